// Arguments of the hierarchical path's two intra-host kernels (plain struct: host files include it).
#pragma once

#include <stddef.h>

#include "algos/launch.h"
#include "device/args.h"

namespace arfuse {

class MultiHostWatch;  // comm/multihost_watch.h

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

#ifdef __CUDACC__
#define ARFUSE_HIER_HD __host__ __device__ __forceinline__
#else
#define ARFUSE_HIER_HD inline
#endif

// The index math of the two kernels, shared with the CPU test that checks it
// (tests/cpu/multihost_plan_test.cc): in 16-byte vectors of the call's dtype (E elements each),
// slice j is vectors [j sliceVecs, (j + 1) sliceVecs) of the message; CTA b of the reduce-scatter
// grid (of `ctas`) handles vectors [first, last) of every slice.
struct HierCut {
  long long first, last;
};
ARFUSE_HIER_HD HierCut hierCtaCut(long long sliceVecs, int ctas, int b) {
  const long long per = (sliceVecs + ctas - 1) / ctas;
  const long long first = static_cast<long long>(b) * per;
  const long long last = first + per < sliceVecs ? first + per : sliceVecs;
  return HierCut{first, last};
}
// The local rank whose slice holds element e of the message, and e's offset in it.
ARFUSE_HIER_HD int hierOwner(long long e, long long sliceElems) { return static_cast<int>(e / sliceElems); }
ARFUSE_HIER_HD long long hierOffset(long long e, long long sliceElems) {
  return e - static_cast<long long>(hierOwner(e, sliceElems)) * sliceElems;
}

// One hierarchical call as its launch (issue.cc) issues it: the reduce-scatter kernel (`scatter`),
// ncclAllReduce of sliceElems fp32 in place at args.slices[args.k.rank] over the communicator of
// this local index (one rank per host), issued and bounded by `watch`, then the gather + epilogue
// kernel (AlgoLaunch::l), in stream order.
struct HierLaunch {
  HierArgs args;
  Launch scatter;
  MultiHostWatch* watch;
};

}  // namespace arfuse
