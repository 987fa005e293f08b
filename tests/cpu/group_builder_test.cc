// init/group_builder.h buildGroup, the init sequence both paths share, over a fake transport: the
// order of the steps, which steps are skipped, the forced-path checks after each step, and the
// host area sized with what NCCL turned out to be. No GPU: the transport is the test's.
#include "init/group_builder.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace arfuse {

void commRegister(arfuseComm*) {}  // publishRank is not exercised; buildGroup's file needs the symbol

namespace {

struct FakeTransport : Transport {
  bool p2p = true, proofHolds = true, ncclWorks = true;
  ProofOutcome proof = kProofOk;  // what the proof found, judged by init's policy (proofVerdict)
  std::vector<std::string> calls;
  long long hostMessage = -1;  // hostMessageBytesFor when hostArea ran with needed = true

  Status allocate(Group*) override {
    calls.push_back("allocate");
    return Status();
  }
  Status connect(Group* g) override {
    calls.push_back("connect");
    g->fabric.p2p = p2p;
    if (!p2p) g->fabric.p2pDetail = "fake: no peer access";
    return Status();
  }
  Status prove(Group* g) override {
    calls.push_back("prove");
    if (!proofHolds) {
      g->fabric.p2p = false;
      g->fabric.p2pDetail = "fake: a peer store did not land";
    }
    return proofVerdict(proof, "fake: rank 1: a store through rank 0's IPC mapping failed: an illegal memory access",
                        &g->fabric);
  }
  Status nccl(Group* g) override {
    calls.push_back("nccl");
    g->fabric.nccl = ncclWorks;
    if (!ncclWorks) g->fabric.ncclDetail = "fake: ncclCommInitAll failed";
    return Status();
  }
  Status hostArea(Group* g, bool needed) override {
    calls.push_back(needed ? "hostArea(needed)" : "hostArea");
    if (needed) {
      hostMessage = hostMessageBytesFor(*g);
      g->fabric.hostStaged = true;
      g->fabric.hostStagedCapacity = hostMessage;
    }
    return Status();
  }
};

Group* group(int nranks, bool ncclPlanned, int forcedAlgo = arfuseAlgoAuto) {
  Group* g = new Group();
  g->nranks = nranks;
  g->fabric.nranks = nranks;
  g->ncclPlanned = ncclPlanned;
  g->policy.forcedAlgo = forcedAlgo;
  g->policy.forcedBy = "config";
  g->limits.maxTokens = 2048;
  g->limits.maxHidden = 8192;
  g->fabric.maxBlocks = 8;
  sizeWorkspace(g, 0);
  g->ranks.resize(nranks);
  return g;
}

using Calls = std::vector<std::string>;

TEST(BuildGroup, PeerAccessThatHoldsNeedsNoHostArea) {
  Group* g = group(4, true);
  FakeTransport t;
  EXPECT_TRUE(buildGroup(g, &t, LogContext{}).ok());
  EXPECT_EQ(t.calls, (Calls{"allocate", "connect", "prove", "nccl", "hostArea"}));
  EXPECT_EQ(g->fabric.hostStagedDetail,
            "peer access works, so no host exchange area is allocated (force algo=hoststaged to get one)");
  delete g;
}

TEST(BuildGroup, NoPeerAccessSkipsTheProofAndSizesTheHostAreaAfterNccl) {
  FakeTransport t;
  t.p2p = false;
  Group* g = group(4, true);
  ASSERT_TRUE(buildGroup(g, &t, LogContext{}).ok());
  EXPECT_EQ(t.calls, (Calls{"allocate", "connect", "nccl", "hostArea(needed)"}));
  const long long withNccl = t.hostMessage;
  EXPECT_EQ(withNccl, g->policy.hostStagedMaxBytes);  // NCCL takes the larger messages
  EXPECT_EQ(g->fabric.lowLatencyMaxBytes, 0);
  delete g;

  // NCCL planned but failed: the area must carry the largest message.
  FakeTransport u;
  u.p2p = false;
  u.ncclWorks = false;
  g = group(4, true);
  ASSERT_TRUE(buildGroup(g, &u, LogContext{}).ok());
  EXPECT_GT(u.hostMessage, withNccl);
  EXPECT_EQ(u.hostMessage, static_cast<long long>(g->limits.maxTokens) * g->ws.maxRowBytes);
  delete g;
}

// The IPC failure policy (issue 37 item 8d, init/group_plan.h proofVerdict): data that did not land
// is a property of the fabric (peer paths off, host staging serves, one WARN line); a CUDA error
// through a mapping that opened fails the group at init, before any host area is made.
TEST(BuildGroup, ACudaErrorThroughAPeerMappingFailsTheGroupInsteadOfFallingBack) {
  FakeTransport t;
  t.proof = kProofCudaError;
  Group* g = group(2, false, -1);
  const Status s = buildGroup(g, &t, LogContext{});
  EXPECT_EQ(s.code(), arfuseCudaError) << s.message();
  EXPECT_NE(s.message().find("a store through rank 0's IPC mapping failed"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("rather than fall back to host staging"), std::string::npos) << s.message();
  EXPECT_EQ(std::count(t.calls.begin(), t.calls.end(), "hostArea"), 0);
  delete g;
  FakeTransport w;
  w.proof = kProofWrongData;
  Group* h = group(2, false, -1);
  ASSERT_TRUE(buildGroup(h, &w, LogContext{}).ok());
  EXPECT_FALSE(h->fabric.p2p);
  EXPECT_NE(h->fabric.p2pDetail.find("a store through rank 0's IPC mapping failed"), std::string::npos);
  delete h;
}

TEST(BuildGroup, AFailedProofTurnsPeerAccessOffAndAForcedPeerPathFails) {
  FakeTransport t;
  t.proofHolds = false;
  Group* g = group(2, false, arfuseAlgoOneShot);
  const Status s = buildGroup(g, &t, LogContext{});
  EXPECT_EQ(s.code(), arfuseUnsupported);
  EXPECT_EQ(s.message(), "config: algo=oneshot (forced by config) needs peer access: fake: a peer store did not land");
  EXPECT_NE(s.trail().find("group_builder.cc:"), std::string::npos) << s.trail();
  EXPECT_EQ(t.calls, (Calls{"allocate", "connect", "prove"}));
  delete g;
}

TEST(BuildGroup, ForcedPathsAreCheckedAfterTheirStep) {
  {  // NCCL forced on a group where it is not planned (ranks share a GPU)
    FakeTransport t;
    Group* g = group(2, false, arfuseAlgoNccl);
    g->fabric.ncclDetail = "NCCL needs one device per rank; this group has virtual ranks (a device repeats)";
    const Status s = buildGroup(g, &t, LogContext{});
    EXPECT_EQ(s.code(), arfuseUnsupported);
    EXPECT_EQ(s.message(),
              "config: algo=nccl (forced by config) is unavailable: NCCL needs one device per rank; "
              "this group has virtual ranks (a device repeats)");
    EXPECT_EQ(t.calls, (Calls{"allocate", "connect", "prove"}));
    delete g;
  }
  {  // host staging forced where peer access works: the area is allocated anyway
    FakeTransport t;
    Group* g = group(2, true, arfuseAlgoHostStaged);
    EXPECT_TRUE(buildGroup(g, &t, LogContext{}).ok());
    EXPECT_EQ(t.calls.back(), "hostArea(needed)");
    EXPECT_TRUE(g->fabric.hostStaged);
    delete g;
  }
  {  // one rank: nothing to prove, no host area
    FakeTransport t;
    Group* g = group(1, false);
    EXPECT_TRUE(buildGroup(g, &t, LogContext{}).ok());
    EXPECT_EQ(t.calls, (Calls{"allocate", "connect", "hostArea"}));
    delete g;
  }
}

}  // namespace
}  // namespace arfuse
