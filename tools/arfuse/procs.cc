// `arfuse selftest --procs N`: the multi-process selftest. The launcher starts N copies of this
// program as workers (one rank each), bounded in time; rank 0 creates the unique id and publishes
// it in a private directory; every worker joins with arfuseCommInitRank, runs fused and plain
// calls over inputs it can regenerate for every rank (so it checks its outputs against an fp64
// reference itself), and prints a hash of its outputs, which the launcher compares across ranks
// (bitwise equality). Afterwards the launcher checks that no shared-memory segment was left in
// /dev/shm. `--kill-rank R` makes rank R die (SIGKILL) right after init: its peers must report a
// timeout naming it, destroy must return, and nothing may leak. With --hosts H, rank R dies mid-run
// instead (after every rank passed the first case): every survivor's first failing call must name
// it (the NCCL watch names the communicator's ranks, docs/multihost.md "Safety") within a bound,
// no later call may report success, and destroy must return (procs_killed.h).
#include "procs.h"

#include <cuda_runtime.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "algos/hierarchical/plan.h"
#include "arfuse/arfuse.h"
#include "cli.h"
#include "device/args.h"
#include "harness/harness.h"
#include "harness/numeric.h"
#include "procs_killed.h"
#include "selftest_args.h"

extern char** environ;

namespace arfuse {
namespace cli {
namespace {

using Clock = std::chrono::steady_clock;

std::set<std::string> arfuseSegments() {
  std::set<std::string> out;
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d))
      if (std::strncmp(e->d_name, "arfuse-", 7) == 0) out.insert(e->d_name);
    closedir(d);
  }
  return out;
}

std::string hexOf(const arfuseUniqueId& id) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (unsigned char c : id.internal) {
    s += digits[c >> 4];
    s += digits[c & 15];
  }
  return s;
}
bool idFromHex(const std::string& s, arfuseUniqueId* id) {
  if (s.size() != 2 * sizeof id->internal) return false;
  for (size_t i = 0; i < sizeof id->internal; ++i) {
    unsigned v = 0;
    if (std::sscanf(s.c_str() + 2 * i, "%2x", &v) != 1) return false;
    id->internal[i] = static_cast<char>(v);
  }
  return true;
}

uint64_t fnv(const void* p, size_t n, uint64_t h = 1469598103934665603ull) {
  const unsigned char* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

struct Case {
  const char* name;
  arfuseOp_t op;
  arfuseDataType_t dtype;
  int tokens, hidden;
};
const Case kCases[] = {
    {"fused-bf16-1x7168", arfuseOpAllReduceAddRmsNorm, arfuseBfloat16, 1, 7168},
    {"fused-fp16-3x5120", arfuseOpAllReduceAddRmsNorm, arfuseFloat16, 3, 5120},
    {"allreduce-fp32-16x4096", arfuseOpAllReduce, arfuseFloat32, 16, 4096},
    {"fused-bf16-64x8192", arfuseOpAllReduceAddRmsNorm, arfuseBfloat16, 64, 8192},
};

// Inputs of rank `r` for case `k`: x differs per rank; residual and weight are the same on every
// rank (as in tensor parallelism). Never zero.
std::vector<float> values(uint64_t seed, size_t n, float scale) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> v(n);
  for (float& f : v) {
    f = u(rng) * scale;
    if (f == 0.f) f = scale * 0.5f;
  }
  return v;
}

// The path the auto plan of a group over simulated hosts must pick (algos/hierarchical/plan.h).
int expectedMultiHostAlgo(const Case& c, int nranks, int hosts) {
  const long long bytes = static_cast<long long>(c.tokens) * c.hidden * numeric::elemSize(c.dtype);
  const int local = nranks / hosts;
  const char* det = std::getenv("ARFUSE_DETERMINISTIC");
  if (det && std::string(det) == "1") return arfuseAlgoNccl;  // the all-gather summed in rank order
  const long long slice = 4 * hierarchicalSliceElems(static_cast<long long>(c.tokens) * c.hidden, local);
  return local >= 2 && slice < bytes && bytes >= kHierarchicalMinBytes ? arfuseAlgoHierarchical : arfuseAlgoNccl;
}

// Mid-run kill: the ranks that passed the first case say so; the doomed rank waits (bounded) until
// every other rank did, so that the survivors' failure is the one under test and not a race with
// NCCL's last sends of that case, then dies abruptly.
void passedFirstCase(const std::string& dir, int rank) { publishFile(dir, "pass0." + std::to_string(rank), "1"); }
void dieAfterPeersPassed(const std::string& dir, int rank, int nranks) {
  std::string text;
  for (int q = 0; q < nranks; ++q)
    if (q != rank) awaitFile(dir, "pass0." + std::to_string(q), 60, &text);
  std::printf("rank %d: KILLED (by request, mid-run: after the first case)\n", rank);
  std::fflush(stdout);
  raise(SIGKILL);
}

int worker(int rank, int nranks, const std::string& dir, int algo, int timeoutMs, int killRank, bool realGpus,
           int hosts, uint64_t seed, bool graph) {
  const bool midRun = killRank >= 0 && hosts > 0;
  if (hosts > 0) simulateHost(rank, nranks, hosts);
  auto say = [&](const char* fmt, auto... a) {
    std::printf("rank %d: ", rank);
    std::printf(fmt, a...);
    std::printf("\n");
    std::fflush(stdout);
  };
  arfuseUniqueId id;
  if (rank == 0) {
    if (arfuseGetUniqueId(&id) != arfuseSuccess) return say("FAIL getUniqueId: %s", arfuseGetLastError()), kExitFailed;
    std::ofstream(dir + "/id.tmp") << hexOf(id);
    std::rename((dir + "/id.tmp").c_str(), (dir + "/id").c_str());
  } else {
    const auto deadline = Clock::now() + std::chrono::seconds(60);
    std::string hex;
    while (!(std::ifstream(dir + "/id") >> hex) || !idFromHex(hex, &id)) {
      if (Clock::now() > deadline) return say("FAIL: rank 0 published no unique id in 60 s"), kExitFailed;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  const int device = realGpus ? rank : 0;
  arfuseConfig_t cfg = ARFUSE_CONFIG_INITIALIZER;
  cfg.maxTokens = 64;
  cfg.maxHidden = 8192;
  cfg.algo = algo;
  cfg.timeoutMs = timeoutMs;
  arfuseComm_t comm = nullptr;
  const auto t0 = Clock::now();
  if (arfuseCommInitRank(&comm, nranks, id, rank, device, &cfg) != arfuseSuccess)
    return say("FAIL init: %s", arfuseGetLastError()), kExitFailed;
  say("INIT ok in %.2f s on device %d", std::chrono::duration<double>(Clock::now() - t0).count(), device);
  if (rank == killRank && !midRun) {
    say("KILLED (by request, right after init)");
    raise(SIGKILL);
  }
  cudaSetDevice(device);
  cudaStream_t stream;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  int failed = 0;
  for (size_t k = 0; k < sizeof kCases / sizeof kCases[0]; ++k) {
    if (midRun && k == 1 && rank == killRank) dieAfterPeersPassed(dir, rank, nranks);
    const Case& c = kCases[k];
    const size_t n = static_cast<size_t>(c.tokens) * c.hidden, es = numeric::elemSize(c.dtype);
    arfusePlan_t plan;
    arfuseCommQueryPlan(comm, c.op, c.tokens, c.hidden, c.dtype, &plan);
    if (hosts > 0) {
      const int want = algo >= 0 ? algo : expectedMultiHostAlgo(c, nranks, hosts);
      if (plan.algo != want) {
        say("CASE %s algo=%s FAIL: expected %s (%s)", c.name, arfuseAlgoName(plan.algo),
            arfuseAlgoName(arfuseAlgo_t(want)), plan.reason);
        ++failed;
      }
    }
    // Every rank's x, rounded to the dtype; the sum in fp64.
    std::vector<double> sum(n, 0.0);
    std::vector<char> mine(n * es);
    for (int s = 0; s < nranks; ++s) {
      const std::vector<float> x = values(seed + 1000 * k + s + 1, n, 1.f);
      for (size_t i = 0; i < n; ++i) {
        const float xr = numeric::round(x[i], c.dtype);
        sum[i] += xr;
        if (s == rank) numeric::store(mine.data(), i, xr, c.dtype);
      }
    }
    const std::vector<float> res = values(seed + 77 + k, n, 2.f), wt = values(seed + 99 + k, c.hidden, 1.f);
    std::vector<char> resH(n * es), wH(c.hidden * es);
    for (size_t i = 0; i < n; ++i) numeric::store(resH.data(), i, res[i], c.dtype);
    for (int i = 0; i < c.hidden; ++i) numeric::store(wH.data(), i, wt[i], c.dtype);
    void *x, *r, *w, *normOut, *resOut;
    cudaMalloc(&x, n * es);
    cudaMalloc(&r, n * es);
    cudaMalloc(&w, c.hidden * es);
    cudaMalloc(&normOut, n * es);
    cudaMalloc(&resOut, n * es);
    cudaMemcpy(x, mine.data(), n * es, cudaMemcpyHostToDevice);
    cudaMemcpy(r, resH.data(), n * es, cudaMemcpyHostToDevice);
    cudaMemcpy(w, wH.data(), c.hidden * es, cudaMemcpyHostToDevice);
    cudaMemset(normOut, 0xFF, n * es);  // poison
    cudaMemset(resOut, 0xFF, n * es);
    cudaDeviceSynchronize();  // cudaMemset runs on the legacy stream, which `stream` does not wait for
    const auto tc = Clock::now();
    auto call = [&] {
      return c.op == arfuseOpAllReduce ? arfuseAllReduce(x, resOut, c.tokens, c.hidden, c.dtype, comm, stream)
                                       : arfuseAllReduceAddRmsNorm(x, r, w, 1e-6f, normOut, resOut, c.tokens, c.hidden,
                                                                   c.dtype, comm, stream);
    };
    arfuseResult_t st = arfuseSuccess;
    if (graph) {  // --graph: captured, then replayed once (as engines run decode steps)
      cudaGraph_t g = nullptr;
      cudaGraphExec_t ge = nullptr;
      cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
      st = call();
      const cudaError_t ce = cudaStreamEndCapture(stream, &g);
      if (st == arfuseSuccess && (ce != cudaSuccess || cudaGraphInstantiate(&ge, g, 0) != cudaSuccess ||
                                  cudaGraphLaunch(ge, stream) != cudaSuccess)) {
        say("CASE %s FAIL: the CUDA graph could not be captured or launched: %s", c.name,
            cudaGetErrorString(cudaGetLastError()));
        ++failed;
      }
      cudaStreamSynchronize(stream);
      if (ge) cudaGraphExecDestroy(ge);
      if (g) cudaGraphDestroy(g);
    } else {
      st = call();
    }
    cudaStreamSynchronize(stream);
    arfuseResult_t async = arfuseSuccess;
    arfuseCommGetAsyncError(comm, &async);
    if (st != arfuseSuccess || async != arfuseSuccess) {
      say("CASE %s algo=%s FAIL after %.2f s: %s", c.name, arfuseAlgoName(plan.algo),
          std::chrono::duration<double>(Clock::now() - tc).count(), arfuseCommGetLastError(comm));
      ++failed;
    } else {
      std::vector<char> gotR(n * es), gotN(n * es);
      cudaMemcpy(gotR.data(), resOut, n * es, cudaMemcpyDeviceToHost);
      cudaMemcpy(gotN.data(), normOut, n * es, cudaMemcpyDeviceToHost);
      // fp64 reference (the norm of the rounded residual, as the header defines it).
      double errR = 0, refR = 0, errN = 0, refN = 0;
      for (int t = 0; t < c.tokens; ++t) {
        std::vector<double> rr(c.hidden);
        double sq = 0;
        for (int i = 0; i < c.hidden; ++i) {
          const size_t j = static_cast<size_t>(t) * c.hidden + i;
          rr[i] = sum[j] + (c.op == arfuseOpAllReduce ? 0.0 : numeric::round(res[j], c.dtype));
          const double rounded = numeric::round(static_cast<float>(rr[i]), c.dtype);
          sq += rounded * rounded;
          errR += std::pow(numeric::load(gotR.data(), j, c.dtype) - rr[i], 2);
          refR += rr[i] * rr[i];
        }
        const double inv = 1.0 / std::sqrt(sq / c.hidden + 1e-6);
        if (c.op == arfuseOpAllReduce) continue;
        for (int i = 0; i < c.hidden; ++i) {
          const size_t j = static_cast<size_t>(t) * c.hidden + i;
          const double ref = numeric::round(static_cast<float>(rr[i]), c.dtype) * inv * numeric::round(wt[i], c.dtype);
          errN += std::pow(numeric::load(gotN.data(), j, c.dtype) - ref, 2);
          refN += ref * ref;
        }
      }
      const double eR = std::sqrt(errR / refR), eN = c.op == arfuseOpAllReduce ? 0 : std::sqrt(errN / refN);
      const bool ok = eR <= numeric::tolerance(c.dtype) && eN <= numeric::tolerance(c.dtype) && std::isfinite(eR) &&
                      std::isfinite(eN);
      if (!ok) ++failed;
      uint64_t hsh = fnv(gotR.data(), gotR.size());
      if (c.op != arfuseOpAllReduce) hsh = fnv(gotN.data(), gotN.size(), hsh);
      say("CASE %s algo=%s err_residual=%.3e err_norm=%.3e hash=%016llx %s", c.name, arfuseAlgoName(plan.algo), eR, eN,
          static_cast<unsigned long long>(hsh), ok ? "PASS" : "FAIL");
      if (midRun && k == 0 && ok) passedFirstCase(dir, rank);
    }
    cudaFree(x);
    cudaFree(r);
    cudaFree(w);
    cudaFree(normOut);
    cudaFree(resOut);
    if (killRank >= 0 && !midRun) break;  // a peer is gone: one call shows the timeout
  }
  const auto td = Clock::now();
  const arfuseResult_t ds = arfuseCommDestroy(comm);
  say("DESTROY %s in %.2f s", ds == arfuseSuccess ? "ok" : "FAIL",
      std::chrono::duration<double>(Clock::now() - td).count());
  cudaStreamDestroy(stream);
  return failed || ds != arfuseSuccess ? kExitFailed : kExitOk;
}

}  // namespace

void simulateHost(int rank, int nranks, int hosts) {
  const std::string host = "h" + std::to_string(rank * hosts / nranks);
  setenv("ARFUSE_TEST_HOST_ID", host.c_str(), 1);
  setenv("NCCL_HOSTID", ("arfuse-selftest-" + std::to_string(getppid()) + "-" + std::to_string(rank)).c_str(), 1);
  for (const char* kv : {"NCCL_SOCKET_IFNAME=lo", "NCCL_IB_DISABLE=1", "NCCL_P2P_DISABLE=1", "NCCL_SHM_DISABLE=1",
                         "NCCL_NVLS_ENABLE=0"}) {
    const std::string s(kv);
    setenv(s.substr(0, s.find('=')).c_str(), s.substr(s.find('=') + 1).c_str(), 1);
  }
}

std::vector<pid_t> spawnSelf(const std::vector<std::vector<std::string>>& argvs, const std::vector<std::string>& logs) {
  char exe[4096];
  const ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
  exe[len > 0 ? len : 0] = 0;
  std::vector<pid_t> pids(argvs.size(), -1);
  for (size_t r = 0; r < argvs.size(); ++r) {
    std::vector<std::string> argv = argvs[r];
    std::vector<char*> cargv;
    for (std::string& s : argv) cargv.push_back(&s[0]);
    cargv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, logs[r].c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    if (len <= 0 || posix_spawn(&pids[r], exe, &fa, nullptr, cargv.data(), environ) != 0) {
      std::perror("posix_spawn");
      pids[r] = -1;
    }
    posix_spawn_file_actions_destroy(&fa);
  }
  return pids;
}

std::vector<int> waitAll(const std::vector<pid_t>& pids, Clock::time_point deadline) {
  const size_t n = pids.size();
  std::vector<int> status(n, -1);
  std::vector<bool> done(n, false);
  size_t left = 0;
  for (size_t r = 0; r < n; ++r) left += pids[r] > 0 ? 1 : 0;
  while (left > 0 && Clock::now() < deadline) {
    for (size_t r = 0; r < n; ++r) {
      if (pids[r] <= 0 || done[r]) continue;
      int ws = 0;
      if (waitpid(pids[r], &ws, WNOHANG) == pids[r]) {
        status[r] = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
        done[r] = true;
        --left;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (size_t r = 0; r < n; ++r)
    if (pids[r] > 0 && !done[r]) {
      kill(pids[r], SIGKILL);
      waitpid(pids[r], nullptr, 0);
      status[r] = 124;
    }
  return status;
}

std::string exitText(int status) {
  if (status == -1) return "did not start";
  if (status == 124) return "did not finish in time (killed)";
  if (status > 128) return "killed by signal " + std::to_string(status - 128) + " (" + strsignal(status - 128) + ")";
  return "exited " + std::to_string(status);
}

bool publishFile(const std::string& dir, const std::string& name, const std::string& text) {
  const std::string tmp = dir + "/" + name + ".tmp";
  {
    std::ofstream f(tmp);
    f << text;
    if (!f) return false;
  }
  return std::rename(tmp.c_str(), (dir + "/" + name).c_str()) == 0;
}

bool awaitFile(const std::string& dir, const std::string& name, double timeoutS, std::string* text) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(static_cast<long long>(timeoutS * 1000));
  while (true) {
    std::ifstream f(dir + "/" + name);
    if (f) {
      std::stringstream ss;
      ss << f.rdbuf();
      *text = ss.str();
      return true;
    }
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

namespace {

std::string rankLog(const std::string& dir, int r) { return dir + "/rank" + std::to_string(r) + ".log"; }

// What the launcher prints before it starts the workers: the scenario and the inputs' seed.
void printRunHeader(const ProcsArgs& p, bool realGpus) {
  const int n = p.nranks;
  if (p.hosts > 0)
    std::printf(
        "simulated hosts: %d x %d ranks (ARFUSE_TEST_HOST_ID h0..h%d; NCCL: a host id per process, loopback "
        "sockets)\n",
        p.hosts, n / p.hosts, p.hosts - 1);
  std::printf("inputs: seed %llu (fresh per run)\n", static_cast<unsigned long long>(p.seed));
  std::printf("arfuse selftest --procs %d: %s; ranks on %s%s\n", n, arfuseGetBuildInfo(),
              realGpus ? "one GPU each" : "GPU 0 (processes time-slice one GPU: correctness only)",
              p.killRank < 0 ? ""
              : p.hosts > 0  ? (", rank " + std::to_string(p.killRank) + " dies mid-run").c_str()
                             : (", rank " + std::to_string(p.killRank) + " dies after init").c_str());
  std::fflush(stdout);
}

// Each worker's command line: the run's settings, its rank, the meeting directory and the seed.
std::vector<std::vector<std::string>> workerArgvs(const ProcsArgs& p) {
  const int n = p.nranks;
  std::vector<std::vector<std::string>> argvs;
  for (int r = 0; r < n; ++r) {
    std::vector<std::string> argv = {
        "/proc/self/exe",  "selftest",   "--procs", std::to_string(n), "--proc-rank",
        std::to_string(r), "--proc-dir", p.dir,     "--timeout-ms",    std::to_string(p.timeoutMs)};
    if (p.algo >= 0) argv.insert(argv.end(), {"--algo", arfuseAlgoName(arfuseAlgo_t(p.algo))});
    if (p.killRank >= 0) argv.insert(argv.end(), {"--kill-rank", std::to_string(p.killRank)});
    if (p.forceVirtual) argv.push_back("--virtual");
    if (p.graph) argv.push_back("--graph");
    if (p.hosts > 0) argv.insert(argv.end(), {"--hosts", std::to_string(p.hosts)});
    argv.insert(argv.end(), {"--seed", std::to_string(p.seed)});
    argvs.push_back(argv);
  }
  return argvs;
}

// Every rank's lines, printed, with their output hashes per case; a rank whose exit status the
// scenario does not allow counts as a failure (returned).
int collectRanks(const ProcsArgs& p, const std::vector<int>& status, std::vector<std::vector<std::string>>* hashes) {
  int failures = 0;
  hashes->assign(p.nranks, {});
  for (int r = 0; r < p.nranks; ++r) {
    std::ifstream in(rankLog(p.dir, r));
    std::string line;
    while (std::getline(in, line)) {
      std::printf("  %s\n", line.c_str());
      const size_t at = line.find("hash=");
      if (at != std::string::npos) (*hashes)[r].push_back(line.substr(at, 21));
    }
    const bool expectKilled = r == p.killRank;
    // A survivor of a kill may fail its calls, but never hang (124: killed at the deadline).
    const bool exitOk =
        expectKilled ? status[r] == 128 + SIGKILL : (p.killRank >= 0 ? status[r] != 124 : status[r] == 0);
    if (!exitOk) {
      std::printf("rank %d: exit status %d%s\n", r, status[r],
                  status[r] == 124 ? " (killed: did not finish in time)" : "");
      ++failures;
    }
  }
  return failures;
}

// The scenario's own expectations, printed; the number not met. No kill: every rank's outputs
// bitwise equal and every case run. A mid-run kill over simulated hosts: every survivor's verdict
// (procs_killed.h). A kill after init: rank 0 named the dead rank and destroyed cleanly.
int judgeScenario(const ProcsArgs& p, const std::vector<std::vector<std::string>>& hashes) {
  const int n = p.nranks, killRank = p.killRank;
  int failures = 0;
  if (killRank < 0) {
    for (int r = 1; r < n; ++r)
      if (hashes[r] != hashes[0]) {
        std::printf("rank %d's outputs differ from rank 0's (bitwise)\n", r);
        ++failures;
      }
    if (hashes[0].size() != sizeof kCases / sizeof kCases[0]) ++failures;
  } else if (p.hosts > 0) {
    // Every survivor: its first failing call names the dead rank within the bound (the NCCL watch
    // fires one timeout after the operation started, two on the hierarchical path, whose gather
    // waits three; the refused calls after it are immediate),
    // no call after it reports success, and destroy returns.
    const std::string dead = simulatedRankName(killRank, n, p.hosts);
    const double boundS = 3.0 * p.timeoutMs / 1000.0 + 10.0;
    for (int r = 0; r < n; ++r) {
      if (r == killRank) continue;
      std::ifstream in(rankLog(p.dir, r));
      const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      const KilledVerdict v = judgeSurvivor(all, dead, boundS);
      std::printf("survivor rank %d: %s\n", r, v.describe().c_str());
      if (!v.ok()) ++failures;
    }
  } else {
    // Rank 0 must have reported the timeout naming the dead rank, and destroyed cleanly.
    std::ifstream in(rankLog(p.dir, 0));
    std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::string named = "for rank " + std::to_string(killRank);
    const bool reported = all.find("FAIL") != std::string::npos && all.find(named) != std::string::npos;
    const bool destroyed = all.find("DESTROY ok") != std::string::npos;
    std::printf("dead rank %d: %s by rank 0, destroy %s\n", killRank, reported ? "named" : "NOT named",
                destroyed ? "returned" : "did NOT return");
    if (!reported || !destroyed) ++failures;
  }
  return failures;
}

// 1 (printed) when an arfuse segment not in `before` is left in /dev/shm, else 0.
int leakedSegments(const std::set<std::string>& before) {
  std::set<std::string> after = arfuseSegments();
  for (const std::string& s : before) after.erase(s);
  if (!after.empty()) {
    std::printf("LEAK: /dev/shm/%s left behind\n", after.begin()->c_str());
    return 1;
  }
  std::printf("/dev/shm: no arfuse segment left behind\n");
  return 0;
}

// The launcher: a private directory, a fresh seed, the workers bounded in time, then the verdict.
int launchProcs(ProcsArgs p, bool realGpus) {
  char tmpl[] = "/tmp/arfuse-procs-XXXXXX";
  if (!mkdtemp(tmpl)) {
    std::perror("mkdtemp");
    return kExitFailed;
  }
  p.dir = tmpl;
  const std::set<std::string> before = arfuseSegments();
  p.seed = std::random_device()() & 0xFFFFFFFFu;
  printRunHeader(p, realGpus);
  const int n = p.nranks;
  std::vector<std::string> logs;
  for (int r = 0; r < n; ++r) logs.push_back(rankLog(p.dir, r));
  // Bounded wait: init timeout + the calls; then kill whatever is left.
  const std::vector<int> status =
      waitAll(spawnSelf(workerArgvs(p), logs), Clock::now() + std::chrono::milliseconds(60000 + 4 * p.timeoutMs));
  std::vector<std::vector<std::string>> hashes;
  int failures = collectRanks(p, status, &hashes);
  failures += judgeScenario(p, hashes);
  failures += leakedSegments(before);
  std::printf("\nselftest --procs %d: %s\n", n, failures ? "FAILED" : "passed");
  for (int r = 0; r < n; ++r) std::remove(rankLog(p.dir, r).c_str());
  std::remove((p.dir + "/id").c_str());
  rmdir(p.dir.c_str());
  return failures ? kExitFailed : kExitOk;
}

}  // namespace

// The hidden worker entry: `arfuse selftest --proc-rank R --procs N --proc-dir D [...]`.
int selftestProcs(const std::vector<std::string>& args) {
  ProcsArgs p;
  std::string error;
  if (!parseProcsArgs(args, &p, &error)) return usageError("selftest --procs", error);
  if (p.help) {
    std::printf("%s", selftestUsage());
    return kExitOk;
  }
  if (!checkProcsArgs(p, &error)) return usageError("selftest --procs", error);
  const int ndev = harness::deviceCount();
  const bool realGpus = !p.forceVirtual && ndev >= p.nranks;
  if (p.rank >= 0)
    return worker(p.rank, p.nranks, p.dir, p.algo, p.timeoutMs, p.killRank, realGpus, p.hosts, p.seed, p.graph);
  if (ndev == 0) return noDeviceExit("selftest --procs");
  return launchProcs(p, realGpus);
}

}  // namespace cli
}  // namespace arfuse
