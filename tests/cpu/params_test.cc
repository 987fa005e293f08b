// The parameter registry's one parser: every type, its range, and text that must not pass
// (issue 16: ARFUSE_TIMEOUT_MS was checked with strtoll and read with atoi).
#include "common/params.h"

#include <gtest/gtest.h>

#include <cstring>

namespace arfuse {
namespace {

const ParamSpec& spec(const char* name) {
  for (const ParamSpec& s : paramSpecs())
    if (std::strcmp(s.name, name) == 0) return s;
  ADD_FAILURE() << name << " is not in the registry";
  return paramSpecs()[0];
}

std::string parse(const char* name, const std::string& text, long long* n = nullptr) {
  long long x = 0;
  const std::string e = parseParamValue(spec(name), text, &x);
  if (n) *n = x;
  return e;
}

TEST(Params, IntegersAreDecimalAndInRange) {
  long long n = 0;
  EXPECT_EQ(parse("ARFUSE_TIMEOUT_MS", "1", &n), "");
  EXPECT_EQ(n, 1);
  EXPECT_EQ(parse("ARFUSE_TIMEOUT_MS", "86400000", &n), "");
  EXPECT_EQ(n, 86400000);
  for (const char* bad : {"0", "-5", "86400001", "3000000000", "99999999999999999999999", "1e3", "0x10", " 5", "5 ",
                          "+5", "", "5ms", "--5", "-"})
    EXPECT_EQ(parse("ARFUSE_TIMEOUT_MS", bad), "expected an integer in 1..86400000") << "'" << bad << "'";
  EXPECT_EQ(parse("ARFUSE_MAX_BLOCKS", "-1", &n), "");
  EXPECT_EQ(n, -1);
  EXPECT_EQ(parse("ARFUSE_MAX_BLOCKS", "0"), "expected -1 (derive) or 1..128");
  EXPECT_EQ(parse("ARFUSE_MAX_BLOCKS", "129"), "expected -1 (derive) or 1..128");
  EXPECT_EQ(parse("ARFUSE_BOOTSTRAP_PORT", "65535"), "");
  EXPECT_EQ(parse("ARFUSE_BOOTSTRAP_PORT", "65536"), "expected an integer in 0..65535");
  EXPECT_EQ(parse("ARFUSE_ONESHOT_MAX_BYTES", "1099511627776"), "");
  EXPECT_EQ(parse("ARFUSE_ONESHOT_MAX_BYTES", "1099511627777"), "expected an integer in 0..1099511627776");
  EXPECT_EQ(parse("ARFUSE_HOST_STAGED_MAX_BYTES", "15"), "expected an integer in 16..1099511627776");
  EXPECT_EQ(parse("ARFUSE_WATCHDOG_MS", "3600001"), "expected an integer in 0..3600000");
}

TEST(Params, EnumsBoolsListsAndText) {
  long long n = 0;
  // A path's name: which names are paths, the registry says (policy/config.cc resolves it).
  EXPECT_EQ(parse("ARFUSE_ALGO", "twoshot"), "");
  EXPECT_EQ(parse("ARFUSE_ALGO", "somefuturepath2"), "");
  for (const char* bad : {"TwoShot", "", "two shot", "nccl;", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"})
    EXPECT_NE(parse("ARFUSE_ALGO", bad), "") << bad;
  EXPECT_EQ(parse("ARFUSE_LOG_LEVEL", "debug", &n), "");
  EXPECT_EQ(n, 0);
  EXPECT_EQ(parse("ARFUSE_CHECK_POINTERS", "0", &n), "");
  EXPECT_EQ(n, 0);
  EXPECT_EQ(parse("ARFUSE_CHECK_POINTERS", "yes"), "expected 0 or 1");
  EXPECT_EQ(parse("ARFUSE_BOOTSTRAP_UIDS", "1000,1001"), "");
  EXPECT_EQ(parse("ARFUSE_BOOTSTRAP_UIDS", ""), "");
  for (const char* bad : {"1000,", ",1000", "-1", "4294967295", "1000;1001", "root"})
    EXPECT_NE(parse("ARFUSE_BOOTSTRAP_UIDS", bad), "") << bad;
  EXPECT_EQ(parse("ARFUSE_BOOTSTRAP_IFNAME", "^docker,lo"), "");
  EXPECT_EQ(parse("ARFUSE_BOOTSTRAP_IFNAME", "=eth0"), "");
  EXPECT_NE(parse("ARFUSE_BOOTSTRAP_IFNAME", "eth0;rm -rf"), "");
  EXPECT_EQ(parse("ARFUSE_BOOTSTRAP_ADDR", "10.0.0.1"), "");
  EXPECT_NE(parse("ARFUSE_BOOTSTRAP_ADDR", "10.0.0.1\nINFO forged"), "");
  EXPECT_EQ(parse("ARFUSE_DEBUG_FILE", ""), "expected a file path");
}

TEST(Params, EveryDefaultParsesAndEveryIntHasARange) {
  for (const ParamSpec& s : paramSpecs()) {
    long long n = 0;
    if (*s.defaultValue == '\0') continue;  // unset by default (a path, an address, a list)
    EXPECT_EQ(parseParamValue(s, s.defaultValue, &n), "") << s.name;
    if (std::strcmp(s.type, "int") == 0) {
      EXPECT_LT(s.min, s.max) << s.name;
      EXPECT_GE(n, s.min) << s.name;
      EXPECT_LE(n, s.max) << s.name;
    }
  }
}

}  // namespace
}  // namespace arfuse
