// The NCCL path's steps, bound to its registry entry: ncclAllReduce (or, deterministic, an
// all-gather of every rank's input) into the path's own buffer, then arfuse's add+RMSNorm epilogue
// over it (or the rank-order sum of the gathered inputs). Within one host the all-reduce runs on the
// rank's own communicator; across hosts on the communicator over every rank, through its watch
// (comm/multihost_watch.h), which bounds the wait. Inside arfuseGroupStart/End the all-reduce is
// issued in its wave's NCCL group (api/group_schedule.h), the epilogue after it.
#include "algos/issue.h"

#include <nccl.h>

#include "algos/local/launch.h"
#include "algos/shared.h"
#include "comm/multihost.h"
#include "comm/multihost_watch.h"
#include "init/group.h"

namespace arfuse {
namespace {

struct NcclArgs {
  LocalArgs la;  // the epilogue: la.x = recvBuf
  const void* sendBuf;
  void* recvBuf;
  size_t count;  // elements of dtype
  arfuseDataType_t dtype;
  bool gather;            // deterministic: an all-gather into recvBuf, la.sources = nranks
  ncclComm_t nccl;        // within one host: the rank's own communicator
  MultiHostWatch* watch;  // across hosts: the communicator over every rank, reached through its watch
  CallDesc desc;          // the call, for the watch's error record
};

ncclDataType_t ncclType(arfuseDataType_t d) {
  return d == arfuseBfloat16 ? ncclBfloat16 : d == arfuseFloat16 ? ncclFloat16 : ncclFloat32;
}

Status prepare(const PrepareContext& p, AlgoLaunch* out) {
  const Group& g = *p.g;
  const Call& c = p.call;
  NcclArgs& a = out->args<NcclArgs>();
  a = NcclArgs{};
  const MultiHost* mh = groupMultiHost(g);  // across hosts: NCCL over every rank
  a.watch = mh ? mh->watch.get() : nullptr;
  a.nccl = mh ? nullptr : rankNccl(g, p.rank);
  a.sendBuf = c.x;
  a.count = static_cast<size_t>(c.tokens) * c.hidden;
  a.dtype = c.dtype;
  a.desc = makeCallDesc(c.op, c.dtype, arfuseAlgoNccl, 0, c.tokens, c.hidden);
  out->collective = true;
  if (!c.fused && !groupDeterministic(g)) {  // a plain all-reduce: straight into the caller's output
    a.recvBuf = c.residualOut;
    out->kernels = false;
    return Status();
  }
  // Reduce (or, deterministic, gather every rank's input) into the NCCL path's own buffer (never a
  // caller buffer that is also an input, nor the staging peers read), then the epilogue. One
  // buffer serves every call: each all-reduce is queued behind the previous call's epilogue on
  // the rank's stream, in groups too (api/group_schedule.h).
  a.recvBuf = mh ? multiHostNcclSum(g) : rankNcclSum(g, p.rank);
  a.gather = groupDeterministic(g);
  a.la = localArgsOf(c, a.recvBuf);
  if (a.gather) {
    a.la.sources = mh ? multiHostRanks(g) : groupRanks(g);
    a.la.sourceStride = a.count;
  }
  if (!c.fused) {  // deterministic plain all-reduce: out = the rank-order sum of the gathered inputs
    out->l.blocks =
        std::max(1, std::min(4 * groupSmCount(g), static_cast<int>((a.count / dtypeVecElems(c.dtype) + 255) / 256)));
    out->l.threads = 256;
  }
  return Status();
}

ncclResult_t issue(const NcclArgs& a, ncclComm_t nc, cudaStream_t stream) {
  return a.gather ? ncclAllGather(a.sendBuf, a.recvBuf, a.count, ncclType(a.dtype), nc, stream)
                  : ncclAllReduce(a.sendBuf, a.recvBuf, a.count, ncclType(a.dtype), ncclSum, nc, stream);
}

// Across hosts through the watch, which bounds the operation's wait; `grouped`: inside an NCCL group
// of arfuseGroupEnd (finishGroupedNccl follows).
Status acrossHosts(const AlgoLaunch& call, bool grouped) {
  const NcclArgs& a = call.args<NcclArgs>();
  const size_t bytes = a.count * dtypeSize(a.dtype);
  NcclIssue op;
  op.info.op = a.gather ? "ncclAllGather" : "ncclAllReduce";
  op.info.path = "nccl";
  op.info.bytes = bytes;
  op.info.comm = kNcclCommWorld;
  op.info.desc = a.desc;
  op.stream = call.stream;
  op.grouped = grouped;
  op.output = a.recvBuf;
  op.outputBytes = a.gather ? bytes * static_cast<size_t>(a.la.sources) : bytes;
  return a.watch->issue(op, [&](ncclComm_t nc) { return issue(a, nc, call.stream); });
}

Status collective(const AlgoLaunch& call, bool grouped) {
  const NcclArgs& a = call.args<NcclArgs>();
  if (a.watch) return acrossHosts(call, grouped);
  const ncclResult_t nr = issue(a, a.nccl, call.stream);
  if (nr != ncclSuccess)
    return ARFUSE_FAIL(arfuseNcclError, "%s: %s", a.gather ? "ncclAllGather" : "ncclAllReduce", ncclGetErrorString(nr));
  return Status();
}

Status launch(const AlgoLaunch& c) { return launchLocal(c.l, c.args<NcclArgs>().la, c.stream); }

[[maybe_unused]] const bool kBound = bindAlgoIssue(arfuseAlgoNccl, AlgoIssue{prepare, collective, launch});

}  // namespace
}  // namespace arfuse
