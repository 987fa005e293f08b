// Subcommands of the `arfuse` tool. Each takes its arguments (without the subcommand word) and
// returns the process exit code.
#pragma once

#include <ctime>
#include <string>
#include <vector>

namespace arfuse {
namespace cli {

// Exit codes shared by the subcommands.
constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;
constexpr int kExitNoDevice = 3;

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

int selftest(const std::vector<std::string>& args);
int selftestProcs(const std::vector<std::string>& args);  // procs.cc: selftest --procs N
int bench(const std::vector<std::string>& args);
int doctor(const std::vector<std::string>& args);  // doctor.cc
int plan(const std::vector<std::string>& args);    // plan_cmd.cc

}  // namespace cli
}  // namespace arfuse
