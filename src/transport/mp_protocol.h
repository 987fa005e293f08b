// The bytes multi-process init exchanges (comm/multiprocess.cc, transport/ipc.cc): the hello of
// phase A (through the rendezvous or the caller's all-gather), the posts of phases B-G through the
// group's shared-memory segment, and that segment's layout. Every rank runs the same build (the
// hello's abi is compared before anything else is read).
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "base/status.h"
#include "device/args.h"
#include "plan/plan.h"

namespace arfuse {
namespace mp {

constexpr uint32_t kHelloMagic = 0xA2F0B007u;
constexpr int kTextBytes = 240;
constexpr int kPhases = 7;  // B = 1 ... G = 6 through the segment (A goes through the rendezvous)
constexpr size_t kSlotBytes = 1024;
constexpr uint32_t kReady = 0x5EADu;

// A segment name as the hello carries it: "/arfuse-<16 hex>-c<pid>.<start>.<pid namespace>-g" is at
// most 8 + 17 + 1 + 3 x 20 + 2 characters (transport/shm_name.h).
constexpr size_t kShmNameBytes = 96;

struct Hello {
  uint32_t magic;
  uint32_t abi;
  int32_t nranks;
  int32_t rank;
  int32_t status;  // arfuseResult_t of this rank's local checks
  char text[kTextBytes];
  uint8_t uuid[16];
  uint64_t hostHash;
  uint64_t cookie;  // processCookie(): equal only for ranks of this very process (PIDs repeat across namespaces)
  int64_t pid;      // not an identity (see cookie); kept for post-mortems of the exchanged bytes
  char groupName[kShmNameBytes];  // rank 0: the segments it created (shmRandomName, with its creator tag)
  char hostName[kShmNameBytes];
  int32_t arch, smCount, canMapHost;
  KernelResidency res;  // plan/plan.h: ints only, the same build on every rank
  int32_t maxTokens, maxHidden, forcedAlgo, timeoutMs, maxBlocks;
  uint32_t dtypeMask;
  int64_t oneShotMax, hostOneShotMax, hostStagedMax;
  int32_t deterministic;
  int32_t llTwoPhase;
  int64_t llTwoPhaseMax;
  char hostLabel[64];    // init/host_layout.h HostIdentity::label, for messages
  int32_t worldNcclSet;  // rank 0: worldNcclId holds an NCCL id for a group that spans hosts
  uint8_t worldNcclId[128];
  int32_t checkReplicas;  // ARFUSE_CHECK_REPLICAS: the group segment holds the replica area (api/replicas.h)
  uint64_t ipcNamespace;  // init/host_layout.h HostIdentity::ipcNamespace
};

struct Wire {
  int32_t status;
  char text[kTextBytes];
  uint8_t reach[kMaxRanks];  // 1: this rank can load/store rank s's memory (peer access, or the same GPU)
  char reachWhy[96];         // why not, for the first rank it cannot reach
  cudaIpcMemHandle_t staging, control, ll;
  uint64_t stagingPtr, controlPtr, llPtr;  // raw, for a rank of the same process (same cookie)
  ncclUniqueId ncclId;                     // rank 0
  // The plan limits this rank resolved (policy/resolve.h: its calibration file, its view of the
  // fabric): every rank must use the same ones, or their plans, and so their calls, could diverge.
  int64_t oneShotMax, hostOneShotMax, hostStagedMax, lowLatencyMax, ncclAbove, llTwoPhaseMax;
};
static_assert(sizeof(Wire) <= kSlotBytes, "Wire must fit a slot");
static_assert(std::is_trivially_copyable<KernelResidency>::value, "KernelResidency crosses processes as bytes");

struct Report {  // a rank's posted outcome of a phase
  int32_t status;
  char text[kTextBytes];
};

struct InitArea {
  std::atomic<uint32_t> ready;
  std::atomic<uint32_t> phase[kMaxRanks];
  std::atomic<uint32_t> departed[kMaxRanks];
  alignas(64) char slots[kPhases][kMaxRanks][kSlotBytes];
};

constexpr size_t kSharedBytes = (sizeof(GroupShared) + 4095) / 4096 * 4096;
constexpr size_t kSegmentBytes = kSharedBytes + sizeof(InitArea);
// ARFUSE_CHECK_REPLICAS=1: the replica area follows, page-aligned (comm/multiprocess.cc sizes it).
constexpr size_t kReplicaAreaOffset = (kSegmentBytes + 4095) / 4096 * 4096;

inline void setText(char* dst, const std::string& s) { std::snprintf(dst, kTextBytes, "%s", s.c_str()); }

// Posts this rank's blob for `phase` (1..kPhases-1) and waits, bounded by timeoutMs, for every
// rank's; *all gets the nranks blobs in rank order. Fails naming the ranks that did not arrive.
Status segmentExchange(InitArea* ia, int phase, int rank, int nranks, const void* mine, size_t bytes, int timeoutMs,
                       std::vector<uint8_t>* all);

// The first failure among the ranks' posted statuses, as every rank will report it ("rank 2: why",
// with that rank's code): every rank fails alike, or decides a fallback alike from the same bytes.
template <typename T>
Status postedFailure(const std::vector<uint8_t>& all, int nranks) {
  for (int s = 0; s < nranks; ++s) {
    const T* t = reinterpret_cast<const T*>(all.data() + s * sizeof(T));
    if (t->status != arfuseSuccess)
      return ARFUSE_FAIL(arfuseResult_t(t->status), "rank %d: %.*s", s, kTextBytes, t->text);
  }
  return Status();
}

}  // namespace mp
}  // namespace arfuse
