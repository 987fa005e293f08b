// Subcommands of the `arfuse` tool. Each takes its arguments (without the subcommand word) and
// returns the process exit code.
#pragma once

#include <string>
#include <vector>

namespace arfuse {
namespace cli {

// Exit codes shared by the subcommands.
constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;
constexpr int kExitNoDevice = 3;

int selftest(const std::vector<std::string>& args);
int selftestProcs(const std::vector<std::string>& args);  // procs.cc: selftest --procs N
int bench(const std::vector<std::string>& args);
int doctor(const std::vector<std::string>& args);  // doctor.cc

}  // namespace cli
}  // namespace arfuse
