// Which host each rank of a multi-process group runs on, and what that makes of the group: pure
// (CPU-tested with fake host ids, tests/cpu/host_layout_test.cc).
//
// Host identity (hostIdentity): as NCCL's getHostHash, the host name followed by the kernel's
// boot_id (/proc/sys/kernel/random/boot_id), and the IPC namespace (/proc/self/ns/ipc). Containers
// of one machine share the boot_id but not, in general, their host name or IPC namespace (hence
// /dev/shm), so they count as different hosts; NCCL may still see one host there and use its own
// intra-node transports between them, which is its business. ARFUSE_TEST_HOST_ID (TEST ONLY)
// replaces the whole identity, so that processes on one machine can be told they are on several
// hosts.
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
  std::string label;  // for messages: the host name, or "test:<id>" under ARFUSE_TEST_HOST_ID
};
// FNV-1a over hostname + bootId, or over the override alone when it is not empty.
HostIdentity hostIdentityOf(const std::string& hostname, const std::string& bootId, const std::string& testOverride);
// This process's: gethostname, /proc/sys/kernel/random/boot_id, ARFUSE_TEST_HOST_ID.
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
