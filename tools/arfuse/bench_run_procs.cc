// `arfuse bench --procs N` (bench_procs.h has the protocol): the launcher and one rank.
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>

#include "arfuse/arfuse.h"
#include "bench_procs.h"
#include "bench_run.h"
#include "cli.h"
#include "harness/harness.h"
#include "harness/ranks.h"
#include "nccl_sweep.h"
#include "procs.h"

namespace arfuse {
namespace cli {
namespace {

constexpr double kMeetTimeoutS = 120;  // a rank waits this long for an id or its peers' init

std::string readAll(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Rank 0 creates the job's unique id ("ok <hex>" or "fail <why>"); the others read it.
std::string meetId(const BenchArgs& a, int job, bool nccl, std::string* id) {
  const std::string name = "id-" + std::to_string(job);
  std::string text;
  if (a.procRank == 0) {
    std::string why;
    if (nccl) {
      ncclUniqueId u;
      const ncclResult_t r = ncclGetUniqueId(&u);
      if (r == ncclSuccess)
        *id = std::string(u.internal, sizeof u.internal);
      else
        why = std::string("ncclGetUniqueId: ") + ncclGetErrorString(r);
    } else {
      arfuseUniqueId u;
      if (arfuseGetUniqueId(&u) == arfuseSuccess)
        *id = std::string(u.internal, sizeof u.internal);
      else
        why = std::string("arfuseGetUniqueId: ") + arfuseGetLastError();
    }
    publishFile(a.procDir, name, why.empty() ? "ok " + hexEncode(*id) : "fail " + why);
    return why;
  }
  if (!awaitFile(a.procDir, name, kMeetTimeoutS, &text)) return "rank 0 published no unique id in 120 s";
  if (text.compare(0, 5, "fail ") == 0) return "rank 0: " + text.substr(5);
  if (text.compare(0, 3, "ok ") != 0 || !hexDecode(text.substr(3), id)) return "rank 0's unique id is unreadable";
  return "";
}

// Every rank says whether its init worked and reads the others' word: a job runs only where every
// rank has a communicator (else a collective would wait for a rank that is not coming).
std::string meetInit(const BenchArgs& a, int job, const std::string& mine) {
  publishFile(a.procDir, "init-" + std::to_string(job) + "-" + std::to_string(a.procRank), mine.empty() ? "ok" : mine);
  std::string first;
  for (int r = 0; r < a.procs; ++r) {
    std::string text;
    const std::string name = "init-" + std::to_string(job) + "-" + std::to_string(r);
    if (!awaitFile(a.procDir, name, kMeetTimeoutS, &text)) text = "no word from this rank's init in 120 s";
    if (text != "ok" && first.empty()) first = r == a.procRank ? text : "rank " + std::to_string(r) + ": " + text;
  }
  return first;
}

}  // namespace

int benchProcChild(const BenchArgs& a) {
  if (a.hosts > 0) simulateHost(a.procRank, a.procs, a.hosts);
  const int ndev = harness::deviceCount();
  const bool shared = a.virtualRanks || ndev < a.procs;
  const int device = shared ? 0 : a.procRank;
  const std::vector<int> jobs = procsJobs(a);
  const arfuseOp_t op = a.op == "allreduce" ? arfuseOpAllReduce : arfuseOpAllReduceAddRmsNorm;
  const size_t esize = a.dtype == arfuseFloat32 ? 4 : 2;
  int maxTokens = 1;
  for (int t : a.tokens) maxTokens = std::max(maxTokens, t);
  std::ofstream out(a.procDir + "/rank" + std::to_string(a.procRank) + ".jsonl");
  int wrong = 0;
  for (size_t j = 0; j < jobs.size(); ++j) {
    const int algo = jobs[j];
    const bool nccl = algo == kAlgoNcclSymm;
    harness::GroupSpec gs;
    gs.backend = nccl ? harness::Backend::kNcclSymm : harness::Backend::kArfuse;
    gs.nranks = a.procs;
    gs.ranks = {a.procRank};
    gs.devices = {device};
    gs.maxTokens = maxTokens;
    gs.maxHidden = a.hidden;
    gs.algo = algo == arfuseAlgoAuto || nccl ? -1 : algo;
    std::string why = meetId(a, static_cast<int>(j), nccl, &gs.uniqueId);
    std::unique_ptr<harness::RankGroup> group;
    if (why.empty()) {
      group.reset(new harness::RankGroup(gs));
      why = meetInit(a, static_cast<int>(j), group->error());
    }
    std::printf("rank %d job %s: %s\n", a.procRank, algoName(algo), why.empty() ? "init ok" : why.c_str());
    std::fflush(stdout);
    for (size_t i = 0; i < a.tokens.size(); ++i) {
      RankRow row;
      row.job = static_cast<int>(j);
      row.tokens = a.tokens[i];
      row.bytes = static_cast<long long>(a.tokens[i]) * a.hidden * esize;
      row.algo = algoName(algo);
      row.role = algo == arfuseAlgoNccl || nccl ? "baseline" : "arfuse";
      harness::CaseSpec spec;
      spec.op = op;
      spec.dtype = a.dtype;
      spec.tokens = a.tokens[i];
      spec.hidden = a.hidden;
      spec.seed = 77 + i;
      arfusePlan_t plan;
      if (!why.empty()) {
        row.error = why;
      } else if (!nccl && algo != arfuseAlgoAuto && algo != arfuseAlgoNccl &&
                 arfuseCommQueryPlan(group->comm(), op, spec.tokens, spec.hidden, spec.dtype, &plan) ==
                     arfuseUnsupported) {
        row.error = std::string("n/a: ") + arfuseCommGetLastError(group->comm());
      } else {
        if (a.check) {
          const harness::RankCheck c = group->check(spec);
          row.wrong = c.ok ? 0 : 1;
          row.hash = hexEncode(std::string(reinterpret_cast<const char*>(&c.hash), sizeof c.hash));
          if (algo == arfuseAlgoAuto && !c.algo.empty()) row.algo = "auto:" + c.algo;
          if (!c.ok) row.error = c.error;
        }
        harness::Timing info;
        if (!group->time(spec, a.callsPerGraph, a.iters, a.warmup, &row.ms, &info) && row.error.empty())
          row.error = info.error;
        row.sets = info.sets;
        row.footprintBytes = static_cast<long long>(info.footprintBytes);
        if (nccl) row.kernels = group->kernelNames();
      }
      wrong += row.wrong;
      out << rankRowJson(row) << "\n";
      out.flush();
    }
  }
  return wrong ? kExitFailed : kExitOk;
}

int benchProcs(const BenchArgs& a, std::vector<Row>* rows, BenchEnv* env) {
  const int n = a.procs;
  const int ndev = harness::deviceCount();
  const bool shared = a.virtualRanks || ndev < n;
  env->mode = "procs";
  env->procs = n;
  env->nranks = n;
  env->sharedGpu = shared;
  const char* tmp = std::getenv("TMPDIR");
  std::string dir = std::string(tmp && *tmp ? tmp : "/tmp") + "/arfuse-bench-procs-XXXXXX";
  if (!mkdtemp(&dir[0])) {
    std::fprintf(stderr, "arfuse bench --procs: cannot create a directory like %s\n", dir.c_str());
    return kExitFailed;
  }
  std::printf("# --procs %d: one process per rank, %s\n", n,
              shared ? "every process on GPU 0 (fewer GPUs than ranks)" : "rank r on GPU r");
  if (a.hosts > 0)
    std::printf(
        "# --hosts %d: %d simulated hosts x %d ranks (ARFUSE_TEST_HOST_ID, TEST ONLY); NCCL between them over "
        "loopback sockets, so times are no figure for real hosts\n",
        a.hosts, a.hosts, n / a.hosts);
  std::fflush(stdout);
  std::vector<std::vector<std::string>> argvs;
  std::vector<std::string> logs;
  for (int r = 0; r < n; ++r) {
    std::vector<std::string> argv = {"arfuse", "bench"};
    for (const std::string& s : procsChildArgs(a, r, dir)) argv.push_back(s);
    argvs.push_back(argv);
    logs.push_back(dir + "/rank" + std::to_string(r) + ".log");
  }
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<int> status = waitAll(spawnSelf(argvs, logs), t0 + std::chrono::seconds(a.procsTimeoutS));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::vector<std::vector<RankRow>> perRank(n);
  std::vector<std::string> rankExit(n);
  bool clean = true;
  for (int r = 0; r < n; ++r) {
    std::string err;
    if (!parseRankRows(readAll(dir + "/rank" + std::to_string(r) + ".jsonl"), &perRank[r], &err))
      rankExit[r] = "its results are unreadable: " + err;
    if (status[r] != 0 && status[r] != kExitFailed) {
      const std::string last = logReason(readAll(logs[r]));
      rankExit[r] = exitText(status[r]) + (last.empty() ? "" : "; last log line: " + last);
      clean = false;
    }
  }
  const std::vector<int> jobs = procsJobs(a);
  const long long perToken = static_cast<long long>(a.hidden) * (a.dtype == arfuseFloat32 ? 4 : 2);
  std::vector<Row> merged = mergeRankRows(perRank, rankExit, jobs, a.tokens, perToken, a.callsPerGraph);
  for (Row& r : merged) {
    if (r.t.ok) {
      r.algbw = r.bytes / (r.t.medianUs * 1e3);
      r.busbw = r.algbw * 2.0 * (n - 1) / n;
    }
    if (r.algo == "nccl-symm") classifyNcclKernels(&r);
  }
  // Token order, every job at one size together, as in process.
  std::vector<Row> ordered;
  for (int t : a.tokens)
    for (const Row& r : merged)
      if (r.tokens == t) ordered.push_back(r);
  ratiosToBestBaseline(&ordered);
  printCollectiveTable(ordered, false, shared ? proxyLine(n, true) : "# real ranks, one process per GPU");
  std::printf("# %d processes finished in %.1f s\n", n, seconds);
  rows->insert(rows->end(), ordered.begin(), ordered.end());
  if (clean) {
    for (int r = 0; r < n; ++r) {
      std::remove(logs[r].c_str());
      std::remove((dir + "/rank" + std::to_string(r) + ".jsonl").c_str());
    }
    for (size_t j = 0; j < jobs.size(); ++j) {
      std::remove((dir + "/id-" + std::to_string(j)).c_str());
      for (int r = 0; r < n; ++r) std::remove((dir + "/init-" + std::to_string(j) + "-" + std::to_string(r)).c_str());
    }
    rmdir(dir.c_str());
  } else {
    std::printf("# the ranks' logs: %s\n", dir.c_str());
  }
  return kExitOk;
}

}  // namespace cli
}  // namespace arfuse
