// `arfuse doctor`, the part without CUDA: its arguments, the report it fills, the checks it judges
// (each OK / WARN / FAIL with a one-line fix), and the text and JSON it prints. doctor.cc gathers
// the facts on a real machine; the CPU tests feed recorded topologies and synthetic environments.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "doctor_shm.h"
#include "topo/topology.h"

namespace arfuse {
namespace cli {
namespace checkup {

struct Args {
  bool help = false;
  bool json = false;
  bool calibrate = false;
  bool selftest = true;       // --no-selftest: skip the self-test and the plan table
  bool measure = true;        // --no-measure: reported facts only
  std::string topologyPath;   // --topology FILE: judge a recorded machine (no GPU work)
  std::string saveTopology;   // --save-topology FILE: write the probed topology (arfuse-topology/1)
  std::vector<int> ranks;     // --ranks N[,N...]
  bool virtualRanks = false;  // --virtual: ranks on GPU 0 even with several GPUs
  int hidden = 7168;
  std::string dtype = "bf16";                   // bf16 | fp16 | fp32
  std::vector<int> tokens;                      // --tokens T,T,...: sizes of the plan table and of --calibrate
  bool quick = false;                           // --quick: fewer sizes and iterations (calibrate)
  std::string out = "arfuse_calibration.json";  // --out FILE (calibrate)
  int iters = 20;                               // -n (calibrate)
  int calls = 20;                               // --calls: calls per CUDA graph (calibrate)
  int warmup = 3;                               // -w (calibrate)
  bool clean = false;                           // --clean: remove the /dev/shm/arfuse-* segments no live process holds
};

// False with *error naming the argument (exit 2).
bool parseArgs(const std::vector<std::string>& args, Args* out, std::string* error);
const char* usage();
// The token counts doctor uses: the given list, or 1..2048 doubling (--quick: 1,4,16,64,256,1024).
std::vector<int> tokenList(const Args& a);

enum class Status { kOk, kWarn, kFail };
const char* statusName(Status s);  // "OK", "WARN", "FAIL"

struct Check {
  std::string name;  // short id: gpu, driver, nvml, arch, p2p, ...
  Status status = Status::kOk;
  std::string message;  // one line: what was found
  std::string fix;      // one line: what to do ("" for OK)
};

struct Param {
  std::string name, value, source, error;  // source: "default" or "environment"
};

struct Environment {
  std::string buildInfo;      // arfuseGetBuildInfo()
  std::string driverVersion;  // "580.159.04"; "" when unknown
  int cudaDriverVersion = 0;  // newest CUDA the driver supports (0: no driver)
  int cudaRuntimeVersion = 0;
  std::string ncclRuntime;  // "2.28.9" as loaded; "" when unknown
  bool nvmlLoaded = false;
  std::string nvmlError;
  std::string nvmlVersion;
  int deviceCount = 0;
  std::string deviceError;              // why no device is visible
  std::vector<Param> params;            // every ARFUSE_* setting
  std::vector<std::string> unknownEnv;  // ARFUSE_* names that are not settings (paramUnknownNames: typos)
  std::vector<std::pair<std::string, std::string>> otherEnv;  // NCCL_NVLS_ENABLE, CUDA_VISIBLE_DEVICES, ... (set ones)
};

// Self-test of one path on the doctor's group.
struct PathResult {
  std::string algo;
  bool eligible = false;
  std::string why;  // not eligible: the library's reason; failed: the first failure
  int passed = 0, failed = 0;
};

struct PlanRow {
  int tokens = 0;
  long long bytes = 0;
  bool ok = false;
  std::string algo;
  std::string reason;  // the library's reason (or its error)
};

struct Report {
  Environment env;
  bool haveTopology = false;
  topo::Topology topology;
  std::string topologySource;  // "probe" or "file PATH"
  bool probeMeasured = false;  // the measured probes ran to the end
  std::vector<std::string> probeNotes;
  std::vector<int> devices;  // the group the self-test and the plan table used, one entry per rank
  bool virtualRanks = false;
  bool selftestRan = false;
  std::string selftestSkipped;  // why not, when !selftestRan
  std::vector<PathResult> selftest;
  std::vector<PlanRow> plan;
  std::string planError;  // the group could not be created for the plan table
  int hidden = 7168;
  std::string dtype = "bf16";
  std::string calibrationFile;  // ARFUSE_CALIBRATION_FILE, "" when unset
  bool calibrationApplies = false;
  std::string calibrationWhy;  // loadCalibrationPolicy's line
  ShmScan shm;                 // /dev/shm/arfuse-*: stale segments of groups killed during init
};

// "... archs 80,86,90" -> {80, 86, 90}.
std::vector<int> buildArchs(const std::string& buildInfo);
// How a GPU of compute capability cc (major*10+minor) runs this build: OK native code, WARN only
// by JIT from an older architecture's PTX, FAIL not at all. *text says which.
Status archSupport(int cc, const std::vector<int>& built, std::string* text);

std::vector<Check> runChecks(const Report& r);
// 1 when any check is FAIL, else 0.
int exitCode(const std::vector<Check>& checks);
// The report and its checks as text and as JSON (doctor_render.cc).
std::string renderText(const Report& r, const std::vector<Check>& checks);
std::string renderJson(const Report& r, const std::vector<Check>& checks);
// "13.0" from a CUDA version number (13000).
std::string cudaVersionText(int v);

}  // namespace checkup
}  // namespace cli
}  // namespace arfuse
