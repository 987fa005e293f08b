#include "common/params.h"

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <sstream>

#include "arfuse/arfuse.h"

namespace arfuse {
namespace {

const std::vector<ParamSpec> kSpecs = {
    {"ARFUSE_ALGO", "enum", "auto",
     "Force the algorithm of every communicator whose config leaves `algo` at -1: auto, lowlatency, oneshot, "
     "twoshot, hoststaged, nccl."},
    {"ARFUSE_TIMEOUT_MS", "int", "10000",
     "Bound on every device-side wait for a peer, in milliseconds (config `timeoutMs` wins). On expiry the group "
     "is aborted and calls fail with arfusePeerTimeout."},
    {"ARFUSE_LOG_LEVEL", "enum", "WARN", "Least severe log line printed on stderr: DEBUG, INFO, WARN, ERROR, NONE."},
    {"ARFUSE_BOOTSTRAP_ADDR", "address", "127.0.0.1",
     "Where rank 0 of arfuseCommInitRank listens (arfuseGetUniqueId): an IPv4/IPv6 literal or an interface name "
     "(eth0). Groups span one host, so loopback is the default."},
    {"ARFUSE_DEBUG_FILE", "path", "",
     "Also append every printed log line to this file (`%p` becomes the process id, `%h` the host name), so each "
     "process of a server keeps its own arfuse log for `arfuse triage`."},
    {"ARFUSE_CHECK_POINTERS", "bool", "1",
     "Check with cudaPointerGetAttributes that every pointer is device memory of the communicator's GPU before "
     "launch (about a microsecond per pointer on the host; 0 skips it)."},
    {"ARFUSE_ONESHOT_MAX_BYTES", "int", "524288",
     "Auto plan: use one-shot while message bytes x (nranks - 1) stays at or under this; two-shot above. "
     "Unset, an in-process group whose GPUs NVML reports joined by NVLink pair by pair uses 2097152 (measured "
     "on 4 x H200, docs/perf.md); a calibration file replaces both."},
    {"ARFUSE_HOST_ONESHOT_MAX_BYTES", "int", "131072",
     "Host-staged path: use its one-shot variant while message bytes x (nranks - 1) stays at or under this; "
     "two-shot above (two ranks always use one-shot)."},
    {"ARFUSE_HOST_STAGED_MAX_BYTES", "int", "1048576",
     "Auto plan without peer access: use the host-staged path for messages up to this many bytes per rank, NCCL "
     "above (when NCCL is available); also sizes the pinned host area in that case."},
    {"ARFUSE_FLIGHT_RECORDER", "bool", "1",
     "Kernels stamp every call into the flight recorder in the rank's device memory, which the host copies out "
     "for arfuseCommDumpState, the watchdog and `arfuse triage`; 0 turns the stamps off."},
    {"ARFUSE_PDL", "bool", "1",
     "On sm_90 and newer, launch the kernels with programmatic dependent launch (a kernel's launch and prologue "
     "overlap the previous kernel's tail, CUDA graphs included); 0 launches them plainly."},
    {"ARFUSE_MAX_CHUNKS", "int", "8",
     "Tuning: the most CTAs one row may be split over (a thread-block cluster, sm_90+): 1, 2, 4 or 8. The plan "
     "splits rows of small calls so that their loads and stores spread over more SMs."},
    {"ARFUSE_POLL_SLEEP_NS", "int", "0",
     "Tuning: nanoseconds a low-latency receiver sleeps between polling rounds once a few rounds found nothing "
     "(0: never); less pressure on the memory system while many CTAs wait, a little more latency."},
    {"ARFUSE_DETERMINISTIC", "bool", "0",
     "1: the NCCL path all-gathers the ranks' inputs and sums them in fp32 in rank order (the arithmetic of every "
     "arfuse path), so a row's outputs are the same bits on every path and for any number of tokens in the call; "
     "it moves (n - 1) x the message instead of NCCL's 2 (n - 1) / n."},
    {"ARFUSE_MAX_BLOCKS", "int", "-1",
     "Cap on thread blocks per rank per call (config `maxBlocks` wins); -1 derives it from the device so that "
     "every rank's blocks are co-resident."},
    {"ARFUSE_CALIBRATION_FILE", "path", "",
     "A calibration file written by `arfuse doctor --calibrate` (schema arfuse-calibration/1). When its GPU UUIDs, "
     "fabric fingerprint and rank count match a communicator, the auto plan uses its measured crossovers instead of "
     "the built-in limits, and the plan's reasons name the file; otherwise one line says why it does not apply."},
    {"ARFUSE_WATCHDOG_MS", "int", "0",
     "Poll period of the host watchdog thread in milliseconds; 0 turns it off. It prints a kernel-recorded error "
     "(timeout, divergent call, concurrent use) as its canonical ERROR line as soon as it appears, even while the "
     "host is blocked elsewhere, and one WARN line for a call still running after max(timeout, 2 s)."},
    {"ARFUSE_DUMP_ON_SIGNAL", "bool", "0",
     "1: on SIGUSR1, write every live communicator's flight-recorder dump (the format `arfuse triage` reads) to "
     "stderr and to the ARFUSE_DEBUG_FILE file."},
    {"ARFUSE_CHECK_REPLICAS", "bool", "0",
     "1: every fused call checks that residual_in and weight are bitwise equal on every rank, as arfuse.h requires, "
     "and a difference aborts the group with arfuseMismatch naming the first differing rank and element. Costs a "
     "device-to-host copy of both and a host callback per call (also inside CUDA graphs, at every replay); "
     "in-process groups only."},
};

int parseLevel(const std::string& v) {
  static const char* names[] = {"DEBUG", "INFO", "WARN", "ERROR", "NONE"};
  for (int i = 0; i < 5; ++i) {
    std::string up;
    for (char c : v) up += static_cast<char>(toupper(static_cast<unsigned char>(c)));
    if (up == names[i]) return i;
  }
  return -1;
}

bool parseInt(const std::string& v, long long* out) {
  if (v.empty()) return false;
  char* end = nullptr;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (*end != '\0') return false;
  *out = x;
  return true;
}

std::string validate(const ParamSpec& s, const std::string& v) {
  const std::string name = s.name;
  long long x = 0;
  if (name == "ARFUSE_ALGO") return parseAlgoName(v) < 0 ? "expected auto|lowlatency|oneshot|twoshot|hoststaged|nccl" : "";
  if (name == "ARFUSE_LOG_LEVEL") return parseLevel(v) < 0 ? "expected DEBUG|INFO|WARN|ERROR|NONE" : "";
  if (name == "ARFUSE_CHECK_POINTERS" || name == "ARFUSE_DUMP_ON_SIGNAL" || name == "ARFUSE_FLIGHT_RECORDER")
    return (v == "0" || v == "1") ? "" : "expected 0 or 1";
  if (name == "ARFUSE_WATCHDOG_MS")
    return (parseInt(v, &x) && x >= 0 && x <= 3600000) ? "" : "expected 0 (off) or a period of 1..3600000 ms";
  if (name == "ARFUSE_TIMEOUT_MS") return (parseInt(v, &x) && x > 0) ? "" : "expected a positive integer";
  if (name == "ARFUSE_ONESHOT_MAX_BYTES") return (parseInt(v, &x) && x >= 0) ? "" : "expected an integer >= 0";
  if (name == "ARFUSE_HOST_ONESHOT_MAX_BYTES") return (parseInt(v, &x) && x >= 0) ? "" : "expected an integer >= 0";
  if (name == "ARFUSE_HOST_STAGED_MAX_BYTES") return (parseInt(v, &x) && x >= 16) ? "" : "expected an integer >= 16";
  if (name == "ARFUSE_DEBUG_FILE" || name == "ARFUSE_CALIBRATION_FILE") return v.empty() ? "expected a file path" : "";
  if (name == "ARFUSE_MAX_BLOCKS")
    return (parseInt(v, &x) && (x == -1 || (x >= 1 && x <= 128))) ? "" : "expected -1 or 1..128";
  return "";
}

const std::string& valueOf(const char* name) {
  for (const ParamValue& v : paramValues())
    if (std::string(v.spec->name) == name) return v.value;
  static const std::string empty;
  return empty;
}

}  // namespace

const std::vector<ParamSpec>& paramSpecs() { return kSpecs; }

const std::vector<ParamValue>& paramValues() {
  static std::vector<ParamValue> values;
  static std::once_flag once;
  std::call_once(once, [] {
    for (const ParamSpec& s : kSpecs) {
      ParamValue v{&s, s.defaultValue, false, ""};
      if (const char* env = std::getenv(s.name)) {
        std::string err = validate(s, env);
        if (err.empty()) {
          v.value = env;
          v.fromEnvironment = true;
        } else {
          v.error = std::string(s.name) + "=" + env + " ignored: " + err;
        }
      }
      values.push_back(v);
    }
  });
  return values;
}

int parseAlgoName(const std::string& name) {
  if (name == "auto") return arfuseAlgoAuto;
  if (name == "oneshot") return arfuseAlgoOneShot;
  if (name == "twoshot") return arfuseAlgoTwoShot;
  if (name == "nccl") return arfuseAlgoNccl;
  if (name == "lowlatency") return arfuseAlgoLowLatency;
  if (name == "hoststaged") return arfuseAlgoHostStaged;
  return -1;
}

int paramAlgo() {
  for (const ParamValue& v : paramValues())
    if (std::string(v.spec->name) == "ARFUSE_ALGO") return v.fromEnvironment ? parseAlgoName(v.value) : -1;
  return -1;
}
int paramTimeoutMs() { return std::atoi(valueOf("ARFUSE_TIMEOUT_MS").c_str()); }
int paramLogLevel() { return parseLevel(valueOf("ARFUSE_LOG_LEVEL")); }
bool paramCheckPointers() { return valueOf("ARFUSE_CHECK_POINTERS") != "0"; }
long long paramOneShotMaxBytes() { return std::atoll(valueOf("ARFUSE_ONESHOT_MAX_BYTES").c_str()); }
long long paramHostOneShotMaxBytes() { return std::atoll(valueOf("ARFUSE_HOST_ONESHOT_MAX_BYTES").c_str()); }
long long paramHostStagedMaxBytes() { return std::atoll(valueOf("ARFUSE_HOST_STAGED_MAX_BYTES").c_str()); }
int paramMaxBlocks() { return std::atoi(valueOf("ARFUSE_MAX_BLOCKS").c_str()); }
std::string paramDebugFile() { return valueOf("ARFUSE_DEBUG_FILE"); }
bool paramFlightRecorder() { return valueOf("ARFUSE_FLIGHT_RECORDER") == "1"; }
bool paramPdl() { return valueOf("ARFUSE_PDL") != "0"; }
int paramMaxChunks() {
  const int v = std::atoi(valueOf("ARFUSE_MAX_CHUNKS").c_str());
  return v >= 8 ? 8 : v >= 4 ? 4 : v >= 2 ? 2 : 1;
}
int paramPollSleepNs() { return std::max(0, std::min(10000, std::atoi(valueOf("ARFUSE_POLL_SLEEP_NS").c_str()))); }
bool paramDeterministic() { return valueOf("ARFUSE_DETERMINISTIC") == "1"; }
std::string paramBootstrapAddr() { return valueOf("ARFUSE_BOOTSTRAP_ADDR"); }
std::string paramCalibrationFile() { return valueOf("ARFUSE_CALIBRATION_FILE"); }
int paramWatchdogMs() { return std::atoi(valueOf("ARFUSE_WATCHDOG_MS").c_str()); }
bool paramDumpOnSignal() { return valueOf("ARFUSE_DUMP_ON_SIGNAL") == "1"; }

std::string paramsMarkdown() {
  std::ostringstream os;
  os << "| variable | type | default | meaning |\n|---|---|---|---|\n";
  for (const ParamSpec& s : kSpecs)
    os << "| `" << s.name << "` | " << s.type << " | `" << s.defaultValue << "` | " << s.description << " |\n";
  return os.str();
}

}  // namespace arfuse
