// Plain structs shared by host and device code: the kernels' arguments, the per-rank control block
// (its layout is defined here once, for in-process and multi-process groups alike) and the sizes
// every path's workspace is built from. No CUDA types, so host-only files can include it.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <algorithm>

#include "diag/device_records.h"

namespace arfuse {

constexpr int kMaxCtas = 128;  // CTAs per rank per call (flag slots and workspace regions per rank)
constexpr int kMaxBlocks = kMaxCtas;
constexpr int kMaxThreads = 512;
constexpr int kMaxVecsPerThread = 8;                             // register cache per thread for one tile
constexpr int kMaxVecsPerRow = kMaxThreads * kMaxVecsPerThread;  // 4096 x 16 B = 64 KiB per row
constexpr int kMaxChunks = 8;  // CTAs one row may be split over (a thread-block cluster, sm_90+)
// The canonical reduction over a row (device/rowsum.cuh) sums squares in groups of this many
// consecutive 16-byte vectors; a chunk of a split row is always a whole number of groups.
constexpr int kGroupVecs = 8;
constexpr int kMaxGroupsPerRow = kMaxVecsPerRow / kGroupVecs;

// Largest message (bytes per rank) the low-latency path carries; the CTAs one low-latency call may
// use (its buffer has a region per CTA index, source and parity); the data bytes one such CTA may
// carry per source and call (its flagged region holds twice that: every 4 data bytes travel with a
// 4-byte flag). One whole row of hidden 8192 bf16 fits, for GPUs that cannot split rows.
constexpr long long kLowLatencyMaxBytes = 64 * 1024;
// The two-phase variant pushes 2(n-1)/n of the message instead of (n-1)x: it may carry larger
// messages, as far as its tiles fit the same per-CTA regions (the plan checks).
constexpr long long kLlTwoPhaseMaxBytes = 512 * 1024;
constexpr int kLlMaxCtas = 32;
constexpr size_t kLlCtaDataBytes = 16 * 1024;
constexpr size_t kLlRegionBytes = 2 * kLlCtaDataBytes;
// Bytes one tile of chunkVecs vectors takes in a flagged region: whole 1 KiB groups of 32 vectors
// (algos/lowlatency/kernel.cuh), so a narrow tile takes more than twice its data. A CTA's tiles
// must fit kLlRegionBytes (the plan checks these bytes, not the data's).
constexpr size_t llTileBytes(int chunkVecs) { return static_cast<size_t>((chunkVecs + 31) / 32) * 1024; }
// Vectors one tile of chunkVecs takes in a two-shot region of n ranks (algos/twoshot/kernel.cuh): the
// owner of a slice receives n - 1 pushed parts of its width, which exceed the tile only for rows
// narrower than (n - 1)^2 vectors.
constexpr int twoShotTileVecs(int chunkVecs, int nranks) {
  return nranks <= 1 ? chunkVecs : std::max(chunkVecs, (nranks - 1) * ((chunkVecs + nranks - 1) / nranks));
}

// Elements of one local rank's fp32 slice in the hierarchical path (algos/hierarchical/kernel.cuh)
// for a message of `count` elements over `localRanks` ranks per host: ceil(count / L) rounded up to 8,
// so no 16-byte vector of any dtype straddles two slices (comm/multihost.cc sizes its buffers by it).
constexpr long long hierarchicalSliceElems(long long count, int localRanks) {
  const long long l = std::max(1, localRanks);
  return ((count + l - 1) / l + 7) / 8 * 8;
}

// A 16-byte flag slot: two 8-byte words {counter:32 | payload:32}, the payloads being the two words
// of the writer's CallDesc. Each 8-byte word is single-copy atomic, so a reader that sees a counter
// in a word has that word's payload; the counter says which call (and phase) the word belongs to.
struct FlagSlot {
  uint64_t w[2];
};

// Per rank, in its own device memory. `cta[b]` is CTA b's call counter: block b of every call adds
// kCtaEnter at entry (epoch in the low kEpochBits, calls of this rank running block b in the high
// bits) and takes kRunOne back at exit. Every CTA keeps its own epoch, so no block ever waits for
// another block of its rank; block b of every rank takes part in the same calls (the launch
// geometry is a pure function of the call), so block b's epochs agree across ranks.
constexpr int kEpochBits = 44;
constexpr uint64_t kEpochMask = (1ull << kEpochBits) - 1;
constexpr uint64_t kRunOne = 1ull << kEpochBits;
constexpr uint64_t kCtaEnter = kRunOne + 1;
struct DeviceState {
  uint32_t abort;         // nonzero once the group aborted (sticky; written by any rank's kernel)
  uint32_t errorClaimed;  // the first error of this rank claims its ErrorRecord
  uint32_t pad[30];
  uint64_t cta[kMaxCtas];
  FlightRing flight;  // written by block 0 of every call (diag/device_records.h)
};

// One allocation per rank, zeroed at init: its state, the barrier flags its peers write
// ([cta][source rank]) and the low-latency descriptor slots ([parity][cta][source]).
struct ControlBlock {
  DeviceState state;
  FlagSlot flags[kMaxCtas][kMaxRanks];
  FlagSlot llDesc[2][kMaxCtas][kMaxRanks];
};

// Addresses every rank can dereference (UVA + peer access, CUDA IPC, or the same device).
//   staging[r]: [kMaxCtas][2 parities][stagingRegionBytes]   (one-shot / two-shot; local copy-in target)
//   ll[r]:      [kLlMaxCtas][2 parities][nranks sources][kLlRegionBytes]
struct PeerPtrs {
  char* staging[kMaxRanks];
  ControlBlock* control[kMaxRanks];
  char* ll[kMaxRanks];
};

// The host-staged exchange area: pinned host memory mapped into every rank's GPU (one allocation
// in one process; POSIX shared memory registered with CUDA across processes).
//   slots[r]: [kMaxCtas][2 parities][hostRegionBytes], written by rank r only
//   flags[r]: [kMaxCtas][kMaxRanks], written by r's peers
struct HostPtrs {
  char* slots[kMaxRanks];
  FlagSlot* flags[kMaxRanks];
};
constexpr size_t kHostFlagBytes = sizeof(FlagSlot) * kMaxCtas * kMaxRanks;

// Options of the extended epilogue (arfuseAllReduceEpilogue); used only by the kExt kernel
// instantiations, so the plain ones are unchanged.
constexpr int kQuantNone = 0, kQuantFp8Static = 1, kQuantFp8PerToken = 2, kQuantNvfp4 = 3;
struct EpiArgs {
  int enabled;        // 1: an arfuseAllReduceEpilogue call (the kExt kernels)
  int weightPlusOne;  // norm * (1 + w) instead of norm * w
  int quant;          // kQuant*
  int scaleLayout;    // 0 linear, 1 swizzled 128x4 (NVFP4 block scales)
  int firstLayer;     // no residual_in: residual_out = the sum
  int writeResidual;  // residual_out requested
  int writeNorm;      // norm_out requested
  int tokens;         // rows of the call (NVFP4 swizzled scales: the padding rows)
  int pad;
  unsigned char* quantOut;  // fp8: [tokens][hidden]; nvfp4: [tokens][hidden / 2]
  void* scaleOut;           // per-token fp8: float[tokens]; nvfp4: e4m3 block scales
  const float* scaleIn;     // static fp8: the scale; nvfp4: the global scale
};

// How one call's work is cut (plan/plan.h computes it; every rank computes the same):
// a row of nvec 16-byte vectors is split into `chunks` contiguous chunks of chunkVecs vectors; a
// tile is (row, chunk); CTA b = slot * chunks + chunk handles chunk `chunk` of rows slot,
// slot + slots, ... (grid = slots * chunks CTAs; with chunks > 1 the `chunks` CTAs of a slot form
// a cluster). A CTA's j-th tile sits at offset j * chunkVecs * 16 B of its workspace region.
struct Tiling {
  int chunks;
  int chunkVecs;
  int slots;
  int nvec;
};

struct KernelArgs {
  PeerPtrs peers;
  HostPtrs host;
  size_t stagingRegionBytes;  // one CTA's region of one parity of a staging buffer
  size_t hostRegionBytes;     // one CTA's region of one parity of a host slot
  DeviceState* state;         // this rank's
  GroupShared* shared;        // device pointer of the host-mapped group area
  const uint32_t* abortPoll;  // the abort word waits poll: state->abort (peer access) or shared->abort
  int peerAbort;              // 1: a failing kernel also writes every peer's DeviceState::abort
  int flight;                 // 1: stamp the flight recorder (ARFUSE_FLIGHT_RECORDER)
  uint32_t pollSleepNs;       // low-latency receive: sleep between polling rounds (ARFUSE_POLL_SLEEP_NS)
  uint64_t timeoutNs;
  CallDesc desc;  // this call, as every rank should have made it
  Tiling tiling;
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
  float invHidden;  // 1.0f / hidden, computed on the host (a device division would call a slow path)
  EpiArgs ext;      // kExt kernels only (residualIn, normOut, residualOut may then be null)
};

// Arguments of the single-GPU add+RMSNorm kernel (also the epilogue of the NCCL path).
// `x` holds `sources` copies of [tokens][hidden] `sourceStride` elements apart, summed in fp32 in
// source order (1 for a plain add+RMSNorm or after ncclAllReduce; nranks after an all-gather in
// the deterministic NCCL mode, which then gives the same bits as every arfuse path).
struct LocalArgs {
  const void* x;
  const void* residualIn;
  const void* weight;
  void* normOut;
  void* residualOut;
  int tokens;
  int hidden;
  float eps;
  float invHidden;  // 1.0f / hidden (see KernelArgs)
  int sources;
  size_t sourceStride;  // elements
  Tiling tiling;
  EpiArgs ext;  // kExt kernels only
};

}  // namespace arfuse
