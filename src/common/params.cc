#include "common/params.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <sstream>

#include "arfuse/arfuse.h"
#include "common/defaults.h"
#include "common/log.h"

extern char** environ;

namespace arfuse {
namespace {

const std::vector<ParamSpec> kSpecs = {
    {"ARFUSE_ALGO", "name", "auto",
     "Force the algorithm of every communicator whose config leaves `algo` at -1: auto or a path's name, as "
     "`arfuse plan --help` lists them (hierarchical: groups that span hosts, docs/multihost.md). A name that is no "
     "path is reported once and ignored."},
    {"ARFUSE_TIMEOUT_MS", "int", "10000",
     "Bound on every device-side wait for a peer, and on every NCCL operation arfuse enqueues across hosts (from its "
     "start on the GPU; docs/multihost.md), in milliseconds, 1..86400000 (config `timeoutMs` wins). On expiry the "
     "group is aborted and calls fail with arfusePeerTimeout. Multi-process init waits max(30 s, this).",
     1, 86400000},
    {"ARFUSE_LOG_LEVEL", "enum", "WARN", "Least severe log line printed on stderr: DEBUG, INFO, WARN, ERROR, NONE."},
    {"ARFUSE_BOOTSTRAP_ADDR", "address", "",
     "Where rank 0 of arfuseCommInitRank listens (arfuseGetUniqueId). Unset (or `unix`): an abstract AF_UNIX socket "
     "on this host, where the kernel names the uid of every process that connects and only this user (and "
     "ARFUSE_BOOTSTRAP_UIDS) may join. An IPv4/IPv6 literal or an interface name (eth0): TCP there, for groups "
     "that span hosts; every hello then carries an HMAC keyed by the secret in the unique id (docs/bootstrap.md)."},
    {"ARFUSE_BOOTSTRAP_IFNAME", "interfaces", "",
     "TCP rendezvous on the first interface this list selects, with NCCL_SOCKET_IFNAME's syntax: name prefixes "
     "(`eth,ib`), `=` for exact names (`=eth0`), `^` to exclude (`^docker,lo`). Loopback only when named. Set this "
     "or ARFUSE_BOOTSTRAP_ADDR, not both."},
    {"ARFUSE_BOOTSTRAP_PORT", "int", "0",
     "TCP port of the rendezvous (0: an ephemeral port), for firewalls that open one port.", 0, 65535},
    {"ARFUSE_BOOTSTRAP_UIDS", "uids", "",
     "AF_UNIX rendezvous: user ids admitted besides rank 0's own, comma-separated (`1000,1001`); any other user is "
     "refused with a line that names its uid. Read on rank 0."},
    {"ARFUSE_DEBUG_FILE", "path", "",
     "Also append every printed log line to this file (`%p` becomes the process id, `%h` the host name), so each "
     "process of a server keeps its own arfuse log for `arfuse triage`."},
    {"ARFUSE_CHECK_POINTERS", "bool", "1",
     "Check with cudaPointerGetAttributes that every pointer is device memory of the communicator's GPU before "
     "launch (about a microsecond per pointer on the host; 0 skips it)."},
    {"ARFUSE_ONESHOT_MAX_BYTES", "int", ARFUSE_DEFAULT_TEXT(ARFUSE_DEFAULT_ONESHOT_MAX_BYTES),
     "Auto plan: use one-shot while message bytes x (nranks - 1) stays at or under this; two-shot above. "
     "Unset, a group whose GPUs NVML reports joined by NVLink pair by pair uses 2097152 (measured on 4 x H200, "
     "docs/perf.md) and a group whose ranks all share one GPU 4194304, in-process or one process per rank; a "
     "calibration file replaces these.",
     0, 1ll << 40},
    {"ARFUSE_HOST_ONESHOT_MAX_BYTES", "int", ARFUSE_DEFAULT_TEXT(ARFUSE_DEFAULT_HOST_ONESHOT_MAX_BYTES),
     "Host-staged path: use its one-shot variant while message bytes x (nranks - 1) stays at or under this; "
     "two-shot above (two ranks always use one-shot).",
     0, 1ll << 40},
    {"ARFUSE_HOST_STAGED_MAX_BYTES", "int", ARFUSE_DEFAULT_TEXT(ARFUSE_DEFAULT_HOST_STAGED_MAX_BYTES),
     "Auto plan without peer access: use the host-staged path for messages up to this many bytes per rank, NCCL "
     "above (when NCCL is available); also sizes the pinned host area in that case.",
     16, 1ll << 40},
    {"ARFUSE_FLIGHT_RECORDER", "bool", "1",
     "Kernels stamp every call into the flight recorder in the rank's device memory, which the host copies out "
     "for arfuseCommDumpState, the watchdog and `arfuse triage`; 0 turns the stamps off."},
    {"ARFUSE_PDL", "bool", "1",
     "On sm_90 and newer, launch the kernels with programmatic dependent launch (a kernel's launch and prologue "
     "overlap the previous kernel's tail, CUDA graphs included); 0 launches them plainly."},
    {"ARFUSE_LL_TWO_PHASE", "int", "-1",
     "Tuning: the low-latency path's two-phase variant (each slice of a row pushed to the rank that owns it, "
     "which pushes the reduced slice back): -1 as the plan decides, 0 never, 1 whenever the low-latency path "
     "runs a fused or all-reduce call at 2+ ranks whose tiles are at least nranks vectors wide.",
     -1, 1},
    {"ARFUSE_LL_TWO_PHASE_MAX_BYTES", "int", ARFUSE_DEFAULT_TEXT(ARFUSE_DEFAULT_LL_TWO_PHASE_MAX_BYTES),
     "Auto plan, 3+ ranks with peer access: messages above the low-latency limit and up to this many bytes per "
     "rank take the two-phase low-latency variant (at most 524288, and only where its tiles fit the per-CTA "
     "regions); 0: the auto plan never picks it.",
     0, 1ll << 40},
    {"ARFUSE_MAX_CHUNKS", "int", "8",
     "Tuning: the most CTAs one row may be split over (a thread-block cluster, sm_90+): 1, 2, 4 or 8. The plan "
     "splits rows of small calls so that their loads and stores spread over more SMs.",
     1, 8},
    {"ARFUSE_POLL_SLEEP_NS", "int", "0",
     "Tuning: nanoseconds a low-latency receiver sleeps between polling rounds once a few rounds found nothing "
     "(0: never); less pressure on the memory system while many CTAs wait, a little more latency.",
     0, 10000},
    {"ARFUSE_ROW_PUSH", "bool", "1",
     "Tuning: the CTAs of a split row (a cluster, sm_90+) of an add+RMSNorm call exchange their partial sums of "
     "squares by pushing them into each other's shared memory (st.async onto an mbarrier) instead of a cluster "
     "barrier followed by distributed-shared-memory loads: the same summation order and bits, one one-way trip "
     "(docs/perf.md change 28). 0: the barrier, for before/after measurements."},
    {"ARFUSE_WIDE_TWO", "bool", "1",
     "Tuning: whole rows of 513-1024 16-byte vectors (hidden 4104-8192 in bf16/fp16) of an add+RMSNorm call on the "
     "one-shot, two-shot and host-staged paths run the 2-vector kernels on 512 threads, which keep the row's "
     "inputs in registers and load the next tile's gather during a tile's finish (docs/perf.md change 34). 0: the "
     "8-vector kernels, for before/after measurements."},
    {"ARFUSE_EXP_SPLIT_VECS", "int", "256",
     "Experimental (issue 33; docs/perf.md): the plan splits a row over a cluster of CTAs while a chunk is larger "
     "than this many 16-byte vectors (256 today). Must be the same on every rank.",
     32, 4096},
    {"ARFUSE_EXP_SPLIT_SHARED", "bool", "0",
     "Experimental (issue 33; measured within +-0.2 us at 64-256 tokens, docs/perf.md change 28): where the plan "
     "would leave rows whole because "
     "the CTA caps cannot give every row CTAs of its own, split them anyway over the clusters that fit, several "
     "rows per cluster, so calls of tens of rows on capped virtual ranks run narrow CTAs instead of 512-thread "
     "ones. Must be the same on every rank."},
    {"ARFUSE_DETERMINISTIC", "bool", "0",
     "1: the NCCL path all-gathers the ranks' inputs and sums them in fp32 in rank order (the arithmetic of every "
     "arfuse path), so a row's outputs are the same bits on every path and for any number of tokens in the call; "
     "it moves (n - 1) x the message instead of NCCL's 2 (n - 1) / n."},
    {"ARFUSE_MAX_BLOCKS", "int", "-1",
     "Cap on thread blocks per rank per call (config `maxBlocks` wins); -1 derives it from the device so that "
     "every rank's blocks are co-resident.",
     -1, 128},
    {"ARFUSE_CALIBRATION_FILE", "path", "",
     "A calibration file written by `arfuse doctor --calibrate` (schema arfuse-calibration/1). When its GPU UUIDs, "
     "fabric fingerprint and rank count match a communicator, the auto plan uses its measured crossovers instead of "
     "the built-in limits, and the plan's reasons name the file; otherwise one line says why it does not apply."},
    {"ARFUSE_WATCHDOG_MS", "int", "0",
     "Poll period of the host watchdog thread in milliseconds; 0 turns it off. It prints a kernel-recorded error "
     "(timeout, divergent call, concurrent use) as its canonical ERROR line as soon as it appears, even while the "
     "host is blocked elsewhere, and one WARN line for a call still running after max(timeout, 2 s). (A group that "
     "spans hosts runs the thread anyway, to bound its NCCL operations: docs/multihost.md.)",
     0, 3600000},
    {"ARFUSE_NCCL_WATCH_GRAPHS", "bool", "1",
     "1 (the default): a group that spans hosts also bounds the NCCL operations it enqueues during CUDA-graph "
     "capture: a one-thread stamp kernel before and the guard after each count in device memory, which the "
     "watchdog copies out every tick; once operations have been in flight and none finished for the timeout (twice "
     "it on the hierarchical path), the group aborts as for an eager timeout. It costs one extra one-thread kernel "
     "per captured operation per replay (`scripts/graph_watch_cost.sh` measures it). 0: captured operations are "
     "only guarded, and a replay stuck in NCCL hangs (docs/multihost.md)."},
    {"ARFUSE_DUMP_ON_SIGNAL", "bool", "0",
     "1: on SIGUSR1, write every live communicator's flight-recorder dump (the format `arfuse triage` reads) to "
     "stderr and to the ARFUSE_DEBUG_FILE file."},
    {"ARFUSE_TEST_HOST_ID", "hostid", "",
     "TEST ONLY: the host identity arfuseCommInitRank uses for this process instead of hostname + boot_id, so that "
     "ranks on one machine form a group that spans simulated hosts (`h0`, `h1`; ranks with equal ids are one host). "
     "Never set it in production: ranks told they are on different hosts still share memory only within a host id, "
     "and NCCL needs NCCL_HOSTID to agree (docs/multihost.md)."},
    {"ARFUSE_CHECK_REPLICAS", "bool", "0",
     "1: every fused call checks that residual_in and weight are bitwise equal on every rank, as arfuse.h requires, "
     "and a difference aborts the group with arfuseMismatch naming the first differing rank and element. Costs a "
     "device-to-host copy of both, a host callback and a one-thread kernel per call (also inside CUDA graphs, at "
     "every replay). In-process groups and multi-process groups alike (one process per rank: the copies meet in "
     "the group's shared memory, which grows by (maxTokens + 1) x maxHidden x 2 or 4 bytes per rank; every rank "
     "must set it); a group that spans hosts compares the ranks of each host."},
};

// ARFUSE_* names read by other parts of arfuse, not by the library: not typos.
const char* const kReadElsewhere[] = {
    "ARFUSE_LIBRARY_PATH",       // the Python package: where libarfuse.so is
    "ARFUSE_LIBRARY",            // its older name
    "ARFUSE_SGLANG",             // arfuse.integrations.sglang: the plugin's switch
    "ARFUSE_SGLANG_MAX_TOKENS",  // ... and its decode size
    "ARFUSE_VLLM",               // arfuse.integrations.vllm: the pass's switch
    "ARFUSE_VLLM_MAX_TOKENS",    // ... and its decode size
    "ARFUSE_PLUGIN_COUNTERS",    // both plugins: a folder for each process's counters
    "ARFUSE_PURE_PYTHON",        // pip install ./python without building the library
    "ARFUSE_CUDA_MAJOR",         // ... the CUDA major the wheel is built for
    "ARFUSE_ARCH",               // ... the GPU architectures it builds (also a CMake variable)
    "ARFUSE_SGLANG_SITE",        // tests/python: where SGLang's modules are
    "ARFUSE_VLLM_TEST",          // tests/python: the opt-in vLLM pattern test
    "ARFUSE_ENGINE_WHEELS",      // scripts/fetch_engine_wheels.sh
    "ARFUSE_QUANT_EXHAUSTIVE",   // tests/cpu/quant_test.cc: every fp32 input
};

int parseLevel(const std::string& v) {
  static const char* names[] = {"DEBUG", "INFO", "WARN", "ERROR", "NONE"};
  std::string up;
  for (char c : v) up += static_cast<char>(toupper(static_cast<unsigned char>(c)));
  for (int i = 0; i < 5; ++i)
    if (up == names[i]) return i;
  return -1;
}

// Decimal integers only: an optional '-', digits, nothing else (no spaces, '+', hex, or overflow).
bool parseInteger(const std::string& v, long long* out) {
  if (v.empty() || v.size() > 20) return false;
  for (size_t i = 0; i < v.size(); ++i)
    if (!(std::isdigit(static_cast<unsigned char>(v[i])) || (i == 0 && v[i] == '-' && v.size() > 1))) return false;
  errno = 0;
  char* end = nullptr;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (errno == ERANGE || *end != '\0') return false;
  *out = x;
  return true;
}

// Levenshtein distance, for "did you mean".
size_t editDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

struct Loaded {
  std::vector<ParamValue> values;
  std::vector<std::string> unknown;
};

Loaded load() {
  Loaded l;
  for (const ParamSpec& s : kSpecs) {
    ParamValue v{&s, s.defaultValue, false, "", 0};
    parseParamValue(s, s.defaultValue, &v.number);
    if (const char* env = std::getenv(s.name)) {
      long long n = 0;
      const std::string err = parseParamValue(s, env, &n);
      if (err.empty()) {
        v.value = env;
        v.fromEnvironment = true;
        v.number = n;
      } else {
        v.error = std::string(s.name) + "=" + env + " ignored (the default " +
                  (*s.defaultValue ? std::string(s.defaultValue) : std::string("(unset)")) + " applies): " + err;
      }
    }
    l.values.push_back(v);
  }
  for (char** e = environ; e && *e; ++e) {
    const char* eq = std::strchr(*e, '=');
    const std::string name = eq ? std::string(*e, static_cast<size_t>(eq - *e)) : std::string(*e);
    if (name.rfind("ARFUSE_", 0) != 0) continue;
    bool known = false;
    for (const ParamSpec& s : kSpecs) known = known || name == s.name;
    for (const char* other : kReadElsewhere) known = known || name == other;
    if (known || name.rfind("ARFUSE_TEST_", 0) == 0) continue;  // ARFUSE_TEST_*: reserved for tests
    std::string best;
    size_t bestD = 4;
    for (const ParamSpec& s : kSpecs) {
      const size_t d = editDistance(name, s.name);
      if (d < bestD) bestD = d, best = s.name;
    }
    l.unknown.push_back(
        name + " is not an arfuse variable and is ignored" +
        (best.empty() ? std::string(" (`arfuse env --markdown` lists them)") : " (did you mean " + best + "?)"));
  }
  std::sort(l.unknown.begin(), l.unknown.end());
  return l;
}

const Loaded& loaded() {
  static Loaded l;
  static std::once_flag once;
  std::call_once(once, [] { l = load(); });
  return l;
}

const ParamValue& valueOf(const char* name) {
  for (const ParamValue& v : paramValues())
    if (std::strcmp(v.spec->name, name) == 0) return v;
  static const ParamValue none{nullptr, "", false, "", 0};
  return none;
}

}  // namespace

const std::vector<ParamSpec>& paramSpecs() { return kSpecs; }

std::string parseParamValue(const ParamSpec& s, const std::string& v, long long* number) {
  const std::string name = s.name;
  const std::string type = s.type;
  long long x = 0;
  if (type == "name") {  // a path's name: which names are paths, the registry says (algos/registry.h)
    if (v.empty() || v.size() > 31) return "expected a name of 1 to 31 characters";
    for (char c : v)
      if (!(std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c))))
        return "expected a path's name: lowercase letters and digits (auto, oneshot, ...)";
  } else if (name == "ARFUSE_LOG_LEVEL") {
    x = parseLevel(v);
    if (x < 0) return "expected DEBUG|INFO|WARN|ERROR|NONE";
  } else if (type == "bool") {
    if (v != "0" && v != "1") return "expected 0 or 1";
    x = v == "1";
  } else if (type == "int") {
    if (!parseInteger(v, &x) || x < s.min || x > s.max || (name == "ARFUSE_MAX_BLOCKS" && x == 0))
      return name == "ARFUSE_MAX_BLOCKS"
                 ? "expected -1 (derive) or 1..128"
                 : "expected an integer in " + std::to_string(s.min) + ".." + std::to_string(s.max);
  } else if (type == "uids") {
    if (v.empty()) return "";
    size_t p = 0;
    while (p <= v.size()) {
      size_t c = v.find(',', p);
      if (c == std::string::npos) c = v.size();
      long long u = 0;
      if (!parseInteger(v.substr(p, c - p), &u) || u < 0 || u > 4294967294ll)
        return "expected user ids (0..4294967294) separated by commas, e.g. 1000,1001";
      p = c + 1;
    }
  } else if (type == "interfaces") {
    if (v.empty()) return "";
    for (char c : v)
      if (!(std::isalnum(static_cast<unsigned char>(c)) || std::strchr("_.:,=^-@", c)))
        return "expected interface names or prefixes separated by commas (eth,ib or =eth0 or ^docker,lo)";
  } else if (type == "hostid") {
    if (v.size() > 63) return "expected at most 63 characters";
    for (char c : v)
      if (!(std::isalnum(static_cast<unsigned char>(c)) || std::strchr("_.:-", c)))
        return "expected letters, digits and _.:- (h0, node-1)";
  } else if (type == "path" || type == "address") {
    if (v.empty() && *s.defaultValue == '\0' && type == "path") return "expected a file path";
    for (char c : v)
      if (static_cast<unsigned char>(c) < 0x20) return "expected text without control characters";
  }
  if (number) *number = x;
  return "";
}

const std::vector<ParamValue>& paramValues() {
  const Loaded& l = loaded();
  // Once per process, after loading (logLine reads ARFUSE_LOG_LEVEL through this same function).
  static std::atomic<bool> warned{false};
  if (!warned.exchange(true)) {
    for (const ParamValue& v : l.values)
      if (!v.error.empty()) ARFUSE_LOG(kLogWarn, LogContext{}, "", "%s", v.error.c_str());
    for (const std::string& u : l.unknown) ARFUSE_LOG(kLogWarn, LogContext{}, "", "%s", u.c_str());
  }
  return l.values;
}

const std::vector<std::string>& paramUnknownNames() { return loaded().unknown; }

std::string paramAlgoName() {
  const ParamValue& v = valueOf("ARFUSE_ALGO");
  return v.fromEnvironment && v.error.empty() ? v.value : std::string();
}
int paramTimeoutMs() { return static_cast<int>(valueOf("ARFUSE_TIMEOUT_MS").number); }
int paramLogLevel() { return static_cast<int>(valueOf("ARFUSE_LOG_LEVEL").number); }
bool paramCheckPointers() { return valueOf("ARFUSE_CHECK_POINTERS").number != 0; }
long long paramOneShotMaxBytes() { return valueOf("ARFUSE_ONESHOT_MAX_BYTES").number; }
long long paramHostOneShotMaxBytes() { return valueOf("ARFUSE_HOST_ONESHOT_MAX_BYTES").number; }
long long paramHostStagedMaxBytes() { return valueOf("ARFUSE_HOST_STAGED_MAX_BYTES").number; }
int paramMaxBlocks() { return static_cast<int>(valueOf("ARFUSE_MAX_BLOCKS").number); }
std::string paramDebugFile() { return valueOf("ARFUSE_DEBUG_FILE").value; }
bool paramFlightRecorder() { return valueOf("ARFUSE_FLIGHT_RECORDER").number != 0; }
bool paramPdl() { return valueOf("ARFUSE_PDL").number != 0; }
int paramMaxChunks() {
  const long long v = valueOf("ARFUSE_MAX_CHUNKS").number;
  return v >= 8 ? 8 : v >= 4 ? 4 : v >= 2 ? 2 : 1;
}
int paramLlTwoPhase() { return static_cast<int>(valueOf("ARFUSE_LL_TWO_PHASE").number); }
long long paramLlTwoPhaseMaxBytes() { return valueOf("ARFUSE_LL_TWO_PHASE_MAX_BYTES").number; }
int paramPollSleepNs() { return static_cast<int>(valueOf("ARFUSE_POLL_SLEEP_NS").number); }
bool paramDeterministic() { return valueOf("ARFUSE_DETERMINISTIC").number != 0; }
bool paramRowPush() { return valueOf("ARFUSE_ROW_PUSH").number != 0; }
bool paramWideTwo() { return valueOf("ARFUSE_WIDE_TWO").number != 0; }
int paramExpSplitVecs() { return static_cast<int>(valueOf("ARFUSE_EXP_SPLIT_VECS").number); }
bool paramExpSplitShared() { return valueOf("ARFUSE_EXP_SPLIT_SHARED").number != 0; }
std::string paramBootstrapAddr() { return valueOf("ARFUSE_BOOTSTRAP_ADDR").value; }
std::string paramBootstrapIfname() { return valueOf("ARFUSE_BOOTSTRAP_IFNAME").value; }
int paramBootstrapPort() { return static_cast<int>(valueOf("ARFUSE_BOOTSTRAP_PORT").number); }
std::vector<unsigned> paramBootstrapUids() {
  std::vector<unsigned> out;
  const std::string v = valueOf("ARFUSE_BOOTSTRAP_UIDS").value;
  size_t p = 0;
  while (!v.empty() && p <= v.size()) {
    size_t c = v.find(',', p);
    if (c == std::string::npos) c = v.size();
    out.push_back(static_cast<unsigned>(std::strtoull(v.substr(p, c - p).c_str(), nullptr, 10)));
    p = c + 1;
  }
  return out;
}
std::string paramCalibrationFile() { return valueOf("ARFUSE_CALIBRATION_FILE").value; }
int paramWatchdogMs() { return static_cast<int>(valueOf("ARFUSE_WATCHDOG_MS").number); }
bool paramDumpOnSignal() { return valueOf("ARFUSE_DUMP_ON_SIGNAL").number != 0; }
bool paramNcclWatchGraphs() { return valueOf("ARFUSE_NCCL_WATCH_GRAPHS").number != 0; }
bool paramCheckReplicas() { return valueOf("ARFUSE_CHECK_REPLICAS").number != 0; }
std::string paramTestHostId() { return valueOf("ARFUSE_TEST_HOST_ID").value; }

std::string paramsMarkdown() {
  std::ostringstream os;
  os << "| variable | type | default | meaning |\n|---|---|---|---|\n";
  for (const ParamSpec& s : kSpecs)
    os << "| `" << s.name << "` | " << s.type << " | `" << s.defaultValue << "` | " << s.description << " |\n";
  return os.str();
}

}  // namespace arfuse
