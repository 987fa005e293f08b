// The `arfuse` command-line tool: one binary, one subcommand per job.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "arfuse/arfuse.h"
#include "args.h"
#include "base/printable.h"
#include "cli.h"
#include "common/params.h"
#include "triage.h"

namespace arfuse {
namespace cli {
namespace {

void usage(FILE* f) {
  const char* gpu = builtWithCuda() ? "needs a GPU" : "NOT IN THIS BUILD: built without CUDA";
  std::fprintf(f,
               "usage: arfuse <command> [options]\n"
               "commands:\n"
               "  selftest   check every path on this machine against an fp64 reference (%s)\n"
               "  bench      time arfuse against the unfused baseline; JSON output (%s)\n"
               "  doctor     environment, topology, self-test, plan per size and checks with fixes; --calibrate\n"
               "             (%s)\n"
               "  plan       explain which algorithm a call would use and why (no GPU needed)\n"
               "  triage     find the root cause of a crashed or hung multi-GPU server from its logs\n"
               "  env        list every ARFUSE_* variable, its value and where it came from\n"
               "  version    library build, CUDA, NCCL and visible devices (also: arfuse --version)\n"
               "Options take their value as --name=VALUE or --name VALUE (-x VALUE or -xVALUE for a short one).\n"
               "Run `arfuse <command> --help` for a command's options and exit status.\n"
               "Exit status: 0 success, 1 a check or the command failed, 2 usage error, 3 cannot run here\n"
               "(no GPU, or a build without CUDA); each command's --help says which it uses.\n",
               gpu, gpu, gpu);
}

int env(const std::vector<std::string>& args) {
  bool help = false, markdown = false;
  Options o;
  o.flag({"-h", "--help"}, [&help] { help = true; });
  o.flag({"--markdown"}, [&markdown] { markdown = true; });
  std::string error;
  if (!o.parse(args, &error)) return usageError("env", error);
  if (help) {
    std::printf(
        "usage: arfuse env [--markdown]\n"
        "  Every ARFUSE_* variable: its value, where it came from (environment or default) and a warning\n"
        "  when a set value is not valid. --markdown prints the table of docs/environment.md instead.\n"
        "  Exit status: 0 printed (a warning does not change it), 2 usage error.\n");
    return kExitOk;
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
    if (a == "--context") {  // its value is the next argument (--context=N is one)
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
  std::fprintf(stderr, "arfuse: unknown command '%s' (see arfuse --help)\n", cmd.c_str());
  return kExitUsage;
}
