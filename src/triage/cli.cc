// `arfuse triage LOG... [--json] [--context N]`: argument parsing and the streaming driver.
#include <cstdlib>
#include <memory>
#include <ostream>

#include "analyzer.h"
#include "input.h"
#include "report.h"
#include "triage.h"

namespace arfuse {
namespace triage {

namespace {

const char kUsage[] =
    "usage: arfuse triage [LOG...] [--json] [--context N] [--help]\n"
    "\n"
    "Finds the root cause of a crashed or hung multi-GPU inference server from its logs: SGLang,\n"
    "vLLM, torchrun, NCCL, PyTorch c10d, Python faulthandler, dmesg (Xid, oom-killer) and arfuse's\n"
    "own lines and flight-recorder dumps, merged across ranks. Each line is classified as an origin,\n"
    "an echo or context by a signature catalogue; the report names the root cause, its evidence,\n"
    "the ranks affected, the echoes it explains, a remedy and the next thing to capture.\n"
    "\n"
    "  LOG          a log file, plain or compressed (gzip, xz: detected by content); '-' or no\n"
    "               LOG reads stdin. Give every rank's log and the launcher's in one call.\n"
    "  --json       machine-readable output (schema arfuse.triage.v1, see docs/triage.md)\n"
    "  --context N  show N lines before and after the evidence line (default 0)\n"
    "  --help       this text\n"
    "\n"
    "exit status: 0 root cause found, 1 only echoes or no evidence (the report names what to\n"
    "capture), 2 usage error or unreadable input.\n";

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
          err << "arfuse triage: --context needs a number of lines\n";
          return 2;
        }
        v = args[++i];
      } else {
        v = a.substr(10);
      }
      char* end = nullptr;
      long n = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || n < 0 || n > 1000) {
        err << "arfuse triage: --context wants a number of lines from 0 to 1000, got '" << v << "'\n";
        return 2;
      }
      context = static_cast<int>(n);
    } else {
      err << "arfuse triage: unknown option '" << a << "' (see arfuse triage --help)\n";
      return 2;
    }
  }
  if (files.empty()) files.push_back("-");

  // Open everything first: a typo in the fifth path should not cost a pass over four big files.
  std::vector<std::unique_ptr<LineReader>> readers;
  for (const auto& f : files) {
    std::string error;
    auto r = LineReader::open(f, &error);
    if (!r) {
      err << "arfuse triage: " << error << "\n";
      return 2;
    }
    readers.push_back(std::move(r));
  }

  Analyzer an(Catalog::builtin(), context);
  for (size_t i = 0; i < readers.size(); ++i) {
    an.beginFile(files[i]);
    std::string_view line;
    while (readers[i]->next(&line)) an.feed(line);
    if (!readers[i]->error().empty())
      err << "arfuse triage: warning: " << files[i] << ": " << readers[i]->error() << " (analysed what was read)\n";
    an.endFile(readers[i]->compression(), readers[i]->bytes(), readers[i]->error());
    readers[i].reset();
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
