// Processes of one multi-process run (`arfuse selftest --procs N`, `arfuse bench --procs N`): the
// launcher starts copies of this program, one per rank, bounded in time; rank 0 publishes a unique
// id in a private directory and the others read it. POSIX only, no CUDA.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace arfuse {
namespace cli {

// Starts /proc/self/exe once per argv (argv[0] is the program name the child sees), stdout and
// stderr of each to its log; stdin from /dev/null. A child that cannot start gets pid -1.
// --hosts H (TEST ONLY, docs/multihost.md): this process, rank `rank` of `nranks`, is on simulated
// host rank * H / nranks: ARFUSE_TEST_HOST_ID for arfuse, an NCCL_HOSTID of its own and loopback
// sockets for NCCL. Call before anything reads the environment (arfuse's parameters, NCCL).
void simulateHost(int rank, int nranks, int hosts);

std::vector<pid_t> spawnSelf(const std::vector<std::vector<std::string>>& argvs, const std::vector<std::string>& logs);

// Waits for every child until `deadline`, then kills (SIGKILL) and reaps what is left. Per child:
// its exit status, 128 + signal when killed by one, 124 when it had to be killed at the deadline,
// -1 when it never started.
std::vector<int> waitAll(const std::vector<pid_t>& pids, std::chrono::steady_clock::time_point deadline);

// "exited 1", "killed by signal 9 (Killed)", "did not finish in time (killed)", "did not start".
std::string exitText(int status);

// Rank 0: writes `bytes` (hex) to dir/name atomically (write, then rename).
bool publishFile(const std::string& dir, const std::string& name, const std::string& text);
// The others: waits up to timeoutS for dir/name; false when it did not appear.
bool awaitFile(const std::string& dir, const std::string& name, double timeoutS, std::string* text);

}  // namespace cli
}  // namespace arfuse
