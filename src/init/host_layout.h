// Which host each rank of a multi-process group runs on, and what that makes of the group: pure
// (CPU-tested with fake host ids, tests/cpu/host_layout_test.cc).
//
// Host identity (hostIdentity): what NCCL hashes (its getHostHash, 2.2x): NCCL_HOSTID when it is set,
// else the full host name followed by the first word of /proc/sys/kernel/random/boot_id. The boot id
// is the kernel's, the same in every container of one boot and different on every machine and after
// every reboot; so arfuse and NCCL agree on which ranks share a host, and a user who sets
// NCCL_HOSTID (containers that must count as hosts of their own) moves both the same way.
// ARFUSE_TEST_HOST_ID (TEST ONLY) replaces the whole identity, so that processes on one machine can
// be told they are on several hosts. Sharing memory needs more than a host: ranks of one host in
// different IPC namespaces (containers without --ipc=host) have different /dev/shm, so the group
// fails at init with ipcNamespaceConflict's sentence instead of splitting silently into "hosts"
// NCCL would not see.
//
// Layout (groupHosts): hosts are numbered in order of their lowest global rank; a rank's local
// index is its order among the ranks of its host by global rank. Every host must hold the same
// number of ranks L (the hierarchical path pairs local index j of every host in one NCCL
// communicator); otherwise the error names every host and its count.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace arfuse {

struct HostIdentity {
  uint64_t hash = 0;
  std::string label;          // for messages: the host name, or "test:<id>" under ARFUSE_TEST_HOST_ID
  uint64_t ipcNamespace = 0;  // inode of /proc/self/ns/ipc (0 unknown): which /dev/shm this process sees
};
// FNV-1a over the test override when it is not empty, else over ncclHostId when it is not empty,
// else over hostname + the first word of bootId.
HostIdentity hostIdentityOf(const std::string& hostname, const std::string& bootId, const std::string& testOverride,
                            const std::string& ncclHostId = "");
// "" when every pair of ranks with one host hash also has one IPC namespace; else the sentence that
// names the first two ranks that do not, and the fixes.
std::string ipcNamespaceConflict(const std::vector<uint64_t>& hostHashes, const std::vector<uint64_t>& ipcNamespaces,
                                 const std::vector<std::string>& labels);
// This process's: gethostname, /proc/sys/kernel/random/boot_id, NCCL_HOSTID, ARFUSE_TEST_HOST_ID,
// /proc/self/ns/ipc.
HostIdentity hostIdentity();

struct HostLayout {
  int hosts = 0;
  int localRanks = 0;                     // L, ranks per host (equal on every host)
  std::vector<int> hostOf;                // [global rank] -> host index
  std::vector<int> localOf;               // [global rank] -> local index on its host
  std::vector<std::vector<int>> ranksOf;  // [host][local index] -> global rank
  std::vector<std::string> labels;        // [host] -> label of its first rank
  std::string error;                      // non-empty: the group cannot be formed (unequal hosts)
  bool ok() const { return error.empty(); }
};
// `hashes[r]`, `labels[r]`: rank r's identity.
HostLayout groupHosts(const std::vector<uint64_t>& hashes, const std::vector<std::string>& labels);

// "host node-a (rank 4) local rank 1": how messages name a rank of a multi-host group.
std::string describeRank(const HostLayout& l, int rank);
// Rank q of a host's intra-host group, whose global ranks are `globalOf` (the kernels of such a
// group record local ranks): "rank G (host H, local rank q)"; "rank q" when q is not one of them.
std::string describeLocalRank(const HostLayout& l, const std::vector<int>& globalOf, int q);

// The ranks this rank waits with in NCCL communicator `comm` across hosts (diag/nccl_watch.h
// kNcclCommWorld or a local index) (every other rank of that communicator),
// each named by describeRank: "rank 2 (host test:h1, local rank 0), rank 3 (host test:h1, local rank 1)".
std::string ncclCommPeers(const HostLayout& l, int comm, int self);

}  // namespace arfuse
