// The order in which arfuseGroupEnd issues the calls deferred inside arfuseGroupStart/End. Pure
// (no CUDA, no NCCL): CPU-tested.
//
// Why waves. NCCL launches every all-reduce enqueued inside one ncclGroupStart/End at its
// ncclGroupEnd, all together, and arfuse cannot place a kernel of its own between two of them. So
// with one NCCL group per arfuse group, a rank's second NCCL-path call would be reduced before its
// first call's epilogue ran (and read that epilogue's output before it exists), and an arfuse-path
// call made after an NCCL-path call would either overtake that call's epilogue or wait for all of
// NCCL's launches. Instead the deferred calls are issued as a sequence of NCCL groups ("waves"):
// wave w holds the w-th NCCL all-reduce of every stream, and everything a stream does between its
// (w-1)-th and w-th all-reduce (an epilogue, arfuse-path calls) is launched before wave w's
// ncclGroupStart. Every stream then sees its calls in exactly the order they were made, and one
// staging buffer per rank is enough for any number of NCCL-path calls (each all-reduce is queued
// behind the previous call's epilogue on the same stream). Every rank makes the same calls in the
// same order, so wave w of every rank holds the same call and NCCL pairs them.
#pragma once

#include <stdint.h>

#include <string>
#include <vector>

namespace arfuse {

// A deferred call as the schedule sees it.
struct GroupItem {
  int device = 0;          // the stream's device (default streams are per device)
  uintptr_t stream = 0;    // the stream handle the call was made on
  bool allReduce = false;  // has an NCCL all-reduce, which must be issued inside an NCCL group
  bool launch = true;      // has kernels of its own (after the all-reduce, if any)
};

enum class GroupStepKind { kLaunch, kNcclGroupStart, kAllReduce, kNcclGroupEnd };

struct GroupStep {
  GroupStepKind kind;
  int item;  // index into the items; -1 for group start/end
};

// The steps that issue `items` (in call order) keeping each stream's order.
std::vector<GroupStep> scheduleGroup(const std::vector<GroupItem>& items);

// "L0 [ A1 A2 ] L1 L3" style text of a schedule, for tests and debug lines.
std::string describeSchedule(const std::vector<GroupStep>& steps);

}  // namespace arfuse
