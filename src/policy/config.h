// Resolution of arfuseConfig_t: config struct > environment (ARFUSE_*) > default. Pure; CPU-tested.
#pragma once

#include <string>

#include "arfuse/arfuse.h"
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

// Validates and resolves. Returns arfuseSuccess or arfuseInvalidArgument with *message naming the field.
arfuseResult_t resolveConfig(const arfuseConfig_t* config, int nranks, ResolvedConfig* out, std::string* message);

}  // namespace arfuse
