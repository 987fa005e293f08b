// The plan: a pure function from (what the machine is, what the caller asks) to the algorithm,
// the launch geometry and a one-line reason. No CUDA, no globals: CPU-tested, and the same code
// answers arfuseCommQueryPlan and every collective call, so the reason printed is the one acted on.
//
// Geometry is a function of (tokens, hidden, dtype, nranks, maxBlocks) only, and maxBlocks is a
// group-wide constant: every rank computes the same grid, which the per-block barriers rely on.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "arfuse/arfuse.h"
#include "base/status.h"
#include "common/defaults.h"
#include "device/args.h"

namespace arfuse {

// What one GPU keeps resident at once of each kernel class (algos/launch.h measureResidency fills it,
// the ranks exchange it at init): CTAs per SM of the low-latency, narrow and wide classes, each at its
// largest block, the fewest over the class's instantiations; and clusters of c CTAs (c = 2, 4, 8) the
// whole GPU keeps resident, per class of the kernels that split rows: the low-latency ones and the
// barrier paths' ones (one-shot, two-shot, host-staged). Each path's rows split as far as its own
// kernels fit: the low-latency kernels hold one CTA per SM, the barrier paths' narrow ones two, so
// one class's figure would cap the other's splits for nothing. A plain struct of ints: it crosses
// processes as is (transport/mp_protocol.h).
struct KernelResidency {
  int lowLatency = 0, narrow = 0, wide = 0;
  int llClusters[kMaxChunks + 1] = {};
  int clusters[kMaxChunks + 1] = {};
};

struct Fabric {
  int nranks = 1;
  bool virtualRanks = false;  // some device hosts several ranks
  bool p2p = true;            // every pair of ranks can load/store each other's memory
  std::string p2pDetail;      // why not, when !p2p ("devices 0 and 3: cudaDeviceCanAccessPeer = 0")
  bool nccl = false;          // an NCCL communicator exists for the group
  std::string ncclDetail;     // why not, when !nccl
  int maxBlocks = 1;          // group-wide cap on CTAs per rank (co-residency): narrow barrier-path CTAs
  // The same for the low-latency kernels, the wide (512-thread) barrier-path CTAs and CTAs in clusters
  // of c (index c = 2, 4, 8); -1: as maxBlocks. See setBlockCaps.
  int maxBlocksLowLatency = -1;
  int maxBlocksWide = -1;
  // Per class of kernels that split rows (KernelResidency): the barrier paths' and the low-latency one's.
  int clusterCtas[kMaxChunks + 1] = {-1, -1, -1, -1, -1, -1, -1, -1, -1};
  int llClusterCtas[kMaxChunks + 1] = {-1, -1, -1, -1, -1, -1, -1, -1, -1};
  int smCount = 1;                   // smallest SM count in the group (local kernel grid)
  long long lowLatencyMaxBytes = 0;  // largest message the low-latency buffer carries (0: no such buffer)
  bool hostStaged = false;           // the group has a host-memory exchange area every rank can map
  long long hostStagedCapacity = 0;  // largest message (bytes per rank) that area holds
  std::string hostStagedDetail;      // why not, when !hostStaged
  bool clusters = false;             // every rank's GPU launches thread-block clusters (sm_90+): rows may be split
  bool pdl = false;                  // kernels use programmatic dependent launch (sm_90+, ARFUSE_PDL)
  // Bytes of one CTA's region of one parity (Workspace below); 0 = no such buffer.
  long long stagingRegionBytes = 0;
  long long hostRegionBytes = 0;
  // A group that spans hosts (comm/multihost.h; docs/multihost.md): hosts > 1, nranks its global
  // ranks, localRanks (L) on each host; the CTA caps, SMs and PDL are the fewest over every rank.
  // Only the paths that cross hosts (AlgoEntry::acrossHosts: nccl, hierarchical) plan its calls.
  int hosts = 1;
  int localRanks = 1;
  bool hierarchical = false;       // every host's ranks have peer access and the hierarchical path's buffers
  std::string hierarchicalDetail;  // why not
};

struct Limits {
  int maxTokens = 2048;
  int maxHidden = 16384;
  unsigned dtypeMask = ARFUSE_DTYPE_ALL;
};

struct PlanPolicy {
  int forcedAlgo = arfuseAlgoAuto;  // arfuseAlgo_t
  std::string forcedBy;             // "config", "ARFUSE_ALGO"
  long long oneShotMaxBytes = ARFUSE_DEFAULT_ONESHOT_MAX_BYTES;
  // Host-staged path: one-shot while bytes x (n-1) stays under this (each rank reads every peer's
  // rows over its own PCIe link), two-shot beyond.
  long long hostOneShotMaxBytes = ARFUSE_DEFAULT_HOST_ONESHOT_MAX_BYTES;
  // Without peer access, messages above this go to NCCL when NCCL is available (its pipelined ring
  // through host memory is the safer choice for bulk transfers until calibration says otherwise).
  long long hostStagedMaxBytes = ARFUSE_DEFAULT_HOST_STAGED_MAX_BYTES;
  // Set from a matching calibration file (src/plan/calibration.h); the defaults leave the plan as
  // it is without one.
  // Auto plan: the low-latency path only while bytes <= this (the fabric's buffer limit still
  // applies); -1: no limit of its own.
  long long lowLatencyMaxBytes = -1;
  // Auto plan with peer access: messages above this go to NCCL when it is available (NCCL measured
  // faster at the largest sizes); -1: never.
  long long ncclAboveBytes = -1;
  // Where the limits above came from ("calibration /etc/arfuse/cal.json"), named in the plan's
  // reasons; "" means built-in defaults ("built-in default, not calibrated").
  std::string calibratedFrom;
  // Batch invariance (arfuseConfig_t.deterministic / ARFUSE_DETERMINISTIC): the NCCL path all-gathers
  // and sums in fp32 in rank order like every arfuse path, so a row's bits never depend on the path.
  bool deterministic = false;
  // The most CTAs a row may be split over (ARFUSE_MAX_CHUNKS; 1 = never split).
  int maxChunks = 8;
  // Experimental split rules (issue 33, ARFUSE_EXP_SPLIT_VECS / ARFUSE_EXP_SPLIT_SHARED; see tileGeometry):
  // split while a chunk exceeds splitVecs vectors; splitShared: also when rows must share CTAs.
  int splitVecs = 256;
  bool splitShared = false;
  // Split rows of add+RMSNorm calls run the row-push kernels (ARFUSE_ROW_PUSH; see Geometry::rowPush).
  bool rowPush = true;
  // Wide tiles of at most 2 vectors per thread run the path's wide 2-vector kernels (ARFUSE_WIDE_TWO;
  // TileRules::wideVecs).
  bool wideTwo = true;
  // The low-latency path's two-phase variant (algos/lowlatency/kernel.cuh): -1 as the plan decides
  // (above the one-phase limit up to llTwoPhaseMaxBytes, 3+ ranks), 0 never, 1 whenever the path
  // runs a call it can take (ARFUSE_LL_TWO_PHASE).
  int llTwoPhase = -1;
  long long llTwoPhaseMaxBytes = ARFUSE_DEFAULT_LL_TWO_PHASE_MAX_BYTES;
  // Without a calibration: what the built-in limits were chosen for, when the fabric chose them
  // (applyFabricDefaults: "built-in NVLink default, not calibrated"); "" names the plain default.
  std::string builtinOrigin;
};

struct PlanRequest {
  arfuseOp_t op = arfuseOpAllReduceAddRmsNorm;
  int tokens = 1;
  int hidden = 0;
  arfuseDataType_t dtype = arfuseBfloat16;
  bool extended = false;  // arfuseAllReduceEpilogue (quantised / optional outputs): rows are never split
};

// How a call's work is cut (device/args.h Tiling) and which instantiation runs it: rows of nvec
// 16-byte vectors are split into `chunks` chunks of chunkVecs vectors (a cluster of CTAs per row,
// sm_90+); `slots` row slots of `chunks` CTAs each; `vecs` vectors per thread.
struct Geometry {
  int chunks = 1;
  int chunkVecs = 0;
  int slots = 1;
  int vecs = 1;
  // The row-push instantiation (device/rowsum.cuh): split rows (chunks > 1) of a plain add+RMSNorm call
  // push their partial sums into each other's shared memory instead of passing a cluster barrier.
  bool rowPush = false;
};

struct Plan {
  arfuseResult_t status = arfuseSuccess;
  arfuseAlgo_t algo = arfuseAlgoAuto;
  int blocks = 0;
  int threads = 0;
  // The path's second kernel instead of its first; what that is, per path:
  //   hoststaged: the two-shot kernels (reduce-scatter, then gather) instead of one-shot;
  //   lowlatency: the two-phase kernel (push each slice to its owner, then the owner pushes the
  //               reduced slice) instead of pushing every row to every peer;
  //   local, nccl, oneshot, twoshot, hierarchical: none (always false).
  // It is also the variant of the call's descriptor (diag/device_records.h), which ranks compare.
  bool variant = false;
  Geometry geo;
  bool pdl = false;    // launch with programmatic dependent launch
  std::string reason;  // why this algorithm, or, on failure, the error message naming the argument
};

// What one GPU of a group keeps resident (algos/launch.h Residency) and how many ranks it hosts.
struct DeviceResidency {
  int sms = 0, ranks = 1;
  KernelResidency res;
};
// The group's per-rank CTA caps: every rank's CTAs of one call must be resident at once when ranks
// share a GPU (they wait for each other), so each class gets SMs x residency / ranks on that GPU, the
// fewest over the group's GPUs, at most configCap (> 0) and kMaxCtas (kLlMaxCtas for low-latency).
// Fails (arfuseUnsupported) if some class cannot fit one CTA per rank, saying which.
Status setBlockCaps(const std::vector<DeviceResidency>& devices, int configCap, Fabric* f);

size_t dtypeSize(arfuseDataType_t dtype);
// Elements per 16-byte vector.
int dtypeVecElems(arfuseDataType_t dtype);
// Largest hidden size the kernels support for a dtype (one row fits in registers of one block).
int maxSupportedHidden(arfuseDataType_t dtype);

// A plan that failed: the code and the reason (the message naming the argument and the fix).
Plan failedPlan(arfuseResult_t status, std::string reason);

// Checks (tokens, hidden, dtype) against the kernels and the communicator's limits.
Plan validateShape(const Limits& limits, const PlanRequest& req);

// The vectors-per-thread instantiations a kernel has, per kind (0 all-reduce, 1 fused, 2 extended),
// ascending, 0 for none: each path lists its own (algos/<path>/plan.cc, beside its launch.h).
struct VecSets {
  int byKind[3][4];
};
// The smallest instantiation of `sets` for `kind` that covers `needed` vectors per thread; 0 if none.
int instantiatedVecs(const VecSets& sets, int kind, int needed);

// How a multi-rank path's kernels may cut a call (its entry says; algos/shared.h barrierTiles):
// at most maxCtas CTAs per rank; with wideTiles, tiles of more than 512 vectors run on 512 threads
// (at most Fabric::maxBlocksWide CTAs), else every tile runs on at most 256 threads; `vecs`: the
// instantiations of the tiles on at most 256 threads; `wideVecs`: those of the wide tiles (none
// given: 8 vectors).
struct TileRules {
  int maxCtas;
  bool wideTiles;
  const VecSets* vecs;
  const int* clusterCtas;  // the path's class's caps on CTAs in clusters of c (Fabric; -1: none)
  const VecSets* wideVecs = nullptr;
};
// How tileGeometry splits rows over clusters (PlanPolicy's maxChunks, splitVecs, splitShared, rowPush).
struct SplitRule {
  int maxChunks = 8;        // the most CTAs one row may be split over
  int maxChunkVecs = 256;   // split while a chunk has more vectors than this
  bool sharedCtas = false;  // split also when rows must share CTAs (by default every row gets its own)
  bool rowPush = true;      // split rows of add+RMSNorm calls take the row push (Geometry::rowPush)
  bool wideTwo = true;      // wide tiles may take TileRules::wideVecs' 2-vector instantiations
};
SplitRule splitRuleOf(const PlanPolicy& p);
// Geometry of a multi-rank path for a call (a pure function of the call and group-wide facts, so
// every rank launches the same grid). Sets blocks/threads. False if no instantiation covers it.
bool tileGeometry(const Fabric& f, const PlanRequest& r, const TileRules& rules, int* blocks, int* threads,
                  Geometry* geo, const SplitRule& split = SplitRule{});
// Bytes one CTA puts in its region for a call with this geometry.
long long ctaRegionUse(const Geometry& g, int tokens);
// The same for two-shot, whose tiles take twoShotTileVecs vectors each (device/args.h).
long long twoShotRegionUse(const Geometry& g, int tokens, int nranks);
// The same in a low-latency region: flagged words, whole 1 KiB groups per tile (device/args.h).
long long llRegionUse(const Geometry& g, int tokens);

// The per-rank workspace of a group (every rank the same): staging for one-shot / two-shot / the
// NCCL path's sum, the low-latency buffer, and the host-staged slot, each cut into per-CTA regions
// of two parities (a CTA only ever touches its own region; device/args.h).
struct Workspace {
  size_t elemBytes = 0;           // largest enabled dtype
  size_t maxRowBytes = 0;         // maxHidden x elemBytes
  size_t stagingRegionBytes = 0;  // per CTA and parity
  size_t stagingBytes = 0;        // per rank: maxBlocks x 2 x stagingRegionBytes
  size_t ncclBytes = 0;           // the NCCL path's sum: the largest message, or nranks of them when
                                  // deterministic (an all-gather); its own buffer, never the staging
                                  // peers may still be reading
  size_t llBytes = 0;             // per rank: kLlMaxCtas x 2 x nranks x kLlRegionBytes (0 for one rank)
  size_t hostRegionBytes = 0;     // per CTA and parity, for messages up to hostMessageBytes
  size_t hostSlotBytes = 0;       // per rank: maxBlocks x 2 x hostRegionBytes
};
// Sized by the paths of the registry (algos/registry.h workspaceFor).

}  // namespace arfuse
