// Arguments of the hierarchical path's two intra-host kernels (plain struct: host files include it).
#pragma once

#include <stddef.h>

#include "algos/launch.h"
#include "device/args.h"

typedef struct ncclComm* ncclComm_t;

namespace arfuse {

// k: the intra-host group's arguments, as for one-shot (k.nranks = L local ranks, k.rank = the local
// index, k.peers / k.state / flags / abort / flight recorder of the intra-host group).
// in[q]:     local rank q's copy-in buffer ([count / E] 16-byte vectors, the layout of x), mapped;
// slices[q]: local rank q's reduced fp32 slice ([sliceElems] floats), mapped; the NCCL all-reduce
//            across hosts runs in place on slices[k.rank] between the two kernels.
struct HierArgs {
  KernelArgs k;
  char* in[kMaxRanks];
  float* slices[kMaxRanks];
  long long count;       // elements of the message (tokens x hidden)
  long long sliceElems;  // elements of one slice (algos/hierarchical/plan.h hierarchicalSliceElems)
};

// One hierarchical call as its launch (issue.cc) issues it: the reduce-scatter kernel (`scatter`),
// ncclAllReduce of sliceElems fp32 in place at args.slices[args.k.rank] over `cross` (the ranks with
// this local index, one per host), then the gather + epilogue kernel (AlgoLaunch::l), in stream order.
struct HierLaunch {
  HierArgs args;
  Launch scatter;
  ncclComm_t cross;
};

}  // namespace arfuse
