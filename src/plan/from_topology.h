// The bridge from a machine description (src/topo: probed or recorded) to what the plan needs.
// Pure: `arfuse plan --topology FILE` and the CPU tests explain decisions on machines we do not
// have (8 x H200 NVSwitch, RTX PRO 6000 behind PCIe switches, consumer cards without P2P, ...).
#pragma once

#include <string>
#include <vector>

#include "plan/plan.h"
#include "topo/topology.h"

namespace arfuse {

// Fabric for ranks placed on `devices` (CUDA ordinals of `t`; a repeated ordinal is a virtual rank).
// `ncclAvailable`: whether an NCCL communicator could exist (false for virtual ranks regardless).
// Returns false with *error when a device is not in the topology.
bool fabricFromTopology(const topo::Topology& t, const std::vector<int>& devices, bool ncclAvailable, Fabric* out,
                        std::string* error);

}  // namespace arfuse
