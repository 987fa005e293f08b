// The hierarchical path's plan and geometry (pure, CPU-tested: tests/cpu/multihost_plan_test.cc). The
// plan of a group that spans hosts (Fabric::hosts > 1) asks only the entries that cross hosts, this
// one before nccl's (algos/registry.cc).
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
// gives); nccl otherwise (its reason says which of these declined). Every rank plans from the same
// group-wide facts, so all agree.
#pragma once

#include <string>

#include "algos/registry.h"  // Verdict
#include "plan/plan.h"

namespace arfuse {

constexpr long long kHierarchicalMinBytes = 256 * 1024;

// The reduce-scatter kernel's grid (phase 1): CTAs and threads for a slice of sliceElems elements
// (device/args.h hierarchicalSliceElems).
void hierarchicalScatterGeometry(const Fabric& f, long long sliceElems, arfuseDataType_t dtype, int* blocks,
                                 int* threads);

// The gather + epilogue kernel's grid (phase 3: whole rows, never split): Verdict::fitted with its
// blocks, threads and geo, or a no saying why no instantiation covers the row (a reason, not an error).
Verdict hierarchicalGatherGeometry(const Fabric& f, const PlanRequest& req);

}  // namespace arfuse
