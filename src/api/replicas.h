// ARFUSE_CHECK_REPLICAS: residual_in and weight must be bitwise equal on every rank (arfuse.h).
// The paths that split a call's rows or columns across ranks (two-shot, host-staged two-shot) take
// rank q's residual_in for the part rank q reduces, so replicas that drifted apart give outputs
// that are neither rank's answer - with no error. The opt-in check compares them at call time.
//
// How (api/replica_check.cc does the CUDA part): every checked call of rank r enqueues, on its
// stream just before the call reads them, a copy of residual_in and weight into a pinned host
// buffer of rank r and a host function. The host functions of the group's ranks meet here; when the
// last rank's copy of the n-th checked call arrives, every rank's bytes are compared with rank 0's
// and the lowest rank that differs is named with its first differing element. No rank can start
// its (n+1)-th copy before then: each copy follows that rank's n-th call on its stream, which
// cannot finish before every rank's n-th call started, and each call starts after its host function.
// This file is the pure part (no CUDA): the comparison and the meeting of the ranks. CPU-tested.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <mutex>
#include <string>
#include <vector>

#include "arfuse/arfuse.h"
#include "init/replica_area.h"

namespace arfuse {

// What one rank's checked call carries: [tokens, hidden] residual_in (unless hasResidual is false:
// an arfuseAllReduceEpilogue first layer) followed by [hidden] weight, of `dtype`.
struct ReplicaShape {
  int tokens = 0;
  int hidden = 0;
  arfuseDataType_t dtype = arfuseBfloat16;
  bool hasResidual = true;
  size_t residualBytes() const;
  size_t weightBytes() const;
  bool operator==(const ReplicaShape& o) const {
    return tokens == o.tokens && hidden == o.hidden && dtype == o.dtype && hasResidual == o.hasResidual;
  }
};

// Compares rank q's bytes with rank 0's for every q; "" when all are equal, else one sentence for
// the lowest differing rank: which tensor, the element (and its token, column), both bit patterns
// and values. `check`: the 1-based number of this checked call, named in the message. *differing
// (when given): that rank, -1 when all are equal.
std::string compareReplicas(const std::vector<ReplicaShape>& shapes, const std::vector<const unsigned char*>& data,
                            uint64_t check, int* differing = nullptr);

// The meeting of the ranks' host functions (thread-safe; they run on CUDA's callback threads).
class ReplicaGather {
 public:
  explicit ReplicaGather(int nranks);
  // Rank `rank` has copied the data of its next checked call to `data`. Returns true when this
  // completed a set (then *message is compareReplicas's verdict and *check its number).
  bool arrive(int rank, const ReplicaShape& shape, const unsigned char* data, std::string* message, uint64_t* check);

 private:
  std::mutex mu_;
  int nranks_;
  std::vector<uint64_t> count_;  // checked calls per rank so far
  uint64_t current_ = 0;         // the check being gathered (0: none)
  int arrived_ = 0;
  std::vector<ReplicaShape> shapes_;
  std::vector<const unsigned char*> data_;
};

// Multi-process groups (one process per rank, on one host): the copies and the meeting live in the
// group's shared segment, in an area of `replicaAreaBytes` (comm/multiprocess.cc adds it when
// ARFUSE_CHECK_REPLICAS=1 on every rank). Rank r's copy goes to replicaSlot(area, r); its host
// function then calls arriveShared, which publishes that rank's n-th arrival (release) and, when
// every rank's n-th copy is in (acquire), lets exactly one of the arriving ranks compare the set
// (a compare-and-swap on the area's count of compared sets). The invariant of ReplicaGather holds
// across processes too: no rank's (n+1)-th copy can start before the comparer's n-th call starts.
// The counters are lock-free 64-bit atomics, which work across processes on shared memory.
// (The area's layout and size: init/replica_area.h.)
// Rank `rank`'s n-th checked call (1-based) has its copy in its slot. True when this call compared
// the set (then *message is compareReplicas's verdict: "" when all equal).
bool arriveShared(ReplicaArea* area, int nranks, size_t slotBytes, int rank, uint64_t n, const ReplicaShape& shape,
                  std::string* message, int* differing = nullptr);

}  // namespace arfuse
