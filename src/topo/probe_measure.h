// Internal to arfuse_topo_probe: the measured half of the probe (probe_measure.cu).
#pragma once

#include <string>
#include <vector>

#include "probe.h"
#include "topology.h"

namespace arfuse {
namespace topo {

// Fills Gpu::host and Link::measured of `t` (whose GPUs are this process's CUDA devices, in
// ordinal order, with canAccessPeer already set). Pairs without canAccessPeer are not touched
// (their P2P verdict is already "no"). Appends a note per thing not measured. Returns false when it
// had to stop early (a CUDA error or a kernel past the timeout); what was measured until then stays.
bool measureTopology(Topology* t, const ProbeOptions& opt, std::vector<std::string>* notes);

}  // namespace topo
}  // namespace arfuse
