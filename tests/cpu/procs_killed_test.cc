// What `arfuse selftest --procs N --hosts H --kill-rank R` requires of a survivor
// (tools/arfuse/procs_killed.h), on hand-written logs: the gpu_multihost_2x2_killed test's checks.
#include "procs_killed.h"

#include <gtest/gtest.h>

namespace arfuse {
namespace cli {
namespace {

const char* kDead = "rank 3 (host test:h1, local rank 1)";

TEST(ProcsKilled, SimulatedRankNamesFollowTheHostLayout) {
  EXPECT_EQ(simulatedRankName(3, 4, 2), kDead);
  EXPECT_EQ(simulatedRankName(0, 4, 2), "rank 0 (host test:h0, local rank 0)");
  EXPECT_EQ(simulatedRankName(2, 4, 2), "rank 2 (host test:h1, local rank 0)");
  EXPECT_EQ(simulatedRankName(5, 6, 3), "rank 5 (host test:h2, local rank 1)");
  EXPECT_EQ(simulatedRankName(1, 2, 2), "rank 1 (host test:h1, local rank 0)");
}

const char* kGood =
    "rank 1: INIT ok in 2.10 s on device 0\n"
    "rank 1: CASE fused-bf16-1x7168 algo=nccl err_residual=1.0e-03 err_norm=2.0e-03 hash=0123456789abcdef PASS\n"
    "rank 1: CASE fused-fp16-3x5120 algo=nccl FAIL after 3.21 s: arfusePeerTimeout: NCCL operation 2 across hosts "
    "(ncclAllReduce, path nccl, 30720 B, communicator world) did not finish 3.050 s after it started on the GPU "
    "(timeout 3.000 s); it waits with: rank 0 (host test:h0, local rank 0), rank 2 (host test:h1, local rank 0), "
    "rank 3 (host test:h1, local rank 1). ...\n"
    "rank 1: CASE allreduce-fp32-16x4096 algo=hierarchical FAIL after 0.00 s: arfusePeerTimeout: refused\n"
    "rank 1: DESTROY ok in 3.02 s\n";

TEST(ProcsKilled, SurvivorThatNamesTheDeadRankInTimeAndRefusesLaterCallsPasses) {
  const KilledVerdict v = judgeSurvivor(kGood, kDead, 19.0);
  EXPECT_TRUE(v.ok()) << v.describe();
  EXPECT_DOUBLE_EQ(v.firstFailS, 3.21);
  EXPECT_EQ(v.describe(), "named the dead rank, first failure after 3.21 s (bound 19.00 s), destroy ok");
}

TEST(ProcsKilled, EachMissingGuaranteeFailsTheSurvivor) {
  // Too slow.
  KilledVerdict v = judgeSurvivor(kGood, kDead, 2.0);
  EXPECT_FALSE(v.ok());
  EXPECT_FALSE(v.bounded);
  EXPECT_NE(v.describe().find("NOT within the bound"), std::string::npos);
  // The first failure does not name the dead rank (a later one does not count).
  const std::string unnamed =
      "rank 0: CASE fused-fp16-3x5120 algo=nccl FAIL after 3.00 s: arfusePeerTimeout: the group was aborted\n"
      "rank 0: CASE allreduce-fp32-16x4096 algo=nccl FAIL after 0.00 s: ... rank 3 (host test:h1, local rank 1)\n"
      "rank 0: DESTROY ok in 1.00 s\n";
  v = judgeSurvivor(unnamed, kDead, 19.0);
  EXPECT_TRUE(v.failed);
  EXPECT_FALSE(v.named);
  EXPECT_FALSE(v.ok());
  // Success reported after the failure: garbage.
  const std::string garbage = std::string(kGood) +
                              "rank 1: CASE fused-bf16-64x8192 algo=nccl err_residual=nan err_norm=nan "
                              "hash=0000000000000000 PASS\n";
  v = judgeSurvivor(garbage, kDead, 19.0);
  EXPECT_TRUE(v.passAfterFail);
  EXPECT_FALSE(v.ok());
  EXPECT_NE(v.describe().find("a later call reported SUCCESS"), std::string::npos);
  // No failure at all, or no clean destroy.
  v = judgeSurvivor("rank 1: CASE a algo=nccl err_residual=0 err_norm=0 hash=00 PASS\nrank 1: DESTROY ok\n", kDead, 19);
  EXPECT_FALSE(v.failed);
  EXPECT_EQ(v.describe(), "reported NO failure");
  std::string noDestroy = kGood;
  noDestroy.replace(noDestroy.find("DESTROY ok"), 10, "DESTROY FAIL");
  EXPECT_FALSE(judgeSurvivor(noDestroy, kDead, 19.0).ok());
}

}  // namespace
}  // namespace cli
}  // namespace arfuse
