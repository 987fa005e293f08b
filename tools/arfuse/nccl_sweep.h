// `arfuse bench --nccl-sweep`: the NCCL baseline (NCCL all-reduce + arfuse's separate add+RMSNorm
// kernel) re-run under other NCCL settings, so a user sees what NCCL tuning alone buys before
// crediting arfuse with the difference.
//
// NCCL reads NCCL_PROTO, NCCL_ALGO and the channel bounds when a communicator is created and caches
// some parameters for the life of the process, so a setting can only be changed by starting over:
// the bench re-executes itself (/proc/self/exe) once per setting with the variables set and the
// internal flag --nccl-sweep-child FILE, which times only the baseline for the same points and
// writes arfuse-bench JSON to FILE. The parent reads those files back. A child runs under a time
// bound and is killed past it; a child that crashes, times out or whose setting NCCL refuses becomes
// a row that says so, never a hang and never a missing row.
//
// Everything here except runChild is pure and CPU-tested; runChild is POSIX only (no CUDA) and is
// tested with /bin/sh.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "bench_args.h"
#include "bench_json.h"

namespace arfuse {
namespace cli {

using EnvList = std::vector<std::pair<std::string, std::string>>;  // (NAME, value) in order

constexpr int kMaxNcclSweepSettings = 64;

// One NCCL setting: the variables a child gets on top of the inherited environment.
struct NcclSetting {
  std::string label;  // "default", "proto=LL", "channels=4", "proto=LL algo=Tree", "NCCL_NTHREADS=256"
  EnvList env;        // the overrides; empty for "default" (the user's environment as it is)
};

// Expands a sweep SPEC into settings, "default" first. Grammar:
//   SPEC  := GROUP (',' GROUP)*            each group's settings are added in turn
//   GROUP := AXIS ('*' AXIS)*              axes joined by '*' are crossed (every combination)
//   AXIS  := NAME [':' VALUE ('/' VALUE)*] without values: the axis's default values
//   NAME  := proto   NCCL_PROTO               LL, LL128, Simple (default: all three)
//          | algo    NCCL_ALGO                Ring, Tree, CollnetDirect, CollnetChain, NVLS, NVLSTree, PAT
//                                             (default: Ring, Tree)
//          | channels NCCL_MIN_NCHANNELS = NCCL_MAX_NCHANNELS = VALUE, 1..64 (default: 1/2/4/8/16)
//          | NCCL_*  any NCCL variable, values required (e.g. NCCL_NTHREADS:256/512)
// Values of proto and algo are matched without regard to case and written as NCCL spells them.
// Repeated settings are kept once. Returns false with *error starting "--nccl-sweep" and saying
// what is accepted.
bool expandNcclSweep(const std::string& spec, std::vector<NcclSetting>* out, std::string* error);

// The NCCL_* variables of an environment block ("NAME=value" strings), sorted by name.
EnvList ncclVariables(const std::vector<std::string>& environment);

// What a child is started with.
struct ChildCommand {
  std::vector<std::string> argv;  // argv[0] is the executable
  std::vector<std::string> env;   // the complete environment, "NAME=value"
};

// The child for one setting: `exe bench <the same points, dtype, hidden, ranks, iterations, check,
// verify pass> --nccl-sweep-child jsonPath`, with the parent's environment in which only the
// setting's variables are replaced, plus NCCL_DEBUG=WARN when the parent has no NCCL_DEBUG (so that
// NCCL's own reason for refusing a setting reaches the report; it changes nothing else).
ChildCommand childCommand(const std::string& exe, const BenchArgs& a, int nranks, const NcclSetting& setting,
                          const std::string& jsonPath, const std::vector<std::string>& parentEnv);

struct ChildOutcome {
  enum class Kind { kExited, kSignalled, kTimedOut, kNotStarted };
  Kind kind = Kind::kNotStarted;
  int code = 0;       // exit status (kExited) or signal number (kSignalled)
  std::string error;  // why it did not start, or why a killed child was abandoned
  double seconds = 0;
};

// Runs the command with stdin from /dev/null and stdout + stderr to logPath. Past timeoutS the
// child is killed (SIGKILL); if it has still not exited 10 s later it is abandoned, so this returns
// within about timeoutS + 10 s whatever the child does. Ctrl-C reaches the child too (same
// process group).
ChildOutcome runChild(const ChildCommand& command, const std::string& logPath, double timeoutS);

// The most useful line of a child's log for an error report: the last line containing "NCCL WARN",
// else the last non-empty line; "" for an empty log. Trimmed, at most 300 characters.
std::string logReason(const std::string& logText);

struct SweepPoint {
  int tokens = 0;
  long long bytes = 0;
  BenchTiming t;
  int wrong = 0;
  std::string error;
  double vsDefault = 0;  // median over the default setting's median at this point (0: not known)
  double vsArfuse = 0;   // median over arfuse's median at this point (0: not known)
};

struct SweepSetting {
  NcclSetting setting;
  // "ok": every point timed and correct; "error": the child ran and reported errors (a setting NCCL
  // refuses lands here, with its reason); "timeout": killed past the bound; "crashed": exited or was
  // killed without writing its result.
  std::string status;
  std::string error;               // the setting's reason when not ok, NCCL's own words where it gave some
  std::vector<SweepPoint> points;  // one per token count, always
};

struct NcclSweep {
  std::string spec;
  int timeoutS = kDefaultNcclSweepTimeoutS;
  EnvList inherited;                         // the user's NCCL_* environment, which every child inherits
  EnvList added;                             // variables the children got that the user had not set (NCCL_DEBUG=WARN)
  std::string arfuseLabel = "arfuse fused";  // what the arfuse column is ("arfuse all-reduce" for --op allreduce)
  int callsPerPass = 0;                      // --verify-pass: calls per pass (the report adds ms per pass); 0 otherwise
  std::vector<int> tokens;
  std::vector<long long> bytes;
  std::vector<double> arfuseUs;         // per point; 0 when this run has no timed, correct arfuse row
  std::vector<std::string> arfuseAlgo;  // per point, e.g. "auto:lowlatency"
  std::vector<SweepSetting> settings;   // "default" first
};

// The sweep's points (tokens, bytes) and, per point, arfuse's reference time from the in-process
// rows: the auto row ("arfuse" or "verify-pass" role) when it was timed and correct, else the
// fastest correct arfuse row.
void setPoints(NcclSweep* sweep, const BenchArgs& a, const std::vector<Row>& rows);

// Fills a setting from what its child left: the JSON text it wrote ("" when none), its outcome and
// its log. Always leaves one point per token count.
void fillSetting(SweepSetting* s, const std::vector<int>& tokens, const std::vector<long long>& bytes,
                 const std::string& childJson, const ChildOutcome& outcome, const std::string& logText, int timeoutS);

// Ratios to the default setting and to arfuse, once every setting is filled.
void computeRatios(NcclSweep* sweep);

// Index into sweep.settings of the fastest correct setting at a point; -1 when none was timed.
int bestSetting(const NcclSweep& sweep, size_t point);

// The printed report: per point a table of settings and a one-line summary naming the best setting.
std::string sweepReport(const NcclSweep& sweep);

// The JSON members the sweep adds (arfuse-bench/2): "nccl_sweep_spec", "nccl_sweep_timeout_s",
// "nccl_sweep_added_env", "nccl_sweep" (one object per setting) and "nccl_sweep_best" (one per
// point), each line indented by two spaces and followed by ",\n".
std::string sweepJsonMembers(const NcclSweep& sweep);

// {"NAME": "value", ...}
std::string envJson(const EnvList& env);

}  // namespace cli
}  // namespace arfuse
