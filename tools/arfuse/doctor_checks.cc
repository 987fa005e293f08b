#include "doctor_checks.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>

#include "args.h"
#include "topo/json.h"

namespace arfuse {
namespace cli {
namespace checkup {

namespace {

std::string fmt1(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", v);
  return b;
}

std::string gpuName(const topo::Topology& t, int d) {
  const topo::Gpu& g = t.gpus[d];
  return g.name + " (sm_" + std::to_string(g.ccMajor) + std::to_string(g.ccMinor) + ")";
}

// "2.28.9" from "... nccl 2.28.9 archs ..." (the header the library was built against).
std::string buildNccl(const std::string& info) {
  const size_t p = info.find(" nccl ");
  if (p == std::string::npos) return "";
  const size_t s = p + 6, e = info.find(' ', s);
  return info.substr(s, e == std::string::npos ? std::string::npos : e - s);
}

std::string majorMinor(const std::string& v) {
  const size_t a = v.find('.');
  if (a == std::string::npos) return v;
  const size_t b = v.find('.', a + 1);
  return v.substr(0, b);
}

std::string envValue(const Report& r, const std::string& name) {
  for (const auto& kv : r.env.otherEnv)
    if (kv.first == name) return kv.second;
  return "";
}

// Joins up to `max` items, then "+N more".
std::string joinSome(const std::vector<std::string>& items, size_t max = 6) {
  std::string s;
  for (size_t i = 0; i < items.size() && i < max; ++i) s += (i ? ", " : "") + items[i];
  if (items.size() > max) s += ", +" + std::to_string(items.size() - max) + " more";
  return s;
}

Check make(const char* name, Status st, std::string msg, std::string fix = "") {
  return Check{name, st, std::move(msg), std::move(fix)};
}

void environmentChecks(const Report& r, std::vector<Check>* out) {
  const Environment& e = r.env;
  const bool recorded = r.topologySource.rfind("file ", 0) == 0;
  if (recorded) {
    // Judging a machine from its recording: this machine's GPUs and driver are beside the point.
    out->push_back(make("gpu", Status::kOk,
                        "judging the recorded machine in " + r.topologySource.substr(5) + " (" +
                            std::to_string(r.topology.size()) + (r.topology.size() == 1 ? " GPU" : " GPUs") +
                            "); this machine has " + std::to_string(e.deviceCount) + " visible"));
  } else if (e.deviceCount == 0) {
    const bool said = e.deviceError.rfind("no CUDA device is visible", 0) == 0;
    out->push_back(
        make("gpu", Status::kFail,
             said ? e.deviceError
                  : "no CUDA device is visible" + (e.deviceError.empty() ? std::string() : " (" + e.deviceError + ")"),
             "check `nvidia-smi`, CUDA_VISIBLE_DEVICES and the driver; `arfuse plan` and `arfuse triage` "
             "work without a GPU"));
  } else {
    std::string names;
    if (r.haveTopology && r.topologySource == "probe") {
      std::map<std::string, int> count;
      for (int d = 0; d < r.topology.size(); ++d) ++count[gpuName(r.topology, d)];
      for (const auto& kv : count)
        names += (names.empty() ? ": " : ", ") + std::to_string(kv.second) + " x " + kv.first;
    }
    out->push_back(make("gpu", Status::kOk,
                        std::to_string(e.deviceCount) + " GPU" + (e.deviceCount == 1 ? "" : "s") + " visible" + names));
  }
  if (e.cudaDriverVersion == 0 && recorded) {
    // nothing to say about a driver that is not there
  } else if (e.cudaDriverVersion == 0) {
    out->push_back(make("driver", Status::kFail, "no NVIDIA driver answered (cudaDriverGetVersion = 0)",
                        "install the NVIDIA driver, or in a container run with the NVIDIA container toolkit (--gpus)"));
  } else if (e.cudaRuntimeVersion > e.cudaDriverVersion) {
    out->push_back(make("driver", Status::kFail,
                        "the driver" + (e.driverVersion.empty() ? std::string() : " " + e.driverVersion) +
                            " supports CUDA " + cudaVersionText(e.cudaDriverVersion) +
                            ", this build's runtime is CUDA " + cudaVersionText(e.cudaRuntimeVersion),
                        "update the driver to one that supports CUDA " + cudaVersionText(e.cudaRuntimeVersion) +
                            ", or rebuild arfuse with an older CUDA toolkit"));
  } else {
    out->push_back(make("driver", Status::kOk,
                        "driver " + (e.driverVersion.empty() ? std::string("?") : e.driverVersion) + " supports CUDA " +
                            cudaVersionText(e.cudaDriverVersion) + "; runtime CUDA " +
                            cudaVersionText(e.cudaRuntimeVersion)));
  }
  if (recorded) {
    bool nvmlFacts = r.topology.nvmlVersion.has_value();
    for (const topo::Link& l : r.topology.links)
      nvmlFacts |= l.pcie != topo::PcieLink::kUnknown || l.nvlinks.has_value();
    if (nvmlFacts) {
      out->push_back(
          make("nvml", Status::kOk, "the recording carries NVML's facts (PCIe levels, NVLinks, P2P status)"));
    } else {
      out->push_back(make("nvml", Status::kWarn,
                          "the recording has no NVML facts: NVLink counts, PCIe levels and NVML's P2P status are "
                          "unknown",
                          "record the machine again with NVML available (`arfuse doctor --save-topology FILE`)"));
    }
  } else if (e.nvmlLoaded) {
    out->push_back(
        make("nvml", Status::kOk, "NVML " + (e.nvmlVersion.empty() ? std::string("?") : e.nvmlVersion) + " loaded"));
  } else {
    out->push_back(make("nvml", Status::kWarn,
                        "NVML unavailable (" + e.nvmlError +
                            "): NVLink counts, PCIe levels and NVML's P2P status "
                            "are unknown; peer access is judged by CUDA and the measured probe alone",
                        "install the driver's libnvidia-ml.so.1 (in a container: the NVIDIA container toolkit mounts "
                        "it) or add its directory to LD_LIBRARY_PATH"));
  }
  const std::string header = buildNccl(e.buildInfo);
  if (e.ncclRuntime.empty()) {
    out->push_back(make("nccl", Status::kWarn, "the NCCL version loaded at run time is unknown (ncclGetVersion failed)",
                        "check which libnccl.so.2 the loader finds (ldd $(which arfuse))"));
  } else if (!header.empty() && majorMinor(header) != majorMinor(e.ncclRuntime)) {
    out->push_back(make("nccl", Status::kWarn,
                        "built against NCCL " + header + " but NCCL " + e.ncclRuntime + " is loaded",
                        "point LD_LIBRARY_PATH at the NCCL arfuse was built with, or rebuild against the one loaded"));
  } else {
    out->push_back(
        make("nccl", Status::kOk,
             "NCCL " + e.ncclRuntime + " loaded (built against " + (header.empty() ? std::string("?") : header) + ")"));
  }
  // Build architectures against each distinct GPU.
  const std::vector<int> built = buildArchs(e.buildInfo);
  if (r.haveTopology && r.topology.size() > 0) {
    std::map<int, std::vector<int>> byCc;
    for (const topo::Gpu& g : r.topology.gpus) byCc[g.ccMajor * 10 + g.ccMinor].push_back(g.index);
    std::string archs;
    for (int a : built) archs += (archs.empty() ? "" : ",") + std::to_string(a);
    for (const auto& kv : byCc) {
      std::string text;
      const Status st = archSupport(kv.first, built, &text);
      const std::string who = "GPU " + std::to_string(kv.second[0]) +
                              (kv.second.size() > 1 ? " (and " + std::to_string(kv.second.size() - 1) + " more)" : "") +
                              ", sm_" + std::to_string(kv.first);
      out->push_back(make("arch", st, who + ": " + text + " (this build: archs " + archs + ")",
                          st == Status::kOk
                              ? ""
                              : "rebuild with -DARFUSE_ARCH=" + std::to_string(kv.first) +
                                    " or the default build, which has native code for 80;86;89;90;100;120"));
    }
  }
  int fromEnv = 0;
  for (const Param& p : e.params) {
    fromEnv += p.source == "environment";
    if (!p.error.empty())
      out->push_back(make("params", Status::kWarn, p.error + " (the default " + p.value + " is used)",
                          "correct or unset " + p.name + " (`arfuse env` lists what each accepts)"));
  }
  for (const std::string& u : e.unknownEnv)
    out->push_back(make("params", Status::kWarn, u, "fix the name, or unset it (`arfuse env --markdown` lists them)"));
  out->push_back(make(
      "params", Status::kOk,
      std::to_string(e.params.size()) + " ARFUSE_* settings, " + std::to_string(fromEnv) + " from the environment"));
}

// Segments left in /dev/shm by groups whose every process died during init (doctor_shm.h).
void shmCheck(const Report& r, std::vector<Check>* out) {
  if (!r.shm.listed && r.shm.error.empty()) return;  // not scanned (a recorded machine, a test)
  const ShmVerdict v = judgeShm(r.shm);
  out->push_back(make("shm", v.warn ? Status::kWarn : Status::kOk, v.message, v.fix));
}

void multicastCheck(const Report& r, std::vector<Check>* out) {
  if (!r.haveTopology || r.topology.size() < 2) return;
  bool nvlink = false;
  for (const topo::Link& l : r.topology.links) nvlink |= l.nvlinks && *l.nvlinks > 0;
  if (!nvlink) {
    out->push_back(make("multicast", Status::kOk,
                        "no NVLink between these GPUs: NVLink multicast does not apply "
                        "(arfuse never creates multicast objects)"));
    return;
  }
  const std::string v = envValue(r, "NCCL_NVLS_ENABLE");
  if (v == "0") {
    out->push_back(
        make("multicast", Status::kOk, "NVLink present; NVLink multicast is off for NCCL (NCCL_NVLS_ENABLE=0)"));
  } else {
    out->push_back(make("multicast", Status::kWarn,
                        "NVLink present and NCCL_NVLS_ENABLE is " +
                            (v.empty() ? std::string("not set") : "'" + v + "'") +
                            ": NCCL may set up NVLink multicast (NVLS) for the NCCL path, which needs a working fabric "
                            "manager and can fail or hang where multicast is not provisioned",
                        "export NCCL_NVLS_ENABLE=0 (and TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1 for "
                        "other libraries in the process) unless multicast is known to work on this machine"));
  }
}

void topologyChecks(const Report& r, std::vector<Check>* out) {
  if (!r.haveTopology) return;
  const topo::Topology& t = r.topology;
  const int n = t.size();
  if (n == 1) {
    out->push_back(make("p2p", Status::kOk,
                        "one GPU: no pairs to probe; the multi-rank paths run as virtual ranks "
                        "on it"));
  }
  std::vector<std::string> noP2p, disagree;
  bool anyBroken = false;
  for (int a = 0; a < n; ++a) {
    for (int b = a + 1; b < n; ++b) {
      const topo::Link& ab = t.link(a, b);
      const topo::Link& ba = t.link(b, a);
      const std::string pair = std::to_string(a) + "-" + std::to_string(b);
      if (!ab.canAccessPeer || !ba.canAccessPeer) {
        std::string nv;
        if (ab.p2pRead != topo::P2pStatus::kUnknown) nv = " NVML " + std::string(topo::p2pStatusName(ab.p2pRead));
        noP2p.push_back(pair + nv);
        if (ab.p2pRead == topo::P2pStatus::kOk && ab.p2pWrite == topo::P2pStatus::kOk)
          disagree.push_back(pair + ": NVML reports P2P ok, CUDA's canAccessPeer is 0");
        continue;
      }
      for (const topo::Link* l : {&ab, &ba}) {
        if (l->p2pRead != topo::P2pStatus::kUnknown && l->p2pRead != topo::P2pStatus::kOk) {
          disagree.push_back(std::to_string(l->from) + "->" + std::to_string(l->to) +
                             ": CUDA allows peer access, NVML reports read " + topo::p2pStatusName(l->p2pRead));
          break;
        }
      }
      // Measured failures, named per direction.
      std::vector<std::string> failed;
      for (const topo::Link* l : {&ab, &ba}) {
        const std::string dir = std::to_string(l->from) + "->" + std::to_string(l->to);
        if (l->measured.peerLoad && !*l->measured.peerLoad) failed.push_back("peer load " + dir);
        if (l->measured.peerStore && !*l->measured.peerStore) failed.push_back("peer store " + dir);
      }
      if (!failed.empty()) {
        anyBroken = true;
        std::string what = failed.size() == 1 ? failed[0].substr(0, failed[0].find(' ', 5)) : "peer access";
        out->push_back(make("p2p", Status::kFail,
                            "P2P advertised but " + what + " failed between GPU " + std::to_string(a) + " and " +
                                std::to_string(b) + " (" + joinSome(failed) +
                                "): ACS or IOMMU likely; arfuse will use "
                                "the host-staged path for groups that include both",
                            "disable ACS on the PCIe bridges between them (or boot with iommu=pt; in a VM, enable P2P "
                            "passthrough), then re-run `arfuse doctor`"));
        continue;
      }
      const std::string why = topo::pairProblem(t, a, b);
      if (!why.empty()) {
        anyBroken = true;
        out->push_back(make("p2p", Status::kFail,
                            "peer traffic between GPU " + std::to_string(a) + " and " + std::to_string(b) +
                                " does not run at link speed: " + why.substr(why.find(": ") + 2) +
                                "; arfuse treats the pair as without P2P (host-staged path)",
                            "check the IOMMU (iommu=pt) and ACS settings of the PCIe path between them; in a VM, P2P "
                            "needs passthrough of the whole switch"));
      }
    }
  }
  if (!noP2p.empty()) {
    out->push_back(make("p2p", Status::kWarn,
                        "no peer access between " + std::to_string(noP2p.size()) + " of " +
                            std::to_string(n * (n - 1) / 2) +
                            " GPU pairs (cudaDeviceCanAccessPeer = 0: " + joinSome(noP2p) +
                            "): groups that include such a pair use the host-staged path, NCCL for "
                            "large messages",
                        "expected on GeForce cards and across some sockets; for peer access keep each TP group inside "
                        "one island (see Islands)"));
  }
  if (!disagree.empty()) {
    out->push_back(make("p2p", Status::kWarn, "CUDA and NVML disagree about P2P: " + joinSome(disagree, 3),
                        "the measured probe decides; if it is off, run `arfuse doctor` without --no-measure"));
  }
  if (n > 1 && noP2p.empty() && !anyBroken) {
    std::vector<int> all(n);
    for (int i = 0; i < n; ++i) all[i] = i;
    const topo::P2pVerdict v = topo::p2pAll(t, all);
    if (v.proven) {
      out->push_back(make("p2p", Status::kOk, v.reason));
    } else {
      out->push_back(make("p2p", Status::kWarn, "P2P is reported but not proven: " + v.reason,
                          "run `arfuse doctor` on the machine (without --no-measure) so peer loads and stores are "
                          "checked"));
    }
  }
  // Islands worth telling about: several groups, at least one with more than one GPU.
  const auto isl = topo::islands(t);
  bool multi = false;
  for (const auto& i : isl) multi |= i.size() > 1;
  std::string islText;
  for (const auto& i : isl) {
    islText += " [";
    for (size_t k = 0; k < i.size(); ++k) islText += (k ? " " : "") + std::to_string(i[k]);
    islText += "]";
  }
  if (n > 1 && isl.size() > 1 && multi) {
    out->push_back(make("islands", Status::kWarn,
                        "the GPUs form " + std::to_string(isl.size()) + " islands:" + islText +
                            "; a TP group that spans islands runs at the pace of the links between them",
                        "place each TP group inside one island (e.g. CUDA_VISIBLE_DEVICES with that island's GPUs)"));
  } else if (n > 1 && isl.size() == 1) {
    out->push_back(make("islands", Status::kOk, "one island of " + std::to_string(n) + " GPUs"));
  }
  // Bandwidth: the pull/push hint, and a warning for links far below what they should carry.
  if (n > 1) {
    std::vector<int> all(n);
    for (int i = 0; i < n; ++i) all[i] = i;
    const topo::AccessHint h = topo::groupAccessHint(t, all);
    if (h.access != topo::Access::kUnknown)
      out->push_back(make("bandwidth", Status::kOk, "all pairs at once: " + h.reason));
  }
  // Host memory, what the host-staged path runs on.
  std::vector<std::string> slow, fine;
  for (const topo::Gpu& g : t.gpus) {
    if (!g.host.readGBps && !g.host.writeGBps) continue;
    const double rd = g.host.readGBps.value_or(0), wr = g.host.writeGBps.value_or(0);
    std::string s = "GPU " + std::to_string(g.index) + " read " + fmt1(rd) + " GB/s, write " + fmt1(wr) + " GB/s";
    if (g.host.flagRoundTripUs) s += ", flag round trip " + fmt1(*g.host.flagRoundTripUs) + " us";
    (std::min(rd, wr) < 5.0 ? slow : fine).push_back(s);
  }
  if (!slow.empty()) {
    out->push_back(make("host", Status::kWarn,
                        "pinned host memory is slow from " + joinSome(slow, 3) + ": the host-staged path will be slow",
                        "check the GPU's PCIe link (`nvidia-smi -q -d PCI`: current vs max generation and width) and "
                        "the slot it sits in"));
  } else if (!fine.empty()) {
    out->push_back(make("host", Status::kOk, "pinned host memory (host-staged path): " + joinSome(fine, 2)));
  }
}

void probeChecks(const Report& r, std::vector<Check>* out) {
  if (!r.haveTopology || r.topologySource != "probe") return;
  for (const std::string& note : r.probeNotes) {
    if (note.rfind("measurement stopped: ", 0) == 0) {
      const bool hung = note.find("did not finish") != std::string::npos;
      out->push_back(make("probe", Status::kFail, "the measured probe " + note.substr(12),
                          hung ? "a peer access that never completes points at ACS or the IOMMU; reset the GPUs "
                                 "(nvidia-smi -r) or reboot before running jobs, and fix the PCIe settings"
                               : "re-run `arfuse doctor`; if it repeats, report it with `arfuse doctor --json`"));
    }
  }
}

void selftestChecks(const Report& r, std::vector<Check>* out) {
  if (!r.selftestRan) return;
  const std::string group =
      r.virtualRanks ? std::to_string(r.devices.size()) + " VIRTUAL ranks on GPU 0" : countOf(r.devices.size(), "GPU");
  std::vector<std::string> passed, notEligible;
  for (const PathResult& p : r.selftest) {
    if (!p.eligible) {
      notEligible.push_back(p.algo);
    } else if (p.failed) {
      out->push_back(
          make("selftest", Status::kFail,
               p.algo + " failed " + std::to_string(p.failed) + " of " + std::to_string(p.failed + p.passed) +
                   " cases on " + group + ": " + p.why,
               "force a path that passed (e.g. ARFUSE_ALGO=" + std::string(r.virtualRanks ? "oneshot" : "nccl") +
                   ") and report this with `arfuse doctor --json`"));
    } else {
      passed.push_back(p.algo + " " + std::to_string(p.passed) + "/" + std::to_string(p.passed));
    }
  }
  if (!passed.empty())
    out->push_back(make("selftest", Status::kOk,
                        "passed on " + group + ": " + joinSome(passed, 8) +
                            (notEligible.empty() ? "" : "; not eligible: " + joinSome(notEligible, 8))));
  else
    out->push_back(make("selftest", Status::kFail, "no path passed on " + group,
                        "see the self-test table above; report it with `arfuse doctor --json`"));
  if (!r.planError.empty()) {
    out->push_back(make("plan", Status::kFail, "the plan table could not be made: " + r.planError,
                        "see the error; `arfuse plan` explains decisions without a GPU"));
  } else {
    int bad = 0;
    for (const PlanRow& p : r.plan) bad += !p.ok;
    if (bad)
      out->push_back(make("plan", Status::kWarn,
                          std::to_string(bad) + " of " + std::to_string(r.plan.size()) + " sizes have no path",
                          "see the plan table's reasons"));
  }
}

void calibrationCheck(const Report& r, std::vector<Check>* out) {
  if (r.calibrationFile.empty()) {
    out->push_back(make("calibration", Status::kOk,
                        "ARFUSE_CALIBRATION_FILE is not set: the plan uses its built-in "
                        "limits (`arfuse doctor --calibrate` measures this machine's)"));
  } else if (r.calibrationApplies) {
    out->push_back(make("calibration", Status::kOk, r.calibrationWhy));
  } else {
    out->push_back(
        make("calibration", Status::kWarn,
             r.calibrationWhy.empty() ? "calibration " + r.calibrationFile + " not checked (no GPU)" : r.calibrationWhy,
             "run `arfuse doctor --calibrate --out " + r.calibrationFile +
                 "` on this machine with the group's rank count, or unset ARFUSE_CALIBRATION_FILE"));
  }
}

}  // namespace

std::string cudaVersionText(int v) { return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10); }

const char* usage() {
  return "usage: arfuse doctor [--json] [--no-measure] [--no-selftest] [--ranks=N] [--virtual]\n"
         "                     [--hidden=H] [--dtype=bf16|fp16|fp32] [--tokens=T,T,...]\n"
         "                     [--topology=FILE.json] [--save-topology=FILE.json]\n"
         "       arfuse doctor --calibrate [--ranks=N[,N...]] [--virtual] [--hidden=H] [--dtype=D]\n"
         "                     [--tokens=T,T,...|--quick] [-n ITERS] [--calls=C] [-w WARMUP] [--out=FILE.json]\n"
         "  Prints the environment (driver, CUDA, NCCL, NVML, arfuse build, every ARFUSE_* setting and its\n"
         "  source), the machine's topology as probed (NVML and CUDA facts; measured peer load/store, bandwidth\n"
         "  with all pairs at once and alone, flag latency, host memory), a self-test of every eligible path on\n"
         "  a real communicator (one GPU: virtual ranks), the path the plan picks per size and why, and checks\n"
         "  marked OK / WARN / FAIL, each with a one-line fix (docs/troubleshooting.md explains them).\n"
         "  --topology judges a recorded machine (docs/topology.md) without touching a GPU.\n"
         "  --calibrate times every eligible path over the sizes (default tokens 1..2048, doubling) inside CUDA\n"
         "  graphs, checks each result, and writes the crossovers to --out (default arfuse_calibration.json);\n"
         "  point ARFUSE_CALIBRATION_FILE at it. With one GPU the ranks are virtual (default --ranks 2).\n"
         "       arfuse doctor --clean\n"
         "  --clean lists /dev/shm/arfuse-* (owner, age, whether a live process holds it) and removes the ones\n"
         "  no live process holds: segments of groups whose processes were all killed during init.\n"
         "  Every option also takes its value as --name VALUE (-n ITERS or -nITERS).\n"
         "  Exit status: 0 no FAIL, 1 a check failed or no GPU is visible, 2 usage error, 3 a build without CUDA.\n";
}

bool parseArgs(const std::vector<std::string>& args, Args* a, std::string* error) {
  Options o;
  o.flag({"-h", "--help"}, [a] { a->help = true; });
  o.flag({"--json"}, [a] { a->json = true; });
  o.flag({"--calibrate"}, [a] { a->calibrate = true; });
  o.flag({"--clean"}, [a] { a->clean = true; });
  o.flag({"--no-selftest"}, [a] { a->selftest = false; });
  o.flag({"--no-measure"}, [a] { a->measure = false; });
  o.flag({"--virtual"}, [a] { a->virtualRanks = true; });
  o.flag({"--quick"}, [a] { a->quick = true; });
  o.text({"--topology"}, &a->topologyPath);
  o.text({"--save-topology"}, &a->saveTopology);
  o.text({"--out"}, &a->out);
  o.value({"--ranks"}, [a](const std::string& k, const std::string& v, std::string* error) {
    return parseIntListArg(k, v, 2, 16, &a->ranks, error);
  });
  o.value({"--tokens"}, [a](const std::string& k, const std::string& v, std::string* error) {
    return parseIntListArg(k, v, 1, 1 << 20, &a->tokens, error);
  });
  o.value({"--hidden"}, [a](const std::string& k, const std::string& v, std::string* error) {
    return parseHiddenArg(k, v, &a->hidden, error);
  });
  o.value({"--dtype"}, [a](const std::string& k, const std::string& v, std::string* error) {
    arfuseDataType_t d;
    if (!parseDtypeArg(k, v, &d, error)) return false;
    a->dtype = dtypeArgName(d);
    return true;
  });
  o.value({"-n", "--calls", "-w"}, [a](const std::string& k, const std::string& v, std::string* error) {
    int* dst = k == "-n" ? &a->iters : k == "--calls" ? &a->calls : &a->warmup;
    return parseIntArg(k, v, k == "-w" ? 0 : 1, 100000, dst, error);
  });
  if (!o.parse(args, error)) return false;
  if (a->calibrate && !a->topologyPath.empty()) {
    *error = "--calibrate measures this machine; it cannot use --topology";
    return false;
  }
  if (!a->calibrate && a->ranks.size() > 1) {
    *error = "--ranks: give one count (several are for --calibrate with virtual ranks)";
    return false;
  }
  return true;
}

std::vector<int> tokenList(const Args& a) {
  if (!a.tokens.empty()) return a.tokens;
  if (a.quick) return {1, 4, 16, 64, 256, 1024};
  std::vector<int> t;
  for (int x = 1; x <= 2048; x *= 2) t.push_back(x);
  return t;
}

const char* statusName(Status s) {
  switch (s) {
    case Status::kOk:
      return "OK";
    case Status::kWarn:
      return "WARN";
    case Status::kFail:
      return "FAIL";
  }
  return "?";
}

std::vector<int> buildArchs(const std::string& info) {
  std::vector<int> out;
  const size_t p = info.find("archs ");
  if (p == std::string::npos) return out;
  std::string list = info.substr(p + 6);
  list = list.substr(0, list.find(' '));
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, list.find(';') != std::string::npos ? ';' : ',')) {
    const int v = std::atoi(item.c_str());  // "90a", "90-real" -> 90
    if (v > 0) out.push_back(v);
  }
  return out;
}

Status archSupport(int cc, const std::vector<int>& built, std::string* text) {
  // Machine code for X.y runs on X.z with z >= y; PTX of an older architecture can be JIT-compiled.
  for (int a : built) {
    if (a / 10 == cc / 10 && a % 10 <= cc % 10) {
      *text = "native code (sm_" + std::to_string(a) + ")";
      return Status::kOk;
    }
  }
  int older = 0;
  for (int a : built)
    if (a < cc) older = std::max(older, a);
  if (older) {
    *text = "no native code; runs only if the driver JIT-compiles sm_" + std::to_string(older) +
            " PTX (slow first start, never tested on this GPU)";
    return Status::kWarn;
  }
  *text = "no code this GPU can run: the arfuse kernels would fail to launch";
  return Status::kFail;
}

std::vector<Check> runChecks(const Report& r) {
  std::vector<Check> out;
  environmentChecks(r, &out);
  multicastCheck(r, &out);
  topologyChecks(r, &out);
  probeChecks(r, &out);
  selftestChecks(r, &out);
  calibrationCheck(r, &out);
  shmCheck(r, &out);
  return out;
}

int exitCode(const std::vector<Check>& checks) {
  for (const Check& c : checks)
    if (c.status == Status::kFail) return 1;
  return 0;
}

}  // namespace checkup
}  // namespace cli
}  // namespace arfuse
