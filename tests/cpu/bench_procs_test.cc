// `arfuse bench` against the real alternatives, without a GPU: --procs argument handling and the
// merge of the ranks' results, the best-baseline ratios, the proof that NCCL's symmetric kernels
// ran, the input rotation that keeps L2 out of bandwidth-bound rows, the proxy labels, and the
// nccl-tests spellings (-d bfloat16, -G N).
#include "bench_procs.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "bench_args.h"
#include "bench_json.h"
#include "harness/ranks.h"
#include "harness/rotation.h"

namespace arfuse {
namespace cli {
namespace {

bool has(const std::string& s, const std::string& needle) { return s.find(needle) != std::string::npos; }

bool parses(const std::vector<std::string>& args, BenchArgs* a, std::string* err) {
  return parseBenchArgs(args, a, err);
}

TEST(BenchArgsNcclTests, DtypeSpellings) {
  const std::vector<std::pair<std::vector<std::string>, arfuseDataType_t>> ok = {
      {{"-d", "bfloat16"}, arfuseBfloat16}, {{"--dtype", "bfloat16"}, arfuseBfloat16},
      {{"-d", "half"}, arfuseFloat16},      {{"--dtype", "fp16"}, arfuseFloat16},
      {{"-d", "float"}, arfuseFloat32},     {{"--dtype", "float32"}, arfuseFloat32},
  };
  for (const auto& c : ok) {
    BenchArgs a;
    std::string err;
    ASSERT_TRUE(parses(c.first, &a, &err)) << c.first[1] << ": " << err;
    EXPECT_EQ(a.dtype, c.second) << c.first[1];
  }
  BenchArgs a;
  std::string err;
  EXPECT_FALSE(parses({"-d", "int8"}, &a, &err));
  EXPECT_TRUE(has(err, "-d wants") && has(err, "got 'int8'") && has(err, "bfloat16")) << err;
}

TEST(BenchArgsNcclTests, GraphReplaysAgreeWithTheHelp) {
  BenchArgs a;
  std::string err;
  ASSERT_TRUE(parses({"-G", "7"}, &a, &err)) << err;
  EXPECT_EQ(a.iters, 7);  // the help: -G N is the number of timed replays, the same as -n N
  ASSERT_TRUE(parses({"-G", "7", "-n", "7"}, &a, &err)) << err;
  EXPECT_FALSE(parses({"-G", "7", "-n", "5"}, &a, &err));
  EXPECT_TRUE(has(err, "-G 7 and -n 5 disagree")) << err;
  EXPECT_FALSE(parses({"-G", "0"}, &a, &err));
  EXPECT_TRUE(has(err, "-G 0") && has(err, "-G N")) << err;
  EXPECT_FALSE(parses({"-G", "x"}, &a, &err));
  EXPECT_TRUE(has(err, "-G wants a whole number from 1 to 1000000, got 'x'")) << err;
  const std::string usage = benchUsage();
  EXPECT_TRUE(has(usage, "-G N") && has(usage, "same as") && has(usage, "-G 0 is refused")) << usage;
  EXPECT_TRUE(has(usage, "-d, --dtype") && has(usage, "bfloat16")) << usage;
}

TEST(BenchArgsBaselines, AlgoListsAndNcclSymm) {
  BenchArgs a;
  std::string err;
  ASSERT_TRUE(parses({"--algo", "auto,nccl-symm,nccl"}, &a, &err)) << err;
  EXPECT_EQ(a.algos, (std::vector<int>{arfuseAlgoAuto, kAlgoNcclSymm, arfuseAlgoNccl}));
  EXPECT_STREQ(algoName(kAlgoNcclSymm), "nccl-symm");
  ASSERT_TRUE(parses({"--algo", "all"}, &a, &err)) << err;
  EXPECT_TRUE(a.algos.empty());
  EXPECT_FALSE(parses({"--algo", "auto,auto"}, &a, &err));
  EXPECT_TRUE(has(err, "--algo names 'auto' twice")) << err;
  EXPECT_FALSE(parses({"--algo", "auto,ring"}, &a, &err));
  EXPECT_TRUE(has(err, "got 'auto,ring' ('ring' is not one)") && has(err, "nccl-symm")) << err;
  EXPECT_FALSE(parses({"--verify-pass", "--layers", "2", "--algo", "nccl-symm"}, &a, &err));
  EXPECT_TRUE(has(err, "nccl-symm")) << err;
  EXPECT_TRUE(has(benchUsage(), "nccl-symm") && has(benchUsage(), "symmetric window"));
}

TEST(BenchArgsProcs, FormsAndErrorsNameTheFix) {
  BenchArgs a;
  std::string err;
  ASSERT_TRUE(parses({"--procs", "4", "--tokens", "1,16"}, &a, &err)) << err;
  EXPECT_EQ(a.procs, 4);
  EXPECT_EQ(a.ranks, 4);
  EXPECT_EQ(a.procRank, -1);
  EXPECT_EQ(a.procsTimeoutS, kDefaultProcsTimeoutS);
  ASSERT_TRUE(parses({"--procs", "2", "--ranks", "2", "--procs-timeout", "60"}, &a, &err)) << err;
  EXPECT_EQ(a.procsTimeoutS, 60);
  const std::vector<std::pair<std::vector<std::string>, std::string>> bad = {
      {{"--procs", "1"}, "--procs wants a whole number from 2 to 16, got '1'"},
      {{"--procs", "4", "--ranks", "2"}, "--ranks 2 and --procs 4 disagree"},
      {{"--procs", "2", "--op", "addrmsnorm"}, "drop --procs"},
      {{"--procs", "2", "--verify-pass", "--layers", "2"}, "--verify-pass"},
      {{"--procs", "2", "--epilogue", "fp8"}, "--epilogue"},
      {{"--procs", "2", "--nccl-sweep"}, "--nccl-sweep"},
      {{"--proc-rank", "0"}, "needs --procs and --proc-dir"},
      {{"--procs", "2", "--proc-rank", "2", "--proc-dir", "/tmp"}, "--proc-rank 2"},
      {{"--procs-timeout", "0"}, "--procs-timeout wants a whole number from 1 to 7200, got '0'"},
      {{"--machine", ""}, "--machine wants a label, e.g. --machine=h200x4, got ''"},
  };
  for (const auto& c : bad) {
    BenchArgs b;
    EXPECT_FALSE(parses(c.first, &b, &err)) << c.second;
    EXPECT_TRUE(has(err, c.second)) << c.second << " -> " << err;
  }
  EXPECT_TRUE(has(benchUsage(), "--procs N") && has(benchUsage(), "NCCL refuses two ranks on one GPU"));
}

TEST(BenchProcs, JobsRunInAFixedOrderWithTheNcclBaselinesLast) {
  BenchArgs a;
  std::string err;
  ASSERT_TRUE(parses({"--procs", "2"}, &a, &err)) << err;
  EXPECT_EQ(procsJobs(a), (std::vector<int>{arfuseAlgoAuto, arfuseAlgoLowLatency, arfuseAlgoOneShot, arfuseAlgoTwoShot,
                                            arfuseAlgoHostStaged, arfuseAlgoNccl, kAlgoNcclSymm}));
  ASSERT_TRUE(parses({"--procs", "2", "--algo", "nccl-symm,oneshot"}, &a, &err)) << err;
  EXPECT_EQ(procsJobs(a), (std::vector<int>{arfuseAlgoOneShot, kAlgoNcclSymm}));
}

TEST(BenchProcs, SimulatedHostsTimeTheHierarchicalPathAgainstNccl) {
  BenchArgs a;
  std::string err;
  ASSERT_TRUE(parses({"--procs", "4", "--hosts", "2"}, &a, &err)) << err;
  EXPECT_EQ(a.hosts, 2);
  EXPECT_EQ(procsJobs(a), (std::vector<int>{arfuseAlgoAuto, arfuseAlgoHierarchical, arfuseAlgoNccl}));
  ASSERT_TRUE(parses({"--procs", "4", "--hosts", "2", "--algo", "nccl,hierarchical"}, &a, &err)) << err;
  EXPECT_EQ(procsJobs(a), (std::vector<int>{arfuseAlgoHierarchical, arfuseAlgoNccl}));
  const std::vector<std::string> c = procsChildArgs(a, 3, "/tmp/d");  // the child simulates its host too
  EXPECT_NE(std::find(c.begin(), c.end(), "--hosts"), c.end());
  BenchArgs b;
  EXPECT_FALSE(parses({"--procs", "4", "--hosts", "3"}, &b, &err));
  EXPECT_TRUE(has(err, "must divide --procs 4")) << err;
  EXPECT_FALSE(parses({"--hosts", "2"}, &b, &err));
  EXPECT_TRUE(has(err, "needs --procs")) << err;
  EXPECT_FALSE(parses({"--procs", "2", "--hosts", "1"}, &b, &err));
  EXPECT_TRUE(has(benchUsage(), "--hosts H"));
}

TEST(BenchProcs, ChildArgumentsAreTheLaunchersWithoutItsJson) {
  BenchArgs a;
  std::string err;
  ASSERT_TRUE(parses({"--procs", "2", "-J", "out.json", "--tokens", "1,4", "-d", "bfloat16"}, &a, &err)) << err;
  const std::vector<std::string> c = procsChildArgs(a, 1, "/tmp/d");
  EXPECT_EQ(c, (std::vector<std::string>{"--procs", "2", "--tokens", "1,4", "-d", "bfloat16", "--proc-rank", "1",
                                         "--proc-dir", "/tmp/d"}));
  BenchArgs child;
  ASSERT_TRUE(parses(c, &child, &err)) << err;  // what the child parses is valid
  EXPECT_EQ(child.procRank, 1);
  EXPECT_EQ(child.procDir, "/tmp/d");
  EXPECT_TRUE(child.jsonPath.empty());
}

RankRow rankRow(int job, int tokens, std::vector<double> ms, const std::string& hash = "aa") {
  RankRow r;
  r.job = job;
  r.tokens = tokens;
  r.bytes = 14336LL * tokens;
  r.algo = job == 0 ? "auto:oneshot" : "nccl-symm";
  r.role = job == 0 ? "arfuse" : "baseline";
  r.hash = hash;
  r.ms = ms;
  r.sets = 8;
  r.footprintBytes = 1234;
  return r;
}

TEST(BenchProcs, RankRowsRoundTripAndACutLastLineIsDropped) {
  RankRow r = rankRow(1, 16, {0.125, 0.25});
  r.error = "quote \" and\nnewline";
  r.kernels = {"ncclSymkDevKernel_AllReduce_AGxLL_R_sum_bf16", "arfuse_add_rmsnorm"};
  const std::string line = rankRowJson(r);
  EXPECT_EQ(line.find('\n'), std::string::npos);
  std::vector<RankRow> back;
  std::string err;
  ASSERT_TRUE(parseRankRows(line + "\n" + line.substr(0, 20), &back, &err)) << err;
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].job, 1);
  EXPECT_EQ(back[0].tokens, 16);
  EXPECT_EQ(back[0].error, r.error);
  EXPECT_EQ(back[0].ms, r.ms);
  EXPECT_EQ(back[0].kernels, r.kernels);
  EXPECT_EQ(back[0].sets, 8);
  EXPECT_FALSE(parseRankRows("{bad\n" + line + "\n", &back, &err));
}

TEST(BenchProcs, MergeTakesTheSlowestRankPerReplayThenTheMedian) {
  // 3 replays of a graph of 5 calls (4 timed): ms per replay.
  std::vector<std::vector<RankRow>> per = {{rankRow(0, 1, {0.04, 0.08, 0.02})}, {rankRow(0, 1, {0.06, 0.01, 0.03})}};
  const std::vector<Row> rows = mergeRankRows(per, {"", ""}, {arfuseAlgoAuto}, {1}, 14336, 5);
  ASSERT_EQ(rows.size(), 1u);
  const Row& r = rows[0];
  EXPECT_TRUE(r.t.ok) << r.error;
  // max per replay: 0.06, 0.08, 0.03 -> sorted 0.03, 0.06, 0.08; median 0.06 ms / 4 calls = 15 us.
  EXPECT_DOUBLE_EQ(r.t.medianUs, 15.0);
  EXPECT_DOUBLE_EQ(r.t.minUs, 7.5);
  EXPECT_DOUBLE_EQ(r.t.maxUs, 20.0);
  EXPECT_EQ(r.algo, "auto:oneshot");
  EXPECT_EQ(r.role, "arfuse");
  EXPECT_EQ(r.bytes, 14336);
  EXPECT_EQ(r.sets, 8);
  EXPECT_EQ(r.wrong, 0);
}

TEST(BenchProcs, MergeNamesTheRankThatFailedOrDisagrees) {
  RankRow failed = rankRow(0, 1, {});
  failed.error = "arfusePeerTimeout: rank 1 waited";
  RankRow na = rankRow(0, 16, {});
  na.error = "n/a: lowlatency carries at most 64 KiB";
  std::vector<std::vector<RankRow>> per = {{rankRow(0, 1, {0.1}), na, rankRow(1, 1, {0.1}, "aa")},
                                           {failed, na, rankRow(1, 1, {0.1}, "bb")}};
  const std::vector<Row> rows =
      mergeRankRows(per, {"", "exited 1"}, {arfuseAlgoAuto, kAlgoNcclSymm}, {1, 16}, 14336, 2);
  ASSERT_EQ(rows.size(), 4u);  // job-major: (auto, 1), (auto, 16), (nccl-symm, 1), (nccl-symm, 16)
  EXPECT_EQ(rows[0].error, "rank 1: arfusePeerTimeout: rank 1 waited");
  EXPECT_FALSE(rows[0].t.ok);
  EXPECT_EQ(rows[1].error, "n/a: lowlatency carries at most 64 KiB");  // the same on every rank: its own words
  EXPECT_EQ(rows[2].wrong, 1);
  EXPECT_TRUE(has(rows[2].error, "outputs differ across ranks (bitwise): rank 1")) << rows[2].error;
  EXPECT_EQ(rows[2].role, "baseline");
  EXPECT_EQ(rows[3].error, "rank 0 left no result");
  // A rank that died says how.
  const std::vector<Row> gone =
      mergeRankRows({{rankRow(0, 1, {0.1})}, {}}, {"", "killed by signal 9 (Killed)"}, {arfuseAlgoAuto}, {1}, 14336, 2);
  EXPECT_EQ(gone[0].error, "rank 1 left no result (killed by signal 9 (Killed))");
}

Row timed(const std::string& algo, const std::string& role, int tokens, double us, int wrong = 0) {
  Row r;
  r.algo = algo;
  r.role = role;
  r.tokens = tokens;
  r.t.ok = true;
  r.t.medianUs = us;
  r.wrong = wrong;
  return r;
}

TEST(BenchRatios, AgainstTheBestCorrectBaselineAtEachSize) {
  std::vector<Row> rows = {timed("auto:lowlatency", "arfuse", 1, 6.0), timed("nccl", "baseline", 1, 12.0),
                           timed("nccl-symm", "baseline", 1, 8.0),     timed("auto:oneshot", "arfuse", 16, 9.0),
                           timed("nccl", "baseline", 16, 18.0),        timed("nccl-symm", "baseline", 16, 4.0, 1)};
  ratiosToBestBaseline(&rows);
  EXPECT_DOUBLE_EQ(rows[0].ratio, 0.75);
  EXPECT_EQ(rows[0].ratioTo, "nccl-symm");
  EXPECT_DOUBLE_EQ(rows[1].ratio, 1.5);
  EXPECT_DOUBLE_EQ(rows[2].ratio, 1.0);
  // The wrong nccl-symm row at 16 tokens is no baseline: nccl is the best correct one there.
  EXPECT_DOUBLE_EQ(rows[3].ratio, 0.5);
  EXPECT_EQ(rows[3].ratioTo, "nccl");
  std::vector<Row> none = {timed("auto", "arfuse", 1, 6.0)};
  ratiosToBestBaseline(&none);
  EXPECT_EQ(none[0].ratio, 0);
}

TEST(BenchNcclSymm, TheCapturedKernelsSayWhetherNcclRanItsSymmetricKernels) {
  Row r;
  r.kernels = {"ncclSymkDevKernel_AllReduce_AGxLL_R_sum_bf16", "arfuse::addRmsNormKernel"};
  classifyNcclKernels(&r);
  EXPECT_EQ(r.symmetric, 1);
  EXPECT_TRUE(r.note.empty());
  r.kernels = {"ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "arfuse::addRmsNormKernel"};
  classifyNcclKernels(&r);
  EXPECT_EQ(r.symmetric, 0);
  EXPECT_TRUE(has(r.note, "did not run its symmetric kernels") &&
              has(r.note, "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"))
      << r.note;
  r.kernels = {"_Z44ncclSymkDevKernel_AllReduce_AGxLL_R_sum_bf1621ncclSymkDevWorkArgs4K"};  // not demangled
  classifyNcclKernels(&r);
  EXPECT_EQ(r.symmetric, 1);
  Row unknown;
  unknown.kernels = {"(kernel names unknown: the driver offers no cuFuncGetName)"};
  classifyNcclKernels(&unknown);
  EXPECT_EQ(unknown.symmetric, -1);
  EXPECT_TRUE(has(unknown.note, "no NCCL kernel found")) << unknown.note;
}

TEST(BenchRotation, SetsExceedTwiceTheL2WhereTheGraphAllowsIt) {
  const size_t l2 = 50u << 20;  // H200 (cudaDevAttrL2CacheSize)
  // 1024 x 7168 bf16 add+RMSNorm: x, residual, norm = 44 MB a set -> 3 sets = 132 MB >= 100 MB.
  const size_t big = 3ull * 1024 * 7168 * 2;
  EXPECT_EQ(harness::rotationSets(big, l2, 20), 3);
  EXPECT_TRUE(harness::rotationBeatsL2(3, big, l2));
  // One token: 43 KB a set; capped by the 20 calls of the graph, and the row says L2 may serve it.
  const size_t small = 3ull * 7168 * 2;
  EXPECT_EQ(harness::rotationSets(small, l2, 20), 20);
  EXPECT_FALSE(harness::rotationBeatsL2(20, small, l2));
  // Larger than twice the L2 by itself: one set.
  EXPECT_EQ(harness::rotationSets(size_t(1) << 30, l2, 20), 1);
  // Unknown L2: eight sets, as before; never more than fit in kMaxRotationBytes.
  EXPECT_EQ(harness::rotationSets(small, 0, 20), 8);
  EXPECT_EQ(harness::rotationSets(harness::kMaxRotationBytes / 2, 8 * harness::kMaxRotationBytes, 20), 2);
  EXPECT_EQ(harness::rotationSets(0, l2, 20), 1);
}

BenchEnv env(bool virtualRanks) {
  BenchEnv e;
  e.arfuse = "arfuse 0.1.0";
  e.date = "2026-12-01T00:00:00Z";
  e.gpu = "NVIDIA H200 (sm_90)";
  e.driver = "580.159.04";
  e.nranks = 4;
  e.virtualRanks = virtualRanks;
  e.l2Bytes = 50 << 20;
  return e;
}

TEST(BenchJsonV4, ProxyRotationRatioAndKernels) {
  BenchArgs a;
  std::string err;
  ASSERT_TRUE(parses({"--tokens", "1", "--machine", "h200x4"}, &a, &err)) << err;
  Row arf = timed("auto:lowlatency", "arfuse", 1, 6.0);
  arf.sets = 8;
  arf.footprintBytes = 100 << 20;
  Row sym = timed("nccl-symm", "baseline", 1, 8.0);
  sym.kernels = {"ncclSymkDevKernel_AllReduce_AGxLL_R_sum_bf16"};
  classifyNcclKernels(&sym);
  std::vector<Row> rows = {arf, sym};
  ratiosToBestBaseline(&rows);
  std::string j = benchJson(a, env(true), rows);
  for (const char* key :
       {"\"schema\": \"arfuse-bench/4\"", "\"mode\": \"in-process\"", "\"machine\": \"h200x4\"",
        "\"l2_bytes\": 52428800", "\"proxy\": true", "\"proxy_reason\": \"4 virtual ranks on one GPU",
        "\"ratio\": 0.75, \"ratio_to\": \"nccl-symm\"",
        "\"rotation\": {\"sets\": 8, \"bytes\": 104857600, \"exceeds_2x_l2\": true}",
        "\"nccl_kernels\": [\"ncclSymkDevKernel_AllReduce_AGxLL_R_sum_bf16\"]", "\"symmetric\": true"})
    EXPECT_TRUE(has(j, key)) << key << "\n" << j;
  BenchEnv shared = env(false);
  shared.mode = "procs";
  shared.procs = 2;
  shared.sharedGpu = true;
  j = benchJson(a, shared, rows);
  EXPECT_TRUE(has(j, "\"mode\": \"procs\",\n  \"procs\": 2")) << j;
  EXPECT_TRUE(has(j, "\"proxy_reason\": \"2 processes share one GPU")) << j;
  j = benchJson(a, env(false), rows);
  EXPECT_TRUE(has(j, "\"proxy\": false")) << j;
  EXPECT_FALSE(has(j, "proxy_reason")) << j;
}

TEST(BenchProcs, HexRoundTrip) {
  std::string bytes("\x00\x01\xfe\xff", 4), back;
  EXPECT_EQ(hexEncode(bytes), "0001feff");
  ASSERT_TRUE(hexDecode("0001feff", &back));
  EXPECT_EQ(back, bytes);
  EXPECT_FALSE(hexDecode("abc", &back));
  EXPECT_FALSE(hexDecode("zz", &back));
}

// The symmetric-window baseline's set-up refuses what it cannot do before it touches NCCL or a GPU,
// and every later call on a group that failed says why instead of crashing.
TEST(BenchNcclSymm, SetupArgumentsAndAFailedGroup) {
  harness::GroupSpec g;
  g.backend = harness::Backend::kNcclSymm;
  g.nranks = 2;
  g.ranks = {0};
  harness::RankGroup noDevice(g);
  EXPECT_EQ(noDevice.error(), "harness: RankGroup needs one device per local rank");
  g.devices = {0};
  g.uniqueId = "short";
  harness::RankGroup badId(g);
  EXPECT_EQ(badId.error(), "harness: the NCCL unique id has the wrong size");
  harness::CaseSpec c;
  const harness::RankCheck r = badId.check(c);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.error, badId.error());
  std::vector<double> ms;
  harness::Timing info;
  EXPECT_FALSE(badId.time(c, 20, 2, 1, &ms, &info));
  EXPECT_EQ(info.error, badId.error());
  EXPECT_TRUE(badId.kernelNames().empty());
  g.backend = harness::Backend::kArfuse;
  harness::RankGroup badArfuseId(g);
  EXPECT_EQ(badArfuseId.error(), "harness: the arfuse unique id has the wrong size");
  EXPECT_EQ(badArfuseId.comm(), nullptr);
}

TEST(BenchNcclSymm, KernelNamesOfNoGraphSayWhy) {
  std::string why;
  EXPECT_TRUE(harness::graphKernelNames(nullptr, &why).empty());
  EXPECT_FALSE(why.empty());
}

}  // namespace
}  // namespace cli
}  // namespace arfuse
