// resolvePolicy: the plan's limits for a group, in one order, for every caller -- the library's two
// init paths (src/init), `arfuse plan` and `arfuse doctor`:
//   1. config struct > environment > built-in default (policy/config.h resolveConfig: `configured`)
//   2. a calibration file (ARFUSE_CALIBRATION_FILE) that matches the group's GPUs, fabric and ranks
//   3. otherwise, built-in limits that follow the fabric (plan/from_topology.h): every rank on one
//      GPU, or NVLink between every pair of the group's GPUs
//   4. an ARFUSE_* limit set explicitly in the environment wins over 2 and 3.
// Pure (the calibration file is read, nothing else): the group is described by its GPUs' UUIDs,
// one per rank, and the reported topology of the GPUs this process sees, so an in-process group and
// a multi-process group on the same machine resolve the same policy (tests/cpu/policy_test.cc).
#pragma once

#include <string>
#include <vector>

#include "common/log.h"
#include "plan/plan.h"
#include "topo/topology.h"

namespace arfuse {

// Which plan limits the environment set explicitly (their values are already in the configured
// policy); they win over a calibration and over the fabric's built-in defaults.
struct ExplicitLimits {
  bool oneShot = false;      // ARFUSE_ONESHOT_MAX_BYTES
  bool hostOneShot = false;  // ARFUSE_HOST_ONESHOT_MAX_BYTES
  bool hostStaged = false;   // ARFUSE_HOST_STAGED_MAX_BYTES
};
ExplicitLimits explicitLimitsFromEnv();

struct PolicyInputs {
  PlanPolicy configured;  // resolveConfig's policy (or the CLI's: its --algo, the environment)
  ExplicitLimits explicitEnv;
  std::vector<std::string> uuids;  // the group's GPUs, one per rank; repeats are ranks sharing a GPU
  // Reported facts (CUDA + NVML) of the GPUs this process sees, or a described machine; nullptr
  // when there are none (topologyError says why). GPUs are matched to ranks by UUID.
  const topo::Topology* topology = nullptr;
  std::string topologyError;
  std::string calibrationFile;  // ARFUSE_CALIBRATION_FILE; "" = none
};

struct PolicyNote {
  LogLevel level;
  std::string text;
};

struct ResolvedPolicy {
  PlanPolicy policy;
  std::vector<PolicyNote> notes;  // for the caller to log: the calibration used or why not, fabric defaults
  bool calibrationApplies = false;
  std::string calibrationWhy;  // the calibration's one-line summary, or why it does not apply
};

ResolvedPolicy resolvePolicy(const PolicyInputs& in);

// Whether resolvePolicy would look at the topology (a probe is worth its few ms): a calibration
// file to match, or at least two distinct GPUs whose links may change a built-in limit.
bool policyNeedsTopology(const PolicyInputs& in);

// Index in `t` of each UUID (-1 when `t` does not hold it).
std::vector<int> topologyIndices(const topo::Topology& t, const std::vector<std::string>& uuids);

// The limits resolvePolicy may change, equal on two policies (what ranks of one group must agree on).
bool sameLimits(const PlanPolicy& a, const PlanPolicy& b);
std::string limitsText(const PlanPolicy& p);

}  // namespace arfuse
