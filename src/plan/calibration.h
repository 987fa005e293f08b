// Calibration: measured crossovers between the paths, turned into the plan's limits.
//
// `arfuse doctor --calibrate` times every eligible path (low-latency, one-shot, two-shot,
// host-staged, NCCL) over a range of message sizes inside CUDA graphs, checks every result, and
// writes a file ("schema": "arfuse-calibration/1") keyed by the GPUs' UUIDs and the fabric
// fingerprint of those GPUs (topo::calibrationFingerprint). The library reads the file named by
// ARFUSE_CALIBRATION_FILE and, when the key and the rank count match the communicator, replaces the
// built-in limits of PlanPolicy with the measured ones; otherwise it keeps the defaults and says in
// one line why the file does not apply. Pure (no CUDA): written, read and matched in CPU tests.
//
// Crossovers come from measurement on the machine, never from an architecture name. Limits are in
// message bytes per rank, the plan's vocabulary, so a file measured at one hidden size guides others
// by their byte count.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "plan/plan.h"

namespace arfuse {

constexpr const char* kCalibrationSchema = "arfuse-calibration/1";

// One timed, checked measurement: a path at one message size.
struct CalibrationPoint {
  std::string algo;  // "lowlatency", "oneshot", "twoshot", "hoststaged", "nccl"
  int tokens = 0;
  long long bytes = 0;  // message bytes per rank: tokens x hidden x dtype size
  double us = 0;        // per call: median over CUDA-graph replays of the slowest rank
};

struct CalibrationGroup {
  int nranks = 0;
  bool virtualRanks = false;             // several ranks shared a GPU (timings are not performance figures)
  std::vector<CalibrationPoint> points;  // only results that passed the check are kept
  std::vector<std::string> notes;        // paths that were not eligible or failed, and why
  // Derived from points (calibrationCrossovers) and written for readers; the reader checks it agrees.
  std::vector<std::pair<std::string, long long>> bestUpTo;
};

struct Calibration {
  std::string created;  // "2026-11-30T10:00:00Z"
  std::string arfuse;   // arfuseGetBuildInfo() of the measuring build
  std::string hostname;
  std::vector<std::string> gpus;         // distinct UUIDs of the measured GPUs, sorted
  std::string fingerprint;               // topo::calibrationFingerprint of those GPUs
  int hidden = 0;                        // of the measured calls
  std::string dtype;                     // "bf16", "fp16", "fp32"
  std::vector<CalibrationGroup> groups;  // one per rank count
};

// Paths in the plan's order (ties in time go to the earlier one).
const std::vector<std::string>& calibrationAlgos();

// For each path, the largest message size at which it was the fastest of the paths measured at that
// size; a path never fastest is absent. In calibrationAlgos() order.
std::vector<std::pair<std::string, long long>> calibrationCrossovers(const std::vector<CalibrationPoint>& points);

// Deterministic JSON (fixed key order, one point per line).
std::string calibrationToJson(const Calibration& c);
// Strict: unknown keys, wrong types, a wrong schema, unknown path names and a best_up_to_bytes that
// disagrees with the points are errors (arfuseInvalidArgument) whose message names the field and
// line:column.
Status calibrationFromJson(std::string_view text, Calibration* out);

// Sets the limits of *policy from the group of `nranks` ranks, if the file matches: `uuids` are the
// group's GPUs, one per rank (repeats are virtual ranks), `fingerprint` is
// topo::calibrationFingerprint of their topology. `label` (e.g. "calibration /etc/arfuse/cal.json")
// goes into policy->calibratedFrom and so into the plan's reasons. Only limits of paths that were
// measured change. On success *summary is the one line that says which limits it set (data: the
// policy reports it as an INFO note, doctor prints it); a file that does not apply is
// arfuseInvalidArgument whose message is the one line that says why ("LABEL does not apply: ..."),
// reported as a WARN note, the policy untouched.
Status policyFromCalibration(const Calibration& c, const std::vector<std::string>& uuids,
                             const std::string& fingerprint, int nranks, const std::string& label, PlanPolicy* policy,
                             std::string* summary);

// Reads `path` and applies it as above, with label "calibration <path>". Every failure has the same
// one-line form: a file that cannot be opened or read is arfuseSystemError, bad JSON or no match
// arfuseInvalidArgument; nothing throws.
Status loadCalibrationPolicy(const std::string& path, const std::vector<std::string>& uuids,
                             const std::string& fingerprint, int nranks, PlanPolicy* policy, std::string* summary);

}  // namespace arfuse
