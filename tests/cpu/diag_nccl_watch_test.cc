// The bounded wait of NCCL operations across hosts (src/diag/nccl_watch.h) with a fake clock and
// fake events: when an operation starts, ends, times out; grouped operations; the messages that
// name the communicator's ranks; the error record a timeout leaves for the other local ranks.
#include <gtest/gtest.h>

#include <map>

#include "arfuse/arfuse.h"
#include "diag/nccl_watch.h"
#include "diag/records.h"
#include "diag_test_util.h"
#include "init/host_layout.h"

namespace arfuse {
namespace {

using testing_diag::fusedDesc;

constexpr uint64_t kMs = 1000000ull;

// Events are small integers; the test sets their state.
struct FakeEvents {
  std::map<intptr_t, EventState> state;
  EventHandle make(intptr_t id) {
    state[id] = EventState::kPending;
    return reinterpret_cast<EventHandle>(id);
  }
  void done(intptr_t id) { state[id] = EventState::kDone; }
  EventQuery query() {
    return [this](EventHandle h) { return state.at(reinterpret_cast<intptr_t>(h)); };
  }
};

NcclOpInfo op(uint64_t seq, int comm = kNcclCommWorld) {
  NcclOpInfo o;
  o.seq = seq;
  o.op = "ncclAllReduce";
  o.path = "nccl";
  o.bytes = 14336;
  o.comm = comm;
  o.desc = fusedDesc(1, 7168, arfuseAlgoNccl);
  return o;
}

// Two simulated hosts of two ranks: ranks 0, 1 on test:h0 and 2, 3 on test:h1.
HostLayout twoByTwo() { return groupHosts({11, 11, 22, 22}, {"test:h0", "test:h0", "test:h1", "test:h1"}); }

TEST(NcclWatch, QueuedOperationNeverTimesOutItIsCountedFromItsStartOnTheGpu) {
  FakeEvents ev;
  NcclWatchList w(3000 * kMs);
  std::vector<EventHandle> rel;
  w.push(op(1), ev.make(1), ev.make(2), 0);
  // Earlier work on the stream holds it back far longer than the timeout: no verdict.
  EXPECT_EQ(w.poll(10000 * kMs, ev.query(), &rel).kind, NcclWatchVerdict::kNone);
  ev.done(1);                                                                      // it starts now
  EXPECT_EQ(w.poll(11000 * kMs, ev.query(), &rel).kind, NcclWatchVerdict::kNone);  // first seen started
  EXPECT_EQ(w.poll(14000 * kMs, ev.query(), &rel).kind, NcclWatchVerdict::kNone);  // exactly the bound
  const NcclWatchVerdict v = w.poll(14001 * kMs, ev.query(), &rel);
  ASSERT_EQ(v.kind, NcclWatchVerdict::kTimeout);
  EXPECT_EQ(v.op.seq, 1u);
  EXPECT_EQ(v.waitedNs, 3001 * kMs);
  EXPECT_TRUE(rel.empty());
}

// The hierarchical path's all-reduce: its peers on other hosts enter it only after their own
// intra-host barrier, bounded by the same timeout. With one bound for both, a peer whose local peer
// died gave up on that barrier just as this rank gave up on it (and named the live peer instead of
// the dead one: gpu_multihost_2x2_killed_hierarchical failed so on the H200). Its bound adds that wait.
TEST(NcclWatch, OperationWhosePeersWaitFirstGetsTheirBoundedWaitOnTopOfTheTimeout) {
  FakeEvents ev;
  NcclWatchList w(3000 * kMs);
  std::vector<EventHandle> rel;
  NcclOpInfo hier = op(1, 0);
  hier.path = "hierarchical";
  hier.peerWaitNs = 3000 * kMs;
  EXPECT_EQ(w.boundNs(hier), 6000 * kMs);
  EXPECT_EQ(w.boundNs(op(2)), 3000 * kMs);  // the nccl path's: its peers enter it directly
  w.push(hier, ev.make(1), ev.make(2), 0);
  w.push(op(2), ev.make(3), ev.make(4), 0);
  ev.done(1);
  ev.done(3);
  EXPECT_EQ(w.poll(0, ev.query(), &rel).kind, NcclWatchVerdict::kNone);  // both start at 0
  const NcclWatchVerdict plain = w.poll(3001 * kMs, ev.query(), &rel);
  ASSERT_EQ(plain.kind, NcclWatchVerdict::kTimeout);
  EXPECT_EQ(plain.op.seq, 2u);  // only the one without a peer wait is past its bound
  EXPECT_EQ(plain.boundNs, 3000 * kMs);
  ev.done(4);
  EXPECT_EQ(w.poll(6000 * kMs, ev.query(), &rel).kind, NcclWatchVerdict::kNone);  // exactly its bound
  const NcclWatchVerdict v = w.poll(6001 * kMs, ev.query(), &rel);
  ASSERT_EQ(v.kind, NcclWatchVerdict::kTimeout);
  EXPECT_EQ(v.op.seq, 1u);
  EXPECT_EQ(v.boundNs, 6000 * kMs);
  const std::string m = describeNcclTimeout(v.op, v.waitedNs, w.timeoutNs(), "rank 2");
  EXPECT_NE(m.find("did not finish 6.001 s after it started on the GPU (bound 6.000 s: the timeout 3.000 s + 3.000 s "
                   "for the peers' own bounded wait before it); it waits with: rank 2."),
            std::string::npos)
      << m;
}

// Operations inside a CUDA graph: only the started / finished counters of their stamp and guard
// kernels, copied out each tick.
TEST(CapturedNcclWatch, ATimeoutOnlyWhenNothingFinishedForTheBoundWhileAnOperationRan) {
  CapturedNcclWatch w(3000 * kMs);
  NcclOpInfo hier = op(5, 1);
  hier.path = "hierarchical";
  hier.peerWaitNs = 3000 * kMs;
  ASSERT_EQ(w.add(op(4)), 0u);
  ASSERT_EQ(w.add(hier), 1u);
  // Replays that keep finishing operations never time out, however long the job runs.
  uint64_t t = 0, started = 0, finished = 0;
  for (int replay = 0; replay < 1000; ++replay, t += 2000 * kMs) {
    started += 2;
    EXPECT_EQ(w.poll(t, started, finished + 1, 1).kind, NcclWatchVerdict::kNone);  // one done, one running
    finished += 2;
    EXPECT_EQ(w.poll(t + 1000 * kMs, started, finished, 1).kind, NcclWatchVerdict::kNone);  // idle
  }
  // Idle for an hour: nothing in flight, nothing to report.
  EXPECT_EQ(w.poll(t + 3600000 * kMs, started, finished, 1).kind, NcclWatchVerdict::kNone);
  // A replay whose hierarchical all-reduce (slot 1) never finishes: counted from the first tick that
  // sees it in flight; its bound is 6 s.
  t += 3600000 * kMs;
  ++started;
  EXPECT_EQ(w.poll(t, started, finished, 1).kind, NcclWatchVerdict::kNone);
  EXPECT_EQ(w.poll(t + 6000 * kMs, started, finished, 1).kind, NcclWatchVerdict::kNone);  // exactly the bound
  const NcclWatchVerdict v = w.poll(t + 6001 * kMs, started, finished, 1);
  ASSERT_EQ(v.kind, NcclWatchVerdict::kTimeout);
  EXPECT_EQ(v.op.seq, 5u);
  EXPECT_TRUE(v.op.captured);
  EXPECT_EQ(v.boundNs, 6000 * kMs);
  EXPECT_EQ(v.waitedNs, 6001 * kMs);
  const std::string m = describeNcclTimeout(v.op, v.waitedNs, 3000 * kMs, "rank 3");
  EXPECT_NE(m.find("did not finish 6.001 s after it started on the GPU (in a CUDA-graph replay: no captured "
                   "operation of this rank finished for that long while it ran; bound 6.000 s"),
            std::string::npos)
      << m;
}

TEST(CapturedNcclWatch, ProgressRestartsTheClockAndAFullTableRefuses) {
  CapturedNcclWatch w(100 * kMs, /*maxSlots=*/1);
  ASSERT_EQ(w.add(op(1)), 0u);
  // A full table still counts the operation (its stamp writes kUnknownSlot): only the message cannot name it.
  EXPECT_EQ(w.add(op(2)), CapturedNcclWatch::kUnknownSlot);
  EXPECT_EQ(w.poll(0, 3, 1, 0).kind, NcclWatchVerdict::kNone);
  EXPECT_EQ(w.poll(90 * kMs, 3, 2, 0).kind, NcclWatchVerdict::kNone);  // one finished: from 90 ms on
  EXPECT_EQ(w.poll(180 * kMs, 3, 2, 0).kind, NcclWatchVerdict::kNone);
  EXPECT_EQ(w.poll(191 * kMs, 3, 2, 0).kind, NcclWatchVerdict::kTimeout);
  // A copy that caught `finished` ahead of `started` reads as idle; an unknown slot takes the widest bound.
  CapturedNcclWatch u(100 * kMs);
  NcclOpInfo slow = op(3);
  slow.peerWaitNs = 100 * kMs;
  u.add(slow);
  EXPECT_EQ(u.poll(0, 4, 5, 0).kind, NcclWatchVerdict::kNone);
  EXPECT_EQ(u.poll(10 * kMs, 5, 4, 99).kind, NcclWatchVerdict::kNone);
  EXPECT_EQ(u.poll(150 * kMs, 5, 4, 99).kind, NcclWatchVerdict::kNone);
  const NcclWatchVerdict v = u.poll(211 * kMs, 5, 4, 99);
  ASSERT_EQ(v.kind, NcclWatchVerdict::kTimeout);
  EXPECT_EQ(v.boundNs, 200 * kMs);
}

TEST(NcclWatch, FinishedOperationsReleaseBothEvents) {
  FakeEvents ev;
  NcclWatchList w(100 * kMs);
  std::vector<EventHandle> rel;
  w.push(op(1), ev.make(1), ev.make(2), 0);
  w.push(op(2), ev.make(3), ev.make(4), 0);
  ev.done(1);
  ev.done(2);
  EXPECT_EQ(w.poll(5 * kMs, ev.query(), &rel).kind, NcclWatchVerdict::kNone);
  ASSERT_EQ(rel.size(), 2u);
  EXPECT_EQ(w.size(), 1u);
  ev.done(3);
  ev.done(4);
  EXPECT_EQ(w.poll(500 * kMs, ev.query(), &rel).kind, NcclWatchVerdict::kNone);  // ended: no timeout
  EXPECT_EQ(rel.size(), 4u);
  EXPECT_EQ(w.size(), 0u);
}

TEST(NcclWatch, GroupedOperationEndsOnlyOnceItsAfterEventExists) {
  FakeEvents ev;
  NcclWatchList w(100 * kMs);
  std::vector<EventHandle> rel;
  w.push(op(7), ev.make(1), nullptr, 0);  // inside an NCCL group: launched at the group's end
  ev.done(1);
  EXPECT_EQ(w.poll(1 * kMs, ev.query(), &rel).kind, NcclWatchVerdict::kNone);
  EXPECT_EQ(w.size(), 1u);
  EXPECT_FALSE(w.setAfter(8, ev.make(9)));  // another operation's number: not this one
  ASSERT_TRUE(w.setAfter(7, ev.make(2)));
  EXPECT_FALSE(w.setAfter(7, ev.make(3)));  // once
  ev.done(2);
  EXPECT_EQ(w.poll(2 * kMs, ev.query(), &rel).kind, NcclWatchVerdict::kNone);
  EXPECT_EQ(w.size(), 0u);
}

TEST(NcclWatch, GroupedOperationWithoutItsAfterEventStillTimesOut) {
  FakeEvents ev;
  NcclWatchList w(100 * kMs);
  std::vector<EventHandle> rel;
  w.push(op(7), ev.make(1), nullptr, 0);
  ev.done(1);
  w.poll(0, ev.query(), &rel);
  EXPECT_EQ(w.poll(101 * kMs, ev.query(), &rel).kind, NcclWatchVerdict::kTimeout);
}

TEST(NcclWatch, OperationsOnSeveralStreamsAreWatchedApartTheOldestStartedOneIsReported) {
  FakeEvents ev;
  NcclWatchList w(100 * kMs);
  std::vector<EventHandle> rel;
  w.push(op(1), ev.make(1), ev.make(2), 0);     // stream A: queued
  w.push(op(2), ev.make(3), ev.make(4), 0);     // stream B: running
  w.push(op(3, 1), ev.make(5), ev.make(6), 0);  // stream C: running, started later
  ev.done(3);
  w.poll(10 * kMs, ev.query(), &rel);
  ev.done(5);
  w.poll(20 * kMs, ev.query(), &rel);
  const NcclWatchVerdict v = w.poll(200 * kMs, ev.query(), &rel);
  ASSERT_EQ(v.kind, NcclWatchVerdict::kTimeout);
  EXPECT_EQ(v.op.seq, 2u);
  EXPECT_EQ(v.waitedNs, 190 * kMs);
  const std::vector<std::string> lines = w.describe(200 * kMs);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], "nccl op 1 ncclAllReduce path=nccl 14336 B comm=world: queued behind earlier work for 0.200 s");
  EXPECT_EQ(lines[1], "nccl op 2 ncclAllReduce path=nccl 14336 B comm=world: running on the GPU for 0.190 s");
  EXPECT_EQ(lines[2], "nccl op 3 ncclAllReduce path=nccl 14336 B comm=local index 1: running on the GPU for 0.180 s");
}

TEST(NcclWatch, EventErrorIsReportedButATimeoutWins) {
  FakeEvents ev;
  NcclWatchList w(100 * kMs);
  std::vector<EventHandle> rel;
  w.push(op(1), ev.make(1), ev.make(2), 0);
  ev.state[1] = EventState::kError;
  EXPECT_EQ(w.poll(0, ev.query(), &rel).kind, NcclWatchVerdict::kEventError);
  w.push(op(2), ev.make(3), ev.make(4), 0);
  ev.done(3);
  w.poll(0, ev.query(), &rel);
  const NcclWatchVerdict v = w.poll(150 * kMs, ev.query(), &rel);
  EXPECT_EQ(v.kind, NcclWatchVerdict::kTimeout);
  EXPECT_EQ(v.op.seq, 2u);
}

TEST(NcclWatch, ClearHandsBackEveryEvent) {
  FakeEvents ev;
  NcclWatchList w(100 * kMs);
  std::vector<EventHandle> rel;
  w.push(op(1), ev.make(1), ev.make(2), 0);
  w.push(op(2), ev.make(3), nullptr, 0);
  w.clear(&rel);
  EXPECT_EQ(rel.size(), 3u);
  EXPECT_EQ(w.size(), 0u);
}

TEST(NcclWatch, PeersOfTheWorldAndOfALocalIndexNameHostAndLocalRank) {
  const HostLayout l = twoByTwo();
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(ncclCommPeers(l, kNcclCommWorld, 0),
            "rank 1 (host test:h0, local rank 1), rank 2 (host test:h1, local rank 0), rank 3 (host test:h1, local "
            "rank 1)");
  EXPECT_EQ(ncclCommPeers(l, 1, 1), "rank 3 (host test:h1, local rank 1)");
  EXPECT_EQ(ncclCommPeers(l, 0, 2), "rank 0 (host test:h0, local rank 0)");
  EXPECT_EQ(ncclCommName(kNcclCommWorld), "world");
  EXPECT_EQ(ncclCommName(1), "local index 1");
}

TEST(NcclWatch, TimeoutMessageNamesTheOperationTheWaitAndTheCandidates) {
  const HostLayout l = twoByTwo();
  const std::string m = describeNcclTimeout(op(17), 3012 * kMs, 3000 * kMs, ncclCommPeers(l, kNcclCommWorld, 0));
  EXPECT_EQ(m,
            "NCCL operation 17 across hosts (ncclAllReduce, path nccl, 14336 B, communicator world, in "
            "AllReduceAddRmsNorm bf16 tokens=1 hidden=7168 (14336 B)) did not finish 3.012 s after it started on the "
            "GPU (timeout 3.000 s); it waits with: rank 1 (host test:h0, local rank 1), rank 2 (host test:h1, local "
            "rank 0), rank 3 (host test:h1, local rank 1). NCCL does not say which of them stopped: the rank(s) that "
            "do not report this same timeout (dead, hung, or making other calls) are the ones. This rank's NCCL "
            "communicators are aborted and the group is aborted");
  EXPECT_NE(ncclTimeoutNextStep().find("destroy and recreate"), std::string::npos);
}

// The record a timeout leaves in the intra-host group's area, as the other local ranks read it.
TEST(NcclWatch, ErrorRecordOfATimeoutReadsAsAPeerTimeoutAcrossHosts) {
  ErrorRecord e = testing_diag::rec(kErrNcclTimeout, -1, 17, fusedDesc(1, 7168, arfuseAlgoHierarchical), {0, 0}, 1,
                                    kPhaseNcclAcrossHosts);
  e.waitedMs = 3012;
  EXPECT_EQ(resultForRecordCode(e.code), arfusePeerTimeout);
  EXPECT_STREQ(recordCodeName(e.code), "nccl_timeout");
  EXPECT_EQ(describeErrorRecord(e, 1, 3000 * kMs),
            "rank 1 waited 3.012 s in its NCCL operation 17 across hosts (communicator local index 1, timeout "
            "3.000 s) in AllReduceAddRmsNorm bf16 tokens=1 hidden=7168 (14336 B) on path hierarchical; its NCCL "
            "communicators and the group are aborted");
  EXPECT_EQ(errorRecordFields(e),
            "code=arfusePeerTimeout call=17 op=AllReduceAddRmsNorm bytes=14336 dtype=bf16 path=hierarchical "
            "nccl_comm=1 waited_ms=3012");
  EXPECT_NE(nextStepFor(e.code).find("another host"), std::string::npos);

  std::unique_ptr<GroupShared> s = testing_diag::newShared();
  s->records[1] = e;
  ErrorRecord back{};
  ASSERT_TRUE(readErrorRecord(*s, 1, &back));
  EXPECT_EQ(back.waitedMs, 3012);
  EXPECT_EQ(back.block, 1);
}

}  // namespace
}  // namespace arfuse
