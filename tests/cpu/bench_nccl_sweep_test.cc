// `arfuse bench --nccl-sweep` without a GPU: the SPEC expansion, the child's argv and environment,
// running a child under a time bound, reading a child's result back, the ratios and the report.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include "bench_args.h"
#include "bench_json.h"
#include "bench_procs.h"
#include "nccl_sweep.h"

extern char** environ;

namespace arfuse {
namespace cli {
namespace {

std::vector<std::string> labels(const std::vector<NcclSetting>& s) {
  std::vector<std::string> out;
  for (const NcclSetting& x : s) out.push_back(x.label);
  return out;
}

bool has(const std::string& s, const std::string& needle) { return s.find(needle) != std::string::npos; }

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string tempPath(const char* name) {
  return testing::TempDir() + "arfuse_sweep_" + std::to_string(getpid()) + "_" + name;
}

TEST(NcclSweepSpec, DefaultIsEachAxisAloneAfterTheDefaultSetting) {
  std::vector<NcclSetting> s;
  std::string err;
  ASSERT_TRUE(expandNcclSweep(kDefaultNcclSweepSpec, &s, &err)) << err;
  EXPECT_EQ(labels(s),
            (std::vector<std::string>{"default", "proto=LL", "proto=LL128", "proto=Simple", "algo=Ring", "algo=Tree",
                                      "channels=1", "channels=2", "channels=4", "channels=8", "channels=16"}));
  EXPECT_TRUE(s[0].env.empty());
  EXPECT_EQ(s[2].env, (EnvList{{"NCCL_PROTO", "LL128"}}));
  EXPECT_EQ(s[5].env, (EnvList{{"NCCL_ALGO", "Tree"}}));
  EXPECT_EQ(s[8].env, (EnvList{{"NCCL_MIN_NCHANNELS", "4"}, {"NCCL_MAX_NCHANNELS", "4"}}));
}

TEST(NcclSweepSpec, ValuesCrossesRawVariablesAndRepeats) {
  std::vector<NcclSetting> s;
  std::string err;
  // Case-insensitive values are written as NCCL spells them; '*' crosses, first axis slowest.
  ASSERT_TRUE(expandNcclSweep("proto:ll/simple*algo:tree/RING,channels:04,NCCL_NTHREADS:256/512", &s, &err)) << err;
  EXPECT_EQ(labels(s), (std::vector<std::string>{"default", "proto=LL algo=Tree", "proto=LL algo=Ring",
                                                 "proto=Simple algo=Tree", "proto=Simple algo=Ring", "channels=4",
                                                 "NCCL_NTHREADS=256", "NCCL_NTHREADS=512"}));
  EXPECT_EQ(s[3].env, (EnvList{{"NCCL_PROTO", "Simple"}, {"NCCL_ALGO", "Tree"}}));
  EXPECT_EQ(s[5].env, (EnvList{{"NCCL_MIN_NCHANNELS", "4"}, {"NCCL_MAX_NCHANNELS", "4"}}));
  EXPECT_EQ(s[7].env, (EnvList{{"NCCL_NTHREADS", "512"}}));
  // A setting named twice runs once.
  ASSERT_TRUE(expandNcclSweep("proto:LL,proto", &s, &err)) << err;
  EXPECT_EQ(labels(s), (std::vector<std::string>{"default", "proto=LL", "proto=LL128", "proto=Simple"}));
  // NCCL's other algorithms are accepted (NCCL may refuse them at run time: that is a row's error).
  ASSERT_TRUE(expandNcclSweep("algo:NVLS/pat", &s, &err)) << err;
  EXPECT_EQ(labels(s), (std::vector<std::string>{"default", "algo=NVLS", "algo=PAT"}));
}

TEST(NcclSweepSpec, TooManySettingsIsAnError) {
  std::vector<NcclSetting> s;
  std::string err;
  // 9 x 8 = 72 processes.
  EXPECT_FALSE(expandNcclSweep("NCCL_A:1/2/3/4/5/6/7/8/9*NCCL_B:1/2/3/4/5/6/7/8", &s, &err));
  EXPECT_TRUE(has(err, "more than 64 settings")) << err;
  // 8 x 8 = 64 is the most.
  ASSERT_TRUE(expandNcclSweep("NCCL_A:1/2/3/4/5/6/7/8*NCCL_B:1/2/3/4/5/6/7/8", &s, &err)) << err;
  EXPECT_EQ(s.size(), 65u);
  EXPECT_EQ(s.back().label, "NCCL_A=8 NCCL_B=8");
  for (const char* bad :
       {"proto:", "proto:LL/", "NCCL_X:a b", "NCCL_X:a=b", "nccl_proto:LL", "channels:65", "channels:x"})
    EXPECT_FALSE(expandNcclSweep(bad, &s, &err)) << bad;
}

TEST(NcclSweepChild, ArgvRepeatsThePointsAndParsesBack) {
  BenchArgs a;
  std::string err;
  ASSERT_TRUE(parseBenchArgs({"--tokens", "1,4,64", "--hidden", "4096", "--dtype", "fp16", "-n", "7", "-w", "2",
                              "--calls", "5", "-c", "0", "--algo", "auto", "-J", "/tmp/parent.json", "--nccl-sweep"},
                             &a, &err))
      << err;
  NcclSetting s{"proto=LL", {{"NCCL_PROTO", "LL"}}};
  const ChildCommand c = childCommand("/opt/bin/arfuse", a, 4, s, "/tmp/d/setting1.json", {});
  EXPECT_EQ(c.argv, (std::vector<std::string>{"/opt/bin/arfuse",
                                              "bench",
                                              "--op",
                                              "fused",
                                              "--tokens",
                                              "1,4,64",
                                              "--hidden",
                                              "4096",
                                              "--dtype",
                                              "fp16",
                                              "--ranks",
                                              "4",
                                              "-n",
                                              "7",
                                              "-w",
                                              "2",
                                              "--calls",
                                              "5",
                                              "-c",
                                              "0",
                                              "--nccl-sweep-child",
                                              "/tmp/d/setting1.json"}));
  // What the child makes of it: the same points, no sweep of its own, no JSON over the parent's.
  BenchArgs child;
  ASSERT_TRUE(parseBenchArgs(std::vector<std::string>(c.argv.begin() + 2, c.argv.end()), &child, &err)) << err;
  EXPECT_EQ(child.tokens, a.tokens);
  EXPECT_EQ(child.hidden, 4096);
  EXPECT_EQ(child.dtype, arfuseFloat16);
  EXPECT_EQ(child.ranks, 4);
  EXPECT_EQ(child.iters, 7);
  EXPECT_EQ(child.warmup, 2);
  EXPECT_EQ(child.callsPerGraph, 5);
  EXPECT_FALSE(child.check);
  EXPECT_FALSE(child.ncclSweep);
  EXPECT_TRUE(child.jsonPath.empty());
  EXPECT_EQ(child.ncclSweepChild, "/tmp/d/setting1.json");

  // The verify pass carries its layer count; the model preset's hidden size travels as --hidden.
  ASSERT_TRUE(parseBenchArgs({"--model", "qwen3-235b", "--verify-pass", "--tokens", "16", "--nccl-sweep"}, &a, &err));
  const ChildCommand v = childCommand("arfuse", a, 2, s, "f.json", {});
  ASSERT_TRUE(parseBenchArgs(std::vector<std::string>(v.argv.begin() + 2, v.argv.end()), &child, &err)) << err;
  EXPECT_TRUE(child.verifyPass);
  EXPECT_EQ(child.layers, 94);
  EXPECT_EQ(child.hidden, 4096);
  EXPECT_EQ(child.tokens, (std::vector<int>{16}));
}

TEST(NcclSweepChild, EnvironmentOverridesOnlyTheSweptVariables) {
  BenchArgs a;
  const std::vector<std::string> parent = {"PATH=/usr/bin", "NCCL_PROTO=Simple", "NCCL_NVLS_ENABLE=0",
                                           "NCCL_MAX_NCHANNELS=32", "CUDA_VISIBLE_DEVICES=0,1"};
  const NcclSetting chan{"channels=4", {{"NCCL_MIN_NCHANNELS", "4"}, {"NCCL_MAX_NCHANNELS", "4"}}};
  ChildCommand c = childCommand("arfuse", a, 2, chan, "f.json", parent);
  EXPECT_EQ(c.env, (std::vector<std::string>{"PATH=/usr/bin", "NCCL_PROTO=Simple", "NCCL_NVLS_ENABLE=0",
                                             "CUDA_VISIBLE_DEVICES=0,1", "NCCL_MIN_NCHANNELS=4", "NCCL_MAX_NCHANNELS=4",
                                             "NCCL_DEBUG=WARN"}));
  // The default setting is the user's environment as it is; a user's NCCL_DEBUG is kept, not replaced.
  std::vector<std::string> withDebug = parent;
  withDebug.push_back("NCCL_DEBUG=INFO");
  c = childCommand("arfuse", a, 2, NcclSetting{"default", {}}, "f.json", withDebug);
  EXPECT_EQ(c.env, withDebug);
  // The user's NCCL variables, as recorded in the JSON.
  EXPECT_EQ(
      ncclVariables(withDebug),
      (EnvList{
          {"NCCL_DEBUG", "INFO"}, {"NCCL_MAX_NCHANNELS", "32"}, {"NCCL_NVLS_ENABLE", "0"}, {"NCCL_PROTO", "Simple"}}));
}

ChildCommand shell(const std::string& script, std::vector<std::string> env = {}) {
  return ChildCommand{{"/bin/sh", "-c", script}, env};
}

TEST(NcclSweepRun, ExitStatusAndLogReason) {
  const std::string log = tempPath("exit.log");
  const ChildOutcome o = runChild(
      shell("echo \"proto is $NCCL_PROTO\"; echo 'host:1:1 [0] NCCL WARN Invalid protocol' >&2; echo bye; exit 3",
            {"NCCL_PROTO=LL"}),
      log, 30);
  EXPECT_EQ(o.kind, ChildOutcome::Kind::kExited);
  EXPECT_EQ(o.code, 3);
  const std::string text = slurp(log);
  EXPECT_TRUE(has(text, "proto is LL\n")) << text;  // the environment given, and stdout captured
  EXPECT_TRUE(has(text, "bye")) << text;
  // NCCL's warning wins over the last line.
  EXPECT_EQ(logReason(text), "host:1:1 [0] NCCL WARN Invalid protocol");
  EXPECT_EQ(logReason("first\n  last line  \n\n"), "last line");
  EXPECT_EQ(logReason(""), "");
  std::remove(log.c_str());
}

TEST(NcclSweepRun, AHangingChildIsKilledAtTheBound) {
  const std::string log = tempPath("hang.log");
  const auto start = std::chrono::steady_clock::now();
  const ChildOutcome o = runChild(shell("echo started; exec sleep 60"), log, 0.5);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(o.kind, ChildOutcome::Kind::kTimedOut);
  EXPECT_TRUE(o.error.empty()) << o.error;
  EXPECT_GE(s, 0.5);
  EXPECT_LT(s, 5.0);
  EXPECT_EQ(logReason(slurp(log)), "started");
  std::remove(log.c_str());
}

TEST(NcclSweepRun, SignalAndMissingProgram) {
  const std::string log = tempPath("sig.log");
  ChildOutcome o = runChild(shell("kill -SEGV $$"), log, 30);
  EXPECT_EQ(o.kind, ChildOutcome::Kind::kSignalled);
  EXPECT_EQ(o.code, 11);
  o = runChild(ChildCommand{{"/nonexistent/arfuse", "bench"}, {}}, log, 30);
  EXPECT_EQ(o.kind, ChildOutcome::Kind::kNotStarted);
  EXPECT_TRUE(has(o.error, "cannot start /nonexistent/arfuse")) << o.error;
  std::remove(log.c_str());
}

// A child's JSON as benchSweepChild writes it: benchJson of baseline rows.
std::string childJson(const std::vector<Row>& rows) {
  BenchArgs a;
  std::string err;
  EXPECT_TRUE(parseBenchArgs({"--tokens", "1,16", "--ranks", "2", "--nccl-sweep-child", "x"}, &a, &err)) << err;
  BenchEnv env;
  env.nranks = 2;
  return benchJson(a, env, rows);
}

Row baseline(int tokens, double us, const std::string& error = "") {
  Row r;
  r.tokens = tokens;
  r.bytes = tokens * 14336LL;
  r.algo = "nccl";
  r.role = "baseline";
  r.error = error;
  if (us > 0) {
    r.t.ok = true;
    r.t.medianUs = us;
    r.t.minUs = us - 0.5;
    r.t.maxUs = us + 0.5;
  }
  return r;
}

const std::vector<int> kTokens = {1, 16};
const std::vector<long long> kBytes = {14336, 229376};

ChildOutcome exited(int code) {
  ChildOutcome o;
  o.kind = ChildOutcome::Kind::kExited;
  o.code = code;
  return o;
}

TEST(NcclSweepResult, ReadsTheChildsRows) {
  SweepSetting s;
  s.setting = {"proto=LL", {{"NCCL_PROTO", "LL"}}};
  fillSetting(&s, kTokens, kBytes, childJson({baseline(1, 9.25), baseline(16, 12.5)}), exited(0), "", 120);
  EXPECT_EQ(s.status, "ok");
  EXPECT_TRUE(s.error.empty()) << s.error;
  ASSERT_EQ(s.points.size(), 2u);
  EXPECT_EQ(s.points[1].tokens, 16);
  EXPECT_EQ(s.points[1].bytes, 229376);
  EXPECT_TRUE(s.points[1].t.ok);
  EXPECT_DOUBLE_EQ(s.points[0].t.medianUs, 9.25);
  EXPECT_DOUBLE_EQ(s.points[1].t.minUs, 12.0);
  EXPECT_DOUBLE_EQ(s.points[1].t.maxUs, 13.0);
}

TEST(NcclSweepResult, ARefusedSettingCarriesNcclsReasonPerRow) {
  SweepSetting s;
  s.setting = {"algo=NVLS", {{"NCCL_ALGO", "NVLS"}}};
  const std::string refused = "config: algo=nccl (forced by config) is unavailable: ncclCommInitAll: invalid usage";
  const std::string log = "h:1:1 [0] NCCL WARN No algorithm found for NCCL_ALGO=NVLS\nsweep child: tokens 16: x\n";
  fillSetting(&s, kTokens, kBytes, childJson({baseline(1, 0, refused), baseline(16, 0, refused)}), exited(1), log, 120);
  EXPECT_EQ(s.status, "error");
  EXPECT_EQ(s.points[0].error, refused + "; h:1:1 [0] NCCL WARN No algorithm found for NCCL_ALGO=NVLS");
  EXPECT_FALSE(s.points[1].t.ok);
  EXPECT_EQ(s.error, s.points[0].error);
}

TEST(NcclSweepResult, TimeoutCrashAndForeignResults) {
  SweepSetting s;
  ChildOutcome t;
  t.kind = ChildOutcome::Kind::kTimedOut;
  fillSetting(&s, kTokens, kBytes, "", t, "init done\n", 120);
  EXPECT_EQ(s.status, "timeout");
  EXPECT_EQ(s.error, "no result within 120 s; killed; last log line: init done");
  ASSERT_EQ(s.points.size(), 2u);
  EXPECT_EQ(s.points[1].tokens, 16);
  EXPECT_EQ(s.points[1].error, s.error);

  ChildOutcome sig;
  sig.kind = ChildOutcome::Kind::kSignalled;
  sig.code = 11;
  fillSetting(&s, kTokens, kBytes, "", sig, "", 120);
  EXPECT_EQ(s.status, "crashed");
  EXPECT_TRUE(has(s.error, "killed by signal 11")) << s.error;

  s = SweepSetting();
  fillSetting(&s, kTokens, kBytes, "", exited(2), "arfuse bench: unknown argument '--nccl-sweep-child'\n", 120);
  EXPECT_EQ(s.status, "crashed");
  EXPECT_EQ(s.error,
            "exited with status 2 without writing its result; last log line: arfuse bench: unknown "
            "argument '--nccl-sweep-child'");

  s = SweepSetting();
  fillSetting(&s, kTokens, kBytes, "{\"results\": [", exited(0), "", 120);
  EXPECT_EQ(s.status, "crashed");
  EXPECT_TRUE(has(s.error, "is not JSON")) << s.error;

  s = SweepSetting();
  fillSetting(&s, kTokens, kBytes, childJson({baseline(2, 9), baseline(16, 9)}), exited(0), "", 120);
  EXPECT_EQ(s.status, "crashed");
  EXPECT_TRUE(has(s.error, "points differ")) << s.error;

  s = SweepSetting();
  fillSetting(&s, kTokens, kBytes, childJson({baseline(1, 9)}), exited(0), "", 120);
  EXPECT_EQ(s.status, "crashed");
  EXPECT_TRUE(has(s.error, "one row per point")) << s.error;
}

Row arfuseRow(int tokens, const std::string& algo, double us, int wrong = 0) {
  Row r = baseline(tokens, us);
  r.algo = algo;
  r.role = "arfuse";
  r.wrong = wrong;
  return r;
}

TEST(NcclSweepResult, ArfuseReferencePrefersAutoThenFastestCorrect) {
  BenchArgs a;
  std::string err;
  ASSERT_TRUE(parseBenchArgs({"--tokens", "1,16", "--nccl-sweep"}, &a, &err)) << err;
  NcclSweep sw;
  setPoints(&sw, a,
            {arfuseRow(1, "oneshot", 8.0), arfuseRow(1, "auto:lowlatency", 6.5), arfuseRow(1, "lowlatency", 6.4),
             baseline(1, 11.0), arfuseRow(16, "auto:oneshot", 7.0, /*wrong=*/1), arfuseRow(16, "twoshot", 9.5),
             arfuseRow(16, "oneshot", 8.5)});
  EXPECT_EQ(sw.tokens, kTokens);
  EXPECT_EQ(sw.bytes, kBytes);
  EXPECT_EQ(sw.arfuseAlgo, (std::vector<std::string>{"auto:lowlatency", "oneshot"}));
  EXPECT_EQ(sw.arfuseUs, (std::vector<double>{6.5, 8.5}));
  EXPECT_EQ(sw.arfuseLabel, "arfuse fused");
  EXPECT_EQ(sw.callsPerPass, 0);
}

// Default 12 / 20 us, proto=LL 9 / 24 us, algo=NVLS refused, channels=4 timed out; arfuse 6 / 10 us.
NcclSweep syntheticSweep() {
  NcclSweep sw;
  sw.spec = "proto:LL,algo:NVLS,channels:4";
  sw.inherited = {{"NCCL_NVLS_ENABLE", "0"}};
  sw.added = {{"NCCL_DEBUG", "WARN"}};
  sw.tokens = kTokens;
  sw.bytes = kBytes;
  sw.arfuseUs = {6.0, 10.0};
  sw.arfuseAlgo = {"auto:lowlatency", "auto:oneshot"};
  std::vector<NcclSetting> settings;
  std::string err;
  EXPECT_TRUE(expandNcclSweep(sw.spec, &settings, &err)) << err;
  const std::vector<std::vector<Row>> rows = {
      {baseline(1, 12.0), baseline(16, 20.0)},
      {baseline(1, 9.0), baseline(16, 24.0)},
      {baseline(1, 0, "ncclAllReduce: invalid usage"), baseline(16, 0, "ncclAllReduce: invalid usage")}};
  for (size_t k = 0; k < settings.size(); ++k) {
    SweepSetting s;
    s.setting = settings[k];
    if (k < rows.size()) {
      fillSetting(&s, sw.tokens, sw.bytes, childJson(rows[k]), exited(k == 2), "", 120);
    } else {
      ChildOutcome t;
      t.kind = ChildOutcome::Kind::kTimedOut;
      fillSetting(&s, sw.tokens, sw.bytes, "", t, "", 120);
    }
    sw.settings.push_back(s);
  }
  computeRatios(&sw);
  return sw;
}

TEST(NcclSweepResult, RatiosBestAndReport) {
  const NcclSweep sw = syntheticSweep();
  ASSERT_EQ(sw.settings.size(), 4u);
  EXPECT_EQ(sw.settings[2].status, "error");
  EXPECT_EQ(sw.settings[3].status, "timeout");
  EXPECT_DOUBLE_EQ(sw.settings[0].points[0].vsDefault, 1.0);
  EXPECT_DOUBLE_EQ(sw.settings[1].points[0].vsDefault, 0.75);
  EXPECT_DOUBLE_EQ(sw.settings[1].points[0].vsArfuse, 1.5);
  EXPECT_DOUBLE_EQ(sw.settings[1].points[1].vsDefault, 1.2);
  EXPECT_EQ(sw.settings[2].points[0].vsDefault, 0);
  EXPECT_EQ(bestSetting(sw, 0), 1);  // proto=LL at 1 token
  EXPECT_EQ(bestSetting(sw, 1), 0);  // the default at 16 tokens

  const std::string r = sweepReport(sw);
  EXPECT_TRUE(has(r, "# tokens 1, 14336 B per rank: NCCL baseline per setting, us per call\n")) << r;
  EXPECT_TRUE(has(r, "  setting        time_us     min_us     max_us vs_default  vs_arfuse  #wrong\n")) << r;
  EXPECT_TRUE(has(r, "  default          12.00      11.50      12.50      1.000      2.000       0\n")) << r;
  EXPECT_TRUE(has(r, "  proto=LL          9.00       8.50       9.50      0.750      1.500       0\n")) << r;
  EXPECT_TRUE(has(r, "  algo=NVLS   error: ncclAllReduce: invalid usage\n")) << r;
  EXPECT_TRUE(has(r, "  channels=4  timeout: no result within 120 s; killed\n")) << r;
  EXPECT_TRUE(has(r,
                  "  best NCCL setting: proto=LL, 9.00 us (0.750 x default); arfuse fused (auto:lowlatency) "
                  "6.00 us = 0.667 x the best NCCL setting\n"))
      << r;
  EXPECT_TRUE(has(r,
                  "  best NCCL setting: default, 20.00 us (1.000 x default); arfuse fused (auto:oneshot) 10.00 us "
                  "= 0.500 x the best NCCL setting\n"))
      << r;
}

TEST(NcclSweepResult, ReportWhenNothingRanOrNoArfuseRow) {
  NcclSweep sw = syntheticSweep();
  sw.settings.erase(sw.settings.begin(), sw.settings.begin() + 2);  // only the refused and the timed-out
  sw.arfuseUs = {0, 0};
  sw.callsPerPass = 122;
  const std::string r = sweepReport(sw);
  EXPECT_TRUE(has(r, "us per call (in a pass of 122 calls)")) << r;
  EXPECT_TRUE(has(r, "    pass_ms vs_default")) << r;
  EXPECT_TRUE(has(r,
                  "  best NCCL setting: none ran at this point (see the errors above); no timed, correct arfuse "
                  "row at this point to compare\n"))
      << r;
}

// The whole child protocol against the real binary: argv parsed by the child, JSON written by it and
// read back. With no GPU visible to the child, every point must say why rather than vanish.
TEST(NcclSweepChild, RealBinaryWithoutAGpuReportsEveryPoint) {
  BenchArgs a;
  std::string err;
  ASSERT_TRUE(parseBenchArgs({"--tokens", "1,16", "-n", "2", "-w", "1", "--nccl-sweep=proto:LL"}, &a, &err)) << err;
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e)
    if (std::string(*e).compare(0, 21, "CUDA_VISIBLE_DEVICES=") != 0) env.push_back(*e);
  env.push_back("CUDA_VISIBLE_DEVICES=");
  const std::string json = tempPath("child.json"), log = tempPath("child.log");
  std::remove(json.c_str());
  const ChildCommand c =
      childCommand(ARFUSE_CLI_PATH, a, 2, NcclSetting{"proto=LL", {{"NCCL_PROTO", "LL"}}}, json, env);
  const ChildOutcome o = runChild(c, log, 60);
  ASSERT_EQ(o.kind, ChildOutcome::Kind::kExited) << slurp(log);
  EXPECT_EQ(o.code, 1) << slurp(log);
  SweepSetting s;
  s.setting = NcclSetting{"proto=LL", {{"NCCL_PROTO", "LL"}}};
  fillSetting(&s, kTokens, kBytes, slurp(json), o, slurp(log), 60);
  EXPECT_EQ(s.status, "error");
  ASSERT_EQ(s.points.size(), 2u);
  for (const SweepPoint& p : s.points) {
    EXPECT_FALSE(p.t.ok);
    EXPECT_EQ(p.error, "2 ranks need 2 GPUs; 0 visible");
  }
  EXPECT_TRUE(has(slurp(json), "\"schema\": \"arfuse-bench/4\"")) << slurp(json);
  EXPECT_TRUE(has(slurp(json), "\"NCCL_PROTO\": \"LL\"")) << slurp(json);  // the child saw the setting
  std::remove(json.c_str());
  std::remove(log.c_str());
}

// `arfuse bench --procs 2`'s ranks, started as the launcher starts them, without a GPU: they meet
// (unique ids and init words through the shared directory), find that no rank has a communicator,
// and each leaves one row per job and size that says why, instead of waiting for the others.
TEST(BenchProcsRanks, RealRanksWithoutAGpuReportEveryRowAndDoNotWait) {
  char tmpl[] = "/tmp/arfuse_procs_test_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  BenchArgs a;
  std::string err;
  ASSERT_TRUE(parseBenchArgs({"--procs", "2", "--algo", "auto,nccl-symm", "--tokens", "1,16", "-n", "2"}, &a, &err))
      << err;
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e)
    if (std::string(*e).compare(0, 21, "CUDA_VISIBLE_DEVICES=") != 0) env.push_back(*e);
  env.push_back("CUDA_VISIBLE_DEVICES=");
  ChildOutcome outcome[2];
  std::thread ranks[2];
  const auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < 2; ++r) {
    ChildCommand c;
    c.argv = {ARFUSE_CLI_PATH, "bench"};
    for (const std::string& s : procsChildArgs(a, r, dir)) c.argv.push_back(s);
    c.env = env;
    ranks[r] = std::thread(
        [c, r, &outcome, dir] { outcome[r] = runChild(c, dir + "/rank" + std::to_string(r) + ".log", 200); });
  }
  for (std::thread& t : ranks) t.join();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::vector<std::vector<RankRow>> per(2);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(outcome[r].kind, ChildOutcome::Kind::kExited) << slurp(dir + "/rank" + std::to_string(r) + ".log");
    ASSERT_TRUE(parseRankRows(slurp(dir + "/rank" + std::to_string(r) + ".jsonl"), &per[r], &err)) << err;
    EXPECT_EQ(per[r].size(), 4u) << slurp(dir + "/rank" + std::to_string(r) + ".log");
  }
  EXPECT_LT(seconds, 100) << "the ranks waited for each other";
  const std::vector<Row> rows = mergeRankRows(per, {"", ""}, procsJobs(a), a.tokens, 14336, a.callsPerGraph);
  ASSERT_EQ(rows.size(), 4u);
  for (const Row& row : rows) {
    EXPECT_FALSE(row.t.ok);
    EXPECT_EQ(row.error.compare(0, 8, "rank 0: "), 0) << row.error;  // every rank agrees on whose init failed
  }
  EXPECT_TRUE(has(rows[0].error, "arfuseCommInitRank")) << rows[0].error;
  EXPECT_TRUE(has(rows[2].error, "ncclCommInitRank")) << rows[2].error;  // NCCL's own words
  EXPECT_EQ(rows[2].role, "baseline");
  std::system(("rm -rf " + dir).c_str());
}

}  // namespace
}  // namespace cli
}  // namespace arfuse
