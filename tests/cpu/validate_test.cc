#include <gtest/gtest.h>

#include <cmath>

#include "api/validate.h"

namespace arfuse {
namespace {

alignas(16) char pool[4096];

TEST(Validate, NullAndMisalignedNameTheArgument) {
  EXPECT_NE(checkBuffers({{"x", nullptr, 64}}, {}).find("x is NULL"), std::string::npos);
  EXPECT_NE(checkBuffers({{"weight", pool + 8, 64}}, {}).find("weight="), std::string::npos);
  EXPECT_NE(checkBuffers({{"weight", pool + 8, 64}}, {}).find("16-byte aligned"), std::string::npos);
  EXPECT_EQ(checkBuffers({{"x", pool, 64}, {"y", pool + 64, 64}}, {}), "");
}

TEST(Validate, OnlyExactAllowedAliases) {
  const std::vector<AliasRule> rules = {{"residual_out", "residual_in"}, {"norm_out", "x"}};
  EXPECT_EQ(checkBuffers({{"x", pool, 256}, {"norm_out", pool, 256}}, rules), "");
  EXPECT_EQ(checkBuffers({{"residual_in", pool, 256}, {"residual_out", pool, 256}}, rules), "");
  // Partial overlap of an allowed pair is an error.
  std::string m = checkBuffers({{"x", pool, 256}, {"norm_out", pool + 128, 256}}, rules);
  EXPECT_NE(m.find("overlap"), std::string::npos);
  // Exact alias of a pair that is not allowed is an error naming both.
  m = checkBuffers({{"x", pool, 256}, {"residual_out", pool, 256}}, rules);
  EXPECT_NE(m.find("x="), std::string::npos);
  EXPECT_NE(m.find("residual_out="), std::string::npos);
  EXPECT_NE(m.find("residual_out == residual_in"), std::string::npos) << m;
}

TEST(Validate, Eps) {
  EXPECT_EQ(checkEps(1e-6f), "");
  EXPECT_NE(checkEps(0.f), "");
  EXPECT_NE(checkEps(-1e-5f), "");
  EXPECT_NE(checkEps(NAN).find("eps=nan"), std::string::npos);
  EXPECT_NE(checkEps(INFINITY), "");
}

}  // namespace
}  // namespace arfuse
