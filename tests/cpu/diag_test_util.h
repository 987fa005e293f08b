// Builders of a synthetic GroupShared (what the kernels would have written) for the diag tests.
#pragma once

#include <memory>

#include "arfuse/arfuse.h"
#include "diag/device_records.h"

namespace arfuse {
namespace testing_diag {

// The fused op, bf16, one token of hidden 7168 on the one-shot path: 14336 B per rank.
inline CallDesc fusedDesc(int tokens = 1, int hidden = 7168, int algo = arfuseAlgoOneShot, int variant = 0) {
  return makeCallDesc(arfuseOpAllReduceAddRmsNorm, arfuseBfloat16, algo, variant, tokens, hidden);
}

// A zeroed group area on the heap (it is ~33 KB).
inline std::unique_ptr<GroupShared> newShared() {
  std::unique_ptr<GroupShared> s(new GroupShared());
  return s;
}

// Stamps call `call` of `rank` as the kernel does; end 0 = still running (or aborted).
inline void stamp(GroupShared* s, int rank, uint64_t call, CallDesc d, uint64_t start, uint64_t end) {
  FlightEntry& f = s->flight[rank].entries[(call - 1) % kFlightEntries];
  f.desc = d;
  f.startNs = start;
  f.endNs = end;
  f.call = call;
}

// Calls first..last of `rank`, each 7.1 us long, 9 us apart; the last one still running if `pendingLast`.
inline void stampRun(GroupShared* s, int rank, uint64_t first, uint64_t last, bool pendingLast,
                     CallDesc d = fusedDesc()) {
  for (uint64_t c = first; c <= last; ++c) {
    const uint64_t start = 1000000000ull + c * 9000;
    stamp(s, rank, c, d, start, (pendingLast && c == last) ? 0 : start + 7100);
  }
}

// A valid error record, as a kernel writes it.
inline ErrorRecord rec(int code, int peer, uint64_t call, CallDesc mine, CallDesc theirs = {0, 0}, int block = 0,
                       int phase = 0) {
  ErrorRecord e{};
  e.valid = 1;
  e.code = code;
  e.peer = peer;
  e.block = block;
  e.phase = phase;
  e.call = call;
  e.mine = mine;
  e.theirs = theirs;
  return e;
}

// Stores it as rank `rank`'s record of the group area and raises the abort flag.
inline void record(GroupShared* s, int rank, int code, int peer, uint64_t call, CallDesc mine, CallDesc theirs = {0, 0},
                   int block = 0, int phase = 0) {
  s->records[rank] = rec(code, peer, call, mine, theirs, block, phase);
  s->abort = 1;
}

}  // namespace testing_diag
}  // namespace arfuse
