#include "bench_args.h"

#include <gtest/gtest.h>

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
  ASSERT_TRUE(parseBenchArgs({"-b", "14K", "-e", "1M", "-f", "4",           "--hidden", "7168",    "-n",      "5",
                              "-w", "0",   "-c", "0",  "-J", "/tmp/x.json", "--algo",   "twoshot", "--ranks", "4"},
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
  EXPECT_NE(err.find("--model wants kimi-k2, deepseek-v3, llama-3-70b or qwen3-235b, got 'gpt-9'"), std::string::npos)
      << err;
  EXPECT_FALSE(parseBenchArgs({"--model", "kimi-k2", "--verify-pass", "--op", "addrmsnorm"}, &a, &err));
}

TEST(BenchArgs, ErrorsNameTheArgument) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> bad = {
      {{"--tokens", "1,x"}, "--tokens wants a comma-separated list of whole numbers from 1 to 1048576, got '1,x'"},
      {{"--hidden", "100"}, "--hidden wants a multiple of 8 from 8 to 1048576, got '100'"},
      {{"--dtype", "int8"}, "--dtype wants bf16, fp16 or fp32"},
      {{"--algo", "ring"}, "--algo wants all, or a comma-separated list of auto,"},
      {{"-b", "1K"}, "-b and -e"},
      {{"-b", "1Q", "-e", "2K"}, "-b wants a byte count from 1 to 1099511627776 (K, M, G: x1024), got '1Q'"},
      {{"-G", "0"}, "-G 0"},
      {{"--ranks", "99"}, "--ranks wants a whole number from 1 to 16, got '99'"},
      {{"--frobnicate"}, "unknown option '--frobnicate'"},
      {{"-n"}, "-n needs a value"},
      {{"--op", "x"}, "--op wants fused, allreduce or addrmsnorm, got 'x'"},
      {{"-c", "2"}, "-c wants 0 or 1, got '2'"},
      {{"--virtual=1"}, "--virtual takes no value, got '--virtual=1'"},
      {{"--", "x"}, "unexpected argument 'x'"},
  };
  for (const auto& c : bad) {
    BenchArgs a;
    std::string err;
    EXPECT_FALSE(parseBenchArgs(c.first, &a, &err)) << c.second;
    EXPECT_NE(err.find(c.second), std::string::npos) << err;
  }
}

TEST(BenchArgs, NcclSweepForms) {
  BenchArgs a;
  std::string err;
  ASSERT_TRUE(parseBenchArgs({}, &a, &err)) << err;
  EXPECT_FALSE(a.ncclSweep);
  EXPECT_EQ(a.ncclSweepTimeoutS, 120);
  EXPECT_TRUE(a.ncclSweepChild.empty());

  // Bare: the default axes; the next option is not taken for a SPEC.
  ASSERT_TRUE(parseBenchArgs({"--nccl-sweep", "--tokens", "1,16"}, &a, &err)) << err;
  EXPECT_TRUE(a.ncclSweep);
  EXPECT_EQ(a.ncclSweepSpec, "proto,algo,channels");
  EXPECT_EQ(a.tokens, (std::vector<int>{1, 16}));

  ASSERT_TRUE(parseBenchArgs({"--nccl-sweep=proto:LL/Simple*algo", "--nccl-sweep-timeout", "30"}, &a, &err)) << err;
  EXPECT_TRUE(a.ncclSweep);
  EXPECT_EQ(a.ncclSweepSpec, "proto:LL/Simple*algo");
  EXPECT_EQ(a.ncclSweepTimeoutS, 30);

  // A separate SPEC word (a SPEC never starts with '-').
  ASSERT_TRUE(parseBenchArgs({"--algo", "auto", "--nccl-sweep", "channels:2/4"}, &a, &err)) << err;
  EXPECT_EQ(a.ncclSweepSpec, "channels:2/4");
  EXPECT_EQ(a.algos, (std::vector<int>{arfuseAlgoAuto}));

  // With the verify pass and an all-reduce-only run.
  ASSERT_TRUE(parseBenchArgs({"--model", "kimi-k2", "--verify-pass", "--nccl-sweep"}, &a, &err)) << err;
  EXPECT_TRUE(a.verifyPass && a.ncclSweep);
  ASSERT_TRUE(parseBenchArgs({"--op", "allreduce", "--nccl-sweep=proto"}, &a, &err)) << err;
  EXPECT_EQ(a.op, "allreduce");

  // The internal child flag.
  ASSERT_TRUE(parseBenchArgs({"--ranks", "2", "--nccl-sweep-child", "/tmp/s.json"}, &a, &err)) << err;
  EXPECT_EQ(a.ncclSweepChild, "/tmp/s.json");
  EXPECT_FALSE(a.ncclSweep);
}

TEST(BenchArgs, NcclSweepErrorsNameTheArgumentAndTheFix) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> bad = {
      {{"--nccl-sweep=proto:LL64"}, "--nccl-sweep: proto value 'LL64': use LL, LL128 or Simple"},
      {{"--nccl-sweep=algo:Butterfly"}, "--nccl-sweep: algo value 'Butterfly': use Ring, Tree"},
      {{"--nccl-sweep=channels:0"}, "--nccl-sweep: channels value '0': use a channel count in 1..64"},
      {{"--nccl-sweep=protocol"}, "--nccl-sweep: unknown axis 'protocol': use proto, algo, channels"},
      {{"--nccl-sweep=NCCL_NTHREADS"}, "--nccl-sweep: NCCL_NTHREADS needs values: NCCL_NTHREADS:V1/V2"},
      {{"--nccl-sweep="}, "--nccl-sweep=: empty"},
      {{"--nccl-sweep", "proto,,algo"}, "an empty item between commas"},
      {{"--nccl-sweep=proto*proto:LL"}, "crosses NCCL_PROTO with itself"},
      {{"--nccl-sweep", "--virtual"}, "--nccl-sweep: NCCL needs one GPU per rank; drop --virtual"},
      {{"--nccl-sweep", "--op", "addrmsnorm"}, "--nccl-sweep: --op addrmsnorm has no NCCL baseline"},
      {{"--nccl-sweep", "--ranks", "1"}, "--nccl-sweep: NCCL needs at least 2 ranks; use --ranks=2 or more"},
      {{"--nccl-sweep-timeout", "0"}, "--nccl-sweep-timeout wants a whole number from 1 to 3600, got '0'"},
      {{"--nccl-sweep-timeout"}, "--nccl-sweep-timeout needs a value"},
      {{"--nccl-sweep-child", "/tmp/x.json"}, "--nccl-sweep-child (internal) needs --ranks >= 2"},
      {{"--nccl-sweep", "--ranks", "2", "--nccl-sweep-child", "x"}, "cannot sweep itself"},
  };
  for (const auto& c : bad) {
    BenchArgs a;
    std::string err;
    EXPECT_FALSE(parseBenchArgs(c.first, &a, &err)) << c.second;
    EXPECT_NE(err.find(c.second), std::string::npos) << "got: " << err << "\nwanted: " << c.second;
  }
}

TEST(BenchArgs, Epilogues) {
  BenchArgs a;
  std::string err;
  ASSERT_TRUE(parseBenchArgs({}, &a, &err)) << err;
  EXPECT_EQ(a.epilogues, (std::vector<int>{harness::kEpilogueNone}));
  EXPECT_FALSE(a.epilogueTable());
  ASSERT_TRUE(parseBenchArgs({"--epilogue", "none"}, &a, &err)) << err;
  EXPECT_FALSE(a.epilogueTable());  // exactly today's bench
  ASSERT_TRUE(parseBenchArgs(
      {"--op", "addrmsnorm", "--epilogue", "none,plain,first,plusone,fp8,fp8-token,nvfp4,nvfp4-swizzled"}, &a, &err))
      << err;
  EXPECT_EQ(a.epilogues.size(), 8u);
  EXPECT_TRUE(a.epilogueTable());
  for (size_t i = 0; i < a.epilogues.size(); ++i) EXPECT_EQ(a.epilogues[i], static_cast<int>(i));
  ASSERT_TRUE(parseBenchArgs({"--epilogue", "nvfp4,fp8", "--algo", "all", "--ranks", "4"}, &a, &err)) << err;
  EXPECT_EQ(a.epilogues, (std::vector<int>{harness::kEpilogueNvfp4, harness::kEpilogueFp8}));

  const std::vector<std::pair<std::vector<std::string>, std::string>> bad = {
      {{"--epilogue", "fp4"},
       "--epilogue wants a comma-separated list of none, plain, first, plusone, fp8, fp8-token, nvfp4 or "
       "nvfp4-swizzled, got 'fp4'"},
      {{"--epilogue", "fp8,,nvfp4"}, "got 'fp8,,nvfp4' ('' is not one)"},
      {{"--epilogue"}, "--epilogue needs a value"},
      {{"--epilogue", "fp8,fp8"}, "--epilogue names 'fp8' twice"},
      {{"--op", "allreduce", "--epilogue", "fp8"}, "--epilogue: applies to --op fused and addrmsnorm"},
      {{"--model", "kimi-k2", "--verify-pass", "--epilogue", "fp8"}, "--epilogue: --verify-pass"},
      {{"--nccl-sweep", "--epilogue", "plain"}, "--epilogue: --nccl-sweep re-runs the baseline"},
      {{"--hidden", "4104", "--epilogue", "fp8,nvfp4"}, "--epilogue: nvfp4 needs --hidden a multiple of 16"},
  };
  for (const auto& c : bad) {
    EXPECT_FALSE(parseBenchArgs(c.first, &a, &err)) << c.second;
    EXPECT_NE(err.find(c.second), std::string::npos) << "got: " << err << "\nwanted: " << c.second;
  }
  // FP8 needs no multiple of 16.
  EXPECT_TRUE(parseBenchArgs({"--hidden", "4104", "--epilogue", "fp8,fp8-token"}, &a, &err)) << err;
}

TEST(BenchArgs, UsageDocumentsTheEpilogues) {
  const std::string u = benchUsage();
  for (const char* s : {"--epilogue LIST", "none", "plain", "first", "plusone", "fp8-token", "nvfp4-swizzled",
                        "NOT norm_out", "copy moves exactly those bytes", "unfused baseline"})
    EXPECT_NE(u.find(s), std::string::npos) << s;
}

TEST(BenchArgs, UsageDocumentsTheSweep) {
  const std::string u = benchUsage();
  for (const char* s : {"--nccl-sweep[=SPEC]", "proto[:LL/LL128/Simple]", "algo[:Ring/Tree]", "channels[:1/2/4/8/16]",
                        "NCCL_NAME:V1/V2", "--nccl-sweep-timeout S", "--nccl-sweep-child FILE"})
    EXPECT_NE(u.find(s), std::string::npos) << s;
}

}  // namespace
}  // namespace cli
}  // namespace arfuse
