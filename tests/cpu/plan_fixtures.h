// Shared by the plan tests (plan_test.cc, registry_test.cc): an 8-rank NVLink-like fabric and a call
// request, the two inputs most plan cases start from.
#pragma once

#include "plan/plan.h"

namespace arfuse {
namespace testing_fixtures {

inline Fabric nvlink8() {
  Fabric f;
  f.nranks = 8;
  f.maxBlocks = 64;
  f.smCount = 132;
  f.nccl = true;
  f.lowLatencyMaxBytes = 64 * 1024;
  return f;
}

inline PlanRequest req(int tokens, int hidden = 7168, arfuseDataType_t dt = arfuseBfloat16) {
  PlanRequest r;
  r.tokens = tokens;
  r.hidden = hidden;
  r.dtype = dt;
  return r;
}

}  // namespace testing_fixtures
}  // namespace arfuse
