// NCCL communicator setup (nccl.cc).
#pragma once

#include <nccl.h>

#include "base/status.h"
#include "init/group.h"
#include "transport/mp_protocol.h"

namespace arfuse {

// In-process: ncclCommInitAll over `devices` (fabric.nccl, or ncclDetail and a WARN).
Status initNcclAll(Group* g, const int* devices);
// Multi-process, phase F: ncclCommInitRank; if any rank failed, every rank drops NCCL (and a forced
// NCCL fails init).
Status initNccl(Group* g, mp::InitArea* ia, int rank, const ncclUniqueId& id, int timeoutMs, const LogContext& ctx);

}  // namespace arfuse
