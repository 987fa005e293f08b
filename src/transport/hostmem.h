// Host memory the GPUs map (hostmem.cc): pinned in one process, POSIX shared memory across processes.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "init/group.h"
#include "transport/mp_protocol.h"
#include "transport/shm.h"

namespace arfuse {

// In-process: the group area, pinned and mapped into every device.
Status allocatePinnedGroupArea(Group* g);
// In-process: the host-staged exchange area for messages up to messageBytes, pinned and mapped into
// every device of `unique` (fabric.hostStagedDetail says why not; not fatal).
Status allocatePinnedHostArena(Group* g, const std::vector<int>& unique, long long messageBytes);
// Multi-process: the group segment registered with CUDA as the group area.
Status mapSharedGroupArea(Group* g, ShmSegment* seg);
// Multi-process, phase G: rank 0 sizes the host-staged segment it reserved, the others open it;
// everyone registers it with CUDA.
Status mapSharedHostArea(Group* g, int rank, const std::vector<mp::Hello>& h, ShmSegment* reservedHost,
                         const std::string& hostName, int timeoutMs);

}  // namespace arfuse
