#include "policy/config.h"

#include <gtest/gtest.h>

#include <cstring>
#include <set>

#include "algos/registry.h"
#include "common/params.h"

namespace arfuse {
namespace {

TEST(Config, DefaultsWhenNull) {
  ResolvedConfig r;
  std::string msg;
  ASSERT_EQ(resolveConfig(nullptr, 4, &r).into(&msg), arfuseSuccess) << msg;
  EXPECT_EQ(r.limits.maxTokens, 2048);
  EXPECT_EQ(r.limits.maxHidden, 16384);
  EXPECT_EQ(r.limits.dtypeMask, ARFUSE_DTYPE_ALL);
  EXPECT_EQ(r.policy.forcedAlgo, arfuseAlgoAuto);
  EXPECT_EQ(r.timeoutMs, 10000);
}

TEST(Config, InitializerAndInitFunctionAgree) {
  arfuseConfig_t a = ARFUSE_CONFIG_INITIALIZER, b;
  ASSERT_EQ(arfuseConfigInit(&b), arfuseSuccess);
  EXPECT_EQ(0, memcmp(&a, &b, sizeof a));
}

TEST(Config, BadFieldsAreNamed) {
  struct Case {
    void (*edit)(arfuseConfig_t*);
    const char* needle;
  } cases[] = {
      {[](arfuseConfig_t* c) { c->magic = 0; }, "magic"},
      {[](arfuseConfig_t* c) { c->size = 3; }, "size=3"},
      {[](arfuseConfig_t* c) { c->version = 990000; }, "version=990000"},
      {[](arfuseConfig_t* c) { c->maxTokens = 0; }, "maxTokens=0"},
      {[](arfuseConfig_t* c) { c->maxHidden = 100; }, "maxHidden=100"},
      {[](arfuseConfig_t* c) { c->maxHidden = 65536; }, "largest hidden size"},
      {[](arfuseConfig_t* c) { c->dtypeMask = 0; }, "dtypeMask=0x0"},
      {[](arfuseConfig_t* c) { c->dtypeMask = 0x10; }, "dtypeMask=0x10"},
      {[](arfuseConfig_t* c) { c->algo = 9; }, "algo=9"},
      {[](arfuseConfig_t* c) { c->algo = arfuseAlgoLocal; }, "algo=local"},
      {[](arfuseConfig_t* c) { c->timeoutMs = 0; }, "timeoutMs=0"},
      {[](arfuseConfig_t* c) { c->maxBlocks = 500; }, "maxBlocks=500"},
  };
  for (const Case& k : cases) {
    arfuseConfig_t c = ARFUSE_CONFIG_INITIALIZER;
    k.edit(&c);
    ResolvedConfig r;
    std::string msg;
    EXPECT_EQ(resolveConfig(&c, 4, &r).into(&msg), arfuseInvalidArgument) << k.needle;
    EXPECT_NE(msg.find(k.needle), std::string::npos) << msg;
  }
}

TEST(Config, FieldsWinOverDefaults) {
  arfuseConfig_t c = ARFUSE_CONFIG_INITIALIZER;
  c.maxTokens = 16;
  c.maxHidden = 4096;
  c.dtypeMask = ARFUSE_DTYPE_BIT(arfuseBfloat16);
  c.algo = arfuseAlgoOneShot;
  c.timeoutMs = 50;
  ResolvedConfig r;
  std::string msg;
  ASSERT_EQ(resolveConfig(&c, 2, &r).into(&msg), arfuseSuccess) << msg;
  EXPECT_EQ(r.limits.maxTokens, 16);
  EXPECT_EQ(r.policy.forcedAlgo, arfuseAlgoOneShot);
  EXPECT_EQ(r.policy.forcedBy, "config");
  EXPECT_EQ(r.timeoutMs, 50);
}

TEST(Params, EveryVariableIsDocumentedOnce) {
  std::set<std::string> names;
  for (const ParamSpec& s : paramSpecs()) {
    EXPECT_EQ(std::string(s.name).rfind("ARFUSE_", 0), 0u) << s.name;
    EXPECT_TRUE(names.insert(s.name).second) << s.name;
    EXPECT_GT(std::string(s.description).size(), 20u) << s.name;
  }
  EXPECT_EQ(parseAlgoName("twoshot"), arfuseAlgoTwoShot);
  EXPECT_EQ(parseAlgoName("bogus"), -1);
}

}  // namespace
}  // namespace arfuse
