// describe(): the topology as a person reads it. The link matrix uses `nvidia-smi topo -m` labels
// because that is the vocabulary users already paste into bug reports; the P2P matrix adds what
// nvidia-smi cannot know, whether a measured peer load or store actually worked.
#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>

#include "topology.h"

namespace arfuse {
namespace topo {

namespace {

std::string pad(const std::string& s, size_t width) {
  return s.size() >= width ? s : std::string(width - s.size(), ' ') + s;
}

std::string padRight(const std::string& s, size_t width) {
  return s.size() >= width ? s : s + std::string(width - s.size(), ' ');
}

constexpr size_t kRowHead = 8;
constexpr size_t kCell = 7;

std::string header(const Topology& t, const char* title, bool numa) {
  std::string s = padRight(title, kRowHead);
  for (int j = 0; j < t.size(); ++j) s += pad("GPU" + std::to_string(j), kCell);
  if (numa) s += pad("NUMA", kCell);
  return s + "\n";
}

template <typename Cell>
std::string matrix(const Topology& t, const char* title, bool numa, Cell cell) {
  std::string s = header(t, title, numa);
  for (int i = 0; i < t.size(); ++i) {
    s += padRight("GPU" + std::to_string(i), kRowHead);
    for (int j = 0; j < t.size(); ++j) s += pad(i == j ? "X" : cell(t.link(i, j)), kCell);
    if (numa) {
      const auto& n = t.gpus[i].numaNode;
      s += pad(n ? std::to_string(*n) : "?", kCell);
    }
    s += "\n";
  }
  return s;
}

std::string p2pCell(const Link& l) {
  if (!l.canAccessPeer) return "no";
  if ((l.measured.peerLoad && !*l.measured.peerLoad) || (l.measured.peerStore && !*l.measured.peerStore)) {
    return "FAIL";
  }
  return "ok";
}

std::string gbpsCell(const std::optional<double>& v) {
  // also used for microseconds
  if (!v) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", *v);
  return buf;
}

std::string gib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

}  // namespace

std::string describe(const Topology& t) {
  std::string s =
      "arfuse topology: " + std::to_string(t.size()) + " GPU" + (t.size() == 1 ? "" : "s") + ", source " + t.source;
  if (t.hostname) s += ", host " + *t.hostname;
  s += "\n";
  s += "driver " + t.driverVersion.value_or("?") + ", CUDA runtime " + t.cudaRuntimeVersion.value_or("?") + ", NCCL " +
       t.ncclVersion.value_or("?") + "\n";
  if (t.nvmlVersion) s += "NVML " + *t.nvmlVersion + "\n";
  s += "fabric fingerprint " + fabricFingerprint(t) + "\n\n";

  for (const Gpu& g : t.gpus) {
    s += padRight("GPU" + std::to_string(g.index), kRowHead) + g.name + ", sm_" + std::to_string(g.ccMajor) +
         std::to_string(g.ccMinor) + ", " + std::to_string(g.smCount) + " SMs, " + gib(g.memoryBytes) + ", " +
         g.pciBusId + ", NUMA " + (g.numaNode ? std::to_string(*g.numaNode) : "?") + ", " + g.uuid;
    if (g.pcieGen && g.pcieWidth) s += ", PCIe Gen" + std::to_string(*g.pcieGen) + " x" + std::to_string(*g.pcieWidth);
    s += "\n";
  }
  bool anyHost = false;
  for (const Gpu& g : t.gpus) anyHost |= g.host.any();
  if (anyHost) {
    s += "\nPinned host memory, per GPU alone (what the host-staged path uses)\n";
    for (const Gpu& g : t.gpus) {
      s += padRight("GPU" + std::to_string(g.index), kRowHead) + "read " + gbpsCell(g.host.readGBps) + " GB/s, write " +
           gbpsCell(g.host.writeGBps) + " GB/s, flag round trip " + gbpsCell(g.host.flagRoundTripUs) + " us\n";
    }
  }
  if (t.size() > 1) {
    s += "\n" + matrix(t, "Link", true, linkLabel);
    s += "\n" + matrix(t, "P2P", false, p2pCell);
    // The measured matrices, in this order, each where some pair has that measurement.
    struct Measurement {
      std::optional<double> Measured::*value;
      const char* caption;
      const char* title;
    };
    static constexpr Measurement kMeasured[] = {
        {&Measured::readGBps, "Peer read GB/s, all pairs at once (row pulls from column)", "Read"},
        {&Measured::writeGBps, "Peer write GB/s, all pairs at once (row pushes into column)", "Write"},
        {&Measured::soloReadGBps, "Peer read GB/s, one pair at a time (row pulls from column)", "Solo"},
        {&Measured::flagLatencyUs, "One-way flag latency, us (row signals column)", "Flag"},
    };
    for (const Measurement& m : kMeasured) {
      const auto value = [&m](const Link& l) { return l.measured.*m.value; };
      if (std::none_of(t.links.begin(), t.links.end(), [&](const Link& l) { return value(l).has_value(); })) continue;
      s += std::string("\n") + m.caption + "\n";
      s += matrix(t, m.title, false, [&](const Link& l) { return gbpsCell(value(l)); });
    }
  }

  if (t.size() == 1) s += "\nOne GPU: no pairs, so no link, P2P or peer measurements.\n";
  s += "\nIslands:";
  for (const auto& isl : islands(t)) {
    s += " [";
    for (size_t k = 0; k < isl.size(); ++k) s += (k ? " " : "") + std::to_string(isl[k]);
    s += "]";
  }
  s += "\n";
  if (t.size() > 1) {
    std::vector<int> all;
    for (int i = 0; i < t.size(); ++i) all.push_back(i);
    P2pVerdict v = p2pAll(t, all);
    s += std::string("P2P (all GPUs): ") + (v.ok ? (v.proven ? "proven" : "reported") : "no") + ", " + v.reason + "\n";
    AccessHint h = groupAccessHint(t, all);
    if (h.access != Access::kUnknown) s += "Pull/push (all GPUs): " + h.reason + "\n";
  }
  for (const std::string& n : t.notes) s += "Note: " + n + "\n";
  if (t.size() > 1) {
    s += "\nLegend: X self; NV# bonded NVLinks; PIX one PCIe switch or board; PXB several PCIe switches; PHB a "
         "CPU host bridge;\n        NODE host bridges of one NUMA node; SYS across sockets; ? unknown. P2P: ok "
         "canAccessPeer (and no failed\n        measurement); no canAccessPeer = 0; FAIL advertised, but a measured "
         "peer load or store failed.\n";
  }
  return s;
}

}  // namespace topo
}  // namespace arfuse
