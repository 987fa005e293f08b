// The plan of a group that spans hosts (algos/hierarchical/plan.h): nccl or hierarchical with the
// reason, forced paths, the slice and kernel geometry.
#include <gtest/gtest.h>

#include <vector>

#include "algos/hierarchical/args.h"
#include "algos/hierarchical/plan.h"
#include "algos/registry.h"

namespace arfuse {
namespace {

Fabric fabric(int hosts, int local, bool hier = true) {
  Fabric f;
  f.nccl = true;
  f.hosts = hosts;
  f.localRanks = local;
  f.nranks = hosts * local;
  f.hierarchical = hier;
  f.hierarchicalDetail =
      hier ? "" : "rank 1 (host test:h0, local rank 1): no peer access between the ranks of its host";
  f.maxBlocks = 64;
  f.maxBlocksWide = 32;
  f.smCount = 132;
  f.pdl = true;
  return f;
}

PlanRequest req(int tokens, int hidden = 7168, arfuseDataType_t dt = arfuseBfloat16,
                arfuseOp_t op = arfuseOpAllReduceAddRmsNorm) {
  PlanRequest r;
  r.op = op;
  r.tokens = tokens;
  r.hidden = hidden;
  r.dtype = dt;
  return r;
}

TEST(MultiHostPlan, AutoSmallMessagesGoToNcclLargeOnesHierarchical) {
  const Fabric f = fabric(2, 8);
  Plan p = makePlan(f, Limits{}, PlanPolicy{}, req(1));
  EXPECT_EQ(p.algo, arfuseAlgoNccl) << p.reason;
  EXPECT_NE(p.reason.find("2 hosts x 8 ranks"), std::string::npos) << p.reason;
  EXPECT_NE(p.reason.find("below which"), std::string::npos) << p.reason;
  p = makePlan(f, Limits{}, PlanPolicy{}, req(256));  // 3.5 MiB
  ASSERT_EQ(p.status, arfuseSuccess) << p.reason;
  EXPECT_EQ(p.algo, arfuseAlgoHierarchical) << p.reason;
  EXPECT_NE(p.reason.find("1/8 of the elements cross hosts"), std::string::npos) << p.reason;
  // The crossover is the documented constant.
  const int tokens = static_cast<int>(kHierarchicalMinBytes / (7168 * 2)) + 1;
  EXPECT_EQ(makePlan(f, Limits{}, PlanPolicy{}, req(tokens)).algo, arfuseAlgoHierarchical);
  EXPECT_EQ(makePlan(f, Limits{}, PlanPolicy{}, req(tokens - 2)).algo, arfuseAlgoNccl);
}

TEST(MultiHostPlan, AutoReasonsForNccl) {
  Plan p = makePlan(fabric(2, 1), Limits{}, PlanPolicy{}, req(512));
  EXPECT_EQ(p.algo, arfuseAlgoNccl);
  EXPECT_NE(p.reason.find("one rank per host"), std::string::npos) << p.reason;
  // Two ranks per host and bf16: the fp32 half-slices are as many bytes as the whole message.
  p = makePlan(fabric(2, 2), Limits{}, PlanPolicy{}, req(512));
  EXPECT_EQ(p.algo, arfuseAlgoNccl);
  EXPECT_NE(p.reason.find("no fewer bytes across hosts"), std::string::npos) << p.reason;
  p = makePlan(fabric(2, 2), Limits{}, PlanPolicy{}, req(512, 7168, arfuseFloat32));
  EXPECT_EQ(p.algo, arfuseAlgoHierarchical) << p.reason;  // fp32: half the bytes
  p = makePlan(fabric(2, 3), Limits{}, PlanPolicy{}, req(512));
  EXPECT_EQ(p.algo, arfuseAlgoHierarchical) << p.reason;  // bf16 at 3 per host: 2/3 of the bytes
  p = makePlan(fabric(2, 4, false), Limits{}, PlanPolicy{}, req(512));
  EXPECT_EQ(p.algo, arfuseAlgoNccl);
  EXPECT_NE(p.reason.find("no peer access"), std::string::npos) << p.reason;
  PlanPolicy det;
  det.deterministic = true;
  p = makePlan(fabric(2, 4), Limits{}, det, req(512));
  EXPECT_EQ(p.algo, arfuseAlgoNccl);
  EXPECT_NE(p.reason.find("deterministic"), std::string::npos) << p.reason;
  PlanRequest ext = req(512);
  ext.extended = true;
  p = makePlan(fabric(2, 4), Limits{}, PlanPolicy{}, ext);
  EXPECT_EQ(p.algo, arfuseAlgoNccl);
  EXPECT_NE(p.reason.find("extended epilogue"), std::string::npos) << p.reason;
}

TEST(MultiHostPlan, ForcedPaths) {
  PlanPolicy pol;
  pol.forcedAlgo = arfuseAlgoHierarchical;
  pol.forcedBy = "ARFUSE_ALGO";
  Plan p = makePlan(fabric(2, 2), Limits{}, pol, req(1));
  ASSERT_EQ(p.status, arfuseSuccess) << p.reason;
  EXPECT_EQ(p.algo, arfuseAlgoHierarchical);
  EXPECT_NE(p.reason.find("forced by ARFUSE_ALGO"), std::string::npos) << p.reason;
  p = makePlan(fabric(2, 1), Limits{}, pol, req(1));  // one rank per host: allowed when forced
  EXPECT_EQ(p.algo, arfuseAlgoHierarchical) << p.reason;
  p = makePlan(fabric(2, 2, false), Limits{}, pol, req(1));
  EXPECT_EQ(p.status, arfuseUnsupported);
  EXPECT_NE(p.reason.find("no peer access"), std::string::npos) << p.reason;
  PlanRequest ext = req(1);
  ext.extended = true;
  EXPECT_EQ(makePlan(fabric(2, 2), Limits{}, pol, ext).status, arfuseUnsupported);
  pol.forcedAlgo = arfuseAlgoNccl;
  p = makePlan(fabric(2, 2), Limits{}, pol, req(4096 / 8, 8192));
  EXPECT_EQ(p.algo, arfuseAlgoNccl);
  for (int a : {arfuseAlgoOneShot, arfuseAlgoTwoShot, arfuseAlgoLowLatency, arfuseAlgoHostStaged, arfuseAlgoLocal}) {
    pol.forcedAlgo = a;
    p = makePlan(fabric(2, 2), Limits{}, pol, req(1));
    EXPECT_EQ(p.status, arfuseUnsupported) << a;
    EXPECT_NE(p.reason.find("runs within one host"), std::string::npos) << p.reason;
  }
}

TEST(MultiHostPlan, ForcedHierarchicalOnOneHostIsRefusedByTheIntraHostPlan) {
  Fabric f;
  f.nranks = 2;
  PlanPolicy pol;
  pol.forcedAlgo = arfuseAlgoHierarchical;
  pol.forcedBy = "config";
  const Plan p = makePlan(f, Limits{}, pol, req(1));
  EXPECT_EQ(p.status, arfuseUnsupported);
  EXPECT_NE(p.reason.find("spans hosts"), std::string::npos) << p.reason;
}

TEST(MultiHostPlan, BadShapesFailBeforeAnyPath) {
  EXPECT_EQ(makePlan(fabric(2, 2), Limits{}, PlanPolicy{}, req(1, 7)).status, arfuseInvalidArgument);
  EXPECT_EQ(makePlan(fabric(2, 2), Limits{}, PlanPolicy{}, req(1 << 20)).status, arfuseInvalidArgument);
}

TEST(MultiHostPlan, SliceCoversTheMessageInWholeVectors) {
  for (int L : {1, 2, 3, 4, 8, 16})
    for (long long count : {8ll, 16ll, 7168ll, 3 * 5120ll, 64 * 8192ll, 2048ll * 16384}) {
      const long long s = hierarchicalSliceElems(count, L);
      EXPECT_EQ(s % 8, 0);
      EXPECT_GE(s * L, count);
      EXPECT_LT((s - 8) * L, count);  // no slice is a whole vector longer than needed
    }
}

// The kernels' index math (algos/hierarchical/args.h), emulated for every local rank: the
// reduce-scatter's CTAs cover every vector of every slice exactly once; what CTA b of rank r reads
// of a peer is what CTA b of that peer copied in; the gather finds every element of the message in
// exactly the slice (and offset) the reduce-scatter wrote it to, never past the slice's end.
TEST(MultiHostPlan, KernelIndexMathCoversTheMessageOnce) {
  for (int L : {1, 2, 3, 4, 8})
    for (int E : {4, 8})
      for (long long count : {8ll, 7168ll, 3 * 5120ll, 16 * 4096ll, 5 * 7168ll + 8})
        for (int ctas : {1, 3, 8, 32}) {
          const long long S = hierarchicalSliceElems(count, L), sliceVecs = S / E, total = count / E;
          ASSERT_EQ(S % E, 0);
          std::vector<int> summedBy(static_cast<size_t>(L * sliceVecs), -1);  // [vector] -> CTA
          for (int r = 0; r < L; ++r) {
            long long covered = 0;
            for (int b = 0; b < ctas; ++b) {
              const HierCut c = hierCtaCut(sliceVecs, ctas, b);
              for (long long v = c.first; v < c.last; ++v) {
                ++covered;
                const long long g = r * sliceVecs + v;  // what rank r sums (and reads of every peer's copy-in)
                EXPECT_EQ(summedBy[g], -1);
                summedBy[g] = b;
                // CTA b of peer q copied vector j * sliceVecs + v for every j != q: j = r is this one.
                const HierCut theirs = hierCtaCut(sliceVecs, ctas, b);
                EXPECT_TRUE(v >= theirs.first && v < theirs.last);
              }
            }
            EXPECT_EQ(covered, sliceVecs);
          }
          for (long long v = 0; v < total; ++v) {
            const long long e0 = v * E;
            const int q = hierOwner(e0, S);
            const long long off = hierOffset(e0, S);
            ASSERT_LT(q, L);
            EXPECT_EQ(off % 4, 0);  // 16-byte aligned fp32 loads
            EXPECT_LE(off + E, S);  // the vector lies inside its slice
            EXPECT_GE(summedBy[q * sliceVecs + off / E], 0);
          }
        }
}

TEST(MultiHostPlan, GatherGeometryCoversRowsWithAnInstantiation) {
  const Fabric f = fabric(2, 4);
  struct {
    int hidden;
    arfuseDataType_t dt;
    arfuseOp_t op;
    int vecs;
  } cases[] = {{7168, arfuseBfloat16, arfuseOpAllReduceAddRmsNorm, 8},  // 896 vectors
               {2048, arfuseBfloat16, arfuseOpAllReduceAddRmsNorm, 1},  // 256
               {4096, arfuseBfloat16, arfuseOpAllReduceAddRmsNorm, 2},  // 512
               {1024, arfuseFloat32, arfuseOpAllReduce, 1},             // 256
               {4096, arfuseBfloat16, arfuseOpAllReduce, 8},            // 512, no 2-vector all-reduce
               {16384, arfuseFloat32, arfuseOpAllReduceAddRmsNorm, 8}};
  for (const auto& c : cases) {
    const Verdict v = hierarchicalGatherGeometry(f, req(5, c.hidden, c.dt, c.op));
    ASSERT_TRUE(v.ok) << v.reason;
    const Plan& p = v.geometry;
    const int nvec = c.hidden / dtypeVecElems(c.dt);
    EXPECT_EQ(p.geo.vecs, c.vecs) << c.hidden;
    EXPECT_GE(p.geo.vecs * p.threads, nvec);
    EXPECT_EQ(p.threads % 32, 0);
    EXPECT_LE(p.threads, p.geo.vecs <= 2 ? 256 : 512);
    EXPECT_EQ(p.geo.chunks, 1);
    EXPECT_EQ(p.geo.chunkVecs, nvec);
    EXPECT_EQ(p.blocks, 5);  // tokens < the cap
    EXPECT_EQ(p.geo.slots, p.blocks);
  }
  const Verdict wide = hierarchicalGatherGeometry(f, req(2048, 16384, arfuseFloat32));
  ASSERT_TRUE(wide.ok) << wide.reason;
  EXPECT_EQ(wide.geometry.blocks, f.maxBlocksWide);
  int blocks = 0, threads = 0;
  hierarchicalScatterGeometry(f, hierarchicalSliceElems(2048ll * 16384, 4), arfuseFloat32, &blocks, &threads);
  EXPECT_EQ(threads, 256);
  EXPECT_EQ(blocks, f.maxBlocks);
  hierarchicalScatterGeometry(f, 8, arfuseBfloat16, &blocks, &threads);
  EXPECT_EQ(blocks, 1);
}

}  // namespace
}  // namespace arfuse
