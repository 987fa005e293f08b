// `arfuse doctor`: what this machine is, whether arfuse works on it, what it will do and why.
//
// Gathers the facts (environment, probed topology, a self-test of every eligible path on a real
// communicator, the plan per size from arfuseCommQueryPlan, whether a calibration file applies) and
// hands them to doctor_checks.cc, which judges and prints them. `--calibrate` times every eligible
// path over the size range in CUDA graphs (tools/harness, as `arfuse bench` does), checks every
// result, and writes the crossovers (src/plan/calibration.h).
#include <cuda_runtime.h>
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <string>
#include <vector>

#include "arfuse/arfuse.h"
#include "args.h"
#include "base/printable.h"
#include "cli.h"
#include "common/params.h"
#include "device/args.h"
#include "doctor_checks.h"
#include "harness/harness.h"
#include "plan/calibration.h"
#include "policy/resolve.h"
#include "topo/probe.h"

namespace arfuse {
namespace cli {

namespace {

using checkup::Args;
using checkup::Report;

const int kPaths[] = {arfuseAlgoLowLatency, arfuseAlgoOneShot, arfuseAlgoTwoShot, arfuseAlgoHostStaged, arfuseAlgoNccl};

// Args::dtype holds dtypeArgName's spelling (doctor_checks.cc parseArgs).
arfuseDataType_t dtypeOf(const std::string& s) {
  arfuseDataType_t d = arfuseBfloat16;
  std::string unused;
  parseDtypeArg("--dtype", s, &d, &unused);
  return d;
}
long long dtypeBytes(const std::string& s) { return s == "fp32" ? 4 : 2; }

// "arfuseCommInitAll: config: algo=nccl (forced by config) is unavailable: ..." -> the part after the
// function name, which is what a person needs.
std::string stripInitPrefix(std::string s) {
  for (const char* p : {"arfuseCommInitAll: ", "config: "})
    if (s.rfind(p, 0) == 0) s = s.substr(std::string(p).size());
  return s;
}

// Environment facts; NVML and the driver version come from the probe (which opens NVML even
// without a GPU).
void fillEnvironment(const topo::ProbeResult& pr, checkup::Environment* e) {
  e->buildInfo = arfuseGetBuildInfo();
  e->driverVersion = pr.topology.driverVersion.value_or("");
  e->cudaDriverVersion = pr.cudaDriverVersion;
  e->cudaRuntimeVersion = pr.cudaRuntimeVersion;
  int v = 0;
  if (ncclGetVersion(&v) == ncclSuccess)
    e->ncclRuntime = std::to_string(v / 10000) + "." + std::to_string((v / 100) % 100) + "." + std::to_string(v % 100);
  e->nvmlLoaded = pr.nvmlLoaded;
  e->nvmlError = pr.nvmlError;
  e->nvmlVersion = pr.topology.nvmlVersion.value_or("");
  e->deviceCount = harness::deviceCount();
  if (e->deviceCount == 0) e->deviceError = pr.error.empty() ? "cudaGetDeviceCount found none" : pr.error;
  for (const ParamValue& p : paramValues())
    e->params.push_back({p.spec->name, p.value, p.fromEnvironment ? "environment" : "default", p.error});
  e->unknownEnv = paramUnknownNames();
  for (const char* name :
       {"NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS", "CUDA_VISIBLE_DEVICES",
        "CUDA_DEVICE_ORDER", "CUDA_DEVICE_MAX_CONNECTIONS", "NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL", "NCCL_SHM_DISABLE"}) {
    if (const char* val = std::getenv(name)) e->otherEnv.emplace_back(name, val);
  }
}

// The doctor's group: every GPU when there are several (or the first --ranks of them), else
// virtual ranks on GPU 0 (--ranks, default 2).
bool chooseDevices(const Args& a, int ndev, std::vector<int>* devices, bool* virtualRanks, std::string* error) {
  *virtualRanks = a.virtualRanks || ndev < 2;
  const int n = !a.ranks.empty() ? a.ranks[0] : (*virtualRanks ? 2 : ndev);
  if (!*virtualRanks && n > ndev) {
    *error = "--ranks " + std::to_string(n) + " but only " + countOf(ndev, "GPU") + (ndev == 1 ? " is" : " are") +
             " visible";
    return false;
  }
  devices->assign(n, 0);
  if (!*virtualRanks)
    for (int r = 0; r < n; ++r) (*devices)[r] = r;
  return true;
}

void runSelftest(const Args& a, Report* r) {
  const arfuseDataType_t dt = dtypeOf(a.dtype);
  for (int algo : kPaths) {
    checkup::PathResult p;
    p.algo = arfuseAlgoName(arfuseAlgo_t(algo));
    harness::World w(r->devices, 64, a.hidden, algo, 5000);
    if (!w.ok()) {
      p.eligible = false;
      p.why = stripInitPrefix(w.error());
      if (w.status() != arfuseUnsupported) {  // eligible in principle, but the group could not be built
        p.eligible = true;
        p.failed = 1;
      }
      r->selftest.push_back(p);
      continue;
    }
    p.eligible = true;
    for (int tokens : {1, 3, 64}) {
      for (arfuseOp_t op : {arfuseOpAllReduceAddRmsNorm, arfuseOpAllReduce}) {
        if (op == arfuseOpAllReduce && tokens != 3) continue;
        if (algo == arfuseAlgoLowLatency && tokens * a.hidden * dtypeBytes(a.dtype) > kLowLatencyMaxBytes) continue;
        harness::CaseSpec spec;
        spec.op = op;
        spec.dtype = dt;
        spec.tokens = tokens;
        spec.hidden = a.hidden;
        spec.seed = 4000 + tokens + 100 * algo;
        harness::CaseResult c = w.run(spec);
        if (c.ok) {
          ++p.passed;
        } else if (p.failed++ == 0) {
          p.why = "tokens=" + std::to_string(tokens) + (op == arfuseOpAllReduce ? " allreduce: " : ": ") + c.error;
        }
      }
    }
    r->selftest.push_back(p);
  }
}

void runPlanTable(const Args& a, Report* r) {
  const std::vector<int> tokens = checkup::tokenList(a);
  const int maxTokens = *std::max_element(tokens.begin(), tokens.end());
  arfuseConfig_t cfg = ARFUSE_CONFIG_INITIALIZER;
  cfg.maxTokens = maxTokens;
  cfg.maxHidden = a.hidden;
  cfg.dtypeMask = ARFUSE_DTYPE_BIT(dtypeOf(a.dtype));
  std::vector<arfuseComm_t> comms(r->devices.size());
  if (arfuseCommInitAll(comms.data(), static_cast<int>(comms.size()), r->devices.data(), &cfg) != arfuseSuccess) {
    r->planError = stripInitPrefix(arfuseGetLastError());
    return;
  }
  for (int t : tokens) {
    checkup::PlanRow row;
    row.tokens = t;
    row.bytes = static_cast<long long>(t) * a.hidden * dtypeBytes(a.dtype);
    arfusePlan_t plan;
    const arfuseResult_t st =
        arfuseCommQueryPlan(comms[0], arfuseOpAllReduceAddRmsNorm, t, a.hidden, dtypeOf(a.dtype), &plan);
    row.ok = st == arfuseSuccess;
    row.algo = row.ok ? arfuseAlgoName(plan.algo) : "";
    row.reason = row.ok ? plan.reason : std::string(arfuseGetErrorName(st)) + ": " + arfuseCommGetLastError(comms[0]);
    r->plan.push_back(row);
  }
  for (arfuseComm_t c : comms) arfuseCommDestroy(c);
}

int calibrate(const Args& a);

}  // namespace

int doctor(const std::vector<std::string>& args) {
  Args a;
  std::string err;
  if (!checkup::parseArgs(args, &a, &err)) return usageError("doctor", err);
  if (a.help) {
    std::printf("%s", checkup::usage());
    return kExitOk;
  }
  if (a.calibrate) return calibrate(a);
  if (a.clean) {
    const checkup::ShmScan scan = checkup::scanShm();
    if (!scan.listed) {
      std::fprintf(stderr, "arfuse doctor --clean: %s\n", printable(scan.error).c_str());
      return kExitFailed;
    }
    int failures = 0;
    // Segment names are any local user's to choose: each line is escaped as it is printed.
    for (const std::string& line : checkup::cleanShm(scan, "/dev/shm", &failures))
      std::printf("%s\n", printable(line).c_str());
    return failures ? kExitFailed : kExitOk;
  }

  Report r;
  r.hidden = a.hidden;
  r.dtype = a.dtype;
  topo::ProbeOptions po;
  po.measure = a.measure && a.topologyPath.empty();
  const topo::ProbeResult pr = topo::probeTopology(po);
  fillEnvironment(pr, &r.env);
  if (!a.topologyPath.empty()) {
    if (const Status read = topo::readJsonFile(a.topologyPath, &r.topology); !read.ok()) {
      return usageError("doctor", "--topology: " + read.message());
    }
    r.haveTopology = true;
    r.topologySource = "file " + a.topologyPath;
  } else if (pr.ok) {
    r.haveTopology = true;
    r.topology = pr.topology;
    r.topologySource = "probe";
    r.probeMeasured = pr.measured;
    r.probeNotes = pr.notes;
    if (r.env.ncclRuntime.size()) r.topology.ncclVersion = r.env.ncclRuntime;
  }
  if (!a.saveTopology.empty() && r.haveTopology) {
    std::ofstream f(a.saveTopology);
    f << topo::toJson(r.topology);
    if (!f) std::fprintf(stderr, "arfuse doctor: cannot write %s\n", a.saveTopology.c_str());
  }

  const int ndev = r.env.deviceCount;
  if (ndev > 0 && !chooseDevices(a, ndev, &r.devices, &r.virtualRanks, &err)) return usageError("doctor", err);
  if (!a.topologyPath.empty()) {
    r.selftestSkipped = "--topology describes another machine";
  } else if (ndev == 0) {
    r.selftestSkipped = "no GPU is visible";
  } else if (!a.selftest) {
    r.selftestSkipped = "--no-selftest";
  } else {
    runSelftest(a, &r);
    r.selftestRan = true;
    runPlanTable(a, &r);
  }

  r.calibrationFile = paramCalibrationFile();
  if (!r.calibrationFile.empty() && r.haveTopology && !r.devices.empty() && a.topologyPath.empty()) {
    // The library's own resolution (policy/resolve.h), for a group on every GPU doctor looked at.
    PolicyInputs in;
    for (int d : r.devices) in.uuids.push_back(r.topology.gpus[d].uuid);
    in.topology = &r.topology;
    in.calibrationFile = r.calibrationFile;
    in.explicitEnv = explicitLimitsFromEnv();
    const ResolvedPolicy rp = resolvePolicy(in);
    r.calibrationApplies = rp.calibrationApplies;
    r.calibrationWhy = rp.calibrationWhy;
  }

  r.shm = checkup::scanShm();
  const auto checks = checkup::runChecks(r);
  // Text: its untrusted fields were escaped one by one (doctor_render.cc); the whole report once more
  // keeping its own newlines (idempotent), so no field missed there reaches the terminal raw.
  const std::string out = a.json ? checkup::renderJson(r, checks) : printable(checkup::renderText(r, checks), true);
  std::fwrite(out.data(), 1, out.size(), stdout);
  return checkup::exitCode(checks);
}

namespace {

int calibrate(const Args& a) {
  topo::ProbeOptions po;
  po.measure = false;  // the calibration key uses reported facts only
  const topo::ProbeResult pr = topo::probeTopology(po);
  std::printf("# arfuse doctor --calibrate: %s\n", arfuseGetBuildInfo());
  if (!pr.ok) {
    std::printf(
        "arfuse doctor --calibrate: %s; nothing to measure here.\n"
        "  Run it on the machine whose crossovers you want (one GPU is enough: virtual ranks).\n",
        pr.error.c_str());
    return kExitFailed;
  }
  if (!pr.nvmlLoaded) std::printf("# NVML unavailable (%s): the key holds CUDA's facts only\n", pr.nvmlError.c_str());
  const topo::Topology& t = pr.topology;
  const int ndev = t.size();
  const bool virtualRanks = a.virtualRanks || ndev < 2;
  std::vector<int> counts = a.ranks;
  if (counts.empty()) counts = {virtualRanks ? 2 : ndev};
  if (!virtualRanks && counts.size() > 1) {
    return usageError("doctor --calibrate",
                      "with real GPUs give one --ranks N (GPUs 0..N-1): a file covers one set of GPUs");
  }
  if (!virtualRanks && counts[0] > ndev) {
    return usageError("doctor --calibrate",
                      "--ranks " + std::to_string(counts[0]) + " but only " + countOf(ndev, "GPU"));
  }
  const std::vector<int> tokens = checkup::tokenList(a);
  const int maxTokens = *std::max_element(tokens.begin(), tokens.end());
  const int iters = a.quick ? std::min(a.iters, 10) : a.iters;
  const int calls = a.quick ? std::min(a.calls, 10) : a.calls;
  const arfuseDataType_t dt = dtypeOf(a.dtype);

  Calibration cal;
  cal.created = isoDate();
  cal.arfuse = arfuseGetBuildInfo();
  cal.hostname = topo::hostName();
  cal.hidden = a.hidden;
  cal.dtype = a.dtype;
  std::vector<int> keyDevices;
  int wrong = 0;
  for (int n : counts) {
    std::vector<int> devices(n, 0);
    if (!virtualRanks)
      for (int r = 0; r < n; ++r) devices[r] = r;
    keyDevices = devices;
    CalibrationGroup g;
    g.nranks = n;
    g.virtualRanks = virtualRanks;
    std::printf(
        "\n# %d ranks, %s; hidden %d %s; %d calls per graph, %d timed replays (+%d warm-up), median of the "
        "slowest rank\n",
        n,
        virtualRanks ? "VIRTUAL on GPU 0 (crossovers of this GPU sharing itself, not of a multi-GPU machine)"
                     : "one per GPU",
        a.hidden, a.dtype.c_str(), calls, iters, a.warmup);
    std::printf("%-11s %7s %11s %10s  %s\n", "algo", "tokens", "bytes", "us", "check");
    for (int algo : kPaths) {
      const std::string name = arfuseAlgoName(arfuseAlgo_t(algo));
      harness::World w(devices, maxTokens, a.hidden, algo, 5000);
      if (!w.ok()) {
        const bool unsupported = w.status() == arfuseUnsupported;
        g.notes.push_back(name + (unsupported ? ": not eligible: " : ": group creation failed: ") +
                          stripInitPrefix(w.error()));
        std::printf("%-11s %s\n", name.c_str(), g.notes.back().c_str());
        if (!unsupported) ++wrong;
        continue;
      }
      bool skippedLarge = false;
      for (size_t i = 0; i < tokens.size(); ++i) {
        const long long bytes = static_cast<long long>(tokens[i]) * a.hidden * dtypeBytes(a.dtype);
        // Above its one-phase limit a forced low-latency call runs the two-phase variant, recorded as
        // "lowlatency2" (the auto plan's window for it); beyond what its regions hold, not timed.
        std::string label = name;
        if (algo == arfuseAlgoLowLatency && bytes > kLowLatencyMaxBytes) {
          arfusePlan_t q;
          if (arfuseCommQueryPlan(w.comm(0), arfuseOpAllReduceAddRmsNorm, tokens[i], a.hidden, dt, &q) !=
              arfuseSuccess) {
            skippedLarge = true;
            continue;
          }
          label = "lowlatency2";
        }
        harness::CaseSpec spec;
        spec.dtype = dt;
        spec.tokens = tokens[i];
        spec.hidden = a.hidden;
        spec.seed = 9000 + i + 100 * algo;
        const harness::CaseResult c = w.run(spec);
        if (!c.ok) {
          ++wrong;
          g.notes.push_back(label + " tokens=" + std::to_string(tokens[i]) + ": wrong result, not timed: " + c.error);
          std::printf("%-11s %7d %11lld %10s  FAIL: %s\n", label.c_str(), tokens[i], bytes, "-", c.error.c_str());
          continue;
        }
        const harness::Timing tm = w.timeGraph(spec, calls, iters, a.warmup);
        if (!tm.ok) {
          ++wrong;
          g.notes.push_back(label + " tokens=" + std::to_string(tokens[i]) + ": timing failed: " + tm.error);
          std::printf("%-11s %7d %11lld %10s  timing failed: %s\n", label.c_str(), tokens[i], bytes, "-",
                      tm.error.c_str());
          continue;
        }
        g.points.push_back({label, tokens[i], bytes, tm.medianUs});
        std::printf("%-11s %7d %11lld %10.2f  ok\n", label.c_str(), tokens[i], bytes, tm.medianUs);
        std::fflush(stdout);
      }
      if (skippedLarge)
        g.notes.push_back(name + ": carries at most " + std::to_string(kLowLatencyMaxBytes) +
                          " B per rank in one phase and what its regions hold in two (lowlatency2); larger sizes "
                          "not timed");
    }
    std::printf("# fastest up to:");
    for (const auto& kv : calibrationCrossovers(g.points)) std::printf(" %s %lld B;", kv.first.c_str(), kv.second);
    std::printf("\n");
    cal.groups.push_back(g);
  }
  std::vector<std::string> uuids;
  for (int d : keyDevices) uuids.push_back(t.gpus[d].uuid);
  cal.gpus = uuids;
  std::sort(cal.gpus.begin(), cal.gpus.end());
  cal.gpus.erase(std::unique(cal.gpus.begin(), cal.gpus.end()), cal.gpus.end());
  cal.fingerprint = topo::calibrationFingerprint(t, keyDevices);

  std::ofstream f(a.out);
  f << calibrationToJson(cal);
  f.close();
  if (!f) {
    std::fprintf(stderr, "arfuse doctor --calibrate: cannot write %s\n", a.out.c_str());
    return kExitFailed;
  }
  std::printf("\n# wrote %s (%s, %zu GPU%s)\n", a.out.c_str(), cal.fingerprint.c_str(), cal.gpus.size(),
              cal.gpus.size() == 1 ? "" : "s");
  bool anyApplies = false;
  for (const CalibrationGroup& g : cal.groups) {
    std::vector<std::string> groupUuids;
    for (int r = 0; r < g.nranks; ++r) groupUuids.push_back(t.gpus[virtualRanks ? 0 : r].uuid);
    PlanPolicy p;
    std::string summary;
    const Status applied =
        policyFromCalibration(cal, groupUuids, cal.fingerprint, g.nranks, "calibration " + a.out, &p, &summary);
    anyApplies |= applied.ok();
    std::printf("# %s\n", (applied.ok() ? summary : applied.message()).c_str());
  }
  char abs[4096];
  const std::string shown = realpath(a.out.c_str(), abs) ? std::string(abs) : a.out;
  std::printf("# use it: export ARFUSE_CALIBRATION_FILE=%s\n", shown.c_str());
  if (wrong) std::printf("# %d problem(s) above: wrong results are never used for a crossover\n", wrong);
  return wrong || !anyApplies ? kExitFailed : kExitOk;
}

}  // namespace
}  // namespace cli
}  // namespace arfuse
