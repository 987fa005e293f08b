#include "plan/plan.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "algos/local/plan.h"
#include "algos/registry.h"
#include "algos/shared.h"
#include "common/log.h"
#include "device/args.h"
#include "plan_fixtures.h"

namespace arfuse {
namespace {

using testing_fixtures::nvlink8;
using testing_fixtures::req;

// One H200 as the caps see it with `ranks` virtual ranks (132 SMs; the low-latency and wide kernels
// one CTA per SM, the narrow ones two) that keeps clusterSlots / c clusters of c resident.
DeviceResidency h200Virtual(int ranks, int clusterSlots) {
  DeviceResidency d;
  d.sms = 132;
  d.ranks = ranks;
  d.res.lowLatency = 1;
  d.res.narrow = 2;
  d.res.wide = 1;
  for (int c = 2; c <= 8; c *= 2) d.res.clusters[c] = d.res.llClusters[c] = clusterSlots / c;
  return d;
}

TEST(Plan, SingleRankIsLocal) {
  Fabric f;
  Plan p = makePlan(f, Limits{}, PlanPolicy{}, req(16));
  ASSERT_EQ(p.status, arfuseSuccess);
  EXPECT_EQ(p.algo, arfuseAlgoLocal);
  EXPECT_NE(p.reason.find("1 rank"), std::string::npos);
}

// The two-phase low-latency variant: off in the auto plan by default; with a limit, between the
// one-phase limit and it at 3+ ranks; forced on at any size the path takes; never for extended calls
// or tiles narrower than the rank count; part of the plan's reason.
TEST(Plan, LowLatencyTwoPhaseVariant) {
  PlanPolicy pol;
  Plan p = makePlan(nvlink8(), Limits{}, pol, req(16));
  EXPECT_NE(p.algo, arfuseAlgoLowLatency) << p.reason;  // default: unchanged plan

  pol.llTwoPhaseMaxBytes = 256 * 1024;
  p = makePlan(nvlink8(), Limits{}, pol, req(16));  // 229376 B
  ASSERT_EQ(p.status, arfuseSuccess) << p.reason;
  EXPECT_EQ(p.algo, arfuseAlgoLowLatency) << p.reason;
  EXPECT_TRUE(p.variant);
  EXPECT_NE(p.reason.find("two-phase variant"), std::string::npos) << p.reason;
  EXPECT_GE(p.geo.chunkVecs, 8);
  p = makePlan(nvlink8(), Limits{}, pol, req(4));  // within the one-phase limit: one-phase
  EXPECT_EQ(p.algo, arfuseAlgoLowLatency);
  EXPECT_FALSE(p.variant);
  p = makePlan(nvlink8(), Limits{}, pol, req(19));  // 272384 B: above the limit
  EXPECT_NE(p.algo, arfuseAlgoLowLatency) << p.reason;
  Fabric two = nvlink8();
  two.nranks = 2;
  p = makePlan(two, Limits{}, pol, req(16));  // 2 ranks: the same bytes either way, never auto
  EXPECT_NE(p.algo, arfuseAlgoLowLatency) << p.reason;
  PlanRequest ext = req(16);
  ext.extended = true;
  p = makePlan(nvlink8(), Limits{}, pol, ext);
  EXPECT_NE(p.algo, arfuseAlgoLowLatency) << p.reason;

  pol.llTwoPhaseMaxBytes = 0;
  pol.llTwoPhase = 1;  // forced on: even a one-token call
  p = makePlan(nvlink8(), Limits{}, pol, req(1));
  EXPECT_EQ(p.algo, arfuseAlgoLowLatency);
  EXPECT_TRUE(p.variant) << p.reason;
  EXPECT_NE(p.reason.find("ARFUSE_LL_TWO_PHASE=1"), std::string::npos) << p.reason;
  p = makePlan(nvlink8(), Limits{}, pol, req(1, 32));  // 4 vectors a row < 8 ranks: one-phase
  EXPECT_EQ(p.algo, arfuseAlgoLowLatency);
  EXPECT_FALSE(p.variant);
  p = makePlan(nvlink8(), Limits{}, pol, ext);  // extended: never
  EXPECT_FALSE(p.variant && p.algo == arfuseAlgoLowLatency);
}

// A plan in one line: every field a launch reads, and the reason.
std::string describe(const Plan& p) {
  return strprintf("%s %s blocks=%d threads=%d chunks=%d chunkVecs=%d slots=%d vecs=%d pdl=%d variant=%d | %s",
                   arfuseGetErrorName(p.status), arfuseAlgoName(p.algo), p.blocks, p.threads, p.geo.chunks,
                   p.geo.chunkVecs, p.geo.slots, p.geo.vecs, p.pdl, p.variant, p.reason.c_str());
}

// The low-latency entry's plans with ARFUSE_LL_TWO_PHASE=1, auto and forced, against those recorded
// before its geometry was computed once per plan instead of up to three times (issue 22): the same
// plans, field for field.
TEST(Plan, LowLatencyForcedTwoPhasePlansAreUnchanged) {
  struct Case {
    bool forced;
    int nranks;
    PlanRequest r;
    const char* want;
  };
  PlanRequest ext = req(2);
  ext.extended = true;
  const Case cases[] = {
      {false, 8, req(1),
       "arfuseSuccess lowlatency blocks=4 threads=224 chunks=4 chunkVecs=224 slots=1 vecs=1 pdl=1 variant=1 | "
       "lowlatency (two-phase variant, ARFUSE_LL_TWO_PHASE=1): 14336 B, 8 ranks"},
      {false, 8, req(4),
       "arfuseSuccess lowlatency blocks=16 threads=224 chunks=4 chunkVecs=224 slots=4 vecs=1 pdl=1 variant=1 | "
       "lowlatency (two-phase variant, ARFUSE_LL_TWO_PHASE=1): 57344 B, 8 ranks"},
      {false, 8, req(1, 32),
       "arfuseSuccess lowlatency blocks=1 threads=32 chunks=1 chunkVecs=4 slots=1 vecs=1 pdl=1 variant=0 | lowlatency: "
       "64 B <= 65536 B: rows pushed with readiness in every word, no separate barrier"},
      {false, 8, req(5),
       "arfuseSuccess oneshot blocks=20 threads=224 chunks=4 chunkVecs=224 slots=5 vecs=1 pdl=1 variant=0 | oneshot: "
       "71680 B x 7 peers = 501760 B <= one-shot limit 524288 B (built-in default, not calibrated)"},
      {false, 3, req(2, 4096, arfuseFloat32),
       "arfuseSuccess lowlatency blocks=8 threads=256 chunks=4 chunkVecs=256 slots=2 vecs=1 pdl=1 variant=1 | "
       "lowlatency (two-phase variant, ARFUSE_LL_TWO_PHASE=1): 32768 B, 3 ranks"},
      {false, 8, ext,
       "arfuseSuccess lowlatency blocks=2 threads=256 chunks=1 chunkVecs=896 slots=2 vecs=4 pdl=1 variant=0 | "
       "lowlatency: 28672 B <= 65536 B: rows pushed with readiness in every word, no separate barrier"},
      {true, 8, req(1),
       "arfuseSuccess lowlatency blocks=4 threads=224 chunks=4 chunkVecs=224 slots=1 vecs=1 pdl=1 variant=1 | "
       "lowlatency (two-phase variant): forced by config (14336 B, 8 ranks)"},
      {true, 8, req(4),
       "arfuseSuccess lowlatency blocks=16 threads=224 chunks=4 chunkVecs=224 slots=4 vecs=1 pdl=1 variant=1 | "
       "lowlatency (two-phase variant): forced by config (57344 B, 8 ranks)"},
      {true, 8, req(5),
       "arfuseSuccess lowlatency blocks=20 threads=224 chunks=4 chunkVecs=224 slots=5 vecs=1 pdl=1 variant=1 | "
       "lowlatency (two-phase variant): forced by config (71680 B, 8 ranks)"},
      {true, 8, req(16),
       "arfuseSuccess lowlatency blocks=32 threads=256 chunks=2 chunkVecs=448 slots=16 vecs=2 pdl=1 variant=1 | "
       "lowlatency (two-phase variant): forced by config (229376 B, 8 ranks)"},
      {true, 8, req(1, 32),
       "arfuseSuccess lowlatency blocks=1 threads=32 chunks=1 chunkVecs=4 slots=1 vecs=1 pdl=1 variant=0 | lowlatency: "
       "forced by config (64 B, 8 ranks)"},
      {true, 8, req(40),
       "arfuseUnsupported auto blocks=0 threads=0 chunks=1 chunkVecs=0 slots=1 vecs=1 pdl=0 variant=0 | "
       "algo=lowlatency (forced by config) carries at most 65536 B per rank (524288 B in its two-phase variant); this "
       "call has 573440 B (tokens=40 x hidden=7168); use auto"},
      {true, 8, req(2048, 32),
       "arfuseUnsupported auto blocks=0 threads=0 chunks=1 chunkVecs=0 slots=1 vecs=1 pdl=0 variant=0 | "
       "algo=lowlatency (forced by config) cannot take this call (lowlatency: a CTA would carry 65536 B (64 tiles of 4 "
       "vectors), more than its 32768 B region); use auto"},
      {true, 3, req(2, 4096, arfuseFloat32),
       "arfuseSuccess lowlatency blocks=8 threads=256 chunks=4 chunkVecs=256 slots=2 vecs=1 pdl=1 variant=1 | "
       "lowlatency (two-phase variant): forced by config (32768 B, 3 ranks)"},
      {true, 2, req(3),
       "arfuseSuccess lowlatency blocks=12 threads=224 chunks=4 chunkVecs=224 slots=3 vecs=1 pdl=1 variant=1 | "
       "lowlatency (two-phase variant): forced by config (43008 B, 2 ranks)"},
      {true, 8, ext,
       "arfuseSuccess lowlatency blocks=2 threads=256 chunks=1 chunkVecs=896 slots=2 vecs=4 pdl=1 variant=0 | "
       "lowlatency: forced by config (28672 B, 8 ranks)"},
  };
  for (const Case& k : cases) {
    Fabric f = nvlink8();
    f.nranks = k.nranks;
    f.clusters = true;
    f.pdl = true;
    PlanPolicy pol;
    pol.llTwoPhase = 1;
    if (k.forced) {
      pol.forcedAlgo = arfuseAlgoLowLatency;
      pol.forcedBy = "config";
    }
    EXPECT_EQ(describe(makePlan(f, Limits{}, pol, k.r)), k.want) << "forced=" << k.forced << " ranks=" << k.nranks;
  }
  // Without peer access the forced call is refused before any geometry.
  Fabric nop2p = nvlink8();
  nop2p.p2p = false;
  nop2p.p2pDetail = "x";
  PlanPolicy pol;
  pol.llTwoPhase = 1;
  pol.forcedAlgo = arfuseAlgoLowLatency;
  pol.forcedBy = "config";
  EXPECT_EQ(describe(makePlan(nop2p, Limits{}, pol, req(1))),
            "arfuseUnsupported auto blocks=0 threads=0 chunks=1 chunkVecs=0 slots=1 vecs=1 pdl=0 variant=0 | "
            "algo=lowlatency (forced by config) needs peer access between all ranks: x; use algo=nccl or auto");
}

TEST(Plan, TinyLowLatencySmallOneShotLargeTwoShot) {
  Plan tiny = makePlan(nvlink8(), Limits{}, PlanPolicy{}, req(4));
  EXPECT_EQ(tiny.algo, arfuseAlgoLowLatency) << tiny.reason;
  EXPECT_NE(tiny.reason.find("57344 B <= 65536 B"), std::string::npos) << tiny.reason;
  Plan small = makePlan(nvlink8(), Limits{}, PlanPolicy{}, req(5));
  EXPECT_EQ(small.algo, arfuseAlgoOneShot) << small.reason;
  EXPECT_NE(small.reason.find("71680 B x 7 peers"), std::string::npos) << small.reason;
  Plan large = makePlan(nvlink8(), Limits{}, PlanPolicy{}, req(1024));
  EXPECT_EQ(large.algo, arfuseAlgoTwoShot) << large.reason;
  EXPECT_NE(large.reason.find("> one-shot limit"), std::string::npos);
}

TEST(Plan, TwoRanksAlwaysOneShot) {
  Fabric f = nvlink8();
  f.nranks = 2;
  Plan p = makePlan(f, Limits{}, PlanPolicy{}, req(64));
  EXPECT_EQ(p.algo, arfuseAlgoOneShot) << p.reason;
  EXPECT_NE(p.reason.find("2 ranks"), std::string::npos) << p.reason;
}

TEST(Plan, CrossoverFollowsPolicy) {
  PlanPolicy pol;
  pol.oneShotMaxBytes = 14336 * 7;
  Fabric noLL = nvlink8();
  noLL.lowLatencyMaxBytes = 0;
  EXPECT_EQ(makePlan(noLL, Limits{}, pol, req(1)).algo, arfuseAlgoOneShot);
  EXPECT_EQ(makePlan(noLL, Limits{}, pol, req(2)).algo, arfuseAlgoTwoShot);
}

TEST(Plan, NoP2PFallsBackToNcclWithReason) {
  Fabric f = nvlink8();
  f.p2p = false;
  f.p2pDetail = "cudaDeviceCanAccessPeer(0, 3) = 0";
  Plan p = makePlan(f, Limits{}, PlanPolicy{}, req(4));
  EXPECT_EQ(p.algo, arfuseAlgoNccl);
  EXPECT_NE(p.reason.find("cudaDeviceCanAccessPeer(0, 3) = 0"), std::string::npos);
  f.nccl = false;
  f.ncclDetail = "ncclCommInitAll: unhandled system error";
  p = makePlan(f, Limits{}, PlanPolicy{}, req(4));
  EXPECT_EQ(p.status, arfuseUnsupported);
  EXPECT_NE(p.reason.find("ncclCommInitAll"), std::string::npos);
}

TEST(Plan, NoP2PUsesHostStagingUpToItsLimitThenNccl) {
  Fabric f = nvlink8();
  f.p2p = false;
  f.p2pDetail = "cudaDeviceCanAccessPeer(0, 3) = 0";
  f.hostStaged = true;
  f.hostStagedCapacity = 4 << 20;
  PlanPolicy pol;                               // host one-shot up to 128 KiB read per rank, host staging up to 1 MiB
  Plan p = makePlan(f, Limits{}, pol, req(1));  // 14336 B x 7 peers = 100352 B: one-shot
  EXPECT_EQ(p.algo, arfuseAlgoHostStaged) << p.reason;
  EXPECT_FALSE(p.variant);
  EXPECT_NE(p.reason.find("one-shot variant"), std::string::npos) << p.reason;
  EXPECT_NE(p.reason.find("cudaDeviceCanAccessPeer(0, 3) = 0"), std::string::npos) << p.reason;
  p = makePlan(f, Limits{}, pol, req(16));
  EXPECT_EQ(p.algo, arfuseAlgoHostStaged);
  EXPECT_TRUE(p.variant) << p.reason;
  p = makePlan(f, Limits{}, pol, req(128));  // 1.75 MiB > 1 MiB: NCCL
  EXPECT_EQ(p.algo, arfuseAlgoNccl);
  EXPECT_NE(p.reason.find("host-staged limit"), std::string::npos) << p.reason;
  f.nccl = false;  // ...unless there is no NCCL
  EXPECT_EQ(makePlan(f, Limits{}, pol, req(128)).algo, arfuseAlgoHostStaged);
  Fabric two = f;
  two.nranks = 2;  // two ranks: one-shot moves the same bytes with one barrier fewer
  EXPECT_FALSE(makePlan(two, Limits{}, pol, req(64)).variant);
  // Forced on a fabric with peer access (virtual ranks): needs the area.
  pol.forcedAlgo = arfuseAlgoHostStaged;
  pol.forcedBy = "config";
  Fabric nv = nvlink8();
  nv.hostStagedDetail = "not allocated";
  p = makePlan(nv, Limits{}, pol, req(1));
  EXPECT_EQ(p.status, arfuseUnsupported);
  EXPECT_NE(p.reason.find("not allocated"), std::string::npos) << p.reason;
  nv.hostStaged = true;
  nv.hostStagedCapacity = 14336;
  EXPECT_EQ(makePlan(nv, Limits{}, pol, req(2)).status, arfuseUnsupported);  // beyond the area
  p = makePlan(nv, Limits{}, pol, req(1));
  EXPECT_EQ(p.algo, arfuseAlgoHostStaged);
  EXPECT_NE(p.reason.find("forced by config"), std::string::npos) << p.reason;
}

TEST(Plan, ForcedAlgorithmsAndTheirRefusals) {
  PlanPolicy pol;
  pol.forcedAlgo = arfuseAlgoTwoShot;
  pol.forcedBy = "ARFUSE_ALGO";
  Plan p = makePlan(nvlink8(), Limits{}, pol, req(1));
  EXPECT_EQ(p.algo, arfuseAlgoTwoShot);
  EXPECT_NE(p.reason.find("forced by ARFUSE_ALGO"), std::string::npos);

  Fabric virt = nvlink8();
  virt.virtualRanks = true;
  virt.nccl = false;
  virt.ncclDetail = "NCCL needs one device per rank";
  pol.forcedAlgo = arfuseAlgoNccl;
  p = makePlan(virt, Limits{}, pol, req(1));
  EXPECT_EQ(p.status, arfuseUnsupported);
  EXPECT_NE(p.reason.find("one device per rank"), std::string::npos);

  pol.forcedAlgo = arfuseAlgoLowLatency;
  pol.forcedBy = "config";
  // above the one-phase limit a forced low-latency call takes the two-phase variant ...
  p = makePlan(nvlink8(), Limits{}, pol, req(5));
  EXPECT_EQ(p.status, arfuseSuccess) << p.reason;
  EXPECT_EQ(p.algo, arfuseAlgoLowLatency);
  EXPECT_TRUE(p.variant);
  EXPECT_NE(p.reason.find("two-phase variant"), std::string::npos) << p.reason;
  EXPECT_FALSE(makePlan(nvlink8(), Limits{}, pol, req(4)).variant);
  EXPECT_EQ(makePlan(nvlink8(), Limits{}, pol, req(4)).algo, arfuseAlgoLowLatency);
  // ... unless the policy turns the variant off: then the one-phase limit refuses it
  pol.llTwoPhase = 0;
  p = makePlan(nvlink8(), Limits{}, pol, req(5));
  EXPECT_EQ(p.status, arfuseUnsupported);
  EXPECT_NE(p.reason.find("carries at most 65536 B"), std::string::npos) << p.reason;
  pol.llTwoPhase = -1;

  Fabric nop2p = nvlink8();
  nop2p.p2p = false;
  nop2p.p2pDetail = "x";
  pol.forcedAlgo = arfuseAlgoOneShot;
  EXPECT_EQ(makePlan(nop2p, Limits{}, pol, req(1)).status, arfuseUnsupported);
}

TEST(Plan, GeometryIsBoundedAndPure) {
  for (int n : {2, 3, 5, 8, 16}) {
    for (bool clusters : {false, true}) {
      Fabric f = nvlink8();
      f.nranks = n;
      f.maxBlocks = 132 / n;
      f.clusters = clusters;
      for (int tokens : {1, 3, 16, 255, 1024, 2048}) {
        for (int hidden : {128, 4096, 5120, 7168, 8192, 16384}) {
          for (int dt = 0; dt < 3; ++dt) {
            Plan a = makePlan(f, Limits{}, PlanPolicy{}, req(tokens, hidden, arfuseDataType_t(dt)));
            Plan b = makePlan(f, Limits{}, PlanPolicy{}, req(tokens, hidden, arfuseDataType_t(dt)));
            ASSERT_EQ(a.status, arfuseSuccess) << a.reason;
            EXPECT_EQ(a.blocks, b.blocks);
            EXPECT_EQ(a.threads, b.threads);
            EXPECT_EQ(a.geo.chunks, b.geo.chunks);
            EXPECT_EQ(a.geo.vecs, b.geo.vecs);
            EXPECT_LE(a.blocks, f.maxBlocks);
            EXPECT_LE(a.geo.slots, tokens);
            EXPECT_EQ(a.blocks, a.geo.slots * a.geo.chunks);
            EXPECT_GE(a.blocks, 1);
            EXPECT_EQ(a.threads % 32, 0);
            EXPECT_LE(a.threads, a.algo == arfuseAlgoLowLatency ? 256 : 512);
            const int nvec = hidden / dtypeVecElems(arfuseDataType_t(dt));
            EXPECT_EQ(a.geo.chunkVecs * a.geo.chunks, nvec);
            if (a.geo.chunks > 1) {
              EXPECT_TRUE(clusters) << "rows are split only over clusters";
              EXPECT_EQ(a.geo.chunkVecs % 8, 0) << "a chunk is whole groups of the canonical reduction";
            }
            EXPECT_GE(a.geo.vecs * a.threads, a.geo.chunkVecs) << "the instantiation covers the tile";
            EXPECT_LE(a.geo.vecs, 8) << "row must fit the register cache";
          }
        }
      }
    }
  }
}

// One token of a Kimi-K2 row on an sm_90 group: four CTAs of 224 vectors (a cluster), one vector per
// thread; 16 tokens fit 64 CTAs; without clusters (sm_80-89) a row stays whole.
TEST(Plan, SmallCallsSplitRowsOverClusters) {
  Fabric f = nvlink8();
  f.clusters = true;
  f.maxBlocks = 128;
  Plan one = makePlan(f, Limits{}, PlanPolicy{}, req(1));
  ASSERT_EQ(one.algo, arfuseAlgoLowLatency) << one.reason;
  EXPECT_EQ(one.geo.chunks, 4);
  EXPECT_EQ(one.geo.chunkVecs, 224);
  EXPECT_EQ(one.threads, 224);
  EXPECT_EQ(one.geo.vecs, 1);
  PlanPolicy big;
  big.oneShotMaxBytes = 1 << 30;
  Plan sixteen = makePlan(f, Limits{}, big, req(16));
  ASSERT_EQ(sixteen.algo, arfuseAlgoOneShot) << sixteen.reason;
  EXPECT_EQ(sixteen.blocks, 64);
  EXPECT_EQ(sixteen.geo.chunks, 4);
  f.clusters = false;
  Plan whole = makePlan(f, Limits{}, PlanPolicy{}, req(1));
  EXPECT_EQ(whole.geo.chunks, 1);
  EXPECT_EQ(whole.geo.chunkVecs, 896);
  EXPECT_EQ(whole.threads, 256);
  EXPECT_EQ(whole.geo.vecs, 4);
  // The extended epilogue never splits rows.
  f.clusters = true;
  PlanRequest ext = req(1);
  ext.extended = true;
  EXPECT_EQ(makePlan(f, Limits{}, PlanPolicy{}, ext).geo.chunks, 1);
}

// A low-latency call uses at most kLlMaxCtas CTAs of at most kLlCtaDataBytes each; beyond that the
// plan falls to one-shot and says so in a forced plan's error.
TEST(Plan, LowLatencyRespectsItsRegions) {
  Fabric f = nvlink8();
  f.clusters = true;
  f.maxBlocks = 128;
  // 64 tokens of 512 B rows: 32 KiB, 64 rows over 32 CTAs -> 2 rows (1 KiB) per CTA: fits.
  Plan small = makePlan(f, Limits{}, PlanPolicy{}, req(64, 256));
  EXPECT_EQ(small.algo, arfuseAlgoLowLatency) << small.reason;
  EXPECT_LE(small.blocks, kLlMaxCtas);
  EXPECT_LE(ctaRegionUse(small.geo, 64), static_cast<long long>(kLlCtaDataBytes));
  EXPECT_LE(llRegionUse(small.geo, 64), static_cast<long long>(kLlRegionBytes));
  // hidden 16384 fp32 = 64 KiB rows: one row per call fits the low-latency limit but not a CTA region
  // unless split; without clusters it goes to one-shot.
  f.clusters = false;
  Plan wide = makePlan(f, Limits{}, PlanPolicy{}, req(1, 16384, arfuseFloat32));
  EXPECT_NE(wide.algo, arfuseAlgoLowLatency) << wide.reason;
  PlanPolicy forced;
  forced.forcedAlgo = arfuseAlgoLowLatency;
  forced.forcedBy = "test";
  Plan refused = makePlan(f, Limits{}, forced, req(1, 16384, arfuseFloat32));
  EXPECT_EQ(refused.status, arfuseUnsupported);
  EXPECT_NE(refused.reason.find("cannot take this call"), std::string::npos) << refused.reason;
}

// A narrow tile takes whole 1 KiB groups of flagged words (4x its data for 16 vectors): the region
// check counts those bytes. Counting data bytes let 64 tiles of 16 vectors (16 KiB of data, 64 KiB
// flagged) into a 32 KiB region, and the writes ran into the next CTA's region (a 20 s peer timeout
// on the H200 at 8 virtual ranks, hidden 128, 1024 tokens, before this check).
TEST(Plan, LowLatencyRegionCountsFlaggedBytes) {
  Fabric f = nvlink8();
  f.maxBlocksLowLatency = 4;  // few CTAs: many tiles per CTA
  PlanPolicy forced;
  forced.forcedAlgo = arfuseAlgoLowLatency;
  forced.forcedBy = "test";
  Plan p = makePlan(f, Limits{}, forced, req(256, 128));  // 64 KiB: 64 tiles of 16 vectors per CTA
  EXPECT_EQ(p.status, arfuseUnsupported) << p.reason;
  EXPECT_NE(p.reason.find("more than its 32768 B region"), std::string::npos) << p.reason;
  p = makePlan(f, Limits{}, forced, req(128, 128));  // 32 tiles: exactly one region
  EXPECT_EQ(p.status, arfuseSuccess) << p.reason;
  EXPECT_EQ(llRegionUse(p.geo, 128), static_cast<long long>(kLlRegionBytes));
  Plan a = makePlan(f, Limits{}, PlanPolicy{}, req(256, 128));  // auto: another path, not an overflow
  EXPECT_NE(a.algo, arfuseAlgoLowLatency) << a.reason;
}

// The workspace: per-CTA regions that hold any call the limits allow, sized by the largest enabled
// dtype (bf16 only: half of fp32's).
TEST(Plan, WorkspaceFitsEveryCallAndFollowsTheDtypes) {
  Limits lim;
  lim.maxTokens = 256;
  lim.maxHidden = 7168;
  lim.dtypeMask = ARFUSE_DTYPE_BIT(arfuseBfloat16);
  const Workspace bf16 = workspaceFor(lim, 4, 128, 0);
  EXPECT_EQ(bf16.elemBytes, 2u);
  // Two rows per CTA region, each with room for two-shot's pushed slots (3 vectors at 4 ranks),
  // rounded up to 256 B.
  const auto region = [](size_t rowBytes) { return (2 * (rowBytes + 3 * 16) + 255) / 256 * 256; };
  EXPECT_EQ(bf16.stagingRegionBytes, region(7168 * 2));
  EXPECT_EQ(bf16.stagingBytes, 128u * 2 * bf16.stagingRegionBytes);
  EXPECT_EQ(bf16.llBytes, static_cast<size_t>(kLlMaxCtas) * 2 * 4 * kLlRegionBytes);
  EXPECT_EQ(bf16.hostSlotBytes, 0u);
  lim.dtypeMask |= ARFUSE_DTYPE_BIT(arfuseFloat32);
  EXPECT_EQ(workspaceFor(lim, 4, 128, 0).stagingRegionBytes, region(7168 * 4));
  Fabric f = nvlink8();
  f.nranks = 4;
  f.maxBlocks = 128;
  f.stagingRegionBytes = static_cast<long long>(workspaceFor(lim, 4, 128, 0).stagingRegionBytes);
  for (int tokens = 1; tokens <= 256; tokens += 17)
    for (arfuseDataType_t dt : {arfuseBfloat16, arfuseFloat32}) {
      Plan p = makePlan(f, lim, PlanPolicy{}, req(tokens, 7168, dt));
      ASSERT_EQ(p.status, arfuseSuccess) << p.reason;
      if (p.algo != arfuseAlgoLowLatency) EXPECT_LE(ctaRegionUse(p.geo, tokens), f.stagingRegionBytes);
    }
  const Workspace host = workspaceFor(lim, 4, 128, 1 << 20);
  EXPECT_GE(host.hostRegionBytes * 128, 1u << 20);
}

// Two-shot's layout (algos/twoshot/kernel.cuh): the owner of slice q receives n - 1 parts of its
// width w_q in one tile of twoShotTileVecs vectors, so the parts never overlap and slot 0 (the
// reduced slice) stays inside the tile; and every forced two-shot call the limits allow fits the
// workspace, also for rows narrower than (n - 1)^2 vectors, where the tile is wider than the row.
TEST(Plan, TwoShotPushedSlotsFitTheTileAndTheWorkspace) {
  const auto begin = [](int r, int len, int n) { return static_cast<int>(static_cast<long long>(r) * len / n); };
  for (int n = 2; n <= 8; ++n)
    for (int v = 1; v <= 600; ++v)
      for (int q = 0; q < n; ++q)
        ASSERT_LE((n - 1) * (begin(q + 1, v, n) - begin(q, v, n)), twoShotTileVecs(v, n)) << n << " ranks, " << v;
  EXPECT_EQ(twoShotTileVecs(9, 8), 14);  // 72 bf16 elements, 8 ranks: 7 parts of 2 vectors
  EXPECT_EQ(twoShotTileVecs(896, 4), 896);
  for (int n : {2, 3, 4, 8})
    for (int hidden : {72, 136, 1024, 7168}) {
      Limits lim;
      lim.maxTokens = 300;
      lim.maxHidden = hidden;
      lim.dtypeMask = ARFUSE_DTYPE_BIT(arfuseBfloat16);
      Fabric f = nvlink8();
      f.nranks = n;
      f.maxBlocks = 128;
      f.stagingRegionBytes = static_cast<long long>(workspaceFor(lim, n, 128, 0).stagingRegionBytes);
      PlanPolicy pol;
      pol.forcedAlgo = arfuseAlgoTwoShot;
      for (int tokens : {1, 7, 64, 129, 300}) {
        Plan p = makePlan(f, lim, pol, req(tokens, hidden));
        ASSERT_EQ(p.status, arfuseSuccess) << n << " ranks, hidden " << hidden << ", " << tokens << ": " << p.reason;
        EXPECT_LE(twoShotRegionUse(p.geo, tokens, n), f.stagingRegionBytes) << n << " " << hidden << " " << tokens;
      }
    }
}

// Per-class CTA caps from residency: 16 virtual ranks on one 132-SM GPU whose low-latency kernel fits
// once per SM and whose clusters of 8 fit 16 times get 8 low-latency CTAs per rank, and a split row
// never asks for more clustered CTAs than fit (the 16-rank low-latency deadlock seen on an H200).
TEST(Plan, BlockCapsFollowResidencyAndClusters) {
  DeviceResidency d;
  d.sms = 132;
  d.ranks = 16;
  d.res.lowLatency = 1;
  d.res.narrow = 2;
  d.res.wide = 1;
  d.res.llClusters[2] = 60;
  d.res.llClusters[4] = 30;
  d.res.llClusters[8] = 16;
  for (int c = 2; c <= 8; c *= 2) d.res.clusters[c] = d.res.llClusters[c];
  Fabric f = nvlink8();
  f.nranks = 16;
  f.clusters = true;
  std::string why;
  ASSERT_TRUE(setBlockCaps({d}, -1, &f).into(&why) == arfuseSuccess) << why;
  EXPECT_EQ(f.maxBlocksLowLatency, 8);
  EXPECT_EQ(f.maxBlocks, 16);
  EXPECT_EQ(f.maxBlocksWide, 8);
  EXPECT_EQ(f.clusterCtas[8], 8);
  EXPECT_EQ(f.clusterCtas[4], 4);
  EXPECT_EQ(f.clusterCtas[2], 6);
  for (int tokens : {1, 2, 4})
    for (arfuseDataType_t dt : {arfuseBfloat16, arfuseFloat32}) {
      Plan p = makePlan(f, Limits{}, PlanPolicy{}, req(tokens, 7168, dt));
      ASSERT_EQ(p.status, arfuseSuccess) << p.reason;
      const int* caps = p.algo == arfuseAlgoLowLatency ? f.llClusterCtas : f.clusterCtas;
      if (p.geo.chunks > 1) EXPECT_LE(tokens * p.geo.chunks, caps[p.geo.chunks]) << p.reason;
      EXPECT_LE(p.blocks, p.algo == arfuseAlgoLowLatency ? f.maxBlocksLowLatency : f.maxBlocks);
    }
  d.ranks = 300;
  EXPECT_FALSE(setBlockCaps({d}, -1, &f).into(&why) == arfuseSuccess);
  EXPECT_NE(why.find("fewer virtual ranks"), std::string::npos) << why;
  // One rank per GPU: the caps are the library's (128 CTAs, 32 for low-latency) and a config cap.
  d.ranks = 1;
  ASSERT_TRUE(setBlockCaps({d}, -1, &f).into(&why) == arfuseSuccess);
  EXPECT_EQ(f.maxBlocks, 128);
  EXPECT_EQ(f.maxBlocksLowLatency, 32);
  ASSERT_TRUE(setBlockCaps({d}, 20, &f).into(&why) == arfuseSuccess);
  EXPECT_EQ(f.maxBlocks, 20);
}

// Each class of split-row kernels is capped by its own clusters: on a GPU whose low-latency kernels fit one
// CTA per SM (66 clusters of 2) and whose barrier-path kernels two (132 clusters of 2), a one-shot call of 16 tokens on
// 8 virtual ranks splits its rows in two (32 clustered CTAs per rank fit), which the low-latency class's
// figure alone (16 per rank) would forbid; the low-latency path still splits only as its clusters fit.
TEST(Plan, EachPathSplitsAsItsOwnKernelsFit) {
  DeviceResidency d = h200Virtual(8, 0);
  for (int c = 2; c <= 8; c *= 2) {
    d.res.llClusters[c] = 132 / c;
    d.res.clusters[c] = 2 * 132 / c;
  }
  Fabric f = nvlink8();
  f.clusters = true;
  f.virtualRanks = true;
  std::string why;
  ASSERT_TRUE(setBlockCaps({d}, -1, &f).into(&why) == arfuseSuccess) << why;
  EXPECT_EQ(f.clusterCtas[2], 32);
  EXPECT_EQ(f.llClusterCtas[2], 16);
  PlanPolicy one;
  one.forcedAlgo = arfuseAlgoOneShot;
  const Plan p = makePlan(f, Limits{}, one, req(16));
  ASSERT_EQ(p.status, arfuseSuccess) << p.reason;
  EXPECT_EQ(p.geo.chunks, 2);
  EXPECT_EQ(p.blocks, 32);
  EXPECT_LE(p.blocks, f.clusterCtas[2]);
  PlanPolicy ll;
  ll.forcedAlgo = arfuseAlgoLowLatency;
  for (int tokens : {1, 4, 16}) {
    const Plan q = makePlan(f, Limits{}, ll, req(tokens));
    ASSERT_EQ(q.status, arfuseSuccess) << q.reason;
    if (q.geo.chunks > 1) EXPECT_LE(q.blocks, f.llClusterCtas[q.geo.chunks]) << tokens;
  }
  // With both classes at the low-latency figure the one-shot rows stay whole, as before.
  for (int c = 2; c <= 8; c *= 2) d.res.clusters[c] = d.res.llClusters[c];
  ASSERT_TRUE(setBlockCaps({d}, -1, &f).into(&why) == arfuseSuccess) << why;
  EXPECT_EQ(makePlan(f, Limits{}, one, req(16)).geo.chunks, 1);
}

namespace {
// Eight virtual ranks on one H200 with clusters: the capped grids of the split-rule tests.
Fabric h200Virtual8Clusters() {
  Fabric f = nvlink8();
  f.clusters = true;
  f.virtualRanks = true;
  std::string why;
  EXPECT_TRUE(setBlockCaps({h200Virtual(8, 128)}, -1, &f).into(&why) == arfuseSuccess) << why;
  return f;
}
}  // namespace

// Whole rows of 513-1024 vectors on the barrier paths run 512 threads with 2 vectors each (the wide
// 2-vector kernels, change 34) when the call is a plain add+RMSNorm; longer rows, the plain all-reduce
// and the extended epilogue keep the 8-vector ones, and so does every wide row with wideTwo off
// (ARFUSE_WIDE_TWO=0). Rows of at most 512 vectors never run wide.
TEST(Plan, WideRowsTakeTheTwoVectorKernels) {
  const Fabric f = h200Virtual8Clusters();
  const TileRules barrier = planning::barrierTiles(f);
  SplitRule eight;
  eight.wideTwo = false;
  struct Case {
    int hidden;
    arfuseDataType_t dt;
    arfuseOp_t op;
    bool extended;
    int vecs, vecsOff;  // with wideTwo on / off
  } cases[] = {
      {7168, arfuseBfloat16, arfuseOpAllReduceAddRmsNorm, false, 2, 8},  // 896 vectors
      {8192, arfuseFloat16, arfuseOpAllReduceAddRmsNorm, false, 2, 8},   // 1024
      {4160, arfuseBfloat16, arfuseOpAllReduceAddRmsNorm, false, 2, 8},  // 520
      {8256, arfuseBfloat16, arfuseOpAllReduceAddRmsNorm, false, 8, 8},  // 1032: 3 per thread
      {7168, arfuseFloat32, arfuseOpAllReduceAddRmsNorm, false, 8, 8},   // 1792
      {7168, arfuseBfloat16, arfuseOpAllReduce, false, 8, 8},            // no wide 2-vector all-reduce
      {7168, arfuseBfloat16, arfuseOpAllReduceAddRmsNorm, true, 8, 8},   // nor extended
  };
  for (const Case& c : cases) {
    for (bool on : {true, false}) {
      PlanRequest r = req(64, c.hidden, c.dt);
      r.op = c.op;
      r.extended = c.extended;
      int blocks = 0, threads = 0;
      Geometry g;
      ASSERT_TRUE(tileGeometry(f, r, barrier, &blocks, &threads, &g, on ? SplitRule{} : eight)) << c.hidden;
      EXPECT_EQ(g.chunks, 1) << c.hidden;
      EXPECT_EQ(threads, 512) << c.hidden;
      EXPECT_EQ(g.vecs, on ? c.vecs : c.vecsOff) << c.hidden << " dtype " << c.dt << " op " << c.op;
      EXPECT_GE(g.vecs * threads, g.chunkVecs);
    }
  }
  // 512 vectors (hidden 4096 bf16): a narrow tile, 256 threads x 2, whatever wideTwo says.
  int blocks = 0, threads = 0;
  Geometry g;
  ASSERT_TRUE(tileGeometry(f, req(64, 4096), barrier, &blocks, &threads, &g, eight));
  EXPECT_EQ(threads, 256);
  EXPECT_EQ(g.vecs, 2);
  // The policy carries it into the rule.
  PlanPolicy pol;
  pol.wideTwo = false;
  EXPECT_FALSE(splitRuleOf(pol).wideTwo);
  EXPECT_TRUE(splitRuleOf(PlanPolicy{}).wideTwo);
}

// Every barrier path takes the wide 2-vector kernels for whole rows of 896 vectors, at every rank count.
TEST(Plan, BarrierPathsTakeWideTwoAtEveryRankCount) {
  for (int n : {2, 4, 8}) {
    Fabric f = nvlink8();
    f.nranks = n;
    f.clusters = true;
    f.virtualRanks = true;
    std::string why;
    ASSERT_TRUE(setBlockCaps({h200Virtual(n, 128)}, -1, &f).into(&why) == arfuseSuccess) << why;
    for (arfuseAlgo_t algo : {arfuseAlgoOneShot, arfuseAlgoTwoShot}) {
      PlanPolicy pol;
      pol.forcedAlgo = algo;
      const Plan p = makePlan(f, Limits{}, pol, req(256));
      ASSERT_EQ(p.status, arfuseSuccess) << p.reason;
      ASSERT_EQ(p.geo.chunks, 1) << n;
      EXPECT_EQ(p.threads, 512);
      EXPECT_EQ(p.geo.vecs, 2) << arfuseAlgoName(algo) << " at " << n << " ranks";
    }
  }
}

// The split rules of tileGeometry (issue 33's experimental ARFUSE_EXP_SPLIT_VECS / _SHARED): by default a
// row is split only while every row gets CTAs of its own, so a 64-token call on 8 capped virtual ranks
// runs whole rows on wide CTAs; sharedCtas splits it anyway, several rows per cluster, never more
// clustered CTAs than fit; maxChunkVecs moves where splitting stops. The geometry always covers the row.
TEST(Plan, SplitRulesOfTheGeometry) {
  const Fabric f = h200Virtual8Clusters();
  const TileRules barrier = planning::barrierTiles(f);
  int blocks = 0, threads = 0;
  Geometry g;
  ASSERT_TRUE(tileGeometry(f, req(64), barrier, &blocks, &threads, &g));
  EXPECT_EQ(g.chunks, 1);
  EXPECT_EQ(g.vecs, 2);                // the wide 2-vector kernels (WideRowsTakeTheTwoVectorKernels)
  EXPECT_EQ(blocks, f.maxBlocksWide);  // 16 wide CTAs, 4 rows each
  EXPECT_EQ(threads, 512);
  SplitRule shared;
  shared.sharedCtas = true;
  ASSERT_TRUE(tileGeometry(f, req(64), barrier, &blocks, &threads, &g, shared));
  EXPECT_EQ(g.chunks, 4);
  EXPECT_EQ(g.chunkVecs, 224);
  EXPECT_EQ(g.vecs, 1);
  EXPECT_LE(blocks, std::min(f.maxBlocks, f.clusterCtas[4]));
  EXPECT_EQ(blocks % 4, 0);
  EXPECT_GT((64 + g.slots - 1) / g.slots, 1);  // rows share CTAs
  // Where every row already gets its own cluster, sharedCtas changes nothing.
  Geometry own;
  ASSERT_TRUE(tileGeometry(f, req(4), barrier, &blocks, &threads, &own));
  ASSERT_TRUE(tileGeometry(f, req(4), barrier, &blocks, &threads, &g, shared));
  EXPECT_EQ(own.chunks, 4);
  EXPECT_EQ(g.chunks, own.chunks);
  EXPECT_EQ(g.slots, own.slots);
  shared.maxChunkVecs = 512;
  ASSERT_TRUE(tileGeometry(f, req(64), barrier, &blocks, &threads, &g, shared));
  EXPECT_EQ(g.chunks, 2);
  EXPECT_EQ(g.vecs, 2);
  EXPECT_LE(blocks, std::min(f.maxBlocks, f.clusterCtas[2]));
  // One token: the default splits to 224-vector chunks; 128 splits once more, into a cluster of 8.
  // (the low-latency path's own tile rules, through the plan)
  PlanPolicy ll;
  ll.forcedAlgo = arfuseAlgoLowLatency;
  Plan lp = makePlan(f, Limits{}, ll, req(1));
  ASSERT_EQ(lp.status, arfuseSuccess) << lp.reason;
  EXPECT_EQ(lp.geo.chunks, 4);
  ll.splitVecs = 128;
  lp = makePlan(f, Limits{}, ll, req(1));
  ASSERT_EQ(lp.status, arfuseSuccess) << lp.reason;
  EXPECT_EQ(lp.geo.chunks, 8);
  EXPECT_EQ(lp.geo.chunkVecs, 112);
  // The policy carries the rule (ARFUSE_EXP_* through comm/config.cc) and the plan acts on it.
  PlanPolicy pol;
  pol.splitShared = true;
  Plan p = makePlan(f, Limits{}, pol, req(64));
  ASSERT_EQ(p.status, arfuseSuccess) << p.reason;
  EXPECT_GT(p.geo.chunks, 1) << p.reason;
  p = makePlan(f, Limits{}, PlanPolicy{}, req(64));
  EXPECT_EQ(p.geo.chunks, 1) << p.reason;
}

// The row push (Geometry::rowPush, ARFUSE_ROW_PUSH) is planned exactly for split rows of plain
// add+RMSNorm calls: not for whole rows (a CTA-local reduction), the plain all-reduce (no norm) or
// the extended epilogue (rows never split), and not when the policy turns it off. Every path that
// splits rows has row-push kernels for the 1 or 2 vectors per thread a split row takes.
TEST(Plan, RowPushExactlyForSplitRowsOfFusedCalls) {
  const Fabric f = h200Virtual8Clusters();
  for (arfuseAlgo_t algo : {arfuseAlgoAuto, arfuseAlgoLowLatency, arfuseAlgoOneShot, arfuseAlgoTwoShot}) {
    for (int tokens : {1, 4, 16, 64, 256}) {
      for (int kind = 0; kind < 3; ++kind) {
        PlanPolicy pol;
        pol.forcedAlgo = algo;
        PlanRequest r = req(tokens);
        if (kind == 0) r.op = arfuseOpAllReduce;
        r.extended = kind == 2;
        const Plan p = makePlan(f, Limits{}, pol, r);
        if (p.status != arfuseSuccess) continue;
        SCOPED_TRACE(p.reason);
        EXPECT_EQ(p.geo.rowPush, kind == 1 && p.geo.chunks > 1) << "tokens " << tokens << " kind " << kind;
        if (p.geo.rowPush) {
          EXPECT_LE(p.geo.vecs, 2);
        }
        pol.rowPush = false;
        EXPECT_FALSE(makePlan(f, Limits{}, pol, r).geo.rowPush);
      }
    }
  }
  // One token is split (4 chunks of 224 vectors) and pushes; 64 tokens on 8 capped ranks runs whole rows.
  EXPECT_TRUE(makePlan(f, Limits{}, PlanPolicy{}, req(1)).geo.rowPush);
  EXPECT_FALSE(makePlan(f, Limits{}, PlanPolicy{}, req(64)).geo.rowPush);
}

// Every forced barrier path takes every call the limits allow when the wide (512-thread) CTAs have a
// smaller cap than the narrow ones (virtual ranks on an H200: 2 vs 1 resident per SM). The regions
// were once sized by the narrow cap only, and a forced one-shot at 1024 tokens x 5120 fp32 was refused.
TEST(Plan, RegionsHoldEveryCallUnderEveryClassCap) {
  for (int ranks : {2, 4, 8, 16}) {
    const DeviceResidency d = h200Virtual(ranks, 64);
    Fabric f = nvlink8();
    f.nranks = ranks;
    f.clusters = true;
    std::string why;
    ASSERT_TRUE(setBlockCaps({d}, -1, &f).into(&why) == arfuseSuccess) << why;
    Limits lim;
    lim.maxTokens = 2048;
    lim.maxHidden = 8192;
    const Workspace w = workspaceFor(lim, f, 1 << 20, false);
    f.stagingRegionBytes = static_cast<long long>(w.stagingRegionBytes);
    f.hostStaged = true;
    f.hostStagedCapacity = 1 << 20;
    f.hostRegionBytes = static_cast<long long>(w.hostRegionBytes);
    for (int algo : {arfuseAlgoOneShot, arfuseAlgoTwoShot, arfuseAlgoHostStaged}) {
      PlanPolicy pol;
      pol.forcedAlgo = algo;
      pol.forcedBy = "test";
      for (int tokens : {1, 3, 16, 100, 1024, 2048})
        for (int hidden : {1024, 5120, 7168, 8192})
          for (arfuseDataType_t dt : {arfuseBfloat16, arfuseFloat32}) {
            const long long bytes = static_cast<long long>(tokens) * hidden * dtypeSize(dt);
            if (algo == arfuseAlgoHostStaged && bytes > f.hostStagedCapacity) continue;
            Plan p = makePlan(f, lim, pol, req(tokens, hidden, dt));
            EXPECT_EQ(p.status, arfuseSuccess) << ranks << " ranks, " << arfuseAlgoName(arfuseAlgo_t(algo)) << " "
                                               << tokens << "x" << hidden << ": " << p.reason;
          }
    }
  }
}

TEST(Plan, LocalGeometryFitsRegisterCache) {
  for (int tokens : {1, 16, 264, 4096}) {
    for (int hidden : {8, 128, 7168, 32768}) {
      int blocks = 0, threads = 0;
      Geometry geo;
      localGeometry(tokens, hidden, arfuseBfloat16, 132, false, &blocks, &threads, &geo);
      EXPECT_GE(blocks, 1);
      EXPECT_LE(blocks, tokens);
      EXPECT_LE(threads, 512);
      EXPECT_LE((hidden / 8 + threads - 1) / threads, 8);
      EXPECT_GE(geo.vecs * threads, hidden / 8) << "the instantiation covers the row";
    }
  }
}

TEST(Plan, ShapeErrorsNameTheArgument) {
  Limits lim;
  lim.maxTokens = 64;
  lim.maxHidden = 8192;
  lim.dtypeMask = ARFUSE_DTYPE_BIT(arfuseBfloat16);
  struct Case {
    PlanRequest r;
    arfuseResult_t code;
    const char* needle;
  } cases[] = {
      {req(0), arfuseInvalidArgument, "tokens=0"},
      {req(65), arfuseInvalidArgument, "maxTokens=64"},
      {req(1, 100), arfuseInvalidArgument, "hidden=100"},
      {req(1, 0), arfuseInvalidArgument, "hidden=0"},
      {req(1, 16384), arfuseInvalidArgument, "maxHidden=8192"},
      {req(1, 40000), arfuseUnsupported, "largest supported hidden size is 32768"},
      {req(1, 128, arfuseFloat32), arfuseInvalidArgument, "dtypeMask"},
      {req(1, 128, arfuseDataType_t(7)), arfuseInvalidArgument, "dtype=7"},
  };
  for (const Case& c : cases) {
    Plan p = makePlan(nvlink8(), lim, PlanPolicy{}, c.r);
    EXPECT_EQ(p.status, c.code) << p.reason;
    EXPECT_NE(p.reason.find(c.needle), std::string::npos) << p.reason;
  }
  EXPECT_EQ(maxSupportedHidden(arfuseFloat32), 16384);
  EXPECT_EQ(maxSupportedHidden(arfuseBfloat16), 32768);
}

}  // namespace
}  // namespace arfuse
