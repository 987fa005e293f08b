// NVML, loaded at run time.
//
// arfuse never links against libnvidia-ml: a container without the driver's NVML library, or a
// machine whose NVML is older than the functions we ask for, must still run (with fewer facts), and
// say so. Only the handful of NVML calls the topology needs are declared here, with the types of
// NVML's ABI written out (nvml.h is not needed to build). A function missing from an old NVML is
// left null and the fact it would give stays absent.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "probe_map.h"
#include "topology.h"

namespace arfuse {
namespace topo {
namespace nvml {

struct DeviceSt;
using Device = DeviceSt*;

// nvmlPciInfo_t (v3 layout, used by nvmlDeviceGetPciInfo_v3 and nvmlDeviceGetNvLinkRemotePciInfo_v2).
struct PciInfo {
  char busIdLegacy[16];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;
  unsigned int pciSubSystemId;
  char busId[32];
};

// Facts NVML gives about one GPU (looked up by its PCI bus id, so CUDA's ordinal order and
// CUDA_VISIBLE_DEVICES need no mapping).
struct GpuFacts {
  bool found = false;
  std::string error;  // why not found
  std::string name;
  std::string uuid;
  std::string busId;  // normalized
  std::optional<int> numaNode;
  std::optional<int> pcieGen;
  std::optional<int> pcieWidth;
  std::optional<NvlinkEnds> nvlinks;  // absent when NVML cannot enumerate NVLinks here
};

// Facts about an ordered pair.
struct PairFacts {
  P2pStatus read = P2pStatus::kUnknown;
  P2pStatus write = P2pStatus::kUnknown;
  P2pStatus atomics = P2pStatus::kUnknown;
  PcieLink pcie = PcieLink::kUnknown;
};

class Library {
 public:
  Library() = default;
  ~Library();
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;

  // dlopen()s `path`, resolves the functions and calls nvmlInit. False with error() set when the
  // library is missing, too old (a required function is absent) or nvmlInit fails; never aborts.
  bool open(const std::string& path = "libnvidia-ml.so.1");
  bool loaded() const { return init_; }
  const std::string& error() const { return error_; }

  std::string driverVersion();  // "575.57.08", "" when unknown
  std::string nvmlVersion();    // "12.575.57.08", "" when unknown

  // Everything NVML knows about the GPU at `busId` (normalized).
  GpuFacts gpu(const std::string& busId);
  PairFacts pair(const std::string& busA, const std::string& busB);

 private:
  // The device at `busId`, or NVML's failure (which the facts record as their error).
  Status handle(const std::string& busId, Device* out);
  std::string errorText(int rc);

  void* lib_ = nullptr;
  bool init_ = false;
  std::string error_;

  // Resolved entry points (null when absent). Signatures follow nvml.h.
  int (*init_fn_)() = nullptr;
  int (*shutdown_)() = nullptr;
  const char* (*errorString_)(int) = nullptr;
  int (*driverVersion_)(char*, unsigned) = nullptr;
  int (*nvmlVersion_)(char*, unsigned) = nullptr;
  int (*byBusId_)(const char*, Device*) = nullptr;
  int (*name_)(Device, char*, unsigned) = nullptr;
  int (*uuid_)(Device, char*, unsigned) = nullptr;
  int (*pciInfo_)(Device, PciInfo*) = nullptr;
  int (*numaNode_)(Device, unsigned*) = nullptr;
  int (*maxPcieGen_)(Device, unsigned*) = nullptr;
  int (*maxPcieWidth_)(Device, unsigned*) = nullptr;
  int (*p2pStatus_)(Device, Device, int, int*) = nullptr;
  int (*commonAncestor_)(Device, Device, int*) = nullptr;
  int (*nvlinkState_)(Device, unsigned, int*) = nullptr;
  int (*nvlinkRemotePci_)(Device, unsigned, PciInfo*) = nullptr;
  int (*nvlinkRemoteType_)(Device, unsigned, int*) = nullptr;
};

}  // namespace nvml
}  // namespace topo
}  // namespace arfuse
