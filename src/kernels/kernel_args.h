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

constexpr int kErrPeerTimeout = 1;

// Largest message (bytes per rank) the low-latency path carries; its buffer holds twice that per
// source and parity (every 4 data bytes travel with a 4-byte flag).
constexpr long long kLowLatencyMaxBytes = 64 * 1024;

// Device-resident protocol state of one rank (in its own device memory).
struct DeviceState {
  uint64_t call;            // number of calls completed by this rank
  unsigned int blocksDone;  // blocks of the current call that have finished
  unsigned int errorClaimed;  // first timeout of this rank claims the error record
};

// One per rank, in host-mapped memory shared by the group: written by kernels on timeout.
struct ErrorRecord {
  int valid;
  int code;
  int peer;
  int block;
  int phase;
  int pad;
  uint64_t call;
};

struct GroupShared {
  int abort;  // set by any rank's kernel (or the host) to end every wait in the group
  int pad[3];
  ErrorRecord records[kMaxRanks];
};

// Addresses every rank can dereference (UVA + peer access, or the same device).
struct PeerPtrs {
  char* staging[kMaxRanks];   // per rank: [2 parities][stagingBytes]
  uint64_t* flags[kMaxRanks]; // per rank: [kMaxBlocks][kMaxRanks]
  char* ll[kMaxRanks];        // per rank: [2 parities][nranks sources][llSourceBytes]
};

// The host-staged exchange area: pinned host memory mapped into every rank's GPU (one allocation
// in one process; POSIX shared memory registered with CUDA across processes).
struct HostPtrs {
  char* slots[kMaxRanks];      // per rank: [2 parities][hostSlotBytes], written by that rank only
  uint64_t* flags[kMaxRanks];  // per rank: [kMaxBlocks][kMaxRanks], written by its peers (as PeerPtrs::flags)
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
};

}  // namespace arfuse
