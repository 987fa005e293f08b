// The `arfuse` command-line tool: one binary, one subcommand per job.
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "arfuse/arfuse.h"
#include "base/printable.h"
#include "cli.h"
#include "common/params.h"
#include "harness/harness.h"
#include "triage.h"

namespace arfuse {
namespace cli {
namespace {

void usage(FILE* f) {
  std::fprintf(f,
               "usage: arfuse <command> [args]\n"
               "commands:\n"
               "  selftest   check every path on this machine against an fp64 reference (needs a GPU)\n"
               "  bench      time arfuse against the unfused baseline; JSON output (needs a GPU)\n"
               "  doctor     environment, topology, self-test, plan per size and checks with fixes; --calibrate\n"
               "  plan       explain which algorithm a call would use and why (no GPU needed)\n"
               "  triage     find the root cause of a crashed or hung multi-GPU server from its logs\n"
               "  env        list every ARFUSE_* variable, its value and where it came from\n"
               "  version    library build, CUDA, NCCL and visible devices\n"
               "Run `arfuse <command> --help` for a command's options.\n");
}

int version(const std::vector<std::string>& args) {
  if (!args.empty() && (args[0] == "-h" || args[0] == "--help")) {
    std::printf(
        "usage: arfuse version\n  The library's build line (version, CUDA, NCCL, architectures), the NCCL loaded at\n"
        "  run time and the visible devices. No options.\n");
    return kExitOk;
  }
  if (!args.empty()) {
    std::fprintf(stderr, "arfuse version: unknown argument '%s' (it takes none; see arfuse version --help)\n",
                 args[0].c_str());
    return kExitUsage;
  }
  std::printf("%s\n", arfuseGetBuildInfo());
  int nccl = 0;
  if (ncclGetVersion(&nccl) == ncclSuccess)  // the library loaded at run time, which may differ from the header
    std::printf("nccl at run time: %d.%d.%d\n", nccl / 10000, (nccl / 100) % 100, nccl % 100);
  const int n = harness::deviceCount();
  if (n == 0) std::printf("devices: none visible (%s)\n", noDeviceReason().c_str());
  for (int d = 0; d < n; ++d) std::printf("device %d: %s\n", d, harness::deviceName(d).c_str());
  return kExitOk;
}

int env(const std::vector<std::string>& args) {
  const bool markdown = args.size() == 1 && args[0] == "--markdown";
  if (args.size() == 1 && (args[0] == "-h" || args[0] == "--help")) {
    std::printf(
        "usage: arfuse env [--markdown]\n"
        "  Every ARFUSE_* variable: its value, where it came from (environment or default) and a warning\n"
        "  when a set value is not valid. --markdown prints the table of docs/environment.md instead.\n");
    return kExitOk;
  }
  if (!args.empty() && !markdown) {
    std::fprintf(stderr, "arfuse env: unknown argument '%s' (use --markdown or nothing; see arfuse env --help)\n",
                 args[0].c_str());
    return kExitUsage;
  }
  if (markdown) {
    std::printf("%s", paramsMarkdown().c_str());
    return kExitOk;
  }
  // The name column is as wide as the longest name, and the value comes last: a long name or value
  // never shifts the rest of a row.
  const std::vector<ParamValue> values = paramValues();
  int nameWidth = 0;
  for (const ParamValue& v : values) nameWidth = std::max<int>(nameWidth, std::strlen(v.spec->name));
  for (const ParamValue& v : values) {
    std::printf("%-*s  %-11s  %s%s%s\n", nameWidth, v.spec->name, v.fromEnvironment ? "environment" : "default",
                v.value.empty() ? "(empty)" : printable(v.value).c_str(),
                v.error.empty() ? "" : "  WARNING: ", printable(v.error).c_str());
  }
  return kExitOk;
}

// `arfuse triage` with no LOG reads stdin; on a terminal that is a silent wait, so it is refused
// (piping a log in, or naming '-', still reads stdin).
bool triageWouldWaitOnTerminal(const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "-h" || a == "--help") return false;
    if (a == "--context") {
      ++i;
      continue;
    }
    if (a == "--" || a == "-" || a.empty() || a[0] != '-') return false;  // a LOG (or '-') is named
  }
  return isatty(STDIN_FILENO) == 1;
}

}  // namespace
}  // namespace cli
}  // namespace arfuse

int main(int argc, char** argv) {
  using namespace arfuse::cli;
  if (argc < 2) {
    usage(stderr);
    return kExitUsage;
  }
  const std::string cmd = argv[1];
  std::vector<std::string> args(argv + 2, argv + argc);
  if (cmd == "selftest") return selftest(args);
  if (cmd == "bench") return bench(args);
  if (cmd == "doctor") return doctor(args);
  if (cmd == "plan") return plan(args);
  if (cmd == "triage") {
    if (triageWouldWaitOnTerminal(args)) {
      std::fprintf(stderr,
                   "arfuse triage: no LOG given and stdin is a terminal: name the logs (arfuse triage rank0.log "
                   "rank1.log ...) or pipe one in (... | arfuse triage -); see arfuse triage --help\n");
      return kExitUsage;
    }
    return arfuse::triage::runCli(args, std::cout, std::cerr);
  }
  if (cmd == "env") return env(args);
  if (cmd == "version" || cmd == "--version") return version(args);
  if (cmd == "help" || cmd == "-h" || cmd == "--help") {
    usage(stdout);
    return kExitOk;
  }
  std::fprintf(stderr, "arfuse: unknown command '%s'\n", cmd.c_str());
  usage(stderr);
  return kExitUsage;
}
