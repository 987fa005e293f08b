// The schema of `arfuse bench -J` (arfuse-bench/1), which scripts/perf_table.py and docs rely on.
#include <gtest/gtest.h>

#include "bench_json.h"

namespace arfuse {
namespace cli {
namespace {

BenchEnv env() {
  BenchEnv e;
  e.arfuse = "arfuse 0.1.0 cuda 13.0 nccl 2.28.9 archs 90";
  e.date = "2026-11-29T17:00:00Z";
  e.gpu = "NVIDIA H200 (sm_90)";
  e.driver = "580.159.04";
  e.cudaRuntime = 13000;
  e.nccl = 22809;
  e.nranks = 2;
  return e;
}

bool has(const std::string& s, const std::string& needle) { return s.find(needle) != std::string::npos; }

TEST(BenchJson, CarriesTheEnvironmentAndEveryRow) {
  BenchArgs a;
  std::string err;
  ASSERT_TRUE(parseBenchArgs({"--tokens", "1,16", "-J", "x.json"}, &a, &err)) << err;
  Row ok;
  ok.tokens = 1;
  ok.bytes = 14336;
  ok.algo = "auto:lowlatency";
  ok.role = "arfuse";
  ok.t.ok = true;
  ok.t.medianUs = 6.62;
  ok.t.minUs = 6.6;
  ok.t.maxUs = 6.7;
  ok.algbw = 2.16;
  ok.busbw = 2.16;
  ok.ratio = 0.62;
  Row bad;
  bad.tokens = 16;
  bad.bytes = 229376;
  bad.algo = "lowlatency";
  bad.role = "arfuse";
  bad.error = "arfuseUnsupported: \"quoted\"\nsecond line";
  const std::string j = benchJson(a, env(), {ok, bad});
  for (const char* key : {"\"schema\": \"arfuse-bench/1\"", "\"arfuse\": \"arfuse 0.1.0", "\"date\": \"2026-11-29T17:00:00Z\"",
                          "\"command\": \"arfuse bench --tokens 1,16 -J x.json\"", "\"gpu\": \"NVIDIA H200 (sm_90)\"",
                          "\"driver\": \"580.159.04\"", "\"cuda_runtime\": 13000", "\"nccl\": 22809", "\"op\": \"fused\"",
                          "\"dtype\": \"bf16\"", "\"hidden\": 7168", "\"ranks\": 2", "\"virtual_ranks\": false",
                          "\"calls_per_graph\": 20", "\"verify_pass\": false", "\"results\": ["})
    EXPECT_TRUE(has(j, key)) << key << "\n" << j;
  EXPECT_TRUE(has(j, "\"median_us\": 6.62, \"min_us\": 6.6, \"max_us\": 6.7")) << j;
  EXPECT_TRUE(has(j, "\"ratio\": 0.62")) << j;
  // A failed row carries its error (escaped) and no timing.
  EXPECT_TRUE(has(j, "\"error\": \"arfuseUnsupported: \\\"quoted\\\"\\nsecond line\"")) << j;
  EXPECT_EQ(j.find("nan"), std::string::npos);
  EXPECT_EQ(j.back(), '\n');
  // Balanced braces and brackets (a cheap well-formedness check).
  int depth = 0;
  bool inString = false;
  for (size_t i = 0; i < j.size(); ++i) {
    if (j[i] == '"' && (i == 0 || j[i - 1] != '\\')) inString = !inString;
    if (inString) continue;
    if (j[i] == '{' || j[i] == '[') ++depth;
    if (j[i] == '}' || j[i] == ']') --depth;
    ASSERT_GE(depth, 0);
  }
  EXPECT_EQ(depth, 0);
}

TEST(BenchJson, VerifyPassAndSingleGpuFields) {
  BenchArgs a;
  std::string err;
  ASSERT_TRUE(parseBenchArgs({"--model", "kimi-k2", "--verify-pass"}, &a, &err)) << err;
  BenchEnv e = env();
  e.virtualRanks = true;
  Row r;
  r.tokens = 16;
  r.algo = "auto:oneshot";
  r.role = "verify-pass";
  r.t.ok = true;
  r.t.medianUs = 8.6;
  r.passMs = 1.049;
  const std::string j = benchJson(a, e, {r});
  EXPECT_TRUE(has(j, "\"model\": \"kimi-k2\"")) << j;
  EXPECT_TRUE(has(j, "\"layers\": 61")) << j;
  EXPECT_TRUE(has(j, "\"calls_per_graph\": 122")) << j;
  EXPECT_TRUE(has(j, "\"verify_pass\": true")) << j;
  EXPECT_TRUE(has(j, "\"virtual_ranks\": true")) << j;
  EXPECT_TRUE(has(j, "\"pass_ms\": 1.049")) << j;

  BenchArgs s;
  ASSERT_TRUE(parseBenchArgs({"--op", "addrmsnorm"}, &s, &err)) << err;
  e.copyPeakGBps = 3946;
  const std::string k = benchJson(s, e, {});
  EXPECT_TRUE(has(k, "\"copy_peak_GBps\": 3946")) << k;
  EXPECT_TRUE(has(k, "\"copy_reference\": \"sm-copy-kernel\"")) << k;
}

}  // namespace
}  // namespace cli
}  // namespace arfuse
