// `arfuse bench`: times arfuse side by side with the unfused baseline (NCCL all-reduce + arfuse's
// separate add+RMSNorm kernel) in one run, with the nccl-tests vocabulary, and writes JSON.
//
// Every figure: CUDA events around CUDA-graph replays of --calls calls, per-iteration maximum over
// ranks, median over iterations (min and max beside it). Virtual ranks (several ranks on one GPU)
// are labelled as such: their timings are correctness runs, not performance.
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "arfuse/arfuse.h"
#include "args.h"
#include "bench_args.h"
#include "bench_json.h"
#include "bench_run.h"
#include "cli.h"
#include "harness/epilogue.h"
#include "harness/harness.h"
#include "harness/ranks.h"
#include "nccl_sweep.h"
#include "topo/probe.h"

extern char** environ;

namespace arfuse {
namespace cli {
namespace {

// The NVIDIA kernel driver version (e.g. "580.159.04") where Linux exposes it, else the CUDA
// driver API version.
std::string driverVersion() {
  const std::string d = topo::procDriverVersion();
  if (!d.empty()) return d;
  int v = 0;
  cudaDriverGetVersion(&v);
  return "cuda-driver-api " + std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

// A progress line on stderr for long sweeps, only when a person is watching (a TTY).
void progress(int done, int total, const std::string& what) {
  static const bool tty = isatty(fileno(stderr));
  if (!tty) return;
  std::fprintf(stderr, "\r# [%d/%d] %-40s", done, total, what.c_str());
  if (done == total) std::fprintf(stderr, "\r%60s\r", "");
  std::fflush(stderr);
}

BenchTiming fromHarness(const harness::Timing& t) {
  BenchTiming b;
  b.ok = t.ok;
  b.error = t.error;
  b.medianUs = t.medianUs;
  b.minUs = t.minUs;
  b.maxUs = t.maxUs;
  b.iters = t.iters;
  return b;
}

// The largest token count of the sweep: what every group of the run is sized for.
int maxTokensOf(const BenchArgs& a) {
  int maxTokens = 1;
  for (int t : a.tokens) maxTokens = std::max(maxTokens, t);
  return maxTokens;
}

// The one-GPU world in which -c 1 checks each call against fp64 before it is timed (null with -c 0).
std::unique_ptr<harness::World> checkWorld(const BenchArgs& a) {
  std::unique_ptr<harness::World> world;
  if (a.check) world.reset(new harness::World({0}, maxTokensOf(a), a.hidden, -1));
  return world;
}

// The two rows of a single-GPU point: the call's (local) and the SM copy's, both of `moved` bytes.
void singleGpuRows(int tokens, double moved, Row* norm, Row* copy) {
  norm->tokens = copy->tokens = tokens;
  norm->bytes = copy->bytes = static_cast<long long>(moved);
  norm->algo = "local";
  norm->role = "addrmsnorm";
  copy->algo = "memcpy";
  copy->role = "copy";
}

// Times the call of `spec`, then an SM copy of copyBytes the same way, into their rows; false when
// either failed, with the call's error (if it failed) and the copy's in the rows.
bool timeAgainstCopy(const BenchArgs& a, const harness::CaseSpec& spec, size_t copyBytes, Row* norm, Row* copy) {
  const harness::Timing tn = harness::timeSingleGpu(0, spec, 0, a.callsPerGraph, a.iters, a.warmup);
  const harness::Timing tc = harness::timeSingleGpu(0, spec, copyBytes, a.callsPerGraph, a.iters, a.warmup);
  norm->t = fromHarness(tn);
  copy->t = fromHarness(tc);
  norm->sets = tn.sets;
  norm->footprintBytes = static_cast<long long>(tn.footprintBytes);
  copy->sets = tc.sets;
  copy->footprintBytes = static_cast<long long>(tc.footprintBytes);
  if (norm->t.ok && copy->t.ok) return true;
  if (!norm->t.ok) norm->error = norm->t.error;
  copy->error = copy->t.error;
  return false;
}

// Without --epilogue: today's table (the copy moves 2 x tokens x hidden elements; the weight is not
// counted in it), kept as it is so that earlier results stay comparable.
int benchSingleGpuLegacy(const BenchArgs& a, std::vector<Row>* rows, double copyPeak) {
  const size_t esize = a.dtype == arfuseFloat32 ? 4 : 2;
  std::printf(
      "# each call of a graph works on one of `sets` input sets, enough to exceed twice the L2 where the "
      "graph's calls allow (JSON: rotation)\n");
  std::printf("%8s %12s %10s %10s %10s %10s %10s %9s %5s %7s\n", "tokens", "bytes_moved", "norm_us", "norm_GBps",
              "copy_us", "copy_GBps", "peak_pct", "of_copy", "sets", "#wrong");
  const std::unique_ptr<harness::World> world = checkWorld(a);  // the fp64 check of arfuseAddRmsNorm
  for (int tokens : a.tokens) {
    harness::CaseSpec spec;
    spec.dtype = a.dtype;
    spec.tokens = tokens;
    spec.hidden = a.hidden;
    const size_t n = static_cast<size_t>(tokens) * a.hidden * esize;
    const double moved = 4.0 * n + a.hidden * esize;  // read x, residual; write residual, norm; weight
    Row norm, copy;
    singleGpuRows(tokens, moved, &norm, &copy);
    if (world) {
      spec.direct = true;  // arfuseAddRmsNorm, what is timed
      spec.seed = 77 + tokens;
      const harness::CaseResult c = world->ok() ? world->run(spec) : harness::CaseResult{};
      norm.wrong = c.ok ? 0 : 1;
      if (!c.ok) norm.error = world->ok() ? c.error : world->error();
      spec.direct = false;
    }
    if (!timeAgainstCopy(a, spec, 2 * n, &norm, &copy)) {  // the copy moves the same bytes
      std::printf("%8d error: %s%s\n", tokens, norm.t.error.c_str(), copy.t.error.c_str());
      rows->push_back(norm);
      rows->push_back(copy);
      continue;
    }
    norm.algbw = moved / (norm.t.medianUs * 1e3);
    copy.algbw = moved / (copy.t.medianUs * 1e3);
    norm.ratio = copy.t.medianUs / norm.t.medianUs;  // fraction of copy bandwidth reached
    std::printf("%8d %12.0f %10.2f %10.0f %10.2f %10.0f %9.0f%% %8.0f%% %5d %7d%s%s\n", tokens, moved, norm.t.medianUs,
                norm.algbw, copy.t.medianUs, copy.algbw, 100.0 * norm.algbw / copyPeak, 100.0 * norm.ratio, norm.sets,
                norm.wrong, norm.error.empty() ? "" : "  ", norm.error.c_str());
    rows->push_back(norm);
    rows->push_back(copy);
  }
  return kExitOk;
}

// With --epilogue: per token count, each variant's call (arfuseAddRmsNorm for none,
// arfuseAllReduceEpilogue on a one-rank communicator otherwise) against an SM copy of exactly the bytes
// that call reads and writes (bytes_moved / 2 copied: read + written = bytes_moved), and each checked
// first (#wrong): none against fp64, the others with harness/epilogue.h's check.
int benchSingleGpuEpilogues(const BenchArgs& a, std::vector<Row>* rows, double copyPeak) {
  const size_t esize = a.dtype == arfuseFloat32 ? 4 : 2;
  std::printf(
      "# epilogues: bytes_moved = x + residual_in + weight + residual_out + norm_out + quant + scales "
      "(what the call reads and writes);\n# the copy moves exactly those bytes; quantised variants write "
      "residual_out + quant_out + scales, no norm_out\n");
  std::printf("%14s %8s %12s %10s %10s %10s %10s %10s %9s %7s\n", "epilogue", "tokens", "bytes_moved", "norm_us",
              "norm_GBps", "copy_us", "copy_GBps", "peak_pct", "of_copy", "#wrong");
  const std::unique_ptr<harness::World> world = checkWorld(a);
  const int total = static_cast<int>(a.tokens.size() * a.epilogues.size());
  int done = 0;
  for (size_t i = 0; i < a.tokens.size(); ++i) {
    const int tokens = a.tokens[i];
    for (int epi : a.epilogues) {
      const char* name = harness::epilogueName(epi);
      progress(++done, total, std::string(name) + " tokens=" + std::to_string(tokens));
      harness::CaseSpec spec;
      spec.dtype = a.dtype;
      spec.tokens = tokens;
      spec.hidden = a.hidden;
      spec.epilogue = epi;
      spec.seed = 77 + i;
      const double moved = static_cast<double>(harness::epilogueBytes(epi, tokens, a.hidden, esize).total());
      const size_t copyBytes =
          (static_cast<size_t>(moved / 2) + 15) / 16 * 16;  // the copy kernel moves 16-byte vectors
      Row norm, copy;
      singleGpuRows(tokens, moved, &norm, &copy);
      norm.epilogue = copy.epilogue = name;
      if (world) {
        harness::CaseResult c;
        if (!world->ok()) {
          c.error = world->error();
        } else {
          spec.direct = epi == harness::kEpilogueNone;  // arfuseAddRmsNorm, what is timed
          c = world->run(spec);
          spec.direct = false;
        }
        norm.wrong = c.ok ? 0 : 1;
        if (!c.ok) norm.error = c.error;
      }
      if (!timeAgainstCopy(a, spec, copyBytes, &norm, &copy)) {
        std::printf("%14s %8d error: %s%s\n", name, tokens, norm.t.error.c_str(), copy.t.error.c_str());
        rows->push_back(norm);
        rows->push_back(copy);
        continue;
      }
      norm.algbw = moved / (norm.t.medianUs * 1e3);
      copy.algbw = 2.0 * copyBytes / (copy.t.medianUs * 1e3);
      norm.ratio = copy.t.medianUs / norm.t.medianUs;  // fraction of copy bandwidth reached
      std::printf("%14s %8d %12.0f %10.2f %10.0f %10.2f %10.0f %9.0f%% %8.0f%% %7d%s%s\n", name, tokens, moved,
                  norm.t.medianUs, norm.algbw, copy.t.medianUs, copy.algbw, 100.0 * norm.algbw / copyPeak,
                  100.0 * norm.ratio, norm.wrong, norm.error.empty() ? "" : "  ", norm.error.c_str());
      rows->push_back(norm);
      rows->push_back(copy);
    }
  }
  return kExitOk;
}

int benchSingleGpu(const BenchArgs& a, std::vector<Row>* rows, double* copyPeak) {
  // Peak copy bandwidth of this GPU: 1 GiB device-to-device, bytes read + written.
  harness::CaseSpec big;
  harness::Timing peak = harness::timeSingleGpu(0, big, size_t(1) << 30, 5, 10, 2);
  if (!peak.ok) {
    std::fprintf(stderr, "arfuse bench: copy reference failed: %s\n", peak.error.c_str());
    return kExitFailed;
  }
  *copyPeak = 2.0 * (1 << 30) / (peak.medianUs * 1e3);
  std::printf("# SM copy kernel, 1 GiB: %.1f us -> %.0f GB/s (read + write)\n", peak.medianUs, *copyPeak);
  return a.epilogueTable() ? benchSingleGpuEpilogues(a, rows, *copyPeak) : benchSingleGpuLegacy(a, rows, *copyPeak);
}

// The row of point i of the sweep (a.tokens[i]): its size, path and role.
Row pointRow(const BenchArgs& a, size_t i, const std::string& algo, const std::string& role) {
  Row r;
  r.tokens = a.tokens[i];
  r.bytes = static_cast<long long>(a.tokens[i]) * a.hidden * (a.dtype == arfuseFloat32 ? 4 : 2);
  r.algo = algo;
  r.role = role;
  return r;
}

// The GPU of each of n ranks: GPU r, or GPU 0 for every rank (virtual ranks).
std::vector<int> rankDevices(int nranks, bool virtualRanks) {
  std::vector<int> devices(nranks);
  for (int r = 0; r < nranks; ++r) devices[r] = virtualRanks ? 0 : r;
  return devices;
}

// Point `spec` of a row on `world`: checked (--check: #wrong, the path the auto plan took, the error)
// and timed over graphs of `calls` calls into r->t (or r->error). The timing, for the caller's figures.
harness::Timing checkAndTime(const BenchArgs& a, harness::World& world, const harness::CaseSpec& spec, int algo,
                             int calls, Row* r) {
  if (a.check) {
    harness::CaseResult c = world.run(spec);
    r->wrong = c.ok ? 0 : 1;
    if (algo == arfuseAlgoAuto) r->algo = "auto:" + c.algo;
    if (!c.ok) r->error = c.error;
  }
  const harness::Timing ht = world.timeGraph(spec, calls, a.iters, a.warmup);
  r->t = fromHarness(ht);
  if (!r->t.ok) r->error = r->t.error;
  return ht;
}

// The case of point i: every row of a point (each path, each run) sees the inputs of seedBase + i.
harness::CaseSpec pointSpec(const BenchArgs& a, size_t i, arfuseOp_t op, int seedBase) {
  harness::CaseSpec spec;
  spec.op = op;
  spec.dtype = a.dtype;
  spec.tokens = a.tokens[i];
  spec.hidden = a.hidden;
  spec.seed = seedBase + i;
  return spec;
}

// The nccl-symm baseline in process: every rank's NCCL communicator from ncclCommInitAll, x and the
// sum in one ncclMemAlloc region registered as a symmetric window (harness/ranks.h).
std::vector<Row> ncclSymmRows(const BenchArgs& a, const std::vector<int>& devices, bool virtualRanks, int maxTokens,
                              arfuseOp_t op) {
  const int nranks = static_cast<int>(devices.size());
  std::unique_ptr<harness::RankGroup> group;
  std::string notHere;
  if (virtualRanks) {
    notHere = "n/a: NCCL refuses two ranks on one GPU (these " + std::to_string(nranks) +
              " virtual ranks share GPU 0); run on one GPU per rank";
  } else {
    harness::GroupSpec gs;
    gs.backend = harness::Backend::kNcclSymm;
    gs.nranks = nranks;
    for (int r = 0; r < nranks; ++r) gs.ranks.push_back(r);
    gs.devices = devices;
    gs.maxTokens = maxTokens;
    gs.maxHidden = a.hidden;
    group.reset(new harness::RankGroup(gs));
    if (!group->ok()) notHere = group->error();
  }
  std::vector<Row> out;
  for (size_t i = 0; i < a.tokens.size(); ++i) {
    Row r = pointRow(a, i, "nccl-symm", "baseline");
    if (!notHere.empty()) {
      r.error = notHere;
      out.push_back(r);
      continue;
    }
    const harness::CaseSpec spec = pointSpec(a, i, op, 77);
    if (a.check) {
      const harness::RankCheck c = group->check(spec);
      r.wrong = c.ok ? 0 : 1;
      if (!c.ok) r.error = c.error;
    }
    std::vector<double> ms;
    harness::Timing info;
    if (group->time(spec, a.callsPerGraph, a.iters, a.warmup, &ms, &info)) {
      std::sort(ms.begin(), ms.end());
      const double scale = 1000.0 / (a.callsPerGraph - 1);
      r.t.ok = true;
      r.t.iters = static_cast<int>(ms.size());
      r.t.minUs = ms.front() * scale;
      r.t.maxUs = ms.back() * scale;
      r.t.medianUs = ms[ms.size() / 2] * scale;
      r.algbw = r.bytes / (r.t.medianUs * 1e3);
      r.busbw = r.algbw * 2.0 * (nranks - 1) / nranks;
      r.sets = info.sets;
      r.footprintBytes = static_cast<long long>(info.footprintBytes);
    } else if (r.error.empty()) {
      r.error = info.error;
    }
    r.kernels = group->kernelNames();
    classifyNcclKernels(&r);
    out.push_back(r);
  }
  return out;
}

int benchCollective(const BenchArgs& a, int nranks, bool virtualRanks, std::vector<Row>* rows) {
  const std::vector<int> devices = rankDevices(nranks, virtualRanks);
  const arfuseOp_t op = a.op == "allreduce" ? arfuseOpAllReduce : arfuseOpAllReduceAddRmsNorm;
  std::vector<int> algos = a.algos;
  if (algos.empty())  // the baselines too on virtual ranks: their rows say why they cannot run there
    algos = {arfuseAlgoAuto,       arfuseAlgoLowLatency, arfuseAlgoOneShot, arfuseAlgoTwoShot,
             arfuseAlgoHostStaged, arfuseAlgoNccl,       kAlgoNcclSymm};
  const int maxTokens = maxTokensOf(a);
  // --epilogue: every arfuse path runs every variant (arfuseAllReduceEpilogue); the nccl row stays
  // the unfused baseline (NCCL all-reduce + the add+RMSNorm kernel: no epilogue, no quantisation).
  const bool table = a.epilogueTable() && op == arfuseOpAllReduceAddRmsNorm;
  std::vector<std::vector<Row>> perAlgo;
  int total = 0;
  for (int algo : algos) total += static_cast<int>((algo >= arfuseAlgoNccl ? 1 : a.epilogues.size()) * a.tokens.size());
  int done = 0;
  for (int algo : algos) {
    if (algo == kAlgoNcclSymm) {
      progress(done += static_cast<int>(a.tokens.size()), total, "nccl-symm");
      perAlgo.push_back(ncclSymmRows(a, devices, virtualRanks, maxTokens, op));
      continue;
    }
    harness::World world(devices, maxTokens, a.hidden, algo == arfuseAlgoAuto ? -1 : algo);
    const std::vector<int> epilogues =
        algo == arfuseAlgoNccl || !table ? std::vector<int>{harness::kEpilogueNone} : a.epilogues;
    for (int epi : epilogues) {
      std::vector<Row> out;
      for (size_t i = 0; i < a.tokens.size(); ++i) {
        progress(++done, total,
                 std::string(arfuseAlgoName(arfuseAlgo_t(algo))) +
                     (table ? std::string(" ") + harness::epilogueName(epi) : std::string()) +
                     " tokens=" + std::to_string(a.tokens[i]));
        Row r = pointRow(a, i, arfuseAlgoName(arfuseAlgo_t(algo)), algo == arfuseAlgoNccl ? "baseline" : "arfuse");
        r.epilogue = harness::epilogueName(epi);
        if (!world.ok()) {
          r.error = world.error();
          out.push_back(r);
          continue;
        }
        harness::CaseSpec spec = pointSpec(a, i, op, 77);
        spec.epilogue = epi;
        arfusePlan_t plan;
        const arfuseResult_t planned = algo == arfuseAlgoNccl ? arfuseSuccess
                                                              : arfuseCommQueryPlan(world.comm(0), op, spec.tokens,
                                                                                    spec.hidden, spec.dtype, &plan);
        if (algo != arfuseAlgoAuto && planned == arfuseUnsupported) {
          // A forced path that does not carry this size (e.g. low-latency above 64 KiB): not a failure.
          r.error = std::string("n/a: ") + arfuseCommGetLastError(world.comm(0));
          out.push_back(r);
          continue;
        }
        if (algo != arfuseAlgoNccl && planned == arfuseSuccess) {
          r.planBlocks = plan.blocks;
          r.planThreads = plan.threads;
          r.planReason = plan.reason;
        }
        const harness::Timing ht = checkAndTime(a, world, spec, algo, a.callsPerGraph, &r);
        if (r.t.ok) {
          r.algbw = r.bytes / (r.t.medianUs * 1e3);
          r.busbw = r.algbw * 2.0 * (nranks - 1) / nranks;
          r.sets = ht.sets;
          r.footprintBytes = static_cast<long long>(ht.footprintBytes);
        }
        out.push_back(r);
      }
      perAlgo.push_back(out);
    }
  }
  // Rows in token order (every path at one size together), then ratios to the best baseline.
  std::vector<Row> ordered;
  for (size_t i = 0; i < a.tokens.size(); ++i)
    for (auto& v : perAlgo) ordered.push_back(v[i]);
  ratiosToBestBaseline(&ordered);
  printCollectiveTable(ordered, table, virtualRanks ? proxyLine(nranks, false) : "# real ranks, one per GPU");
  rows->insert(rows->end(), ordered.begin(), ordered.end());
  return kExitOk;
}

// One speculative-decoding verify pass: 2 x layers fused calls in one CUDA graph per rank, arfuse's
// plan (auto, or the one path given with --algo) against the unfused baseline (NCCL all-reduce +
// add+RMSNorm kernel), ms per pass.
int benchVerifyPass(const BenchArgs& a, int nranks, bool virtualRanks, std::vector<Row>* rows) {
  const std::vector<int> devices = rankDevices(nranks, virtualRanks);
  const int calls = 2 * a.layers;
  const int maxTokens = maxTokensOf(a);
  std::printf("# verify pass: %s%d layers x 2 fused calls = %d calls in one CUDA graph per rank, hidden %d\n",
              a.model.empty() ? "" : (a.model + ", ").c_str(), a.layers, calls, a.hidden);
  std::printf("%s\n", virtualRanks ? proxyLine(nranks, false).c_str() : "# real ranks, one per GPU");
  std::printf("%8s %12s %12s %12s %12s %9s %7s\n", "tokens", "bytes", "arfuse_algo", "arfuse_ms", "baseline_ms",
              "ratio", "#wrong");
  const bool onePath = a.algos.size() == 1 && a.algos[0] != arfuseAlgoNccl;
  std::vector<int> algos = {onePath ? a.algos[0] : int(arfuseAlgoAuto)};
  if (!virtualRanks) algos.push_back(arfuseAlgoNccl);
  std::vector<std::vector<Row>> perAlgo;
  for (int algo : algos) {
    harness::World world(devices, maxTokens, a.hidden, algo == arfuseAlgoAuto ? -1 : algo);
    std::vector<Row> out;
    for (size_t i = 0; i < a.tokens.size(); ++i) {
      Row r =
          pointRow(a, i, arfuseAlgoName(arfuseAlgo_t(algo)), algo == arfuseAlgoNccl ? "baseline-pass" : "verify-pass");
      if (!world.ok()) {
        r.error = world.error();
        out.push_back(r);
        continue;
      }
      const harness::CaseSpec spec = pointSpec(a, i, arfuseOpAllReduceAddRmsNorm, 900);
      checkAndTime(a, world, spec, algo, calls, &r);
      if (r.t.ok) r.passMs = r.t.medianUs * calls / 1000.0;
      out.push_back(r);
    }
    perAlgo.push_back(out);
  }
  for (size_t i = 0; i < a.tokens.size(); ++i) {
    Row& mine = perAlgo[0][i];
    const Row* base = perAlgo.size() > 1 ? &perAlgo[1][i] : nullptr;
    if (base && mine.passMs > 0 && base->passMs > 0) mine.ratio = mine.passMs / base->passMs;
    std::printf("%8d %12lld %12s %12.3f %12s %9s %7d%s%s\n", mine.tokens, mine.bytes, mine.algo.c_str(), mine.passMs,
                base && base->passMs > 0 ? std::to_string(base->passMs).substr(0, 6).c_str() : "-",
                mine.ratio > 0 ? std::to_string(mine.ratio).substr(0, 5).c_str() : "-",
                mine.wrong + (base ? base->wrong : 0), mine.error.empty() ? "" : "  ", mine.error.c_str());
    rows->push_back(mine);
    if (base) rows->push_back(*base);
  }
  return kExitOk;
}

std::vector<std::string> environment() {
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) env.push_back(*e);
  return env;
}

std::string readFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

BenchEnv runEnvironment(const std::string& gpu) {
  BenchEnv env;
  env.arfuse = arfuseGetBuildInfo();
  env.date = isoDate();
  env.gpu = gpu;
  env.driver = driverVersion();
  env.cudaRuntime = CUDART_VERSION;
  ncclGetVersion(&env.nccl);
  env.ncclEnv = ncclVariables(environment());
  return env;
}

// --nccl-sweep-child FILE: what each sweep child runs. Only the baseline (NCCL all-reduce + the
// add+RMSNorm kernel) for the parent's points, timed as the parent times it; NCCL picks its settings
// up from this process's environment at communicator init. JSON to FILE, one row per point.
int benchSweepChild(const BenchArgs& a) {
  const int ndev = harness::deviceCount();
  const int nranks = a.ranks;
  const std::vector<int> devices = rankDevices(nranks, false);
  const int calls = a.verifyPass ? 2 * a.layers : a.callsPerGraph;
  const int maxTokens = maxTokensOf(a);
  std::vector<Row> rows;
  {
    std::unique_ptr<harness::World> world;
    if (ndev >= nranks) world.reset(new harness::World(devices, maxTokens, a.hidden, arfuseAlgoNccl));
    const std::string notHere = world ? world->error()
                                      : std::to_string(nranks) + " ranks need " + std::to_string(nranks) + " GPUs; " +
                                            std::to_string(ndev) + " visible";
    for (size_t i = 0; i < a.tokens.size(); ++i) {
      Row r = pointRow(a, i, "nccl", "baseline");
      if (!world || !world->ok()) {
        r.error = notHere;
      } else {
        const harness::CaseSpec spec = pointSpec(
            a, i, a.op == "allreduce" ? arfuseOpAllReduce : arfuseOpAllReduceAddRmsNorm, a.verifyPass ? 900 : 77);
        checkAndTime(a, *world, spec, arfuseAlgoNccl, calls, &r);
      }
      std::printf("sweep child: tokens %d: %s\n", r.tokens,
                  r.t.ok ? (std::to_string(r.t.medianUs) + " us" + (r.error.empty() ? "" : "; " + r.error)).c_str()
                         : r.error.c_str());
      rows.push_back(r);
    }
  }
  BenchEnv env = runEnvironment(ndev ? harness::deviceName(0) : "none");
  env.nranks = nranks;
  std::ofstream f(a.ncclSweepChild);
  f << benchJson(a, env, rows);
  if (!f) {
    std::fprintf(stderr, "arfuse bench: cannot write %s\n", a.ncclSweepChild.c_str());
    return kExitFailed;
  }
  for (const Row& r : rows)
    if (!r.error.empty() || r.wrong) return kExitFailed;
  return kExitOk;
}

// --nccl-sweep: one child per setting, one after another (they share the GPUs), then the report.
// Returns the number of wrong results the children found.
int runNcclSweep(const BenchArgs& a, int nranks, const std::vector<Row>& rows, NcclSweep* sweep) {
  std::vector<NcclSetting> settings;
  std::string err;
  expandNcclSweep(a.ncclSweepSpec, &settings, &err);  // checked when the arguments were parsed
  const std::vector<std::string> env = environment();
  sweep->spec = a.ncclSweepSpec;
  sweep->timeoutS = a.ncclSweepTimeoutS;
  sweep->inherited = ncclVariables(env);
  bool hasDebug = false;
  for (const auto& kv : sweep->inherited) hasDebug = hasDebug || kv.first == "NCCL_DEBUG";
  if (!hasDebug) sweep->added = {{"NCCL_DEBUG", "WARN"}};
  setPoints(sweep, a, rows);

  std::string inherited;
  for (const auto& kv : sweep->inherited) inherited += " " + kv.first + "=" + kv.second;
  std::printf(
      "# NCCL sweep: the baseline (NCCL all-reduce + arfuse's add+RMSNorm kernel) once per setting, each in a "
      "fresh process bounded to %d s\n",
      sweep->timeoutS);
  std::printf("# children inherit your NCCL environment:%s; only the swept variables change%s\n",
              inherited.empty() ? " (none set)" : inherited.c_str(),
              hasDebug ? "" : "; NCCL_DEBUG=WARN added so that a refused setting carries NCCL's reason");

  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) {
    std::printf("# NCCL sweep not run: cannot find this program (/proc/self/exe) to start the children\n");
    return 0;
  }
  exe[n] = '\0';
  const char* tmp = std::getenv("TMPDIR");
  std::string dir = std::string(tmp && *tmp ? tmp : "/tmp") + "/arfuse-nccl-sweep-XXXXXX";
  if (!mkdtemp(&dir[0])) {
    std::printf("# NCCL sweep not run: cannot create a temporary directory like %s\n", dir.c_str());
    return 0;
  }
  bool keep = false;
  int wrong = 0;
  for (size_t k = 0; k < settings.size(); ++k) {
    const std::string json = dir + "/setting" + std::to_string(k) + ".json";
    const std::string log = dir + "/setting" + std::to_string(k) + ".log";
    progress(static_cast<int>(k + 1), static_cast<int>(settings.size()), "nccl sweep: " + settings[k].label);
    const ChildOutcome o = runChild(childCommand(exe, a, nranks, settings[k], json, env), log, a.ncclSweepTimeoutS);
    SweepSetting s;
    s.setting = settings[k];
    fillSetting(&s, sweep->tokens, sweep->bytes, readFile(json), o, readFile(log), a.ncclSweepTimeoutS);
    std::printf("# [%zu/%zu] %s: %s in %.1f s%s%s\n", k + 1, settings.size(), s.setting.label.c_str(), s.status.c_str(),
                o.seconds, s.error.empty() ? "" : ": ", s.error.c_str());
    std::fflush(stdout);
    for (const SweepPoint& p : s.points) wrong += p.wrong;
    if (s.status == "ok") {
      std::remove(json.c_str());
      std::remove(log.c_str());
    } else {
      keep = true;
    }
    sweep->settings.push_back(s);
  }
  computeRatios(sweep);
  std::printf("%s", sweepReport(*sweep).c_str());
  if (keep)
    std::printf("# logs of the settings that did not run cleanly: %s\n", dir.c_str());
  else
    rmdir(dir.c_str());
  return wrong;
}

}  // namespace

std::string proxyLine(int nranks, bool processes) {
  return processes ? "# PROXY: " + std::to_string(nranks) +
                         " processes time-slice one GPU: times below are a proxy (correctness and the kernels' own "
                         "cost), NOT performance figures"
                   : "# PROXY: " + std::to_string(nranks) +
                         " VIRTUAL ranks on one GPU: times below are a proxy for the kernels' own cost, NOT "
                         "performance figures";
}

void printCollectiveTable(const std::vector<Row>& rows, bool table, const std::string& header) {
  const bool proxy = header.compare(0, 7, "# PROXY") == 0;
  std::printf(
      "%s\n# vs_best: time over the fastest correct baseline at that size (nccl, nccl-symm), named in the "
      "JSON's ratio_to\n",
      header.c_str());
  if (table)
    std::printf(
        "# epilogues: quantised variants write residual_out + quant_out + scales, no norm_out; bytes = one "
        "rank's message;\n# the nccl baselines are unfused and have no epilogue (their rows say none)\n");
  if (table) std::printf("%14s ", "epilogue");
  std::printf("%8s %12s %9s %9s %10s %10s %10s %10s %10s %9s %7s\n", "tokens", "bytes", "algo", "role",
              proxy ? "proxy_us" : "time_us", "min_us", "max_us", "algbw", "busbw", "vs_best", "#wrong");
  for (const Row& r : rows) {
    if (table) std::printf("%14s ", r.epilogue.c_str());
    if (r.t.ok)
      std::printf("%8d %12lld %9s %9s %10.2f %10.2f %10.2f %10.2f %10.2f %9s %7d%s%s%s%s\n", r.tokens, r.bytes,
                  r.algo.c_str(), r.role.c_str(), r.t.medianUs, r.t.minUs, r.t.maxUs, r.algbw, r.busbw,
                  r.ratio > 0 ? std::to_string(r.ratio).substr(0, 5).c_str() : "-", r.wrong,
                  r.error.empty() ? "" : "  ", r.error.c_str(), r.note.empty() ? "" : "  note: ", r.note.c_str());
    else
      std::printf("%8d %12lld %9s %9s  error: %s\n", r.tokens, r.bytes, r.algo.c_str(), r.role.c_str(),
                  r.error.c_str());
    if (r.symmetric == 1 && !r.kernels.empty())
      std::printf("%8s NCCL symmetric kernels ran: %s\n", "", r.kernels[0].c_str());
  }
}

int bench(const std::vector<std::string>& args) {
  BenchArgs a;
  std::string err;
  if (!parseBenchArgs(args, &a, &err)) return usageError("bench", err);
  if (a.help) {
    std::printf("%s", benchUsage());
    return kExitOk;
  }
  if (!a.ncclSweepChild.empty()) return benchSweepChild(a);
  if (a.procRank >= 0) return benchProcChild(a);
  const int ndev = harness::deviceCount();
  if (ndev == 0) {
    const int rc = noDeviceExit("bench");
    if (a.ncclSweep) std::printf("  --nccl-sweep also needs NCCL, which needs one GPU per rank: 2 or more GPUs.\n");
    return rc;
  }
  if (a.ncclSweep && ndev < 2) {
    std::printf(
        "arfuse bench --nccl-sweep: this machine has 1 GPU (%s); NCCL needs one GPU per rank, so the NCCL\n"
        "  baseline cannot run here and there is nothing to sweep. Run it where 2 or more GPUs are\n"
        "  visible; without --nccl-sweep, `arfuse bench` runs arfuse's paths on virtual ranks here\n"
        "  (correctness only, not performance).\n",
        harness::deviceName(0).c_str());
    return kExitNoDevice;
  }
  std::vector<Row> rows;
  double copyPeak = 0;
  int rc;
  int nranks = 1;
  bool virtualRanks = false;
  const std::string gpu = harness::deviceName(0);
  BenchEnv procsEnv;
  std::printf("# %s on %d x %s, %s, hidden %d\n", arfuseGetBuildInfo(), ndev, gpu.c_str(), arfuseDataTypeName(a.dtype),
              a.hidden);
  if (a.op == "addrmsnorm") {
    rc = benchSingleGpu(a, &rows, &copyPeak);
  } else if (a.procs) {
    rc = benchProcs(a, &rows, &procsEnv);
    nranks = a.procs;
  } else {
    nranks = a.ranks > 0 ? a.ranks : (ndev >= 2 && !a.virtualRanks ? ndev : 2);
    virtualRanks = a.virtualRanks || ndev < nranks;
    if (virtualRanks && ndev > 1 && !a.virtualRanks) {
      return usageError("bench", "--ranks " + std::to_string(nranks) + " but only " + countOf(ndev, "GPU") +
                                     "; use --ranks <= " + std::to_string(ndev) + " (or one GPU for virtual ranks)");
    }
    rc = a.verifyPass ? benchVerifyPass(a, nranks, virtualRanks, &rows)
                      : benchCollective(a, nranks, virtualRanks, &rows);
  }
  int wrong = 0;
  for (const Row& r : rows) wrong += r.wrong;
  NcclSweep sweep;
  if (a.ncclSweep) wrong += runNcclSweep(a, nranks, rows, &sweep);
  if (!a.jsonPath.empty()) {
    BenchEnv env = runEnvironment(gpu);
    env.nranks = nranks;
    env.virtualRanks = virtualRanks;
    env.copyPeakGBps = copyPeak;
    env.mode = procsEnv.mode;
    env.procs = procsEnv.procs;
    env.sharedGpu = procsEnv.sharedGpu;
    env.l2Bytes = static_cast<long long>(harness::l2Bytes(0));
    std::ofstream f(a.jsonPath);
    f << benchJson(a, env, rows, a.ncclSweep ? &sweep : nullptr);
    if (!f) {
      std::fprintf(stderr, "arfuse bench: cannot write %s\n", a.jsonPath.c_str());
      return kExitFailed;
    }
    std::printf("# wrote %s\n", a.jsonPath.c_str());
  }
  return rc != kExitOk ? rc : (wrong ? kExitFailed : kExitOk);
}

}  // namespace cli
}  // namespace arfuse
