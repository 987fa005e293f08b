#include "probe_map.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>

namespace arfuse {
namespace topo {

namespace {

// An NVML code and what it means here.
template <typename E>
struct FromNvml {
  int code;
  E value;
};

// The value of `code` in `table`; a code it does not list (a later NVML's) is `unknown`.
template <typename E, size_t N>
E fromNvml(const FromNvml<E> (&table)[N], int code, E unknown) {
  for (const FromNvml<E>& t : table)
    if (t.code == code) return t.value;
  return unknown;
}

// nvmlGpuTopologyLevel_t: INTERNAL, SINGLE, MULTIPLE, HOSTBRIDGE, NODE, SYSTEM.
constexpr FromNvml<PcieLink> kTopologyLevels[] = {{0, PcieLink::kSameBoard},    {10, PcieLink::kSameSwitch},
                                                  {20, PcieLink::kMultiSwitch}, {30, PcieLink::kHostBridge},
                                                  {40, PcieLink::kSameSocket},  {50, PcieLink::kCrossSocket}};
// nvmlGpuP2PStatus_t: OK, CHIPSET_NOT_SUPPORTED, GPU_NOT_SUPPORTED, IOH_TOPOLOGY_NOT_SUPPORTED,
// DISABLED_BY_REGKEY, NOT_SUPPORTED.
constexpr FromNvml<P2pStatus> kP2pStatuses[] = {{0, P2pStatus::kOk},
                                                {1, P2pStatus::kChipsetNotSupported},
                                                {2, P2pStatus::kGpuNotSupported},
                                                {3, P2pStatus::kTopologyNotSupported},
                                                {4, P2pStatus::kDisabledByRegkey},
                                                {5, P2pStatus::kNotSupported}};

}  // namespace

PcieLink pcieFromNvmlLevel(int level) { return fromNvml(kTopologyLevels, level, PcieLink::kUnknown); }

P2pStatus p2pFromNvml(int rc, int status) {
  constexpr int kNvmlSuccess = 0, kNvmlNotSupported = 3;
  if (rc == kNvmlNotSupported) return P2pStatus::kNotSupported;
  if (rc != kNvmlSuccess) return P2pStatus::kUnknown;
  return fromNvml(kP2pStatuses, status, P2pStatus::kUnknown);
}

std::string normalizeBusId(const std::string& s) {
  // [domain:]bus:device.function, all hex.
  unsigned domain = 0, bus = 0, dev = 0, fn = 0;
  char tail = 0;
  const int colons = static_cast<int>(std::count(s.begin(), s.end(), ':'));
  int got = 0;
  if (colons == 2) {
    got = std::sscanf(s.c_str(), "%x:%x:%x.%x%c", &domain, &bus, &dev, &fn, &tail);
    if (got != 4) return "";
  } else if (colons == 1) {
    got = std::sscanf(s.c_str(), "%x:%x.%x%c", &bus, &dev, &fn, &tail);
    if (got != 3) return "";
  } else {
    return "";
  }
  for (char c : s) {
    if (!std::isxdigit(static_cast<unsigned char>(c)) && c != ':' && c != '.') return "";
  }
  if (bus > 0xff || dev > 0x1f || fn > 7) return "";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%08x:%02x:%02x.%x", domain, bus, dev, fn);
  return buf;
}

std::string sysfsBusId(const std::string& normalized) {
  if (normalized.size() == 16 && normalized[8] == ':') return normalized.substr(4);
  return normalized;
}

std::string formatGpuUuid(const unsigned char b[16]) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
                b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  return buf;
}

std::string cudaVersionText(int v) { return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10); }

std::vector<std::vector<int>> nvlinkMatrix(const std::vector<std::string>& busIds,
                                           const std::vector<NvlinkEnds>& ends) {
  const size_t n = busIds.size();
  std::vector<std::vector<int>> m(n, std::vector<int>(n, 0));
  for (size_t i = 0; i < n && i < ends.size(); ++i) {
    for (const std::string& peer : ends[i].gpuPeers) {
      for (size_t j = 0; j < n; ++j) {
        if (j != i && busIds[j] == peer) ++m[i][j];
      }
    }
  }
  for (size_t i = 0; i < n && i < ends.size(); ++i) {
    for (size_t j = 0; j < n && j < ends.size(); ++j) {
      if (i != j && ends[i].switchLinks > 0 && ends[j].switchLinks > 0) {
        m[i][j] += std::min(ends[i].switchLinks, ends[j].switchLinks);
      }
    }
  }
  return m;
}

std::optional<int> parseNumaNode(const std::string& text) {
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (end == text.c_str()) return std::nullopt;
  while (*end == '\n' || *end == ' ') ++end;
  if (*end != '\0' || v < 0 || v > (1 << 20)) return std::nullopt;
  return static_cast<int>(v);
}

}  // namespace topo
}  // namespace arfuse
