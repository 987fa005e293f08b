// Resolution of arfuseConfig_t: config struct > environment (ARFUSE_*) > default, and the rank
// arguments of a multi-process communicator. Pure; CPU-tested.
#pragma once

#include <string>

#include "arfuse/arfuse.h"
#include "base/status.h"
#include "plan/plan.h"

namespace arfuse {

struct ResolvedConfig {
  Limits limits;
  PlanPolicy policy;
  int timeoutMs = 10000;
  int maxBlocks = -1;       // -1: derive from the device
  size_t messageBytes = 0;  // largest message of any enabled dtype (workspaceMessageBytes): one staging parity
};

// Bytes of the largest message a communicator with these limits accepts: maxTokens x maxHidden
// (capped, per dtype, at the kernels' largest hidden size) x the dtype's size, the largest over the
// enabled dtypes only. A bf16-only communicator thus gets half the staging of one that enables fp32.
size_t workspaceMessageBytes(const Limits& limits);

// Validates and resolves: ok, or arfuseInvalidArgument with a message naming the field ("config: ...").
Status resolveConfig(const arfuseConfig_t* config, int nranks, ResolvedConfig* out);

// Ok when 1 <= nranks <= ARFUSE_MAX_RANKS and 0 <= rank < nranks; else what is wrong and the fix.
// Checked at the C ABI before anything is sized by nranks or indexed by rank.
Status checkRankArgs(int nranks, int rank);

}  // namespace arfuse
