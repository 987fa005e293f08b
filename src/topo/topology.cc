#include "topology.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdio>
#include <set>

namespace arfuse {
namespace topo {

// ---- names ----------------------------------------------------------------------------------

namespace {

struct PcieName {
  PcieLink v;
  const char* json;
  const char* smi;
};
constexpr PcieName kPcieNames[] = {
    {PcieLink::kSameBoard, "same_board", "PIX"},
    {PcieLink::kSameSwitch, "same_switch", "PIX"},
    {PcieLink::kMultiSwitch, "multi_switch", "PXB"},
    {PcieLink::kHostBridge, "host_bridge", "PHB"},
    {PcieLink::kSameSocket, "same_socket", "NODE"},
    {PcieLink::kCrossSocket, "cross_socket", "SYS"},
    {PcieLink::kUnknown, "unknown", "?"},
};

struct P2pName {
  P2pStatus v;
  const char* json;
};
constexpr P2pName kP2pNames[] = {
    {P2pStatus::kOk, "ok"},
    {P2pStatus::kChipsetNotSupported, "chipset_not_supported"},
    {P2pStatus::kGpuNotSupported, "gpu_not_supported"},
    {P2pStatus::kTopologyNotSupported, "topology_not_supported"},
    {P2pStatus::kDisabledByRegkey, "disabled_by_regkey"},
    {P2pStatus::kNotSupported, "not_supported"},
    {P2pStatus::kUnknown, "unknown"},
};

std::string fmt1(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

}  // namespace

const char* pcieLinkName(PcieLink v) {
  for (const auto& n : kPcieNames) {
    if (n.v == v) return n.json;
  }
  return "unknown";
}

const char* p2pStatusName(P2pStatus v) {
  for (const auto& n : kP2pNames) {
    if (n.v == v) return n.json;
  }
  return "unknown";
}

std::optional<PcieLink> parsePcieLink(std::string_view s) {
  for (const auto& n : kPcieNames) {
    if (s == n.json) return n.v;
  }
  return std::nullopt;
}

std::optional<P2pStatus> parseP2pStatus(std::string_view s) {
  for (const auto& n : kP2pNames) {
    if (s == n.json) return n.v;
  }
  return std::nullopt;
}

std::string linkLabel(const Link& link) {
  if (link.nvlinks && *link.nvlinks > 0) return "NV" + std::to_string(*link.nvlinks);
  for (const auto& n : kPcieNames) {
    if (n.v == link.pcie) return n.smi;
  }
  return "?";
}

const char* accessName(Access a) {
  switch (a) {
    case Access::kPull:
      return "pull";
    case Access::kPush:
      return "push";
    case Access::kEither:
      return "either";
    case Access::kUnknown:
      break;
  }
  return "unknown";
}

// ---- structure ------------------------------------------------------------------------------

bool operator==(const HostMeasured& a, const HostMeasured& b) {
  return a.readGBps == b.readGBps && a.writeGBps == b.writeGBps && a.flagRoundTripUs == b.flagRoundTripUs;
}

bool operator==(const Gpu& a, const Gpu& b) {
  return a.index == b.index && a.name == b.name && a.uuid == b.uuid && a.pciBusId == b.pciBusId &&
         a.ccMajor == b.ccMajor && a.ccMinor == b.ccMinor && a.smCount == b.smCount && a.numaNode == b.numaNode &&
         a.memoryBytes == b.memoryBytes && a.pcieGen == b.pcieGen && a.pcieWidth == b.pcieWidth && a.host == b.host;
}

bool operator==(const Measured& a, const Measured& b) {
  return a.peerLoad == b.peerLoad && a.peerStore == b.peerStore && a.readGBps == b.readGBps &&
         a.writeGBps == b.writeGBps && a.flagLatencyUs == b.flagLatencyUs && a.soloReadGBps == b.soloReadGBps;
}

bool operator==(const Link& a, const Link& b) {
  return a.from == b.from && a.to == b.to && a.canAccessPeer == b.canAccessPeer && a.p2pRead == b.p2pRead &&
         a.p2pWrite == b.p2pWrite && a.p2pAtomics == b.p2pAtomics && a.nvlinks == b.nvlinks && a.pcie == b.pcie &&
         a.measured == b.measured;
}

bool operator==(const Topology& a, const Topology& b) {
  return a.source == b.source && a.hostname == b.hostname && a.driverVersion == b.driverVersion &&
         a.cudaRuntimeVersion == b.cudaRuntimeVersion && a.ncclVersion == b.ncclVersion &&
         a.nvmlVersion == b.nvmlVersion && a.notes == b.notes && a.gpus == b.gpus && a.links == b.links;
}

namespace {
size_t linkIndex(int n, int from, int to) {
  assert(from != to && from >= 0 && to >= 0 && from < n && to < n);
  return static_cast<size_t>(from) * (n - 1) + (to < from ? to : to - 1);
}
}  // namespace

const Link& Topology::link(int from, int to) const { return links[linkIndex(size(), from, to)]; }
Link& Topology::link(int from, int to) { return links[linkIndex(size(), from, to)]; }

Topology makeTopology(int n) {
  Topology t;
  t.gpus.resize(n);
  for (int i = 0; i < n; ++i) t.gpus[i].index = i;
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      if (i == j) continue;
      Link l;
      l.from = i;
      l.to = j;
      t.links.push_back(l);
    }
  }
  return t;
}

std::string validate(const Topology& t) {
  const int n = t.size();
  if (n == 0) return "no GPUs";
  std::set<std::string> uuids;
  for (int i = 0; i < n; ++i) {
    const Gpu& g = t.gpus[i];
    std::string who = "gpus[" + std::to_string(i) + "]";
    if (g.index != i) return who + ".index is " + std::to_string(g.index) + ", expected " + std::to_string(i);
    if (g.uuid.empty()) return who + ".uuid is empty";
    if (!uuids.insert(g.uuid).second) return who + ".uuid " + g.uuid + " appears twice";
    if (g.ccMajor < 1 || g.ccMinor < 0) return who + " has an invalid compute capability";
    if (g.smCount < 1) return who + ".sm_count must be positive";
    if (g.numaNode && *g.numaNode < 0) return who + ".numa_node must not be negative";
    if (g.memoryBytes < 0) return who + ".memory_bytes must not be negative";
    if (g.pcieGen && (*g.pcieGen < 1 || *g.pcieGen > 16)) return who + ".pcie_gen must be 1..16";
    if (g.pcieWidth && (*g.pcieWidth < 1 || *g.pcieWidth > 64)) return who + ".pcie_width must be 1..64";
    for (const auto& v : {g.host.readGBps, g.host.writeGBps, g.host.flagRoundTripUs}) {
      if (v && !(std::isfinite(*v) && *v >= 0)) return who + ": measured host values must be finite and >= 0";
    }
  }
  if (t.links.size() != static_cast<size_t>(n) * (n - 1)) {
    return "links has " + std::to_string(t.links.size()) + " entries, expected " + std::to_string(n * (n - 1));
  }
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      if (i == j) continue;
      const Link& l = t.link(i, j);
      std::string who = "link " + std::to_string(i) + "->" + std::to_string(j);
      if (l.from != i || l.to != j)
        return who + " is stored as " + std::to_string(l.from) + "->" + std::to_string(l.to);
      if (l.nvlinks && *l.nvlinks < 0) return who + ": negative NVLink count";
      const Measured& m = l.measured;
      for (const auto& v : {m.readGBps, m.writeGBps, m.flagLatencyUs, m.soloReadGBps}) {
        if (v && !(std::isfinite(*v) && *v >= 0)) return who + ": measured values must be finite and >= 0";
      }
    }
  }
  return "";
}

// ---- peer usability and islands -------------------------------------------------------------

namespace {

std::string pairName(int a, int b) { return "devices " + std::to_string(a) + " and " + std::to_string(b); }

// Link classes, best first. Islands are built from these, not from the finer NVML levels: a PIX vs
// PXB difference inside one switch tree is not a boundary worth splitting a group at.
enum LinkClass { kClassNvlink, kClassSwitch, kClassHost, kClassSocket, kClassUnknown, kClassNone };

int linkClass(const Link& l) {
  if (l.nvlinks && *l.nvlinks > 0) return kClassNvlink;
  switch (l.pcie) {
    case PcieLink::kSameBoard:
    case PcieLink::kSameSwitch:
    case PcieLink::kMultiSwitch:
      return kClassSwitch;
    case PcieLink::kHostBridge:
    case PcieLink::kSameSocket:
      return kClassHost;
    case PcieLink::kCrossSocket:
      return kClassSocket;
    case PcieLink::kUnknown:
      break;
  }
  return kClassUnknown;
}

// Class of the pair a-b: the worse direction, or kClassNone when the pair cannot do P2P.
int pairClass(const Topology& t, int a, int b, const IslandOptions& opt) {
  if (!pairProblem(t, a, b, opt).empty()) return kClassNone;
  return std::max(linkClass(t.link(a, b)), linkClass(t.link(b, a)));
}

// Connected components of `group` under the pairs whose class is below `limit`.
std::vector<std::vector<int>> components(const Topology& t, const std::vector<int>& group, int limit,
                                         const IslandOptions& opt) {
  std::vector<int> comp(group.size(), -1);
  std::vector<std::vector<int>> out;
  for (size_t s = 0; s < group.size(); ++s) {
    if (comp[s] >= 0) continue;
    const int c = static_cast<int>(out.size());
    out.emplace_back();
    std::vector<size_t> stack{s};
    comp[s] = c;
    while (!stack.empty()) {
      size_t u = stack.back();
      stack.pop_back();
      out[c].push_back(group[u]);
      for (size_t v = 0; v < group.size(); ++v) {
        if (comp[v] < 0 && pairClass(t, group[u], group[v], opt) < limit) {
          comp[v] = c;
          stack.push_back(v);
        }
      }
    }
  }
  return out;
}

bool clique(const Topology& t, const std::vector<int>& g, int limit, const IslandOptions& opt) {
  for (size_t x = 0; x < g.size(); ++x) {
    for (size_t y = x + 1; y < g.size(); ++y) {
      if (pairClass(t, g[x], g[y], opt) >= limit) return false;
    }
  }
  return true;
}

void split(const Topology& t, const std::vector<int>& group, int limit, const IslandOptions& opt,
           std::vector<std::vector<int>>* out);

// `group` is connected under `limit` but some pair in it is not (a broken pair, or a chain of good
// links around a slow one). First try the link classes again one level stricter: two sockets with
// one failed pair still split 4 + 4. When classes do not separate anything, drop the GPU with the
// most bad pairs (ties: the highest index) into its own island and retry, so one bad pair costs one
// GPU, not the whole island.
void refine(const Topology& t, const std::vector<int>& group, int limit, const IslandOptions& opt,
            std::vector<std::vector<int>>* out) {
  int worst = -1;
  for (size_t x = 0; x < group.size(); ++x) {
    for (size_t y = x + 1; y < group.size(); ++y) {
      int cl = pairClass(t, group[x], group[y], opt);
      if (cl < limit) worst = std::max(worst, cl);
    }
  }
  auto sub = components(t, group, worst, opt);
  bool informative = sub.size() > 1 && std::any_of(sub.begin(), sub.end(), [](const auto& s) { return s.size() > 1; });
  if (informative) {
    for (const auto& s : sub) {
      if (clique(t, s, worst, opt)) {
        out->push_back(s);
      } else {
        refine(t, s, worst, opt, out);
      }
    }
    return;
  }
  int victim = -1, most = -1;
  for (int a : group) {
    int bad = 0;
    for (int b : group) bad += a != b && pairClass(t, a, b, opt) >= limit;
    if (bad > most || (bad == most && a > victim)) {
      most = bad;
      victim = a;
    }
  }
  out->push_back({victim});
  std::vector<int> rest;
  for (int a : group) {
    if (a != victim) rest.push_back(a);
  }
  split(t, rest, limit, opt, out);
}

// Each component under `limit` that is a clique of such pairs is an island; any other is refined.
void split(const Topology& t, const std::vector<int>& group, int limit, const IslandOptions& opt,
           std::vector<std::vector<int>>* out) {
  for (const auto& c : components(t, group, limit, opt)) {
    if (clique(t, c, limit, opt)) {
      out->push_back(c);
    } else {
      refine(t, c, limit, opt, out);
    }
  }
}

}  // namespace

std::string pairProblem(const Topology& t, int a, int b, const IslandOptions& opt) {
  for (int dir = 0; dir < 2; ++dir) {
    int from = dir == 0 ? a : b, to = dir == 0 ? b : a;
    const Link& l = t.link(from, to);
    std::string ft = std::to_string(from) + ", " + std::to_string(to);
    if (!l.canAccessPeer) return pairName(a, b) + ": cudaDeviceCanAccessPeer(" + ft + ") = 0";
    if (l.measured.peerLoad && !*l.measured.peerLoad) {
      return pairName(a, b) + ": P2P advertised but a peer load by " + std::to_string(from) + " from " +
             std::to_string(to) + " failed (ACS or IOMMU likely)";
    }
    if (l.measured.peerStore && !*l.measured.peerStore) {
      return pairName(a, b) + ": P2P advertised but a peer store by " + std::to_string(from) + " into " +
             std::to_string(to) + " failed (ACS or IOMMU likely)";
    }
    const auto& rd = l.measured.readGBps;
    const auto& wr = l.measured.writeGBps;
    if ((rd || wr) && std::max(rd.value_or(0.0), wr.value_or(0.0)) < opt.minUsableGBps) {
      return pairName(a, b) + ": peer bandwidth " + std::to_string(from) + "->" + std::to_string(to) + " is " +
             fmt1(std::max(rd.value_or(0.0), wr.value_or(0.0))) + " GB/s (below " + fmt1(opt.minUsableGBps) +
             "): traffic is likely routed through system memory";
    }
    const auto nominal = linkNominalGBps(t, from, to);
    if (l.measured.soloReadGBps && nominal && *l.measured.soloReadGBps < opt.minFractionOfLink * *nominal) {
      return pairName(a, b) + ": a peer read " + std::to_string(from) + "->" + std::to_string(to) + " alone reaches " +
             fmt1(*l.measured.soloReadGBps) + " GB/s, under " + fmt1(opt.minFractionOfLink * 100) + "% of the " +
             fmt1(*nominal) + " GB/s its link (" + linkLabel(l) +
             ") allows: traffic is likely routed through system "
             "memory";
    }
  }
  return "";
}

std::optional<double> linkNominalGBps(const Topology& t, int from, int to) {
  const Link& l = t.link(from, to);
  if (l.nvlinks && *l.nvlinks > 0) return 20.0 * *l.nvlinks;
  const Gpu& a = t.gpus[from];
  const Gpu& b = t.gpus[to];
  if (!a.pcieGen || !b.pcieGen || !a.pcieWidth || !b.pcieWidth) return std::nullopt;
  // Usable bytes per lane per second and direction after line coding: 8b/10b up to Gen2,
  // 128b/130b from Gen3; Gen6 doubles Gen5 again (FLIT mode).
  static const double kLaneGBps[] = {0, 0.25, 0.5, 0.985, 1.969, 3.938, 7.877};
  const int gen = std::min(*a.pcieGen, *b.pcieGen);
  const double lane = gen < 7 ? kLaneGBps[gen] : kLaneGBps[6];
  return lane * std::min(*a.pcieWidth, *b.pcieWidth);
}

std::vector<std::vector<int>> islands(const Topology& t, const std::vector<int>& devices, const IslandOptions& opt) {
  std::vector<int> group;
  for (int d : devices) {
    if (d >= 0 && d < t.size() && std::find(group.begin(), group.end(), d) == group.end()) group.push_back(d);
  }
  std::sort(group.begin(), group.end());
  std::vector<std::vector<int>> out;
  if (group.empty()) return out;
  // The worst class present among all pairs is the boundary between islands, unless every pair is
  // of one class (NVSwitch, one PCIe switch), in which case the whole group is one island.
  int worst = -1, best = kClassNone;
  for (size_t x = 0; x < group.size(); ++x) {
    for (size_t y = x + 1; y < group.size(); ++y) {
      int cl = pairClass(t, group[x], group[y], opt);
      worst = std::max(worst, cl);
      best = std::min(best, cl);
    }
  }
  if (worst < 0 || (worst == best && worst != kClassNone)) {
    out.push_back(group);
  } else {
    split(t, group, worst, opt, &out);
  }
  for (auto& isl : out) std::sort(isl.begin(), isl.end());
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::vector<int>> islands(const Topology& t, const IslandOptions& opt) {
  std::vector<int> all(t.size());
  for (int i = 0; i < t.size(); ++i) all[i] = i;
  return islands(t, all, opt);
}

P2pVerdict p2pAll(const Topology& t, const std::vector<int>& devices, const IslandOptions& opt) {
  P2pVerdict v;
  for (int d : devices) {
    if (d < 0 || d >= t.size()) {
      v.reason = "device " + std::to_string(d) + " is not in the topology (" + std::to_string(t.size()) + " GPUs)";
      return v;
    }
  }
  std::vector<int> distinct;
  for (int d : devices) {
    if (std::find(distinct.begin(), distinct.end(), d) == distinct.end()) distinct.push_back(d);
  }
  int pairs = 0, proven = 0;
  for (size_t x = 0; x < distinct.size(); ++x) {
    for (size_t y = x + 1; y < distinct.size(); ++y) {
      std::string why = pairProblem(t, distinct[x], distinct[y], opt);
      if (!why.empty()) {
        v.reason = why;
        return v;
      }
      for (int dir = 0; dir < 2; ++dir) {
        const Measured& m = t.link(dir ? distinct[y] : distinct[x], dir ? distinct[x] : distinct[y]).measured;
        ++pairs;
        if (m.peerLoad.value_or(false) && m.peerStore.value_or(false)) ++proven;
      }
    }
  }
  v.ok = true;
  v.proven = proven == pairs;
  std::string n = std::to_string(distinct.size());
  if (distinct.size() < 2) {
    v.reason = "a single device: no peer access needed";
  } else if (v.proven) {
    v.reason = "P2P among all " + n + " devices, peer load and store measured on all " + std::to_string(pairs) +
               " ordered pairs";
  } else {
    v.reason = "P2P among all " + n + " devices as reported (peer load and store measured on " +
               std::to_string(proven) + " of " + std::to_string(pairs) + " ordered pairs)";
  }
  return v;
}

// ---- fingerprint ----------------------------------------------------------------------------

std::string fabricFingerprintInput(const Topology& t) {
  std::string s = "arfuse-fabric/1\n";
  for (const Gpu& g : t.gpus) s += "gpu " + std::to_string(g.index) + " " + g.uuid + "\n";
  auto tri = [](const std::optional<bool>& b) { return b ? (*b ? "1" : "0") : "-"; };
  for (const Link& l : t.links) {
    s += "link " + std::to_string(l.from) + ">" + std::to_string(l.to) + " cap=" + (l.canAccessPeer ? "1" : "0") +
         " r=" + p2pStatusName(l.p2pRead) + " w=" + p2pStatusName(l.p2pWrite) + " a=" + p2pStatusName(l.p2pAtomics) +
         " nv=" + (l.nvlinks ? std::to_string(*l.nvlinks) : "-") + " pcie=" + pcieLinkName(l.pcie) +
         " load=" + tri(l.measured.peerLoad) + " store=" + tri(l.measured.peerStore) + "\n";
  }
  return s;
}

std::string fabricFingerprint(const Topology& t) {
  // FNV-1a: tiny, specified, identical on every platform (std::hash is none of these).
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : fabricFingerprintInput(t)) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "fab1-%016llx", static_cast<unsigned long long>(h));
  return buf;
}

namespace {
// The in-range devices of `devices`, each once, in their order.
std::vector<int> distinctDevices(const Topology& t, const std::vector<int>& devices) {
  std::vector<int> pick;
  for (int d : devices) {
    if (d >= 0 && d < t.size() && std::find(pick.begin(), pick.end(), d) == pick.end()) pick.push_back(d);
  }
  return pick;
}
}  // namespace

Topology subTopology(const Topology& t, const std::vector<int>& devices) {
  const std::vector<int> pick = distinctDevices(t, devices);
  // The machine's facts (source, versions, notes) are the whole topology's, so it is copied whole: a
  // field added to Topology comes along. Then the picked GPUs and their links, renumbered.
  Topology s = t;
  s.gpus.clear();
  for (size_t i = 0; i < pick.size(); ++i) {
    s.gpus.push_back(t.gpus[pick[i]]);
    s.gpus.back().index = static_cast<int>(i);
  }
  s.links = makeTopology(s.size()).links;
  for (Link& l : s.links) {
    const int from = l.from, to = l.to;
    l = t.link(pick[from], pick[to]);
    l.from = from;
    l.to = to;
  }
  return s;
}

std::string calibrationFingerprint(const Topology& t, const std::vector<int>& devices) {
  std::vector<int> pick = distinctDevices(t, devices);
  std::sort(pick.begin(), pick.end(), [&](int x, int y) { return t.gpus[x].uuid < t.gpus[y].uuid; });
  Topology s = subTopology(t, pick);
  for (Link& l : s.links) l.measured = Measured{};
  return fabricFingerprint(s);
}

// ---- pull vs push ---------------------------------------------------------------------------

AccessHint accessHint(const Link& l, double margin) {
  AccessHint h;
  std::string who = std::to_string(l.from) + "->" + std::to_string(l.to);
  if (!l.measured.readGBps || !l.measured.writeGBps) {
    h.reason = who + ": read and write bandwidth not both measured";
    return h;
  }
  double rd = *l.measured.readGBps, wr = *l.measured.writeGBps;
  std::string nums = " (read " + fmt1(rd) + " GB/s, write " + fmt1(wr) + " GB/s)";
  if (rd >= wr * margin) {
    h.access = Access::kPull;
    h.reason = who + ": pull, peer reads are faster" + nums;
  } else if (wr >= rd * margin) {
    h.access = Access::kPush;
    h.reason = who + ": push, peer writes are faster" + nums;
  } else {
    h.access = Access::kEither;
    h.reason = who + ": either, reads and writes are within " + fmt1((margin - 1) * 100) + "%" + nums;
  }
  return h;
}

AccessHint groupAccessHint(const Topology& t, const std::vector<int>& devices, double margin) {
  AccessHint h;
  double minRd = INFINITY, minWr = INFINITY;
  int pairs = 0;
  for (int a : devices) {
    for (int b : devices) {
      if (a == b || a < 0 || b < 0 || a >= t.size() || b >= t.size()) continue;
      const Measured& m = t.link(a, b).measured;
      if (!m.readGBps || !m.writeGBps) {
        h.reason = "bandwidth not measured for " + std::to_string(a) + "->" + std::to_string(b);
        return h;
      }
      minRd = std::min(minRd, *m.readGBps);
      minWr = std::min(minWr, *m.writeGBps);
      ++pairs;
    }
  }
  if (pairs == 0) {
    h.reason = "no pairs";
    return h;
  }
  Link worst;  // reuse the per-pair rule on the slowest read and the slowest write
  worst.from = devices.front();
  worst.to = devices.front();
  worst.measured.readGBps = minRd;
  worst.measured.writeGBps = minWr;
  h = accessHint(worst, margin);
  h.reason = accessName(h.access) + std::string(": slowest pair reads at ") + fmt1(minRd) + " GB/s, writes at " +
             fmt1(minWr) + " GB/s over " + std::to_string(pairs) + " ordered pairs";
  return h;
}

}  // namespace topo
}  // namespace arfuse
