// The schema of `arfuse bench -J` (arfuse-bench/3), which scripts/perf_table.py and docs rely on.
#include "bench_json.h"

#include <gtest/gtest.h>

#include "nccl_sweep.h"
#include "topo/json.h"

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
  ok.planBlocks = 4;
  ok.planThreads = 256;
  ok.planReason = "lowlatency: 14336 B <= \"limit\"";
  Row bad;
  bad.tokens = 16;
  bad.bytes = 229376;
  bad.algo = "lowlatency";
  bad.role = "arfuse";
  bad.error = "arfuseUnsupported: \"quoted\"\nsecond line";
  const std::string j = benchJson(a, env(), {ok, bad});
  for (const char* key :
       {"\"schema\": \"arfuse-bench/4\"", "\"arfuse\": \"arfuse 0.1.0", "\"date\": \"2026-11-29T17:00:00Z\"",
        "\"command\": \"arfuse bench --tokens 1,16 -J x.json\"", "\"gpu\": \"NVIDIA H200 (sm_90)\"",
        "\"driver\": \"580.159.04\"", "\"cuda_runtime\": 13000", "\"nccl\": 22809", "\"op\": \"fused\"",
        "\"dtype\": \"bf16\"", "\"hidden\": 7168", "\"ranks\": 2", "\"virtual_ranks\": false",
        "\"calls_per_graph\": 20", "\"verify_pass\": false", "\"results\": ["})
    EXPECT_TRUE(has(j, key)) << key << "\n" << j;
  EXPECT_TRUE(has(j, "\"median_us\": 6.62, \"min_us\": 6.6, \"max_us\": 6.7")) << j;
  EXPECT_TRUE(has(j, "\"ratio\": 0.62")) << j;
  // The plan the row ran under, on rows that have one (the failed row has none).
  EXPECT_TRUE(
      has(j, "\"plan\": {\"blocks\": 4, \"threads\": 256, \"reason\": \"lowlatency: 14336 B <= \\\"limit\\\"\"}"))
      << j;
  EXPECT_EQ(j.find("\"plan\""), j.rfind("\"plan\""));
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
  // arfuse-bench/3: the epilogue list (default: none) and each row's epilogue.
  EXPECT_TRUE(has(j, "\"epilogues\": [\"none\"]")) << j;
  EXPECT_TRUE(has(j, "\"role\": \"arfuse\", \"epilogue\": \"none\"")) << j;
  // arfuse-bench/2 records the NCCL environment; without a sweep there are no sweep members.
  EXPECT_TRUE(has(j, "\"nccl_env\": {}")) << j;
  EXPECT_FALSE(has(j, "nccl_sweep")) << j;
}

const topo::json::Value* member(const topo::json::Value& v, const std::string& key) {
  for (const topo::json::Member& m : v.members)
    if (m.key == key) return &m.value;
  return nullptr;
}

std::string str(const topo::json::Value* v) { return v ? v->text : "<missing>"; }

TEST(BenchJson, NcclSweepMembers) {
  BenchArgs a;
  std::string err;
  ASSERT_TRUE(parseBenchArgs({"--tokens", "1,16", "--algo", "auto", "--nccl-sweep=proto:LL,algo:NVLS"}, &a, &err))
      << err;
  BenchEnv e = env();
  e.ncclEnv = {{"NCCL_NVLS_ENABLE", "0"}, {"NCCL_SOCKET_IFNAME", "\"eth0\""}};
  // A synthetic sweep: default 12 / 20 us, proto=LL 9 / 24 us, algo=NVLS refused; arfuse 6 / 10 us.
  NcclSweep sw;
  sw.spec = a.ncclSweepSpec;
  sw.timeoutS = 120;
  sw.inherited = e.ncclEnv;
  sw.added = {{"NCCL_DEBUG", "WARN"}};
  std::vector<Row> rows;
  for (int t : a.tokens) {
    Row r;
    r.tokens = t;
    r.bytes = t * 14336LL;
    r.algo = t == 1 ? "auto:lowlatency" : "auto:oneshot";
    r.role = "arfuse";
    r.t.ok = true;
    r.t.medianUs = t == 1 ? 6.0 : 10.0;
    rows.push_back(r);
  }
  setPoints(&sw, a, rows);
  std::vector<NcclSetting> settings;
  ASSERT_TRUE(expandNcclSweep(sw.spec, &settings, &err)) << err;
  ASSERT_EQ(settings.size(), 3u);
  const double us[3][2] = {{12, 20}, {9, 24}, {0, 0}};
  for (size_t k = 0; k < 3; ++k) {
    SweepSetting s;
    s.setting = settings[k];
    s.status = k == 2 ? "error" : "ok";
    for (size_t i = 0; i < 2; ++i) {
      SweepPoint p;
      p.tokens = sw.tokens[i];
      p.bytes = sw.bytes[i];
      if (us[k][i] > 0) {
        p.t.ok = true;
        p.t.medianUs = us[k][i];
        p.t.minUs = us[k][i] - 0.5;
        p.t.maxUs = us[k][i] + 0.5;
      } else {
        p.error = "NCCL WARN \"NVLS\" not supported";
      }
      s.points.push_back(p);
    }
    if (k == 2) s.error = s.points[0].error;
    sw.settings.push_back(s);
  }
  computeRatios(&sw);
  const std::string j = benchJson(a, e, rows, &sw);

  // Well-formed JSON, read back with the project's strict reader.
  topo::json::Value doc;
  ASSERT_EQ(topo::json::parse(j, &doc).into(&err), arfuseSuccess) << err << "\n" << j;
  EXPECT_EQ(str(member(doc, "schema")), "arfuse-bench/4");
  // Every arfuse-bench/1 and /2 member is still there, and /3's epilogue list.
  for (const char* key :
       {"arfuse", "date", "command", "gpu", "driver", "cuda_runtime", "nccl", "op", "dtype", "hidden", "ranks",
        "virtual_ranks", "calls_per_graph", "iters", "verify_pass", "warmup", "results", "nccl_env", "epilogues"})
    EXPECT_NE(member(doc, key), nullptr) << key;
  EXPECT_EQ(member(doc, "results")->items.size(), 2u);
  const topo::json::Value* nccl = member(doc, "nccl_env");
  ASSERT_NE(nccl, nullptr);
  EXPECT_EQ(str(member(*nccl, "NCCL_NVLS_ENABLE")), "0");
  EXPECT_EQ(str(member(*nccl, "NCCL_SOCKET_IFNAME")), "\"eth0\"");
  EXPECT_EQ(str(member(doc, "nccl_sweep_spec")), "proto:LL,algo:NVLS");
  EXPECT_EQ(str(member(doc, "nccl_sweep_timeout_s")), "120");
  EXPECT_EQ(str(member(*member(doc, "nccl_sweep_added_env"), "NCCL_DEBUG")), "WARN");

  const topo::json::Value* sweep = member(doc, "nccl_sweep");
  ASSERT_NE(sweep, nullptr);
  ASSERT_EQ(sweep->kind, topo::json::Value::Kind::kArray);
  ASSERT_EQ(sweep->items.size(), 3u);
  const topo::json::Value& def = sweep->items[0];
  EXPECT_EQ(str(member(def, "setting")), "default");
  EXPECT_TRUE(member(def, "env")->members.empty());
  EXPECT_EQ(str(member(def, "status")), "ok");
  const topo::json::Value& ll = sweep->items[1];
  EXPECT_EQ(str(member(ll, "setting")), "proto=LL");
  EXPECT_EQ(str(member(*member(ll, "env"), "NCCL_PROTO")), "LL");
  const topo::json::Value& ll1 = member(ll, "results")->items[0];
  EXPECT_EQ(str(member(ll1, "tokens")), "1");
  EXPECT_EQ(str(member(ll1, "bytes")), "14336");
  EXPECT_EQ(str(member(ll1, "median_us")), "9");
  EXPECT_EQ(str(member(ll1, "min_us")), "8.5");
  EXPECT_EQ(str(member(ll1, "max_us")), "9.5");
  EXPECT_EQ(str(member(ll1, "vs_default")), "0.75");
  EXPECT_EQ(str(member(ll1, "vs_arfuse")), "1.5");
  EXPECT_EQ(str(member(ll1, "wrong")), "0");
  EXPECT_EQ(member(ll1, "error"), nullptr);
  EXPECT_EQ(str(member(member(ll, "results")->items[1], "vs_default")), "1.2");
  const topo::json::Value& nvls = sweep->items[2];
  EXPECT_EQ(str(member(nvls, "status")), "error");
  EXPECT_EQ(str(member(nvls, "error")), "NCCL WARN \"NVLS\" not supported");
  const topo::json::Value& nvls16 = member(nvls, "results")->items[1];
  EXPECT_EQ(str(member(nvls16, "tokens")), "16");
  EXPECT_EQ(member(nvls16, "median_us"), nullptr);
  EXPECT_EQ(str(member(nvls16, "error")), "NCCL WARN \"NVLS\" not supported");

  const topo::json::Value* best = member(doc, "nccl_sweep_best");
  ASSERT_NE(best, nullptr);
  ASSERT_EQ(best->items.size(), 2u);
  EXPECT_EQ(str(member(best->items[0], "setting")), "proto=LL");
  EXPECT_EQ(str(member(best->items[0], "median_us")), "9");
  EXPECT_EQ(str(member(best->items[0], "arfuse_algo")), "auto:lowlatency");
  EXPECT_EQ(str(member(best->items[0], "arfuse_us")), "6");
  EXPECT_EQ(str(member(best->items[0], "arfuse_vs_best")), "0.666667");
  EXPECT_EQ(str(member(best->items[1], "setting")), "default");
  EXPECT_EQ(str(member(best->items[1], "arfuse_vs_best")), "0.5");
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

TEST(BenchJson, EpilogueListAndRows) {
  BenchArgs a;
  std::string err;
  ASSERT_TRUE(
      parseBenchArgs({"--op", "addrmsnorm", "--epilogue", "none,fp8,nvfp4-swizzled", "--tokens", "1"}, &a, &err))
      << err;
  BenchEnv e = env();
  e.nranks = 1;
  e.copyPeakGBps = 3946;
  Row norm;
  norm.tokens = 1;
  norm.bytes = 50180;
  norm.algo = "local";
  norm.role = "addrmsnorm";
  norm.epilogue = "fp8";
  norm.t.ok = true;
  norm.t.medianUs = 3.1;
  norm.ratio = 0.4;
  Row copy = norm;
  copy.algo = "memcpy";
  copy.role = "copy";
  copy.epilogue = "fp8";
  const std::string j = benchJson(a, e, {norm, copy});
  topo::json::Value doc;
  ASSERT_EQ(topo::json::parse(j, &doc).into(&err), arfuseSuccess) << err << "\n" << j;
  EXPECT_EQ(str(member(doc, "schema")), "arfuse-bench/4");
  const topo::json::Value* list = member(doc, "epilogues");
  ASSERT_NE(list, nullptr);
  ASSERT_EQ(list->items.size(), 3u);
  EXPECT_EQ(str(&list->items[0]), "none");
  EXPECT_EQ(str(&list->items[1]), "fp8");
  EXPECT_EQ(str(&list->items[2]), "nvfp4-swizzled");
  const topo::json::Value* results = member(doc, "results");
  ASSERT_EQ(results->items.size(), 2u);
  for (const topo::json::Value& r : results->items) {
    EXPECT_EQ(str(member(r, "epilogue")), "fp8");
    EXPECT_EQ(str(member(r, "bytes")), "50180");
  }
}

}  // namespace
}  // namespace cli
}  // namespace arfuse
