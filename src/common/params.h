// Every ARFUSE_* environment variable, declared once: name, type, default, range, description.
// Values are read from the environment once per process (first use), parsed and range-checked by one
// parser, and can be dumped with their source (`arfuse env`); the docs' table is generated from this
// same list. An invalid value is ignored (the default is used) and, like an ARFUSE_* name that is not
// in the list (a typo), reported in one WARN line per process.
#pragma once

#include <string>
#include <vector>

namespace arfuse {

struct ParamSpec {
  const char* name;          // ARFUSE_...
  const char* type;          // "int", "enum", "bool", "path", "address", "interfaces", "uids", "hostid", "name"
  const char* defaultValue;  // as text
  const char* description;
  long long min = 0, max = 0;  // "int": the accepted range (inclusive)
};

struct ParamValue {
  const ParamSpec* spec;
  std::string value;     // effective value as text
  bool fromEnvironment;  // else default
  std::string error;     // non-empty when the environment held an invalid value (then the default is used)
  long long number = 0;  // "int" / "bool" / "enum" (its index): the parsed effective value
};

const std::vector<ParamSpec>& paramSpecs();
// Effective values (environment read once; thread-safe). The first call also prints, once per
// process, one WARN line per invalid value and per unknown ARFUSE_* name.
const std::vector<ParamValue>& paramValues();
// ARFUSE_* names in the environment that are neither parameters of the library nor read by another
// part of arfuse (the Python package, the tests), each with a suggestion when one is near
// ("ARFUSE_TIMEOUT_M is not an arfuse variable (did you mean ARFUSE_TIMEOUT_MS?)").
const std::vector<std::string>& paramUnknownNames();

// Parses one value as the registry does. Returns "" when valid (then *number holds it for numeric
// types), else what was expected. For tests and tools.
std::string parseParamValue(const ParamSpec& spec, const std::string& text, long long* number);

// Typed accessors for the parameters the library uses.
std::string paramAlgoName();                 // ARFUSE_ALGO, "" when unset (policy/config.cc: a path's name?)
int paramTimeoutMs();                        // ARFUSE_TIMEOUT_MS
int paramLogLevel();                         // ARFUSE_LOG_LEVEL: 0 DEBUG, 1 INFO, 2 WARN, 3 ERROR, 4 NONE
bool paramCheckPointers();                   // ARFUSE_CHECK_POINTERS
long long paramOneShotMaxBytes();            // ARFUSE_ONESHOT_MAX_BYTES
long long paramHostOneShotMaxBytes();        // ARFUSE_HOST_ONESHOT_MAX_BYTES
long long paramHostStagedMaxBytes();         // ARFUSE_HOST_STAGED_MAX_BYTES
int paramMaxBlocks();                        // ARFUSE_MAX_BLOCKS (-1: derive)
bool paramFlightRecorder();                  // ARFUSE_FLIGHT_RECORDER
bool paramPdl();                             // ARFUSE_PDL
int paramLlTwoPhase();                       // ARFUSE_LL_TWO_PHASE (-1 plan, 0 never, 1 always)
long long paramLlTwoPhaseMaxBytes();         // ARFUSE_LL_TWO_PHASE_MAX_BYTES
int paramMaxChunks();                        // ARFUSE_MAX_CHUNKS (1, 2, 4 or 8)
int paramPollSleepNs();                      // ARFUSE_POLL_SLEEP_NS (0..10000)
bool paramDeterministic();                   // ARFUSE_DETERMINISTIC
bool paramRowPush();                         // ARFUSE_ROW_PUSH
bool paramWideTwo();                         // ARFUSE_WIDE_TWO
int paramExpSplitVecs();                     // ARFUSE_EXP_SPLIT_VECS (experimental, issue 33)
bool paramExpSplitShared();                  // ARFUSE_EXP_SPLIT_SHARED (experimental, issue 33)
std::string paramBootstrapAddr();            // ARFUSE_BOOTSTRAP_ADDR ("" = AF_UNIX on this host)
std::string paramBootstrapIfname();          // ARFUSE_BOOTSTRAP_IFNAME
int paramBootstrapPort();                    // ARFUSE_BOOTSTRAP_PORT (0: ephemeral)
std::vector<unsigned> paramBootstrapUids();  // ARFUSE_BOOTSTRAP_UIDS
std::string paramDebugFile();                // ARFUSE_DEBUG_FILE, "" when unset (not yet expanded)
std::string paramCalibrationFile();          // ARFUSE_CALIBRATION_FILE, "" when unset
int paramWatchdogMs();                       // ARFUSE_WATCHDOG_MS (0: watchdog off)
bool paramDumpOnSignal();                    // ARFUSE_DUMP_ON_SIGNAL
bool paramNcclWatchGraphs();                 // ARFUSE_NCCL_WATCH_GRAPHS
bool paramCheckReplicas();                   // ARFUSE_CHECK_REPLICAS
std::string paramTestHostId();               // ARFUSE_TEST_HOST_ID ("" = the real host identity)

// Markdown table of the variables (docs/environment.md is this output; a test keeps them equal).
std::string paramsMarkdown();

}  // namespace arfuse
