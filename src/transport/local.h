// The in-process transport (init/group_builder.h Transport): one process drives every rank, so
// every buffer is a plain device pointer -- the same device for virtual ranks, a peer device with
// peer access enabled otherwise (UVA). Buffers with cudaMalloc, peer access enabled between the
// distinct devices and proven (proveP2p), a pinned host area mapped into every device,
// ncclCommInitAll.
#pragma once

#include <memory>
#include <vector>

#include "init/group_builder.h"

namespace arfuse {

// `devices`: the CUDA ordinal of each rank (repeats are virtual ranks), alive while the transport
// is used; `unique`: the distinct ones, sorted.
std::unique_ptr<Transport> makeInProcessTransport(const int* devices, std::vector<int> unique);

}  // namespace arfuse
