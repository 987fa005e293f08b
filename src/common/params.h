// Every ARFUSE_* environment variable, declared once: name, type, default, description.
// Values are read from the environment once per process (first use) and can be dumped with their
// source (`arfuse env`), and the docs' table is generated from this same list.
#pragma once

#include <string>
#include <vector>

namespace arfuse {

struct ParamSpec {
  const char* name;         // ARFUSE_...
  const char* type;         // "int", "enum", "bool"
  const char* defaultValue; // as text
  const char* description;
};

struct ParamValue {
  const ParamSpec* spec;
  std::string value;   // effective value as text
  bool fromEnvironment; // else default
  std::string error;   // non-empty when the environment held an invalid value (then the default is used)
};

const std::vector<ParamSpec>& paramSpecs();
// Effective values (environment read once; thread-safe).
const std::vector<ParamValue>& paramValues();

// Typed accessors for the parameters the library uses.
int paramAlgo();          // ARFUSE_ALGO as arfuseAlgo_t; -1 when unset ("auto" counts as set: 0)
int paramTimeoutMs();     // ARFUSE_TIMEOUT_MS
int paramLogLevel();      // ARFUSE_LOG_LEVEL: 0 DEBUG, 1 INFO, 2 WARN, 3 ERROR, 4 NONE
bool paramCheckPointers(); // ARFUSE_CHECK_POINTERS
long long paramOneShotMaxBytes(); // ARFUSE_ONESHOT_MAX_BYTES
long long paramHostOneShotMaxBytes();  // ARFUSE_HOST_ONESHOT_MAX_BYTES
long long paramHostStagedMaxBytes();   // ARFUSE_HOST_STAGED_MAX_BYTES
int paramMaxBlocks();     // ARFUSE_MAX_BLOCKS (-1: derive)
bool paramFlightRecorder();          // ARFUSE_FLIGHT_RECORDER
bool paramPdl();                     // ARFUSE_PDL
int paramMaxChunks();                // ARFUSE_MAX_CHUNKS (1, 2, 4 or 8)
int paramPollSleepNs();              // ARFUSE_POLL_SLEEP_NS (0..10000)
bool paramDeterministic();           // ARFUSE_DETERMINISTIC
std::string paramBootstrapAddr();  // ARFUSE_BOOTSTRAP_ADDR
std::string paramDebugFile();  // ARFUSE_DEBUG_FILE, "" when unset (not yet expanded)
std::string paramCalibrationFile();  // ARFUSE_CALIBRATION_FILE, "" when unset
int paramWatchdogMs();    // ARFUSE_WATCHDOG_MS (0: watchdog off)
bool paramDumpOnSignal(); // ARFUSE_DUMP_ON_SIGNAL

// Markdown table of the variables (docs/environment.md is this output; a test keeps them equal).
std::string paramsMarkdown();
// Parses an algorithm name ("auto", "oneshot", "twoshot", "nccl"); -1 if unknown.
int parseAlgoName(const std::string& name);  // also "lowlatency"

}  // namespace arfuse
