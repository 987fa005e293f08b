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
  int maxBlocks = -1;  // -1: derive from the device
};

// Validates and resolves. Returns arfuseSuccess or arfuseInvalidArgument with *message naming the field.
arfuseResult_t resolveConfig(const arfuseConfig_t* config, int nranks, ResolvedConfig* out, std::string* message);

}  // namespace arfuse
