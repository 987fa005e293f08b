#include <gtest/gtest.h>

#include "bench_args.h"

namespace arfuse {
namespace cli {
namespace {

TEST(BenchArgs, Defaults) {
  BenchArgs a;
  std::string err;
  ASSERT_TRUE(parseBenchArgs({}, &a, &err)) << err;
  EXPECT_EQ(a.op, "fused");
  EXPECT_EQ(a.hidden, 7168);
  EXPECT_EQ(a.tokens.front(), 1);
  EXPECT_EQ(a.tokens.back(), 2048);
  EXPECT_TRUE(a.check);
}

TEST(BenchArgs, NcclTestsVocabulary) {
  BenchArgs a;
  std::string err;
  ASSERT_TRUE(parseBenchArgs({"-b", "14K", "-e", "1M", "-f", "4", "--hidden", "7168", "-n", "5", "-w", "0", "-c",
                              "0", "-J", "/tmp/x.json", "--algo", "twoshot", "--ranks", "4"},
                             &a, &err))
      << err;
  // 14 KiB = one 7168-wide bf16 row; x4 steps: 1, 4, 16, 64 rows.
  EXPECT_EQ(a.tokens, (std::vector<int>{1, 4, 16, 64}));
  EXPECT_EQ(a.iters, 5);
  EXPECT_EQ(a.warmup, 0);
  EXPECT_FALSE(a.check);
  EXPECT_EQ(a.jsonPath, "/tmp/x.json");
  EXPECT_EQ(a.algos, (std::vector<int>{arfuseAlgoTwoShot}));
  EXPECT_EQ(a.ranks, 4);
  EXPECT_NE(a.commandLine.find("-b 14K"), std::string::npos);
}

TEST(BenchArgs, ModelPresetsAndVerifyPass) {
  BenchArgs a;
  std::string err;
  ASSERT_TRUE(parseBenchArgs({"--model", "llama-3-70b", "--verify-pass", "--virtual"}, &a, &err)) << err;
  EXPECT_EQ(a.hidden, 8192);
  EXPECT_EQ(a.layers, 80);
  EXPECT_TRUE(a.verifyPass);
  EXPECT_TRUE(a.virtualRanks);
  ASSERT_TRUE(parseBenchArgs({"--model", "kimi-k2", "--layers", "3"}, &a, &err)) << err;
  EXPECT_EQ(a.hidden, 7168);
  EXPECT_EQ(a.layers, 3);
  ASSERT_NE(findModel("qwen3-235b"), nullptr);
  EXPECT_EQ(findModel("qwen3-235b")->layers, 94);
  EXPECT_FALSE(parseBenchArgs({"--verify-pass"}, &a, &err));
  EXPECT_NE(err.find("needs a layer count"), std::string::npos) << err;
  EXPECT_FALSE(parseBenchArgs({"--model", "gpt-9"}, &a, &err));
  EXPECT_NE(err.find("--model gpt-9"), std::string::npos) << err;
  EXPECT_FALSE(parseBenchArgs({"--model", "kimi-k2", "--verify-pass", "--op", "addrmsnorm"}, &a, &err));
}

TEST(BenchArgs, ErrorsNameTheArgument) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> bad = {
      {{"--tokens", "1,x"}, "--tokens"},  {{"--hidden", "100"}, "--hidden 100"}, {{"--dtype", "int8"}, "--dtype"},
      {{"--algo", "ring"}, "--algo ring"}, {{"-b", "1K"}, "-b and -e"},        {{"-G", "0"}, "-G 0"},
      {{"--ranks", "99"}, "--ranks 99"},   {{"--frobnicate"}, "--frobnicate"},  {{"-n"}, "-n needs a value"},
      {{"--op", "x"}, "--op x"},
  };
  for (const auto& c : bad) {
    BenchArgs a;
    std::string err;
    EXPECT_FALSE(parseBenchArgs(c.first, &a, &err)) << c.second;
    EXPECT_NE(err.find(c.second), std::string::npos) << err;
  }
}

}  // namespace
}  // namespace cli
}  // namespace arfuse
