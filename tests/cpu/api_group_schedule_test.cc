// The order arfuseGroupEnd issues deferred calls in (api/group_schedule.h): every stream sees its
// calls in call order, and NCCL all-reduces sit in waves, the w-th all-reduce of every stream in
// the w-th NCCL group, each wave after everything its streams did before it.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <vector>

#include "api/group_schedule.h"

namespace arfuse {
namespace {

GroupItem item(uintptr_t stream, bool nccl, bool launch = true, int device = 0) {
  GroupItem g;
  g.device = device;
  g.stream = stream;
  g.allReduce = nccl;
  g.launch = launch;
  return g;
}

TEST(GroupSchedule, OneNcclCallPerRankIsOneNcclGroup) {
  // The common case (a loop over ranks, one fused call each): one wave, epilogues after it.
  const std::vector<GroupItem> items = {item(1, true), item(2, true)};
  EXPECT_EQ(describeSchedule(scheduleGroup(items)), "[ A0 A1 ] L0 L1");
}

TEST(GroupSchedule, ChainedNcclCallsOfOneRankGoInSuccessiveWaves) {
  // Rank 0 and rank 1, two NCCL calls each, the second reading the first's output: the second
  // all-reduce must follow the first epilogue on each stream.
  const std::vector<GroupItem> items = {item(1, true), item(1, true), item(2, true), item(2, true)};
  EXPECT_EQ(describeSchedule(scheduleGroup(items)), "[ A0 A2 ] L0 L2 [ A1 A3 ] L1 L3");
}

TEST(GroupSchedule, AnArfusePathCallAfterAnNcclCallWaitsForItsEpilogue) {
  // NCCL, then low-latency, then NCCL again, per rank: the low-latency call runs between the two
  // waves, after the first epilogue and before the second all-reduce.
  const std::vector<GroupItem> items = {item(1, true), item(1, false), item(1, true),
                                        item(2, true), item(2, false), item(2, true)};
  EXPECT_EQ(describeSchedule(scheduleGroup(items)), "[ A0 A3 ] L0 L1 L3 L4 [ A2 A5 ] L2 L5");
}

TEST(GroupSchedule, PlainAllReduceHasNoLaunchAndStreamsAreKeyedByDevice) {
  // A non-fused NCCL call has nothing after its all-reduce. The same handle on two devices (the
  // default streams) is two streams.
  const std::vector<GroupItem> items = {item(0, true, false, 0), item(0, true, true, 1), item(0, false, true, 0)};
  EXPECT_EQ(describeSchedule(scheduleGroup(items)), "[ A0 A1 ] L1 L2");
}

// Random groups: replaying the schedule per stream gives exactly the call order, every
// all-reduce of a wave is that stream's w-th, and nothing is issued twice or lost.
TEST(GroupSchedule, RandomGroupsKeepEveryStreamsOrder) {
  std::mt19937 rng(12345);
  for (int trial = 0; trial < 2000; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 24);
    std::vector<GroupItem> items;
    for (int i = 0; i < n; ++i) {
      const bool nccl = rng() % 2;
      items.push_back(item(1 + rng() % 4, nccl, nccl ? rng() % 4 != 0 : true, static_cast<int>(rng() % 2)));
    }
    const std::vector<GroupStep> steps = scheduleGroup(items);
    // Expected per-stream sequence of events: for each item in order, "A i" (if any) then "L i" (if any).
    std::map<std::pair<int, uintptr_t>, std::vector<int>> want, got;  // +i = launch, -(i+1) = all-reduce
    for (int i = 0; i < n; ++i) {
      auto& w = want[{items[i].device, items[i].stream}];
      if (items[i].allReduce) w.push_back(-(i + 1));
      if (items[i].launch) w.push_back(i);
    }
    bool inGroup = false;
    std::map<std::pair<int, uintptr_t>, int> perWave;
    for (const GroupStep& s : steps) {
      if (s.kind == GroupStepKind::kNcclGroupStart) {
        ASSERT_FALSE(inGroup);
        inGroup = true;
        perWave.clear();
        continue;
      }
      if (s.kind == GroupStepKind::kNcclGroupEnd) {
        ASSERT_TRUE(inGroup);
        inGroup = false;
        continue;
      }
      const GroupItem& it = items[s.item];
      if (s.kind == GroupStepKind::kAllReduce) {
        ASSERT_TRUE(inGroup) << "an all-reduce outside an NCCL group";
        const int inWave = ++perWave[std::make_pair(it.device, it.stream)];
        EXPECT_EQ(inWave, 1) << "two all-reduces of one stream in one wave";
        got[{it.device, it.stream}].push_back(-(s.item + 1));
      } else {
        ASSERT_FALSE(inGroup) << "a launch inside an NCCL group would run before its all-reduce";
        got[{it.device, it.stream}].push_back(s.item);
      }
    }
    ASSERT_FALSE(inGroup);
    ASSERT_EQ(got, want) << "trial " << trial << ": " << describeSchedule(steps);
  }
}

}  // namespace
}  // namespace arfuse
