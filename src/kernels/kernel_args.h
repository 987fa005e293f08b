// Plain structs shared by host and device code: the kernel arguments, the per-rank device state
// and the group's host-mapped error area. No CUDA types, so host-only files can include it.
#pragma once

#include <stddef.h>
#include <stdint.h>

namespace arfuse {

constexpr int kMaxRanks = 16;   // == ARFUSE_MAX_RANKS
constexpr int kMaxBlocks = 128; // flag slots per rank: [kMaxBlocks][kMaxRanks]
constexpr int kMaxThreads = 512;
constexpr int kMaxVecsPerThread = 8;  // register cache per thread for one row
constexpr int kMaxVecsPerRow = kMaxThreads * kMaxVecsPerThread;  // 4096 x 16 B = 64 KiB per row

// Error codes a kernel records (ErrorRecord::code).
constexpr int kErrPeerTimeout = 1;  // a wait for `peer` exceeded the timeout
constexpr int kErrMismatch = 2;     // `peer` made a different call (descriptors differ)
constexpr int kErrConcurrent = 3;   // two calls of this rank ran at the same time (two streams)

// Largest message (bytes per rank) the low-latency path carries; its buffer holds twice that per
// source and parity (every 4 data bytes travel with a 4-byte flag).
constexpr long long kLowLatencyMaxBytes = 64 * 1024;

// What one call is, in two 32-bit words (so each travels in one flagged 8-byte word):
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

// Device-resident protocol state of one rank (in its own device memory).
struct DeviceState {
  uint64_t call;  // number of calls completed by this rank
  // Low 32 bits: blocks of the current call that have finished. High 32 bits: calls of this rank
  // running now (block 0 adds one at entry with a fire-and-forget reduction; the last block takes it
  // back). More than one running is two streams at once.
  uint64_t doneAndRunning;
  uint64_t startNs;           // %globaltimer at entry of the current call (block 0), for the flight recorder
  unsigned int errorClaimed;  // first error of this rank claims the error record
  unsigned int pad;
};

// One per rank, in host-mapped memory shared by the group: written by kernels on an error.
struct ErrorRecord {
  int valid;
  int code;   // kErr*
  int peer;   // the rank waited for / whose descriptor differs; -1 for kErrConcurrent
  int block;
  int phase;  // 0/1 barrier phase, 2 low-latency data, 3 descriptor exchange, 4 call entry
  int pad;
  uint64_t call;
  CallDesc mine;    // this rank's call
  CallDesc theirs;  // the peer's call (kErrMismatch)
};

// Flight recorder: the last kFlightEntries calls of each rank, stamped by the kernels themselves
// (so CUDA-graph replays are recorded too) into host-mapped memory. The last block to leave a call
// writes its whole entry (desc, start, end, then call) as the kernel's very last stores, so no
// fence on the call's critical path waits for these writes over PCIe. A call that fails (timeout,
// mismatch, misuse) is stamped by the failing thread with end = 0 ("pending"). Host readers may see
// an entry mid-update: `call` is written last.
constexpr int kFlightEntries = 64;
struct FlightEntry {
  uint64_t call;     // 1-based call number of this rank; 0 = empty
  CallDesc desc;
  uint64_t startNs;  // %globaltimer at entry (ns; the device's clock, comparable within a GPU)
  uint64_t endNs;    // at exit of the last block; 0 while running, or if the call aborted
};
struct FlightRing {
  FlightEntry entries[kFlightEntries];  // entry of call c at index (c - 1) % kFlightEntries
};

struct GroupShared {
  int abort;  // set by any rank's kernel (or the host) to end every wait in the group
  int pad[3];
  ErrorRecord records[kMaxRanks];
  FlightRing flight[kMaxRanks];
};

// Descriptor slots: per rank, [2 parities][kMaxRanks sources] x 16 bytes (two flagged 8-byte
// words), written by the peers. In the control block (P2P paths) or the host area (host-staged).
constexpr size_t kDescSlotBytes = 16;
constexpr size_t kDescAreaBytes = 2 * kMaxRanks * kDescSlotBytes;

// Addresses every rank can dereference (UVA + peer access, or the same device).
struct PeerPtrs {
  char* staging[kMaxRanks];   // per rank: [2 parities][stagingBytes]
  uint64_t* flags[kMaxRanks]; // per rank: [kMaxBlocks][kMaxRanks]
  char* ll[kMaxRanks];        // per rank: [2 parities][nranks sources][llSourceBytes]
  char* desc[kMaxRanks];      // per rank: descriptor slots (kDescAreaBytes), in its control block
};

// The host-staged exchange area: pinned host memory mapped into every rank's GPU (one allocation
// in one process; POSIX shared memory registered with CUDA across processes).
struct HostPtrs {
  char* slots[kMaxRanks];      // per rank: [2 parities][hostSlotBytes], written by that rank only
  uint64_t* flags[kMaxRanks];  // per rank: [kMaxBlocks][kMaxRanks], written by its peers (as PeerPtrs::flags)
  char* desc[kMaxRanks];       // per rank: descriptor slots (kDescAreaBytes)
};

// Options of the extended epilogue (arfuseAllReduceEpilogue); used only by the kExt kernel
// instantiations, so the plain ones are unchanged.
constexpr int kQuantNone = 0, kQuantFp8Static = 1, kQuantFp8PerToken = 2, kQuantNvfp4 = 3;
struct EpiArgs {
  int enabled;           // 1: an arfuseAllReduceEpilogue call (the kExt kernels)
  int weightPlusOne;     // norm * (1 + w) instead of norm * w
  int quant;             // kQuant*
  int scaleLayout;       // 0 linear, 1 swizzled 128x4 (NVFP4 block scales)
  int firstLayer;        // no residual_in: residual_out = the sum
  int writeResidual;     // residual_out requested
  int writeNorm;         // norm_out requested
  int tokens;            // rows of the call (NVFP4 swizzled scales: the padding rows)
  int pad;
  unsigned char* quantOut;  // fp8: [tokens][hidden]; nvfp4: [tokens][hidden / 2]
  void* scaleOut;           // per-token fp8: float[tokens]; nvfp4: e4m3 block scales
  const float* scaleIn;     // static fp8: the scale; nvfp4: the global scale
};

struct KernelArgs {
  PeerPtrs peers;
  HostPtrs host;          // hoststaged path only
  size_t hostSlotBytes;   // bytes of one parity of one rank's host slot
  DeviceState* state;     // this rank's
  GroupShared* shared;    // device pointer of the host-mapped group area
  size_t stagingBytes;    // bytes of one parity of a staging buffer
  size_t llSourceBytes;   // bytes of one source's region of one parity of a low-latency buffer
  uint64_t timeoutNs;
  CallDesc desc;          // this call, as every rank should have made it
  int flight;             // 1: stamp the flight recorder (ARFUSE_FLIGHT_RECORDER)
  int rank;
  int nranks;
  // call arguments
  const void* x;
  const void* residualIn;
  const void* weight;
  void* normOut;
  void* residualOut;  // for AllReduce: the output
  int tokens;
  int hidden;
  float eps;
  EpiArgs ext;  // kExt kernels only (residualIn, normOut, residualOut may then be null)
};

// Arguments of the single-GPU add+RMSNorm kernel (also the epilogue of the NCCL path).
struct LocalArgs {
  const void* x;  // the (already reduced) sum
  const void* residualIn;
  const void* weight;
  void* normOut;
  void* residualOut;
  int tokens;
  int hidden;
  float eps;
  EpiArgs ext;  // kExt kernels only
};

}  // namespace arfuse
