// Runs with ARFUSE_ALGO=twoshot ARFUSE_TIMEOUT_MS=1234 ARFUSE_LOG_LEVEL=bogus (set by CTest).
#include <gtest/gtest.h>

#include "common/params.h"
#include "policy/config.h"

namespace arfuse {
namespace {

TEST(EnvPrecedence, EnvironmentOverridesDefaultsAndConfigOverridesEnvironment) {
  ResolvedConfig r;
  std::string msg;
  ASSERT_EQ(resolveConfig(nullptr, 2, &r).into(&msg), arfuseSuccess) << msg;
  EXPECT_EQ(r.policy.forcedAlgo, arfuseAlgoTwoShot);
  EXPECT_EQ(r.policy.forcedBy, "ARFUSE_ALGO");
  EXPECT_EQ(r.timeoutMs, 1234);

  arfuseConfig_t c = ARFUSE_CONFIG_INITIALIZER;
  c.algo = arfuseAlgoOneShot;
  c.timeoutMs = 7;
  ASSERT_EQ(resolveConfig(&c, 2, &r).into(&msg), arfuseSuccess) << msg;
  EXPECT_EQ(r.policy.forcedAlgo, arfuseAlgoOneShot);
  EXPECT_EQ(r.policy.forcedBy, "config");
  EXPECT_EQ(r.timeoutMs, 7);
}

TEST(EnvPrecedence, InvalidValueIsReportedAndIgnored) {
  bool found = false;
  for (const ParamValue& v : paramValues()) {
    if (std::string(v.spec->name) != "ARFUSE_LOG_LEVEL") continue;
    found = true;
    EXPECT_FALSE(v.fromEnvironment);
    EXPECT_EQ(v.value, "WARN");
    EXPECT_NE(v.error.find("ARFUSE_LOG_LEVEL=bogus ignored"), std::string::npos) << v.error;
  }
  EXPECT_TRUE(found);
}

}  // namespace
}  // namespace arfuse
