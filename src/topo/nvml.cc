#include "nvml.h"

#include <dlfcn.h>

#include <cstring>

namespace arfuse {
namespace topo {
namespace nvml {

namespace {

// The values of NVML's own enums that this file uses (NVIDIA's nvml.h is not needed to build): nvmlReturn_t,
// nvmlGpuP2PCapsIndex_t and nvmlIntNvLinkDeviceType_t. The functions are resolved with int in their
// place, so the enumerators compare with what they return.
enum Return : int { kSuccess = 0, kErrorInvalidArgument = 2, kErrorNotSupported = 3 };
enum P2pCapsIndex : int { kP2pRead = 0, kP2pWrite = 1, kP2pAtomics = 3 };
enum NvlinkRemoteType : int { kNvlinkRemoteGpu = 0, kNvlinkRemoteSwitch = 2 };
// NVML_NVLINK_MAX_LINKS is 18 today; ask further and stop at the first "invalid argument", so a
// later GPU with more links is still counted.
constexpr unsigned kMaxLinksAsked = 64;

template <typename F>
void resolve(void* lib, const char* name, F* fn) {
  *fn = reinterpret_cast<F>(dlsym(lib, name));
}

template <typename F>
void resolveEither(void* lib, const char* name, const char* fallback, F* fn) {
  resolve(lib, name, fn);
  if (!*fn) resolve(lib, fallback, fn);
}

}  // namespace

Library::~Library() {
  if (init_ && shutdown_) shutdown_();
  if (lib_) dlclose(lib_);
}

bool Library::open(const std::string& path) {
  if (init_) return true;
  lib_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib_) {
    const char* e = dlerror();
    error_ = e ? std::string(e) : "cannot load " + path;  // dlerror names the file and the reason
    return false;
  }
  resolveEither(lib_, "nvmlInit_v2", "nvmlInit", &init_fn_);
  resolve(lib_, "nvmlShutdown", &shutdown_);
  resolve(lib_, "nvmlErrorString", &errorString_);
  resolve(lib_, "nvmlSystemGetDriverVersion", &driverVersion_);
  resolve(lib_, "nvmlSystemGetNVMLVersion", &nvmlVersion_);
  resolveEither(lib_, "nvmlDeviceGetHandleByPciBusId_v2", "nvmlDeviceGetHandleByPciBusId", &byBusId_);
  resolve(lib_, "nvmlDeviceGetName", &name_);
  resolve(lib_, "nvmlDeviceGetUUID", &uuid_);
  resolve(lib_, "nvmlDeviceGetPciInfo_v3", &pciInfo_);
  resolve(lib_, "nvmlDeviceGetNumaNodeId", &numaNode_);
  resolve(lib_, "nvmlDeviceGetMaxPcieLinkGeneration", &maxPcieGen_);
  resolve(lib_, "nvmlDeviceGetMaxPcieLinkWidth", &maxPcieWidth_);
  resolve(lib_, "nvmlDeviceGetP2PStatus", &p2pStatus_);
  resolve(lib_, "nvmlDeviceGetTopologyCommonAncestor", &commonAncestor_);
  resolve(lib_, "nvmlDeviceGetNvLinkState", &nvlinkState_);
  resolve(lib_, "nvmlDeviceGetNvLinkRemotePciInfo_v2", &nvlinkRemotePci_);
  resolve(lib_, "nvmlDeviceGetNvLinkRemoteDeviceType", &nvlinkRemoteType_);
  const char* missing = !init_fn_    ? "nvmlInit_v2"
                        : !shutdown_ ? "nvmlShutdown"
                        : !byBusId_  ? "nvmlDeviceGetHandleByPciBusId_v2"
                                     : nullptr;
  if (missing) {
    error_ = path + " lacks " + missing + " (NVML too old)";
    dlclose(lib_);
    lib_ = nullptr;
    return false;
  }
  const int rc = init_fn_();
  if (rc != kSuccess) {
    error_ = "nvmlInit failed: " + errorText(rc);
    dlclose(lib_);
    lib_ = nullptr;
    return false;
  }
  init_ = true;
  return true;
}

std::string Library::errorText(int rc) {
  const char* s = errorString_ ? errorString_(rc) : nullptr;
  return (s ? std::string(s) : std::string("error")) + " (" + std::to_string(rc) + ")";
}

std::string Library::driverVersion() {
  char buf[96] = {};
  if (!init_ || !driverVersion_ || driverVersion_(buf, sizeof buf) != kSuccess) return "";
  return buf;
}

std::string Library::nvmlVersion() {
  char buf[96] = {};
  if (!init_ || !nvmlVersion_ || nvmlVersion_(buf, sizeof buf) != kSuccess) return "";
  return buf;
}

Status Library::handle(const std::string& busId, Device* out) {
  *out = nullptr;
  if (!init_) return ARFUSE_FAIL(arfuseSystemError, "%s", error_.c_str());
  const int rc = byBusId_(busId.c_str(), out);
  if (rc != kSuccess)
    return ARFUSE_FAIL(arfuseSystemError, "nvmlDeviceGetHandleByPciBusId(%s): %s", busId.c_str(),
                       errorText(rc).c_str());
  return Status();
}

GpuFacts Library::gpu(const std::string& busId) {
  GpuFacts f;
  Device d = nullptr;
  if (const Status found = handle(busId, &d); !found.ok()) {
    f.error = found.message();  // a fact: what NVML could not say about this GPU
    return f;
  }
  f.found = true;
  char buf[128] = {};
  if (name_ && name_(d, buf, sizeof buf) == kSuccess) f.name = buf;
  std::memset(buf, 0, sizeof buf);
  if (uuid_ && uuid_(d, buf, sizeof buf) == kSuccess) f.uuid = buf;
  PciInfo pci{};
  if (pciInfo_ && pciInfo_(d, &pci) == kSuccess) f.busId = normalizeBusId(pci.busId);
  if (f.busId.empty()) f.busId = busId;
  unsigned v = 0;
  if (numaNode_ && numaNode_(d, &v) == kSuccess && v < (1u << 20)) f.numaNode = static_cast<int>(v);
  if (maxPcieGen_ && maxPcieGen_(d, &v) == kSuccess && v >= 1 && v <= 16) f.pcieGen = static_cast<int>(v);
  if (maxPcieWidth_ && maxPcieWidth_(d, &v) == kSuccess && v >= 1 && v <= 64) f.pcieWidth = static_cast<int>(v);
  if (nvlinkState_ && nvlinkRemotePci_) {
    NvlinkEnds ends;
    bool answered = false;
    for (unsigned link = 0; link < kMaxLinksAsked; ++link) {
      int active = 0;
      const int rc = nvlinkState_(d, link, &active);
      if (rc == kErrorInvalidArgument) break;  // past the last link
      if (rc == kErrorNotSupported) {
        answered = true;  // no NVLink on this GPU: a known zero
        break;
      }
      if (rc != kSuccess) break;
      answered = true;
      if (!active) continue;
      int type = kNvlinkRemoteGpu;
      if (nvlinkRemoteType_ && nvlinkRemoteType_(d, link, &type) != kSuccess) continue;
      if (type == kNvlinkRemoteSwitch) {
        ++ends.switchLinks;
      } else if (type == kNvlinkRemoteGpu) {
        PciInfo remote{};
        if (nvlinkRemotePci_(d, link, &remote) == kSuccess) {
          std::string id = normalizeBusId(remote.busId);
          if (!id.empty()) ends.gpuPeers.push_back(id);
        }
      }
    }
    if (answered) f.nvlinks = ends;
  }
  return f;
}

PairFacts Library::pair(const std::string& busA, const std::string& busB) {
  PairFacts p;
  Device a = nullptr, b = nullptr;
  if (!handle(busA, &a).ok() || !handle(busB, &b).ok()) return p;  // unknown facts, as NVML's absence leaves them
  if (p2pStatus_) {
    int st = 0;
    int rc = p2pStatus_(a, b, kP2pRead, &st);
    p.read = p2pFromNvml(rc, st);
    rc = p2pStatus_(a, b, kP2pWrite, &st);
    p.write = p2pFromNvml(rc, st);
    rc = p2pStatus_(a, b, kP2pAtomics, &st);
    p.atomics = p2pFromNvml(rc, st);
  }
  if (commonAncestor_) {
    int level = -1;
    if (commonAncestor_(a, b, &level) == kSuccess) p.pcie = pcieFromNvmlLevel(level);
  }
  return p;
}

}  // namespace nvml
}  // namespace topo
}  // namespace arfuse
