// The arguments of `arfuse selftest` and of `arfuse selftest --procs N` (the launcher and the
// workers it starts), parsed strictly with args.h: "--procs 4x" or "--timeout-ms abc" is an error
// naming the option, never a silent 4 or 0. CPU-tested (tests/cpu/selftest_args_test.cc).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace arfuse {
namespace cli {

// `arfuse selftest --help` (both forms).
const char* selftestUsage();
// Whether the arguments ask for the multi-process form (--procs N or --procs=N).
bool isProcsRun(const std::vector<std::string>& args);

struct SelftestArgs {
  std::vector<int> ranks;  // empty: the default counts for the machine
  bool quick = false, forceVirtual = false, help = false;
};
// False with *error for a usage error.
bool parseSelftestArgs(const std::vector<std::string>& args, SelftestArgs* out, std::string* error);

// `selftest --procs N [...]` as the user gives it, and as the launcher gives it to each worker
// (--proc-rank, --proc-dir and --seed added).
struct ProcsArgs {
  int nranks = 0, rank = -1, algo = -1, timeoutMs = 20000, killRank = -1, hosts = 0;
  uint64_t seed = 0;  // the launcher draws it (fresh inputs every run) and gives it to every rank
  bool forceVirtual = false, help = false;
  bool graph = false;  // every call captured into a CUDA graph and replayed once
  std::string dir;
};
// False with *error for a malformed argument; then checkProcsArgs for the combination (the rank
// count, the rank to kill, the simulated hosts, a worker's rank).
bool parseProcsArgs(const std::vector<std::string>& args, ProcsArgs* out, std::string* error);
bool checkProcsArgs(const ProcsArgs& p, std::string* error);

}  // namespace cli
}  // namespace arfuse
