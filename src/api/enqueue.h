// Issuing a planned call through its path's steps (the NCCL step, the kernels), the opt-in replica
// check, and the deferral of calls made inside arfuseGroupStart/End (api/group_schedule.h says in what order
// arfuseGroupEnd issues them and why). api.cc checks and plans; this file only issues.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "algos/registry.h"
#include "api/replicas.h"
#include "arfuse/arfuse.h"
#include "base/status.h"
#include "comm/comm.h"
#include "device/args.h"
#include "init/cuda_check.h"

namespace arfuse {

// The one error currency of the C ABI (defined in api.cc): records the communicator's (or this
// thread's) last-error text and prints one canonical ERROR line.
arfuseResult_t fail(arfuseComm* comm, arfuseResult_t code, const char* file, int line, const std::string& msg,
                    const std::string& fields = "");
// The same for a failed Status (base/status.h), the line placed where it was raised.
arfuseResult_t fail(arfuseComm* comm, const Status& st, const std::string& fields = "");

// Everything needed to issue one checked and planned call, by value (a deferred call outlives the
// caller's arguments struct, not its buffers).
struct PlannedCall {
  arfuseComm* comm = nullptr;
  int device = 0;  // comm->device, kept so that a deferred call never reads a destroyed handle
  arfuseAlgo_t algo = arfuseAlgoAuto;
  // What the path's steps read (algos/registry.h), prepared by its entry and handed to its steps as
  // it is: the kernel's instantiation and geometry, the stream, which steps the call has (an NCCL
  // step, kernels), the path's own arguments.
  AlgoLaunch launch;
  // ARFUSE_CHECK_REPLICAS: what to compare, copied just before the call reads it
  bool check = false;
  ReplicaShape checkShape;
  const void* checkResidual = nullptr;
  const void* checkWeight = nullptr;
  std::string fields;  // the canonical line's fields for this call (op, bytes, dtype, path)

  bool hasAllReduce() const { return launch.collective; }
  bool hasLaunch() const { return launch.kernels; }
};

// Issues the call now, or, inside arfuseGroupStart/End, defers it when stream order requires
// (an NCCL all-reduce, or anything after one on the same stream).
arfuseResult_t enqueueCall(const PlannedCall& call);

// arfuseGroupStart / arfuseGroupEnd.
arfuseResult_t groupStart();
arfuseResult_t groupEnd();

// Most calls one host thread may hold deferred inside one arfuseGroupStart/End (every rank's
// together); documented in arfuse.h.
constexpr int kMaxGroupCalls = 4096;

}  // namespace arfuse
