// The call protocol every multi-rank kernel follows: entry and exit, the one bounded wait, the
// abort, descriptor checks and the flight recorder.
//
// Entry, in two parts, so that its round trip is not on the call's critical path:
//   enterCall (thread 0 of each CTA, BEFORE pdlWait: it overlaps the tail of the previous kernel of
//   the stream): one atomic on the CTA's own word of DeviceState::cta returns its epoch (calls this
//   CTA index took part in) and how many calls of this rank hold the same CTA index; a load of this
//   rank's device abort word, issued just before, says whether the group is already aborted.
//   settleEntry (after pdlWait, before this call's first barrier flag or output store and before
//   pdlLaunchDependents): the two loads issueEntryCheck sent right after pdlWait -- the CTA word and
//   the abort word again -- must show exactly this call (one running, epoch + 1 taken) and no abort.
// Why both: with programmatic dependent launch the previous kernel of the stream may still run when
// enterCall runs, so one running mark besides ours is legitimate there (every kernel here triggers
// its dependents only after its own enterCall, so that kernel has taken its epoch already and at
// most that one kernel can still be running); after pdlWait it has finished, so any other mark, or
// an epoch taken after ours, is a call of this rank on another stream. An abort raised by the
// previous kernel after enterCall read the word is seen by the second load.
// Outcomes:
//   - aborted at entry: the call sends nothing, writes NaN into every output element it owns and
//     leaves (kFlightRefused). Every later call of every rank -- eager or a CUDA-graph replay --
//     therefore fails fast and writes nothing that looks valid;
//   - two other calls running at entry, or another call seen by settleEntry: the call raises
//     kErrConcurrent (the group aborts) and writes NaN. Caught at entry it sends nothing; caught by
//     settleEntry it may have sent its data (low-latency sends before it settles), but it never
//     passes a barrier or stores an output;
//   - aborted by the time settleEntry runs: as refused, except that what it sent is sent;
//   - otherwise the call runs.
// Waits (Spin): poll; every kPollsPerCheck polls look at the abort word and the clock; past the
// timeout the waiter records {peer, block, call, phase} and aborts the group. A CTA whose wait
// failed finishes its tiles with NaN (every barrier of the tile still executed, so the CTAs of a
// cluster never wait for each other forever) and stamps kFlightFailed.
// The abort (raiseError): host-mapped record first (the host reads it), then the abort word in this
// rank's device memory, in every peer's device memory when the group has peer access, and in the
// host-mapped area (groups without peer access poll that one). It is sticky: a group that aborted
// stays aborted; destroy and re-create it (docs/troubleshooting.md).
// Epochs: taken at entry by the atomic, so an aborted call's epoch is consumed too. That is safe
// because nothing reads an epoch-tagged slot of an aborted group again (every call is refused).
// Exit: a fire-and-forget reduction takes the CTA's running mark back; block 0 stamps the flight
// entry's end and status. No fence, no atomic round trip and no host-memory store on a call that
// succeeds.
#pragma once

#include "device/args.h"
#include "device/memory.cuh"
#include "device/phase_clock.cuh"
#include "device/vec.cuh"

namespace arfuse {

constexpr uint32_t kPollsPerCheck = 64;

// Records the first error of this rank (code kErr*, the peer involved, the peer's descriptor for a
// mismatch) and aborts the group everywhere it can reach. One thread calls it; the caller then
// fails its tiles.
__device__ inline void raiseError(const KernelArgs& a, int code, int peer, int phase, uint64_t epoch,
                                  CallDesc theirs = CallDesc{0, 0}) {
  if (atomicCAS(&a.state->errorClaimed, 0u, 1u) == 0u) {
    ErrorRecord* rec = &a.shared->records[a.rank];
    rec->peer = peer;
    rec->block = blockIdx.x;
    rec->phase = phase;
    rec->call = epoch + 1;
    rec->mine = a.desc;
    rec->theirs = theirs;
    rec->code = code;
    __threadfence_system();
    *reinterpret_cast<volatile int*>(&rec->valid) = 1;
  }
  storeVolatileU32(&a.state->abort, 1u);
  if (a.peerAbort)
    for (int p = 0; p < a.nranks; ++p)
      if (p != a.rank) storeVolatileU32(&a.peers.control[p]->state.abort, 1u);
  __threadfence_system();
  *reinterpret_cast<volatile int*>(&a.shared->abort) = 1;
}

// The bounded part of every wait: call after each poll that did not succeed.
struct Spin {
  uint64_t start = 0;
  uint32_t polls = 0;
  // False when the wait must end: the group aborted, or the timeout passed (recorded here).
  __device__ bool keepGoing(const KernelArgs& a, int peer, int phase, uint64_t epoch) {
    if ((++polls % kPollsPerCheck) != 0) return true;
    if (loadVolatileU32(a.abortPoll)) return false;
    const uint64_t now = globalTimerNs();
    if (start == 0) {
      start = now;
    } else if (now - start > a.timeoutNs) {
      raiseError(a, kErrPeerTimeout, peer, phase, epoch);
      return false;
    }
    return true;
  }
};

// ---- flags --------------------------------------------------------------------------------------
// Low-latency flag of an epoch: 1..2^32-1, never 0 (buffers start zeroed).
__device__ __forceinline__ uint32_t llFlag(uint64_t epoch) { return static_cast<uint32_t>(epoch % 0xFFFFFFFFull) + 1u; }
// Barrier counter of (epoch, phase 0/1): increasing within and across calls of one CTA index;
// compared modulo 2^32.
__device__ __forceinline__ uint32_t barrierCounter(uint64_t epoch, int phase) {
  return static_cast<uint32_t>(2 * epoch + static_cast<uint64_t>(phase) + 1);
}
__device__ __forceinline__ uint64_t flagWord(uint32_t counter, uint32_t payload) {
  return static_cast<uint64_t>(counter) << 32 | payload;
}
__device__ __forceinline__ uint32_t wordCounter(uint64_t w) { return static_cast<uint32_t>(w >> 32); }
__device__ __forceinline__ uint32_t wordPayload(uint64_t w) { return static_cast<uint32_t>(w); }

enum SlotVerdict { kSlotNotYet = 0, kSlotOk = 1, kSlotMismatch = 2 };

// A barrier flag slot {counter|desc.w0, counter|desc.w1} seen by a rank that waits for `want`:
//   both counters >= want and both == want: the peer's descriptor of this call, compared;
//   both >= want but not both == want: the peer already went past this barrier, which it could only
//     do after it had compared our descriptor of this call with its own and found them equal;
//   otherwise not there yet. (A peer is at most one phase of this call ahead, or in a later call
//   whose barrier needed ours; a rank that found a mismatch never writes a later flag: it aborted.)
__device__ __forceinline__ int judgeBarrierSlot(uint64_t w0, uint64_t w1, uint32_t want, CallDesc mine,
                                                CallDesc* theirs) {
  const uint32_t c0 = wordCounter(w0), c1 = wordCounter(w1);
  if (static_cast<int32_t>(c0 - want) < 0 || static_cast<int32_t>(c1 - want) < 0) return kSlotNotYet;
  if (c0 != want || c1 != want) return kSlotOk;
  theirs->w0 = wordPayload(w0);
  theirs->w1 = wordPayload(w1);
  return theirs->w0 == mine.w0 && theirs->w1 == mine.w1 ? kSlotOk : kSlotMismatch;
}

// Waits (bounded) for peer's flag slot to reach `want`; a different descriptor is a mismatch.
__device__ __forceinline__ bool waitBarrierSlot(const KernelArgs& a, const FlagSlot* slot, uint32_t want, int peer,
                                                int phase, uint64_t epoch) {
  Spin spin;
  for (;;) {
    uint64_t w0, w1;
    loadAcquire2(slot->w, &w0, &w1);
    CallDesc theirs;
    const int v = judgeBarrierSlot(w0, w1, want, a.desc, &theirs);
    if (v == kSlotOk) return true;
    if (v == kSlotMismatch) {
      raiseError(a, kErrMismatch, peer, /*phase=*/3, epoch, theirs);
      return false;
    }
    if (!spin.keepGoing(a, peer, phase, epoch)) return false;
  }
}

// Per-CTA barrier across ranks: CTA b of every rank takes part. Thread t (t != rank) stores this
// call's counter and descriptor into slot [b][rank] of rank t's flags (release: the __syncthreads
// before it orders every store of this CTA -- copy-in, phase-1 results -- before the flag, release
// being cumulative over the CTA barrier), then waits for slot [b][t] of ours. The __syncthreads_and
// after the acquire extends it to the whole CTA. Returns false (uniformly) if a wait failed.
template <class Flags>
__device__ __forceinline__ bool ctaBarrier(const KernelArgs& a, uint64_t epoch, int phase) {
  __syncthreads();
  bool ok = true;
  const int t = threadIdx.x;
  if (t < a.nranks && t != a.rank) {
    const uint32_t c = barrierCounter(epoch, phase);
    storeRelease2(Flags::slot(a, t, a.rank)->w, flagWord(c, a.desc.w0), flagWord(c, a.desc.w1));
    ok = waitBarrierSlot(a, Flags::slot(a, a.rank, t), c, t, phase, epoch);
  }
  return __syncthreads_and(ok) != 0;
}

// ---- entry and exit -------------------------------------------------------------------------------
struct CallState {
  uint64_t epoch;   // this CTA's epoch
  uint32_t status;  // kFlightOk: run; kFlightRefused / kFlightFailed: send nothing, write NaN
};

__device__ inline void stampFlightStart(const KernelArgs& a, uint64_t epoch) {
  FlightEntry* e = &a.state->flight.entries[epoch % kFlightEntries];
  e->status = kFlightPending;
  e->endNs = 0;
  e->desc = a.desc;
  e->startNs = globalTimerNs();
  e->call = epoch + 1;
}

// Thread 0's part of enterCall: the abort word, the atomic and their verdict.
template <bool kAfterWait>
__device__ __forceinline__ CallState judgeEntry(const KernelArgs& a) {
  // This rank's own abort word: set by its own failures, and by any peer's when the group has peer
  // access. (Without peer access, a peer's abort reaches this call through its waits, which poll
  // the host-mapped word; a call whose waits all succeed has valid outputs either way.)
  const uint32_t aborted = loadVolatileU32(&a.state->abort);
  const uint64_t old = atomicAdd(reinterpret_cast<unsigned long long*>(&a.state->cta[blockIdx.x]),
                                 static_cast<unsigned long long>(kCtaEnter));
  const uint64_t epoch = old & kEpochMask;
  uint32_t status = kFlightOk;
  if ((old >> kEpochBits) > (kAfterWait ? 0 : 1)) {  // before the wait the previous kernel may run
    raiseError(a, kErrConcurrent, -1, /*phase=*/4, epoch);
    status = kFlightFailed;
  } else if (aborted) {
    status = kFlightRefused;
  }
  if (blockIdx.x == 0 && a.flight) stampFlightStart(a, epoch);
  return CallState{epoch, status};
}

// Part one, before pdlWait (see the top of this file). Uniform across the CTA. kAfterWait: the
// kernel enters after pdlWait instead and skips part two; then any other running mark is another
// stream's call.
template <bool kAfterWait = false>
__device__ __forceinline__ CallState enterCall(const KernelArgs& a) {
  __shared__ uint64_t sEpoch;
  __shared__ uint32_t sStatus;
  if (threadIdx.x == 0) {
    const CallState c = judgeEntry<kAfterWait>(a);
    sEpoch = c.epoch;
    sStatus = c.status;
  }
  __syncthreads();
  return CallState{sEpoch, sStatus};
}

// Part one, then the wait on the previous kernel (programmatic dependent launch), with the phase
// points 0 (start), 1 (entered) and 2 (after the wait) of the kernels that mark them.
__device__ __forceinline__ CallState enterThenWait(const KernelArgs& a) {
  PhaseClock::mark<0>();
  const CallState cs = enterCall(a);
  PhaseClock::mark<1>();
  pdlWait();
  PhaseClock::mark<2>();
  return cs;
}

// Part two: the loads, issued by thread 0 right after pdlWait; their latency overlaps what the call
// does before settleEntry.
struct EntryCheck {
  uint64_t word = 0;     // DeviceState::cta[blockIdx.x] after pdlWait (thread 0 only)
  uint32_t aborted = 0;  // the abort word after pdlWait (thread 0 only)
};
__device__ __forceinline__ EntryCheck issueEntryCheck(const KernelArgs& a, const CallState& cs) {
  EntryCheck c;
  if (threadIdx.x == 0 && cs.status == kFlightOk) {
    c.aborted = loadVolatileU32(&a.state->abort);
    c.word = *reinterpret_cast<const volatile uint64_t*>(&a.state->cta[blockIdx.x]);
  }
  return c;
}
// Settles part two: true (uniformly) if the call may go on. A call that may not has cs->status set
// (kFlightFailed: another call of this rank holds the CTA index, raised as kErrConcurrent;
// kFlightRefused: the group aborted) and must write NaN. Call it before pdlLaunchDependents (a later
// kernel's enterCall would otherwise be counted here) and before any barrier flag or output store.
__device__ __forceinline__ uint32_t judgeSettle(const KernelArgs& a, const CallState& cs, const EntryCheck& c) {
  uint32_t status = cs.status;
  if (status == kFlightOk) {
    if ((c.word >> kEpochBits) != 1 || (c.word & kEpochMask) != ((cs.epoch + 1) & kEpochMask)) {
      raiseError(a, kErrConcurrent, -1, /*phase=*/4, cs.epoch);
      status = kFlightFailed;
    } else if (c.aborted) {
      status = kFlightRefused;
    }
  }
  return status;
}
__device__ __forceinline__ bool settleEntry(const KernelArgs& a, CallState* cs, const EntryCheck& c) {
  __shared__ uint32_t sStatus;
  if (threadIdx.x == 0) sStatus = judgeSettle(a, *cs, c);
  __syncthreads();
  cs->status = sStatus;
  return cs->status == kFlightOk;
}

// `failed`: this CTA's outputs were written as NaN (uniform across the CTA).
__device__ __forceinline__ void exitCall(const KernelArgs& a, const CallState& cs, bool failed) {
  __syncthreads();
  if (threadIdx.x == 0) {
    atomicAdd(reinterpret_cast<unsigned long long*>(&a.state->cta[blockIdx.x]), 0ull - kRunOne);  // RED
    if (blockIdx.x == 0 && a.flight) {
      FlightEntry* e = &a.state->flight.entries[cs.epoch % kFlightEntries];
      e->endNs = globalTimerNs();
      e->status = cs.status != kFlightOk ? cs.status : failed ? kFlightFailed : kFlightOk;
    }
  }
}

// The same three with the call state kept in shared memory from entry to exit (sharedCall), for the
// kernels whose only spill was that state held in registers across their epilogue (the extended
// 8-vector ones); exitCallShared reads epoch and status from there. The others keep the functions
// above and e7608fe's machine code.
__device__ __forceinline__ CallState& sharedCall() {
  __shared__ CallState call;
  return call;
}
__device__ __forceinline__ CallState enterThenWaitShared(const KernelArgs& a) {
  PhaseClock::mark<0>();
  if (threadIdx.x == 0) sharedCall() = judgeEntry<false>(a);
  __syncthreads();
  const CallState cs = sharedCall();
  PhaseClock::mark<1>();
  pdlWait();
  PhaseClock::mark<2>();
  return cs;
}
// The verdict travels through its own word: until the __syncthreads below, a slower warp may still be
// reading sharedCall() from enterThenWaitShared (compute-sanitizer racecheck found thread 0's write of
// sharedCall().status racing those reads). Thread 0 copies it into sharedCall() after the barrier,
// for exitCallShared, which reads it after a barrier of its own.
__device__ __forceinline__ bool settleEntryShared(const KernelArgs& a, CallState* cs, const EntryCheck& c) {
  __shared__ uint32_t sSettled;
  if (threadIdx.x == 0) sSettled = judgeSettle(a, *cs, c);
  __syncthreads();
  cs->status = sSettled;
  if (threadIdx.x == 0) sharedCall().status = cs->status;
  return cs->status == kFlightOk;
}
__device__ __forceinline__ void exitCallShared(const KernelArgs& a, bool failed) { exitCall(a, sharedCall(), failed); }
// A kernel's choice between the two (kShared: the ...Shared ones).
template <bool kShared>
__device__ __forceinline__ CallState enterThenWaitAs(const KernelArgs& a) {
  if constexpr (kShared)
    return enterThenWaitShared(a);
  else
    return enterThenWait(a);
}
template <bool kShared>
__device__ __forceinline__ bool settleEntryAs(const KernelArgs& a, CallState* cs, const EntryCheck& c) {
  if constexpr (kShared)
    return settleEntryShared(a, cs, c);
  else
    return settleEntry(a, cs, c);
}
template <bool kShared>
__device__ __forceinline__ void exitCallAs(const KernelArgs& a, const CallState& cs, bool failed) {
  if constexpr (kShared)
    exitCallShared(a, failed);
  else
    exitCall(a, cs, failed);
}
// The end of a barrier path's call: phase points 5 (tiles finished) and 6 (exited) around
// exitCallAs, then the phase clock's report of the path's 7 points (empty in a normal build).
template <bool kShared>
__device__ __forceinline__ void finishCallAs(const KernelArgs& a, const CallState& cs, bool failed, const char* path) {
  PhaseClock::mark<5>();
  exitCallAs<kShared>(a, cs, failed);
  PhaseClock::mark<6>();
  PhaseClock::report(path, a.nranks, a.rank, cs.epoch, 7);
}

// ---- tiles ---------------------------------------------------------------------------------------
// This CTA's place in the call's tiling (device/args.h Tiling).
struct TileCursor {
  int chunk, slot, tiles;
  int chunkVecs, nvec, slots;
  __device__ explicit TileCursor(const KernelArgs& a) {
    chunk = blockIdx.x % a.tiling.chunks;
    slot = blockIdx.x / a.tiling.chunks;
    slots = a.tiling.slots;
    chunkVecs = a.tiling.chunkVecs;
    nvec = a.tiling.nvec;
    tiles = (a.tokens - slot + slots - 1) / slots;
  }
  __device__ int row(int j) const { return slot + j * slots; }
  // Index of vector u of tile j in a [tokens][nvec] array of 16-byte vectors.
  __device__ size_t at(int j, int u) const {
    return static_cast<size_t>(row(j)) * nvec + static_cast<size_t>(chunk) * chunkVecs + u;
  }
};

}  // namespace arfuse
