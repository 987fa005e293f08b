// Argument parsing of `arfuse plan` (pure; CPU-tested): every value is checked strictly (args.h)
// and combinations that cannot mean anything are usage errors, so a typo never plans for a machine
// nobody asked about.
#pragma once

#include <string>
#include <vector>

#include "arfuse/arfuse.h"
#include "policy/resolve.h"

namespace arfuse {
namespace cli {

struct PlanArgs {
  int ranks = 8;
  bool ranksGiven = false;
  int hidden = 7168;
  std::vector<int> tokens = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048};
  arfuseDataType_t dtype = arfuseBfloat16;
  bool noP2p = false;
  bool virtualRanks = false;
  int algo = arfuseAlgoAuto;  // arfuseAlgo_t
  bool allreduce = false;
  int hosts = 0;             // --hosts H: the machine is one host of a group over H such hosts (docs/multihost.md)
  std::string topology;      // --topology FILE, "" when none
  std::vector<int> devices;  // --devices (only with --topology); empty: every GPU of the file
  bool help = false;
};

// False with *error naming the argument and what it wants (exit 2).
bool parsePlanArgs(const std::vector<std::string>& args, PlanArgs* out, std::string* error);
const char* planUsage();

// The policy `arfuse plan` plans with for ranks on `devices` of `t`, resolved exactly as the library
// resolves a group's (policy/resolve.h: the environment, ARFUSE_CALIBRATION_FILE, the fabric's
// built-in limits), then --algo, which wins over ARFUSE_ALGO. GPUs of `t` without a UUID (an
// assumed machine) get a placeholder one per index.
ResolvedPolicy planPolicy(const PlanArgs& a, const topo::Topology& t, const std::vector<int>& devices,
                          const ExplicitLimits& explicitEnv, const std::string& calibrationFile);

}  // namespace cli
}  // namespace arfuse
