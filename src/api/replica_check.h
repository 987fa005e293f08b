// ARFUSE_CHECK_REPLICAS=1, the CUDA side (the comparison is api/replicas.h, which says how and why).
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "api/replicas.h"
#include "arfuse/arfuse.h"
#include "base/status.h"

struct arfuseComm;

namespace arfuse {

// ARFUSE_CHECK_REPLICAS, read once per process.
bool replicaCheckEnabled();

// Enqueues on `stream`, where the call's kernels follow: copies of residual_in (unless
// shape.hasResidual is false) and weight into this rank's pinned host buffer, then a host function
// that meets the other ranks' (api/replicas.h). Works the same under CUDA-graph capture: the copies
// and the host function become graph nodes and run at every replay. A mismatch aborts the group
// with arfuseMismatch (reported like a kernel-recorded error); a one-thread kernel after the host
// function carries that abort to the device words (api/host_abort.h), so the call itself is refused.
// Multi-process groups copy into this rank's slot of the group's shared replica area instead, and
// meet there (api/replicas.h arriveShared). Fails (arfuseSystemError, arfuseCudaError) when the
// pinned buffer or the enqueueing fails.
Status enqueueReplicaCheck(arfuseComm* comm, const ReplicaShape& shape, const void* residualIn, const void* weight,
                           cudaStream_t stream);

}  // namespace arfuse
