// The probe: fills the topology model in on the machine it runs on.
//
// Reported facts come from CUDA (device properties, cudaDeviceCanAccessPeer) and NVML, which is
// loaded at run time (a missing NVML is reported in ProbeResult, never a crash). Measured facts come
// from kernels (probe_measure.cu): per ordered pair a real peer load and store checked word by word,
// read and write bandwidth with every pair transferring at once, each pair's read bandwidth alone,
// and the one-way flag latency; per GPU the pinned-host-memory bandwidth and flag round trip that
// the host-staged path pays. Library `arfuse_topo_probe` (CUDA runtime, libdl); the model itself,
// `arfuse_topo`, stays free of both.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "topology.h"

namespace arfuse {
namespace topo {

struct ProbeOptions {
  bool measure = true;  // run the measured probes (kernels); false: reported facts only
  std::string nvmlLibrary = "libnvidia-ml.so.1";
  double timeoutSeconds = 5.0;       // bound on every probe kernel; past it the probe stops measuring
  size_t checkBytes = 256 << 10;     // buffer of the peer load / store check
  size_t bandwidthBytes = 16 << 20;  // per pair and pass
  int bandwidthPasses = 4;
  int latencyRounds = 2000;     // ping-pong rounds (the first 10 % are warm-up)
  size_t hostBytes = 64 << 20;  // pinned host buffer of the host bandwidth probe
};

struct ProbeResult {
  bool ok = false;             // `topology` holds every visible GPU
  std::string error;           // why not: no GPU visible, a CUDA call failed
  int cudaDriverVersion = 0;   // cudaDriverGetVersion: the newest CUDA the driver supports (0: no driver)
  int cudaRuntimeVersion = 0;  // cudaRuntimeGetVersion
  bool nvmlLoaded = false;
  std::string nvmlError;           // why NVML's facts are missing ("" when loaded)
  bool measured = false;           // the measured probes ran to the end
  std::vector<std::string> notes;  // one line per thing worth saying: what was not measured and why
  Topology topology;               // source "probe"
};

// Probes every GPU visible to this process (CUDA ordinal order). Never throws, never aborts: an
// absent GPU, driver or NVML is a result. Leaves no peer access enabled and frees what it allocated,
// except after a probe kernel timed out (then the device may be unusable and a note says so).
ProbeResult probeTopology(const ProbeOptions& opt = {});

// This machine's host name ("" when unknown), and the NVIDIA kernel module's version from
// /proc/driver/nvidia/version ("580.159.04"; "" when Linux does not expose it).
std::string hostName();
std::string procDriverVersion();

}  // namespace topo
}  // namespace arfuse
