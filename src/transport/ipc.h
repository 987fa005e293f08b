// The multi-process transport (init/group_builder.h Transport): this process holds one rank; its
// peers' buffers are CUDA IPC views, the group area and the host-staged area POSIX shared memory
// registered with CUDA. Every step posts this rank's outcome into the group segment
// (transport/mp_protocol.h) and takes every rank's, so that all ranks decide from the same bytes:
//   B  this rank's IPC handles, its view of peer access, rank 0's NCCL id, the limits it resolved
//   C  every peer's buffers mapped            D, E  the mappings proven (seeded stores and loads)
//   F  NCCL (ncclCommInitRank)                G     the host-staged area; then the names are unlinked
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "init/group_builder.h"
#include "transport/mp_protocol.h"
#include "transport/shm.h"

namespace arfuse {

struct IpcWhere {
  int rank, device, count, timeoutMs;    // count: CUDA devices this process sees
  const std::vector<mp::Hello>* hellos;  // phase A, every rank's
  ShmSegment *seg, *reservedHost;        // the group segment (mapped), rank 0's reserved host-staged one
  std::string groupName, hostName;
  mp::InitArea* ia;
  LogContext ctx;
  PlanPolicy configured;  // what every rank falls back to if their resolved limits differ
};

std::unique_ptr<Transport> makeIpcTransport(const IpcWhere& where);

}  // namespace arfuse
