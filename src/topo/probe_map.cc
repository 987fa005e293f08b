#include "probe_map.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>

namespace arfuse {
namespace topo {

PcieLink pcieFromNvmlLevel(int level) {
  switch (level) {
    case 0:
      return PcieLink::kSameBoard;
    case 10:
      return PcieLink::kSameSwitch;
    case 20:
      return PcieLink::kMultiSwitch;
    case 30:
      return PcieLink::kHostBridge;
    case 40:
      return PcieLink::kSameSocket;
    case 50:
      return PcieLink::kCrossSocket;
    default:
      return PcieLink::kUnknown;
  }
}

P2pStatus p2pFromNvml(int rc, int status) {
  constexpr int kNvmlSuccess = 0, kNvmlNotSupported = 3;
  if (rc == kNvmlNotSupported) return P2pStatus::kNotSupported;
  if (rc != kNvmlSuccess) return P2pStatus::kUnknown;
  switch (status) {
    case 0:
      return P2pStatus::kOk;
    case 1:
      return P2pStatus::kChipsetNotSupported;
    case 2:
      return P2pStatus::kGpuNotSupported;
    case 3:
      return P2pStatus::kTopologyNotSupported;
    case 4:
      return P2pStatus::kDisabledByRegkey;
    case 5:
      return P2pStatus::kNotSupported;
    default:
      return P2pStatus::kUnknown;
  }
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
