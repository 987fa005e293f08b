// `arfuse triage LOG... [--json] [--context N]`: argument parsing and the streaming driver.
#include <cstdlib>
#include <memory>
#include <ostream>

#include "analyzer.h"
#include "input.h"
#include "report.h"
#include "text.h"
#include "triage.h"

namespace arfuse {
namespace triage {

namespace {

const char kUsage[] =
    "usage: arfuse triage [LOG|DIR|ARCHIVE...] [--json] [--context=N] [--help]\n"
    "\n"
    "Finds the root cause of a crashed or hung multi-GPU inference server from its logs: SGLang,\n"
    "vLLM, TensorRT-LLM, torchrun, NCCL, PyTorch c10d, FlashInfer, Python tracebacks and\n"
    "faulthandler, Ray, dmesg/journalctl (Xid, oom-killer) and arfuse's own lines and flight-recorder\n"
    "dumps, merged across ranks. Each line is classified as an origin, an echo or context by a\n"
    "signature catalogue; the first line of the report, VERDICT, names the cause, where it was seen\n"
    "and which ranks; the rest gives the evidence, the echoes it explains, a remedy and the next\n"
    "thing to capture.\n"
    "\n"
    "  LOG          a log file, plain or compressed (gzip, xz: detected by content); '-' or no\n"
    "               LOG reads stdin. Give every rank's log and the launcher's in one call.\n"
    "  DIR          a directory: every file below it (per-rank log folders), in name order\n"
    "  ARCHIVE      a .tar, .tar.gz or .tar.xz: read member by member (detected by content)\n"
    "               Binary files are skipped with a warning.\n"
    "  --json       machine-readable output (schema arfuse.triage.v1, see docs/triage.md)\n"
    "  --context N  show N lines before and after the evidence line (0-1000, default 0)\n"
    "  --help       this text\n"
    "\n"
    "Exit status: 0 a root cause was found; 1 no root cause (only echoes, no error line, or empty\n"
    "input: the report says why and what to capture); 2 unusable input (a usage error, a path that\n"
    "does not exist or cannot be read, or no readable log among the inputs).\n";

}  // namespace

int runCli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  bool json = false;
  int context = 0;
  std::vector<std::string> files;
  bool optionsDone = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (optionsDone || a == "-" || a.empty() || a[0] != '-') {
      files.push_back(a);
    } else if (a == "--") {
      optionsDone = true;
    } else if (a == "--help" || a == "-h") {
      out << kUsage;
      return 0;
    } else if (a == "--json") {
      json = true;
    } else if (a == "--context" || a.rfind("--context=", 0) == 0) {
      std::string v;
      if (a == "--context") {
        if (i + 1 >= args.size()) {
          err << "arfuse triage: --context needs a value (see arfuse triage --help)\n";
          return 2;
        }
        v = args[++i];
      } else {
        v = a.substr(10);
      }
      char* end = nullptr;
      long n = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || n < 0 || n > 1000) {
        err << "arfuse triage: --context wants a whole number from 0 to 1000, got '" << v
            << "' (see arfuse triage --help)\n";
        return 2;
      }
      context = static_cast<int>(n);
    } else {
      err << "arfuse triage: unknown option '" << a << "' (see arfuse triage --help)\n";
      return 2;
    }
  }
  if (files.empty()) files.push_back("-");

  // Check every path before reading any: a typo in the fifth path should not cost a pass over four
  // big files. Logs are then opened one at a time.
  InputSet inputs;
  for (const auto& f : files) {
    const Status added = inputs.add(f);
    if (!added.ok()) {
      err << "arfuse triage: " << printable(added.message()) << " (exit 2: unusable input)\n";
      return 2;
    }
  }

  Analyzer an(Catalog::builtin(), context);
  LogInput in;
  while (inputs.next(&in)) {
    an.beginFile(in.name);
    std::string_view line;
    bool sameLine = false;
    while (in.reader->next(&line, &sameLine)) an.feed(line, sameLine);
    if (!in.reader->error().empty())
      err << "arfuse triage: warning: " << printable(in.name) << ": " << printable(in.reader->error())
          << " (analysed what was read)\n";
    an.endFile(in.compression, in.reader->bytes(), in.reader->windowedLines(), in.reader->error());
  }
  an.setInputWarnings(inputs.warnings(), inputs.skipped());
  for (const auto& w : inputs.warnings()) err << "arfuse triage: warning: " << printable(w) << "\n";
  if (inputs.opened() == 0) {
    err << "arfuse triage: no readable log among the inputs (" << inputs.skipped()
        << " skipped, see the warnings above) (exit 2: unusable input)\n";
    return 2;
  }
  Result r = an.finish();
  ReportOptions o;
  o.contextLines = context;
  if (json)
    writeJson(an, r, o, out);
  else
    writeText(an, r, o, out);
  return exitCodeOf(r);
}

}  // namespace triage
}  // namespace arfuse
