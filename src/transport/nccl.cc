// NCCL communicator setup: ncclCommInitAll for an in-process group, ncclCommInitRank for a
// multi-process one (every rank drops NCCL if any rank failed). The two transports call these.
#include "transport/nccl.h"

#include <nccl.h>

#include <vector>

namespace arfuse {

using namespace mp;  // NOLINT: the multi-process half speaks the segment protocol

// In-process groups: one ncclCommInitAll over every rank's device. A failure is not fatal: the
// fabric says why NCCL is missing.
Status initNcclAll(Group* g, const int* devices) {
  Fabric& f = g->fabric;
  std::vector<ncclComm_t> nc(g->nranks);
  const ncclResult_t nr = ncclCommInitAll(nc.data(), g->nranks, devices);
  if (nr == ncclSuccess) {
    f.nccl = true;
    for (int r = 0; r < g->nranks; ++r) g->ranks[r].nccl = nc[r];
  } else {
    f.ncclDetail = strprintf("ncclCommInitAll: %s", ncclGetErrorString(nr));
    ARFUSE_LOG(kLogWarn, LogContext{}, "path=nccl", "disabled: %s", f.ncclDetail.c_str());
  }
  return Status();
}

// Phase F: NCCL, when every rank has its own GPU; if any rank failed, every rank drops it.
Status initNccl(Group* g, InitArea* ia, int rank, const ncclUniqueId& id, int timeoutMs, const LogContext& ctx) {
  std::vector<uint8_t> all;
  Report sd{};
  ncclComm_t nc = nullptr;
  const ncclResult_t nr = ncclCommInitRank(&nc, g->nranks, id, rank);
  if (nr != ncclSuccess) {
    sd.status = arfuseNcclError;
    setText(sd.text, strprintf("ncclCommInitRank: %s", ncclGetErrorString(nr)));
  }
  Status st = segmentExchange(ia, 5, rank, g->nranks, &sd, sizeof sd, timeoutMs, &all);
  if (!st.ok()) {
    if (nc) ncclCommAbort(nc);
    return st.through(__FILE__, __LINE__);
  }
  // A rank whose NCCL init failed turns the nccl path off on every rank (a fact the plan reads).
  if (const Status posted = postedFailure<Report>(all, g->nranks); !posted.ok()) {
    const std::string& ncclWhy = posted.message();
    if (nc) ncclCommAbort(nc);
    g->fabric.nccl = false;
    g->fabric.ncclDetail = ncclWhy;
    ARFUSE_LOG(kLogWarn, ctx, "path=nccl", "disabled: %s", ncclWhy.c_str());
    if (g->policy.forcedAlgo == arfuseAlgoNccl)
      return ARFUSE_FAIL(arfuseNcclError, "config: algo=nccl is unavailable: %s", ncclWhy.c_str());
  } else {
    g->fabric.nccl = true;
    g->ranks[rank].nccl = nc;
  }
  return Status();
}

}  // namespace arfuse
