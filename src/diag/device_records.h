// What the kernels record for the host: call descriptors, error records, the flight recorder and
// the group's host-mapped area. Plain structs (no CUDA types), shared by kernels (src/device) and
// the host readers (diag/records.h, diag/dump.h, the watchdog, the CPU tests).
#pragma once

#include <stddef.h>
#include <stdint.h>

namespace arfuse {

constexpr int kMaxRanks = 16;  // == ARFUSE_MAX_RANKS

// Error codes a kernel records (ErrorRecord::code).
constexpr int kErrPeerTimeout = 1;  // a wait for `peer` exceeded the timeout
constexpr int kErrMismatch = 2;     // `peer` made a different call (descriptors differ)
constexpr int kErrConcurrent = 3;   // two calls of this rank ran at the same time (two streams)
// Written by the host, never by a kernel: an NCCL operation across hosts of this rank did not
// finish within the timeout (comm/multihost_watch.h). peer -1; block = the communicator
// (diag/nccl_watch.h kNcclCommWorld, or the local index); phase 5; call = the rank's NCCL
// operation number across hosts; waitedMs = how long it had run on the GPU.
constexpr int kErrNcclTimeout = 4;
constexpr int kPhaseNcclAcrossHosts = 5;
// Written by the host, never by a kernel: ARFUSE_CHECK_REPLICAS found residual_in or weight of rank
// `peer` different from rank 0's at checked call `call` (api/replicas.h; the recording rank's ERROR
// line names the tensor and element). phase 6.
constexpr int kErrReplicaMismatch = 5;
constexpr int kPhaseReplicaCheck = 6;

// What one call is, in two 32-bit words (each travels in the payload half of a flagged 8-byte word):
//   w0 = op | dtype << 4 | algo << 8 | variant << 12 | hidden << 16   (hidden < 65536)
//   w1 = tokens
// Every rank's kernel sends its descriptor to its peers; a difference is a divergent call.
struct CallDesc {
  uint32_t w0;
  uint32_t w1;
};
inline CallDesc makeCallDesc(int op, int dtype, int algo, int variant, int tokens, int hidden) {
  CallDesc d;
  d.w0 = static_cast<uint32_t>(op & 0xF) | static_cast<uint32_t>(dtype & 0xF) << 4 |
         static_cast<uint32_t>(algo & 0xF) << 8 | static_cast<uint32_t>(variant & 0xF) << 12 |
         static_cast<uint32_t>(hidden & 0xFFFF) << 16;
  d.w1 = static_cast<uint32_t>(tokens);
  return d;
}
inline int descOp(CallDesc d) { return d.w0 & 0xF; }
inline int descDtype(CallDesc d) { return (d.w0 >> 4) & 0xF; }
inline int descAlgo(CallDesc d) { return (d.w0 >> 8) & 0xF; }
inline int descVariant(CallDesc d) { return (d.w0 >> 12) & 0xF; }
inline int descHidden(CallDesc d) { return static_cast<int>(d.w0 >> 16); }
inline int descTokens(CallDesc d) { return static_cast<int>(d.w1); }

// One per rank, in host-mapped memory shared by the group: written by a kernel on its rank's first
// error (the error path only: no call that succeeds touches host memory).
struct ErrorRecord {
  int valid;
  int code;  // kErr*
  int peer;  // the rank waited for / whose descriptor differs; -1 for kErrConcurrent
  int block;
  int phase;     // 0/1 barrier phase, 2 low-latency data, 3 descriptor exchange, 4 call entry, 5 NCCL across hosts
  int waitedMs;  // kErrNcclTimeout only (kernels leave it 0)
  uint64_t call;
  CallDesc mine;    // this rank's call
  CallDesc theirs;  // the peer's call (kErrMismatch)
};

// Flight recorder: the last kFlightEntries calls of each rank, stamped by block 0 of every kernel
// (so CUDA-graph replays are recorded too) into the rank's own *device* memory (DeviceState), off
// the host link. The host copies the ring out when it dumps or watches (Group::refreshFlight) into
// GroupShared::flight, the mirror every host reader uses. `call` is written first with end 0 and
// status 0 ("pending"), and end + status when block 0 leaves.
constexpr int kFlightEntries = 64;
constexpr uint32_t kFlightPending = 0;  // running, or stopped without leaving (a hang)
constexpr uint32_t kFlightOk = 1;       // block 0 finished its part; its outputs are valid
constexpr uint32_t kFlightFailed = 2;   // a wait failed (timeout, mismatch, concurrent call): outputs NaN
constexpr uint32_t kFlightRefused = 3;  // the group was already aborted at entry: outputs NaN, nothing sent
struct FlightEntry {
  uint64_t call;  // 1-based call number of block 0 of this rank; 0 = empty
  CallDesc desc;
  uint64_t startNs;  // %globaltimer at entry (ns; the device's clock, comparable within a GPU)
  uint64_t endNs;    // at exit of block 0; 0 while running, or if the call did not finish
  uint32_t status;   // kFlight*
  uint32_t pad;
};
struct FlightRing {
  FlightEntry entries[kFlightEntries];  // entry of call c at index (c - 1) % kFlightEntries
};

// The group's host-mapped area (one pinned allocation in-process, POSIX shared memory across
// processes). `abort` is the host-visible copy of the group's abort: every failing kernel sets it,
// and kernels of groups without peer access poll it (with peer access they poll their own device
// copy, DeviceState::abort, which a failing rank writes on every peer).
struct GroupShared {
  int abort;
  int pad[3];
  ErrorRecord records[kMaxRanks];
  FlightRing flight[kMaxRanks];  // host mirror of each local rank's device ring (see above)
};

}  // namespace arfuse
