// Runs with hostile ARFUSE_* values and mistyped names set by CTest (tests/cpu/CMakeLists.txt):
//   ARFUSE_TIMEOUT_MS=3000000000 (the old reader checked it with strtoll and read it with atoi: ~584
//   years, or a negative timeout), ARFUSE_MAX_BLOCKS=0x10, ARFUSE_WATCHDOG_MS=" 25",
//   ARFUSE_BOOTSTRAP_UIDS=1000,x, ARFUSE_BOOTSTRAP_PORT=65536, and the names ARFUSE_TIMOUT_MS and
//   ARFUSE_NOT_A_THING, beside ARFUSE_LIBRARY_PATH (read by the Python package) and ARFUSE_TEST_*.
#include <gtest/gtest.h>

#include <string>

#include "common/params.h"

namespace arfuse {
namespace {

size_t countOf(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t p = 0; (p = text.find(part, p)) != std::string::npos; p += part.size()) ++n;
  return n;
}

TEST(EnvHostile, OneParserRangesAndOneWarnPerProblem) {
  // The first read of the registry in this process prints the WARN lines, once.
  ::testing::internal::CaptureStderr();
  const auto& values = paramValues();
  paramValues();
  paramTimeoutMs();
  const std::string err = ::testing::internal::GetCapturedStderr();

  EXPECT_EQ(paramTimeoutMs(), 10000) << "an out-of-range value must leave the default, not wrap";
  EXPECT_EQ(paramMaxBlocks(), -1);
  EXPECT_EQ(paramWatchdogMs(), 0);
  EXPECT_EQ(paramBootstrapPort(), 0);
  EXPECT_TRUE(paramBootstrapUids().empty());
  std::string errors;
  for (const ParamValue& v : values) errors += v.error + "\n";
  EXPECT_NE(errors.find("ARFUSE_TIMEOUT_MS=3000000000 ignored (the default 10000 applies): expected an integer in "
                        "1..86400000"),
            std::string::npos)
      << errors;
  EXPECT_NE(errors.find("ARFUSE_MAX_BLOCKS=0x10 ignored (the default -1 applies): expected -1 (derive) or 1..128"),
            std::string::npos)
      << errors;
  EXPECT_NE(errors.find("ARFUSE_WATCHDOG_MS= 25 ignored"), std::string::npos) << errors;
  EXPECT_NE(errors.find("ARFUSE_BOOTSTRAP_UIDS=1000,x ignored"), std::string::npos) << errors;
  EXPECT_NE(errors.find("ARFUSE_BOOTSTRAP_PORT=65536 ignored (the default 0 applies): expected an integer in 0..65535"),
            std::string::npos)
      << errors;

  const std::vector<std::string>& unknown = paramUnknownNames();
  ASSERT_EQ(unknown.size(), 2u);
  EXPECT_EQ(unknown[0],
            "ARFUSE_NOT_A_THING is not an arfuse variable and is ignored (`arfuse env --markdown` lists them)");
  EXPECT_EQ(unknown[1], "ARFUSE_TIMOUT_MS is not an arfuse variable and is ignored (did you mean ARFUSE_TIMEOUT_MS?)");

  // One WARN line per problem, in the canonical format, once per process.
  EXPECT_EQ(countOf(err, "arfuse WARN rank=- dev=- params.cc:"), 7u) << err;
  EXPECT_EQ(countOf(err, "ARFUSE_TIMOUT_MS is not an arfuse variable"), 1u) << err;
  EXPECT_EQ(countOf(err, "ARFUSE_TIMEOUT_MS=3000000000 ignored"), 1u) << err;
  EXPECT_EQ(err.find("ARFUSE_LIBRARY_PATH"), std::string::npos) << err;
  EXPECT_EQ(err.find("ARFUSE_TEST_ANYTHING"), std::string::npos) << err;
}

}  // namespace
}  // namespace arfuse
