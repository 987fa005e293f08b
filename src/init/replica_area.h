// The replica area of a multi-process group's shared segment (ARFUSE_CHECK_REPLICAS=1): its layout and
// size. comm/multiprocess.cc sizes the segment with it when it creates the group; api/replicas.cc
// meets the ranks' copies in it (arriveShared). Below both, so that comm/ need not include api/.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <atomic>

#include "arfuse/arfuse.h"

namespace arfuse {

struct ReplicaArea {
  std::atomic<uint64_t> arrived[ARFUSE_MAX_RANKS];  // checked calls whose copy rank r has put in its slot
  std::atomic<uint64_t> compared;                   // sets compared so far
  int32_t tokens[ARFUSE_MAX_RANKS], hidden[ARFUSE_MAX_RANKS], dtype[ARFUSE_MAX_RANKS], residual[ARFUSE_MAX_RANKS];
};
static_assert(std::atomic<uint64_t>::is_always_lock_free, "the meeting needs address-free 64-bit atomics");

constexpr size_t kReplicaAreaHeaderBytes = (sizeof(ReplicaArea) + 63) / 64 * 64;

// Bytes of one rank's slot: residual_in and weight at the group's largest call (4 bytes an element
// when fp32 is allowed, else 2), rounded up to 64.
inline size_t replicaSlotBytes(int maxTokens, int maxHidden, bool fp32Allowed) {
  const size_t es = fp32Allowed ? 4 : 2;
  const size_t bytes = (static_cast<size_t>(maxTokens) + 1) * static_cast<size_t>(maxHidden) * es;
  return (bytes + 63) / 64 * 64;
}
inline size_t replicaAreaBytes(int nranks, size_t slotBytes) {
  return kReplicaAreaHeaderBytes + static_cast<size_t>(nranks) * slotBytes;
}
// A zeroed area is ready to use; these are the pointers into it.
inline ReplicaArea* replicaAreaAt(void* base) { return static_cast<ReplicaArea*>(base); }
inline unsigned char* replicaSlot(ReplicaArea* area, int rank, size_t slotBytes) {
  return reinterpret_cast<unsigned char*>(area) + kReplicaAreaHeaderBytes + static_cast<size_t>(rank) * slotBytes;
}

}  // namespace arfuse
