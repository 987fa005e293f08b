// The plan of a group that spans hosts (pure, CPU-tested: tests/cpu/multihost_plan_test.cc).
//
// Two paths cross hosts, both through NCCL (arfuse has no network transport of its own):
//   nccl          ncclAllReduce over every rank (or, deterministic, an all-gather summed in fp32 in
//                 global rank order) + arfuse's fused add+RMSNorm epilogue; the whole message crosses;
//   hierarchical  intra-host reduce-scatter over arfuse's peer mappings (local rank j sums its 1/L
//                 slice over the L local ranks in fp32, local-rank order), ncclAllReduce (fp32, sum)
//                 of each slice among the ranks with local index j (one per host), then an
//                 intra-host all-gather of the reduced fp32 slices fused with residual add + RMSNorm.
//                 Only 1/L of the elements cross hosts per rank, in fp32: 4 / L bytes per element
//                 against the nccl path's 2 (bf16 / fp16) or 4 (fp32).
// Auto: hierarchical when every host has L >= 2 ranks with peer access, its fp32 slice is fewer
// bytes than the message (4 / L below the dtype's size: L >= 2 for fp32, L >= 3 for bf16 / fp16),
// the message is at least kHierarchicalMinBytes (below, the two extra intra-host kernels and
// barriers cost more than the cross-host bytes saved) and the call is neither the extended
// epilogue nor deterministic (the
// deterministic mode promises the bits of a rank-order sum, which only the nccl path's all-gather
// gives); nccl otherwise. Every rank plans from the same group-wide facts, so all agree.
#pragma once

#include <string>

#include "plan/plan.h"

namespace arfuse {

constexpr long long kHierarchicalMinBytes = 256 * 1024;

struct MultiHostFabric {
  int nranks = 2;                  // global ranks
  int hosts = 2;                   // H
  int localRanks = 1;              // L, ranks per host
  bool hierarchical = false;       // every host's ranks have peer access and the path's buffers
  std::string hierarchicalDetail;  // why not
  int maxBlocks = 1;               // intra-host CTA caps (narrow / wide barrier CTAs, the same on every rank)
  int maxBlocksWide = 1;
  int smCount = 1;
  bool pdl = false;
};

// Elements of one local rank's fp32 slice for a message of `count` elements: ceil(count / L)
// rounded up to 8, so no 16-byte vector of any dtype straddles two slices.
long long hierarchicalSliceElems(long long count, int localRanks);

// The reduce-scatter kernel's grid (phase 1): CTAs and threads for a slice of sliceElems elements.
void hierarchicalScatterGeometry(const MultiHostFabric& f, long long sliceElems, arfuseDataType_t dtype, int* blocks,
                                 int* threads);

// The gather + epilogue kernel's grid (phase 3: whole rows, never split) into p (blocks, threads,
// geo); false with *why when no instantiation covers the row.
bool hierarchicalGatherGeometry(const MultiHostFabric& f, const PlanRequest& req, Plan* p, std::string* why);

Plan makeMultiHostPlan(const MultiHostFabric& f, const Limits& limits, const PlanPolicy& policy,
                       const PlanRequest& req);

}  // namespace arfuse
