// Subcommands of the `arfuse` tool. Each takes its arguments (without the subcommand word) and
// returns the process exit code.
#pragma once

#include <cstdio>
#include <ctime>
#include <string>
#include <vector>

#include "args.h"
#include "base/printable.h"

namespace arfuse {
namespace cli {

// Exit codes shared by the subcommands (each --help lists the ones it uses, as "Exit status: ...").
constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;
constexpr int kExitNoDevice = 3;  // no GPU here, or a build without CUDA: nothing could be run

// A usage error, worded alike by every subcommand: "arfuse plan: --ranks wants ... (see arfuse plan
// --help)" on stderr; returns kExitUsage. `command` is the subcommand ("plan", "selftest --procs").
// The error quotes what the user gave (an argument, a file's text): printed escaped, one line.
inline int usageError(const std::string& command, const std::string& error) {
  const std::string word = command.substr(0, command.find(' '));
  std::fprintf(stderr, "arfuse %s: %s (see arfuse %s --help)\n", command.c_str(), printable(error).c_str(),
               word.c_str());
  return kExitUsage;
}

// A subcommand whose only option is -h/--help (`version`): -1 to go on, else the exit status (the
// help printed, or a usage error).
inline int helpOnly(const std::string& command, const std::vector<std::string>& args, const char* help) {
  bool wanted = false;
  Options o;
  o.flag({"-h", "--help"}, [&wanted] { wanted = true; });
  std::string error;
  if (!o.parse(args, &error)) return usageError(command, error);
  if (!wanted) return -1;
  std::fputs(help, stdout);
  return kExitOk;
}

// Now, UTC, as ISO 8601 ("2026-11-29T19:58:19Z"): the date of a bench result or a calibration.
inline std::string isoDate() {
  char buf[32];
  std::time_t now = std::time(nullptr);
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return buf;
}

// Why no CUDA device is visible, in the library's words (common/no_device.h: "no NVIDIA driver is
// loaded ..." when there is none), for the subcommands that need a device. selftest.cc.
std::string noDeviceReason();
// What a subcommand that needs a GPU prints when none is visible (the same block for `selftest` and
// `selftest --procs`); returns kExitNoDevice. selftest.cc.
int noDeviceExit(const std::string& command);

// False in a build configured without CUDA (nocuda.cc), whose selftest, bench, doctor and version
// only say so.
bool builtWithCuda();

int selftest(const std::vector<std::string>& args);
int selftestProcs(const std::vector<std::string>& args);  // procs.cc: selftest --procs N
int bench(const std::vector<std::string>& args);
int doctor(const std::vector<std::string>& args);   // doctor.cc
int plan(const std::vector<std::string>& args);     // plan_cmd.cc
int version(const std::vector<std::string>& args);  // version.cc

}  // namespace cli
}  // namespace arfuse
