// The pure half of the probe: turning what NVML and CUDA report into the topology model's values.
//
// Kept apart from the code that calls NVML and CUDA so that every mapping (NVML's topology levels
// and P2P statuses, bus-id spellings, NVLink counts through NVSwitches) is tested on a CPU.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "topology.h"

namespace arfuse {
namespace topo {

// NVML's nvmlGpuTopologyLevel_t (0 INTERNAL, 10 SINGLE, 20 MULTIPLE, 30 HOSTBRIDGE, 40 NODE,
// 50 SYSTEM) to the model's PCIe level; anything else is kUnknown.
PcieLink pcieFromNvmlLevel(int level);

// NVML's answer to nvmlDeviceGetP2PStatus: `rc` is the call's nvmlReturn_t, `status` the
// nvmlGpuP2PStatus_t it wrote. A failed call is kUnknown, except NVML_ERROR_NOT_SUPPORTED (3),
// which is an answer: kNotSupported.
P2pStatus p2pFromNvml(int rc, int status);

// "0000:1B:00.0", "00000000:1b:00.0", "1b:00.0" -> "00000000:1b:00.0" (NVML's layout: 8-digit
// domain; lower case, as the fixtures and sysfs write hex). Returns "" when `s` is not a bus id.
std::string normalizeBusId(const std::string& s);
// The sysfs spelling of a bus id (4-digit domain): "00000000:1b:00.0" -> "0000:1b:00.0".
std::string sysfsBusId(const std::string& normalized);

// CUDA's 16 UUID bytes as nvidia-smi prints them: "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx".
std::string formatGpuUuid(const unsigned char bytes[16]);

// A CUDA version number (12080) as "12.8".
std::string cudaVersionText(int version);

// The active NVLinks of one GPU, as NVML enumerates them link by link: the bus ids of GPUs at the
// far end of direct links (one entry per link), and how many links end at an NVSwitch.
struct NvlinkEnds {
  std::vector<std::string> gpuPeers;  // normalized bus ids
  int switchLinks = 0;
};
// Active NVLinks between each ordered pair of `busIds` (normalized, in CUDA ordinal order): direct
// links counted per link, plus, when both GPUs reach NVSwitches, the smaller of their switch link
// counts (every GPU on an NVSwitch fabric reaches every other through it, at the pace of the GPU with
// fewer links). result[i][j]; the diagonal is 0.
std::vector<std::vector<int>> nvlinkMatrix(const std::vector<std::string>& busIds, const std::vector<NvlinkEnds>& ends);

// The NUMA node in a sysfs numa_node file's text ("1\n"); absent for "-1" (no affinity) or junk.
std::optional<int> parseNumaNode(const std::string& text);

}  // namespace topo
}  // namespace arfuse
