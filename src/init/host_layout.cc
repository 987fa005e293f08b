#include "init/host_layout.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "common/log.h"
#include "common/params.h"
#include "diag/nccl_watch.h"

namespace arfuse {

HostIdentity hostIdentityOf(const std::string& hostname, const std::string& bootId, const std::string& testOverride,
                            const std::string& ncclHostId) {
  HostIdentity id;
  const std::string bootWord = bootId.substr(0, bootId.find_first_of(" \t\r\n"));
  const std::string key = !testOverride.empty() ? "test:" + testOverride
                          : !ncclHostId.empty() ? ncclHostId
                                                : hostname + bootWord;
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : key) h = (h ^ c) * 1099511628211ull;
  id.hash = h;
  id.label = !testOverride.empty() ? "test:" + testOverride : hostname;
  return id;
}

HostIdentity hostIdentity() {
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  // NCCL's own variable, read as NCCL reads it (not an ARFUSE_* parameter: NCCL owns its meaning).
  const char* ncclHostId = std::getenv("NCCL_HOSTID");
  HostIdentity id = hostIdentityOf(name, boot, paramTestHostId(), ncclHostId ? ncclHostId : "");
  char ns[64] = {};
  if (readlink("/proc/self/ns/ipc", ns, sizeof ns - 1) > 0)
    if (const char* open = std::strchr(ns, '[')) id.ipcNamespace = std::strtoull(open + 1, nullptr, 10);
  return id;
}

std::string ipcNamespaceConflict(const std::vector<uint64_t>& hostHashes, const std::vector<uint64_t>& ipcNamespaces,
                                 const std::vector<std::string>& labels) {
  const size_t n = std::min(hostHashes.size(), ipcNamespaces.size());
  for (size_t a = 0; a < n; ++a)
    for (size_t b = a + 1; b < n; ++b)
      if (hostHashes[a] == hostHashes[b] && ipcNamespaces[a] != ipcNamespaces[b] && ipcNamespaces[a] &&
          ipcNamespaces[b])
        return strprintf(
            "ranks %zu and %zu are on one host (%s: its host name and boot id, or NCCL_HOSTID, as NCCL identifies "
            "hosts) but in different IPC namespaces, so they cannot share memory: run their containers with "
            "--ipc=host (or in one container), or give each container its own NCCL_HOSTID so that arfuse and NCCL "
            "both treat them as separate hosts",
            a, b, a < labels.size() ? labels[a].c_str() : "?");
  return "";
}

HostLayout groupHosts(const std::vector<uint64_t>& hashes, const std::vector<std::string>& labels) {
  HostLayout l;
  const int n = static_cast<int>(hashes.size());
  l.hostOf.assign(n, -1);
  l.localOf.assign(n, -1);
  std::vector<uint64_t> seen;
  for (int r = 0; r < n; ++r) {
    int h = 0;
    while (h < static_cast<int>(seen.size()) && seen[h] != hashes[r]) ++h;
    if (h == static_cast<int>(seen.size())) {
      seen.push_back(hashes[r]);
      l.ranksOf.emplace_back();
      l.labels.push_back(r < static_cast<int>(labels.size()) ? labels[r] : strprintf("#%d", h));
    }
    l.hostOf[r] = h;
    l.localOf[r] = static_cast<int>(l.ranksOf[h].size());
    l.ranksOf[h].push_back(r);
  }
  l.hosts = static_cast<int>(seen.size());
  l.localRanks = l.hosts > 0 ? static_cast<int>(l.ranksOf[0].size()) : 0;
  bool equal = true;
  for (const auto& rs : l.ranksOf) equal = equal && static_cast<int>(rs.size()) == l.localRanks;
  if (!equal) {
    std::string list;
    for (int h = 0; h < l.hosts; ++h)
      list += strprintf("%shost %s: %zu (first rank %d)", h ? ", " : "", l.labels[h].c_str(), l.ranksOf[h].size(),
                        l.ranksOf[h][0]);
    l.error = strprintf(
        "a group that spans hosts needs the same number of ranks on every host (the hierarchical path pairs local "
        "rank j of every host); ranks per host: %s",
        list.c_str());
  }
  return l;
}

std::string describeRank(const HostLayout& l, int rank) {
  if (rank < 0 || rank >= static_cast<int>(l.hostOf.size())) return strprintf("rank %d", rank);
  return strprintf("rank %d (host %s, local rank %d)", rank, l.labels[l.hostOf[rank]].c_str(), l.localOf[rank]);
}

std::string describeLocalRank(const HostLayout& l, const std::vector<int>& globalOf, int q) {
  if (q < 0 || q >= static_cast<int>(globalOf.size())) return strprintf("rank %d", q);
  return describeRank(l, globalOf[q]);
}

std::string ncclCommPeers(const HostLayout& l, int comm, int self) {
  std::vector<int> ranks;
  if (comm == kNcclCommWorld) {
    for (int r = 0; r < static_cast<int>(l.hostOf.size()); ++r) ranks.push_back(r);
  } else {
    for (const std::vector<int>& host : l.ranksOf)
      if (comm >= 0 && comm < static_cast<int>(host.size())) ranks.push_back(host[comm]);
  }
  std::string s;
  for (int r : ranks) {
    if (r == self) continue;
    s += (s.empty() ? "" : ", ") + describeRank(l, r);
  }
  return s.empty() ? std::string("no other rank") : s;
}

}  // namespace arfuse
