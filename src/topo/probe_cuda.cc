// Reported facts: CUDA device properties and cudaDeviceCanAccessPeer, NVML's names, bus ids, NUMA
// nodes, PCIe levels, P2P statuses and NVLinks. Then, unless asked not to, the measured probes.
#include <cuda_runtime.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "common/no_device.h"
#include "nvml.h"
#include "probe.h"
#include "probe_map.h"
#include "probe_measure.h"

namespace arfuse {
namespace topo {

namespace {

std::optional<int> sysfsNumaNode(const std::string& busId) {
  std::ifstream f("/sys/bus/pci/devices/" + sysfsBusId(busId) + "/numa_node");
  if (!f) return std::nullopt;
  std::stringstream ss;
  ss << f.rdbuf();
  return parseNumaNode(ss.str());
}

std::string cudaText(const char* what, cudaError_t e) { return std::string(what) + ": " + cudaGetErrorString(e); }

}  // namespace

std::string hostName() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "";
  return buf;
}

// The kernel module's version from /proc ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  575.57.08 ...").
std::string procDriverVersion() {
  std::ifstream f("/proc/driver/nvidia/version");
  std::string line;
  if (!f || !std::getline(f, line)) return "";
  std::istringstream is(line);
  std::string tok, prev;
  while (is >> tok) {
    if (prev == "Module" && !tok.empty() && tok[0] >= '0' && tok[0] <= '9') return tok;
    prev = tok;
  }
  return "";
}

ProbeResult probeTopology(const ProbeOptions& opt) {
  ProbeResult r;
  Topology machine;
  machine.source = "probe";
  const std::string host = hostName();
  if (!host.empty()) machine.hostname = host;
  cudaRuntimeGetVersion(&r.cudaRuntimeVersion);
  if (cudaDriverGetVersion(&r.cudaDriverVersion) != cudaSuccess) {
    cudaGetLastError();
    r.cudaDriverVersion = 0;
  }
  machine.cudaRuntimeVersion = cudaVersionText(r.cudaRuntimeVersion);

  nvml::Library nv;
  r.nvmlLoaded = nv.open(opt.nvmlLibrary);
  if (r.nvmlLoaded) {
    const std::string v = nv.nvmlVersion();
    if (!v.empty()) machine.nvmlVersion = v;
  } else {
    r.nvmlError = nv.error();
  }
  std::string driver = r.nvmlLoaded ? nv.driverVersion() : "";
  if (driver.empty()) driver = procDriverVersion();
  if (!driver.empty()) machine.driverVersion = driver;

  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n <= 0) {
    cudaGetLastError();
    r.error = noDeviceMessage(e, cudaGetErrorString(e));
    r.topology = machine;
    return r;
  }

  Topology t = makeTopology(n);
  t.source = machine.source;
  t.hostname = machine.hostname;
  t.driverVersion = machine.driverVersion;
  t.cudaRuntimeVersion = machine.cudaRuntimeVersion;
  t.nvmlVersion = machine.nvmlVersion;
  if (!r.nvmlLoaded)
    t.notes.push_back("NVML unavailable (" + r.nvmlError + "): NVLink, PCIe level and P2P status unknown");

  std::vector<std::string> busIds(n);
  std::vector<NvlinkEnds> ends(n);
  bool allNvlinksKnown = r.nvmlLoaded;
  for (int d = 0; d < n; ++d) {
    cudaDeviceProp p;
    e = cudaGetDeviceProperties(&p, d);
    if (e != cudaSuccess) {
      cudaGetLastError();
      r.error = cudaText(("cudaGetDeviceProperties(" + std::to_string(d) + ")").c_str(), e);
      r.topology = t;
      return r;
    }
    Gpu& g = t.gpus[d];
    g.index = d;
    g.name = p.name;
    g.uuid = formatGpuUuid(reinterpret_cast<const unsigned char*>(p.uuid.bytes));
    char bus[32];
    std::snprintf(bus, sizeof bus, "%x:%x:%x.0", p.pciDomainID, p.pciBusID, p.pciDeviceID);
    g.pciBusId = normalizeBusId(bus);
    busIds[d] = g.pciBusId;
    g.ccMajor = p.major;
    g.ccMinor = p.minor;
    g.smCount = p.multiProcessorCount;
    g.memoryBytes = static_cast<int64_t>(p.totalGlobalMem);
    if (r.nvmlLoaded) {
      nvml::GpuFacts f = nv.gpu(g.pciBusId);
      if (!f.found) {
        t.notes.push_back("GPU " + std::to_string(d) + " not found by NVML: " + f.error);
        allNvlinksKnown = false;
      } else {
        if (!f.uuid.empty() && f.uuid != g.uuid)
          t.notes.push_back("GPU " + std::to_string(d) + ": NVML's UUID " + f.uuid + " differs from CUDA's " + g.uuid);
        g.numaNode = f.numaNode;
        g.pcieGen = f.pcieGen;
        g.pcieWidth = f.pcieWidth;
        if (f.nvlinks) {
          ends[d] = *f.nvlinks;
        } else {
          allNvlinksKnown = false;
        }
      }
    }
    if (!g.numaNode) g.numaNode = sysfsNumaNode(g.pciBusId);
  }

  const auto nvlinks = nvlinkMatrix(busIds, ends);
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      if (i == j) continue;
      Link& l = t.link(i, j);
      int can = 0;
      e = cudaDeviceCanAccessPeer(&can, i, j);
      if (e != cudaSuccess) {
        cudaGetLastError();
        t.notes.push_back(
            cudaText(("cudaDeviceCanAccessPeer(" + std::to_string(i) + ", " + std::to_string(j) + ")").c_str(), e));
        can = 0;
      }
      l.canAccessPeer = can != 0;
      if (r.nvmlLoaded) {
        nvml::PairFacts pf = nv.pair(busIds[i], busIds[j]);
        l.p2pRead = pf.read;
        l.p2pWrite = pf.write;
        l.p2pAtomics = pf.atomics;
        l.pcie = pf.pcie;
        if (allNvlinksKnown) l.nvlinks = nvlinks[i][j];
      }
    }
  }

  if (n == 1) r.notes.push_back("one GPU: no pairs, so nothing to probe between GPUs");
  if (opt.measure) {
    r.measured = measureTopology(&t, opt, &r.notes);
  } else {
    r.notes.push_back("measured probes not run (reported facts only)");
  }
  const std::string bad = validate(t);
  if (!bad.empty()) {
    r.error = "probe produced an invalid topology: " + bad;
  } else {
    r.ok = true;
  }
  r.topology = std::move(t);
  return r;
}

}  // namespace topo
}  // namespace arfuse
