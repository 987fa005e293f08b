// `arfuse doctor` without a GPU: argument parsing, the checks judged on recorded machines and
// synthetic environments, the JSON form, and the CLI's exit codes.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <map>
#include <string>

#include "doctor_checks.h"
#include "topo/json.h"
#include "transport/shm_name.h"

namespace arfuse {
namespace cli {
namespace checkup {
namespace {

topo::Topology fixture(const std::string& name) {
  topo::Topology t;
  std::string err;
  EXPECT_EQ(topo::readJsonFile(std::string(ARFUSE_SOURCE_DIR) + "/tests/topo/fixtures/" + name, &t).into(&err),
            arfuseSuccess)
      << err;
  return t;
}

// A healthy environment: driver newer than the runtime, NVML and NCCL loaded, sm_90 and sm_120 built.
Environment goodEnv(int gpus) {
  Environment e;
  e.buildInfo = "arfuse 0.1.0 cuda 13.0 nccl 2.28.9 archs 80,86,89,90,100,120";
  e.driverVersion = "580.159.04";
  e.cudaDriverVersion = 13000;
  e.cudaRuntimeVersion = 13000;
  e.ncclRuntime = "2.28.9";
  e.nvmlLoaded = true;
  e.nvmlVersion = "13.580.159.04";
  e.deviceCount = gpus;
  e.params = {{"ARFUSE_ALGO", "auto", "default", ""}};
  e.otherEnv = {{"NCCL_NVLS_ENABLE", "0"}};
  return e;
}

Report probed(const std::string& name) {
  Report r;
  r.topology = fixture(name);
  r.haveTopology = true;
  r.topologySource = "probe";
  r.env = goodEnv(r.topology.size());
  return r;
}

const Check* find(const std::vector<Check>& checks, const std::string& name, Status st) {
  for (const Check& c : checks)
    if (c.name == name && c.status == st) return &c;
  return nullptr;
}

std::string dump(const std::vector<Check>& checks) {
  std::string s;
  for (const Check& c : checks) s += std::string(statusName(c.status)) + " " + c.name + ": " + c.message + "\n";
  return s;
}

TEST(DoctorArgs, ParsesEveryOption) {
  Args a;
  std::string err;
  ASSERT_TRUE(parseArgs({"--json", "--no-measure", "--no-selftest", "--ranks", "4", "--virtual", "--hidden", "4096",
                         "--dtype", "fp32", "--tokens", "1,8,64", "--save-topology", "t.json"},
                        &a, &err))
      << err;
  EXPECT_TRUE(a.json);
  EXPECT_FALSE(a.measure);
  EXPECT_FALSE(a.selftest);
  EXPECT_EQ(a.ranks, std::vector<int>{4});
  EXPECT_TRUE(a.virtualRanks);
  EXPECT_EQ(a.hidden, 4096);
  EXPECT_EQ(a.dtype, "fp32");
  EXPECT_EQ(tokenList(a), (std::vector<int>{1, 8, 64}));
  EXPECT_EQ(a.saveTopology, "t.json");

  Args c;
  ASSERT_TRUE(parseArgs(
      {"--calibrate", "--ranks", "2,4,8", "--quick", "-n", "5", "--calls", "7", "-w", "0", "--out", "/tmp/c.json"}, &c,
      &err))
      << err;
  EXPECT_TRUE(c.calibrate);
  EXPECT_EQ(c.ranks, (std::vector<int>{2, 4, 8}));
  EXPECT_EQ(tokenList(c), (std::vector<int>{1, 4, 16, 64, 256, 1024}));
  EXPECT_EQ(c.iters, 5);
  EXPECT_EQ(c.calls, 7);
  EXPECT_EQ(c.warmup, 0);
  EXPECT_EQ(c.out, "/tmp/c.json");
  Args d;
  ASSERT_TRUE(parseArgs({}, &d, &err));
  EXPECT_EQ(tokenList(d), (std::vector<int>{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048}));
  EXPECT_EQ(d.hidden, 7168);
  EXPECT_EQ(d.out, "arfuse_calibration.json");
}

TEST(DoctorArgs, ErrorsNameTheArgument) {
  auto error = [](std::vector<std::string> args) {
    Args a;
    std::string err;
    EXPECT_FALSE(parseArgs(args, &a, &err));
    return err;
  };
  EXPECT_EQ(error({"--bogus"}), "unknown option '--bogus'");
  EXPECT_EQ(error({"--ranks"}), "--ranks needs a value");
  // The same wording as every other subcommand's (args.h).
  EXPECT_EQ(error({"--ranks", "1"}), "--ranks wants a comma-separated list of whole numbers from 2 to 16, got '1'");
  EXPECT_EQ(error({"--ranks", "2,x"}),
            "--ranks wants a comma-separated list of whole numbers from 2 to 16, got '2,x' ('x' is not one)");
  EXPECT_EQ(error({"--ranks", "2,4"}), "--ranks: give one count (several are for --calibrate with virtual ranks)");
  EXPECT_EQ(error({"--hidden", "100"}), "--hidden wants a multiple of 8 from 8 to 1048576, got '100'");
  EXPECT_EQ(error({"--hidden", " 8"}), "--hidden wants a multiple of 8 from 8 to 1048576, got ' 8'");
  EXPECT_EQ(error({"--dtype", "int8"}),
            "--dtype wants bf16, fp16 or fp32 (or nccl-tests' bfloat16, half, float), got 'int8'");
  EXPECT_EQ(error({"--tokens", "1,,2"}),
            "--tokens wants a comma-separated list of whole numbers from 1 to 1048576, got '1,,2' ('' is not one)");
  EXPECT_EQ(error({"-n", "0"}), "-n wants a whole number from 1 to 100000, got '0'");
  EXPECT_EQ(error({"-w", "1e3"}), "-w wants a whole number from 0 to 100000, got '1e3'");
  EXPECT_EQ(error({"--calibrate", "--topology", "x.json"}),
            "--calibrate measures this machine; it cannot use --topology");
}

TEST(DoctorChecks, BuildArchitectures) {
  EXPECT_EQ(buildArchs("arfuse 0.1.0 cuda 13.0 nccl 2.28.9 archs 80,86,89,90,100,120"),
            (std::vector<int>{80, 86, 89, 90, 100, 120}));
  EXPECT_EQ(buildArchs("arfuse 0.1.0 cuda 13.0 nccl 2.28.9 archs 90"), std::vector<int>{90});
  EXPECT_EQ(buildArchs("archs 90a;100"), (std::vector<int>{90, 100}));
  EXPECT_TRUE(buildArchs("no archs here").empty() || buildArchs("no archs here") == std::vector<int>{});
  std::string text;
  EXPECT_EQ(archSupport(90, {90}, &text), Status::kOk);
  EXPECT_EQ(text, "native code (sm_90)");
  EXPECT_EQ(archSupport(89, {80, 86}, &text), Status::kOk);  // sm_86 code runs on 8.9
  EXPECT_EQ(text, "native code (sm_80)");
  EXPECT_EQ(archSupport(120, {90}, &text), Status::kWarn);  // the failure mode of SM120 builds in the field
  EXPECT_EQ(text,
            "no native code; runs only if the driver JIT-compiles sm_90 PTX (slow first start, never tested on "
            "this GPU)");
  EXPECT_EQ(archSupport(80, {90, 120}, &text), Status::kFail);
  EXPECT_EQ(text, "no code this GPU can run: the arfuse kernels would fail to launch");
  EXPECT_EQ(archSupport(86, {89}, &text), Status::kFail);
}

TEST(DoctorChecks, NoGpuIsAFailWithAFix) {
  Report r;
  r.env = goodEnv(0);
  r.env.cudaDriverVersion = 0;
  r.env.nvmlLoaded = false;
  r.env.nvmlError = "libnvidia-ml.so.1: cannot open shared object file: No such file or directory";
  r.env.deviceError =
      "no CUDA device is visible (cudaGetDeviceCount: CUDA driver version is insufficient for CUDA "
      "runtime version)";
  r.selftestSkipped = "no GPU is visible";
  const auto checks = runChecks(r);
  const Check* gpu = find(checks, "gpu", Status::kFail);
  ASSERT_NE(gpu, nullptr) << dump(checks);
  EXPECT_EQ(gpu->message, r.env.deviceError);
  EXPECT_NE(gpu->fix.find("nvidia-smi"), std::string::npos);
  EXPECT_NE(find(checks, "driver", Status::kFail), nullptr) << dump(checks);
  const Check* nvml = find(checks, "nvml", Status::kWarn);
  ASSERT_NE(nvml, nullptr) << dump(checks);
  EXPECT_NE(nvml->message.find("NVML unavailable (libnvidia-ml.so.1: cannot open"), std::string::npos);
  EXPECT_EQ(exitCode(checks), 1);
  const std::string text = renderText(r, checks);
  EXPECT_NE(text.find("GPUs        NONE VISIBLE: no CUDA device is visible (cudaGetDeviceCount: "), std::string::npos)
      << text;
  EXPECT_NE(text.find("build       arfuse 0.1.0 cuda 13.0 nccl 2.28.9 archs 80,86,89,90,100,120\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("ARFUSE_ALGO                    auto        (default)\n"), std::string::npos) << text;
  EXPECT_NE(text.find("Topology: none (no GPU is visible)"), std::string::npos) << text;
  EXPECT_NE(text.find("Summary: 2 FAIL, 1 WARN,"), std::string::npos) << text;
}

TEST(DoctorChecks, DriverOlderThanRuntime) {
  Report r = probed("h200_1x.json");
  r.env.cudaDriverVersion = 12040;
  const auto checks = runChecks(r);
  const Check* c = find(checks, "driver", Status::kFail);
  ASSERT_NE(c, nullptr) << dump(checks);
  EXPECT_EQ(c->message, "the driver 580.159.04 supports CUDA 12.4, this build's runtime is CUDA 13.0");
  EXPECT_EQ(c->fix, "update the driver to one that supports CUDA 13.0, or rebuild arfuse with an older CUDA toolkit");
}

TEST(DoctorChecks, FailedPeerStoreNamesThePairAndTheFallback) {
  Report r = probed("rtxpro6000_8x_2socket.json");
  const auto checks = runChecks(r);
  const Check* c = find(checks, "p2p", Status::kFail);
  ASSERT_NE(c, nullptr) << dump(checks);
  EXPECT_EQ(c->message,
            "P2P advertised but peer store failed between GPU 2 and 5 (peer store 2->5): ACS or IOMMU "
            "likely; arfuse will use the host-staged path for groups that include both");
  EXPECT_NE(c->fix.find("disable ACS"), std::string::npos);
  const Check* isl = find(checks, "islands", Status::kWarn);
  ASSERT_NE(isl, nullptr) << dump(checks);
  EXPECT_EQ(isl->message,
            "the GPUs form 2 islands: [0 1 2 3] [4 5 6 7]; a TP group that spans islands runs at the "
            "pace of the links between them");
  EXPECT_NE(find(checks, "multicast", Status::kOk), nullptr);  // PCIe only
  EXPECT_NE(find(checks, "arch", Status::kOk), nullptr) << dump(checks);
  EXPECT_EQ(exitCode(checks), 1);
}

TEST(DoctorChecks, NoP2pIsAWarningNotAFailure) {
  Report r = probed("rtx5090_2x_nop2p.json");
  const auto checks = runChecks(r);
  const Check* c = find(checks, "p2p", Status::kWarn);
  ASSERT_NE(c, nullptr) << dump(checks);
  EXPECT_EQ(c->message,
            "no peer access between 1 of 1 GPU pairs (cudaDeviceCanAccessPeer = 0: 0-1 NVML "
            "not_supported): groups that include such a pair use the host-staged path, NCCL for "
            "large messages");
  EXPECT_EQ(find(checks, "islands", Status::kWarn), nullptr);  // singletons: the p2p line already says it
  EXPECT_EQ(exitCode(checks), 0) << dump(checks);

  r = probed("l40s_8x_noswitch.json");
  const auto l40 = runChecks(r);
  c = find(l40, "p2p", Status::kWarn);
  ASSERT_NE(c, nullptr) << dump(l40);
  EXPECT_NE(c->message.find("no peer access between 28 of 28 GPU pairs"), std::string::npos) << c->message;
  EXPECT_NE(c->message.find(", +22 more)"), std::string::npos) << c->message;
}

TEST(DoctorChecks, NvSwitchWithoutMeasurementsAndMulticast) {
  Report r = probed("h200_8x_nvswitch.json");
  r.env.otherEnv.clear();  // NCCL_NVLS_ENABLE unset
  const auto checks = runChecks(r);
  const Check* mc = find(checks, "multicast", Status::kWarn);
  ASSERT_NE(mc, nullptr) << dump(checks);
  EXPECT_NE(mc->message.find("NVLink present and NCCL_NVLS_ENABLE is not set"), std::string::npos);
  EXPECT_NE(mc->fix.find("export NCCL_NVLS_ENABLE=0"), std::string::npos);
  const Check* p = find(checks, "p2p", Status::kWarn);
  ASSERT_NE(p, nullptr) << dump(checks);
  EXPECT_EQ(p->message,
            "P2P is reported but not proven: P2P among all 8 devices as reported (peer load and store "
            "measured on 0 of 56 ordered pairs)");
  EXPECT_NE(find(checks, "islands", Status::kOk), nullptr);
  EXPECT_EQ(exitCode(checks), 0);

  r.env.otherEnv = {{"NCCL_NVLS_ENABLE", "0"}};
  EXPECT_NE(find(runChecks(r), "multicast", Status::kOk), nullptr);
}

TEST(DoctorChecks, ProvenFabricAndPullHint) {
  Report r = probed("rtxpro6000_4x_switch.json");
  const auto checks = runChecks(r);
  const Check* p = find(checks, "p2p", Status::kOk);
  ASSERT_NE(p, nullptr) << dump(checks);
  EXPECT_EQ(p->message, "P2P among all 4 devices, peer load and store measured on all 12 ordered pairs");
  const Check* bw = find(checks, "bandwidth", Status::kOk);
  ASSERT_NE(bw, nullptr) << dump(checks);
  EXPECT_EQ(bw->message.rfind("all pairs at once: pull: slowest pair reads at 52.0 GB/s", 0), 0u) << bw->message;
  EXPECT_EQ(exitCode(checks), 0) << dump(checks);
}

TEST(DoctorChecks, SystemMemoryDetour) {
  Report r = probed("rtxpro6000_4x_switch.json");
  for (topo::Gpu& g : r.topology.gpus) {
    g.pcieGen = 5;
    g.pcieWidth = 16;
  }
  r.topology.link(1, 3).measured.soloReadGBps = 3.1;
  const auto checks = runChecks(r);
  const Check* c = find(checks, "p2p", Status::kFail);
  ASSERT_NE(c, nullptr) << dump(checks);
  EXPECT_EQ(c->message,
            "peer traffic between GPU 1 and 3 does not run at link speed: a peer read 1->3 alone reaches "
            "3.1 GB/s, under 10.0% of the 63.0 GB/s its link (PIX) allows: traffic is likely routed "
            "through system memory; arfuse treats the pair as without P2P (host-staged path)");
}

TEST(DoctorChecks, OneGpuHostMemoryAndSelftest) {
  Report r = probed("h200_1x.json");
  r.devices = {0, 0};
  r.virtualRanks = true;
  r.selftestRan = true;
  r.selftest = {{"lowlatency", true, "", 3, 0},
                {"oneshot", true, "", 4, 0},
                {"hoststaged", true, "tokens=64: norm_out error 3.1e-01 > 1.0e-02", 3, 1},
                {"nccl", false, "algo=nccl (forced by config) is unavailable: NCCL needs one device per rank", 0, 0}};
  r.plan = {{1, 14336, true, "lowlatency", "lowlatency: 14336 B <= 65536 B: ..."}};
  auto checks = runChecks(r);
  EXPECT_NE(find(checks, "p2p", Status::kOk), nullptr) << dump(checks);
  EXPECT_EQ(find(checks, "p2p", Status::kOk)->message,
            "one GPU: no pairs to probe; the multi-rank paths run as virtual ranks on it");
  const Check* host = find(checks, "host", Status::kOk);
  ASSERT_NE(host, nullptr) << dump(checks);
  EXPECT_EQ(host->message,
            "pinned host memory (host-staged path): GPU 0 read 50.0 GB/s, write 47.0 GB/s, flag round "
            "trip 1.6 us");
  const Check* bad = find(checks, "selftest", Status::kFail);
  ASSERT_NE(bad, nullptr) << dump(checks);
  EXPECT_EQ(bad->message,
            "hoststaged failed 1 of 4 cases on 2 VIRTUAL ranks on GPU 0: tokens=64: norm_out error "
            "3.1e-01 > 1.0e-02");
  const Check* good = find(checks, "selftest", Status::kOk);
  ASSERT_NE(good, nullptr);
  EXPECT_EQ(good->message, "passed on 2 VIRTUAL ranks on GPU 0: lowlatency 3/3, oneshot 4/4; not eligible: nccl");
  EXPECT_EQ(exitCode(checks), 1);
  const std::string text = renderText(r, checks);
  EXPECT_NE(text.find("Self-test (2 ranks, VIRTUAL on GPU 0: correctness only; hidden 7168 bf16)\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("  nccl        not eligible: algo=nccl (forced by config) is unavailable"), std::string::npos)
      << text;
  EXPECT_NE(text.find("  hoststaged  FAIL  3/4 cases: tokens=64"), std::string::npos) << text;
  EXPECT_NE(text.find("  1       14336      lowlatency  lowlatency: 14336 B"), std::string::npos) << text;

  // A slow host link is a warning for the host-staged path.
  r.topology.gpus[0].host.readGBps = 2.0;
  checks = runChecks(r);
  const Check* slow = find(checks, "host", Status::kWarn);
  ASSERT_NE(slow, nullptr) << dump(checks);
  EXPECT_NE(slow->fix.find("nvidia-smi -q -d PCI"), std::string::npos);
}

TEST(DoctorChecks, ParamsCalibrationAndProbeProblems) {
  Report r = probed("h200_1x.json");
  r.env.params.push_back(
      {"ARFUSE_TIMEOUT_MS", "10000", "default", "ARFUSE_TIMEOUT_MS=abc ignored: expected a positive integer"});
  r.calibrationFile = "/etc/arfuse/cal.json";
  r.calibrationWhy = "calibration /etc/arfuse/cal.json does not apply: it has no measurement for 2 ranks (it has 4)";
  r.probeNotes = {
      "measurement stopped: peer load 0->1 on GPU 0 did not finish within 6 s (a peer access that never "
      "completes); the GPU may need a reset"};
  const auto checks = runChecks(r);
  const Check* p = find(checks, "params", Status::kWarn);
  ASSERT_NE(p, nullptr) << dump(checks);
  EXPECT_EQ(p->message, "ARFUSE_TIMEOUT_MS=abc ignored: expected a positive integer (the default 10000 is used)");
  const Check* c = find(checks, "calibration", Status::kWarn);
  ASSERT_NE(c, nullptr) << dump(checks);
  EXPECT_EQ(c->message, r.calibrationWhy);
  EXPECT_NE(c->fix.find("arfuse doctor --calibrate --out /etc/arfuse/cal.json"), std::string::npos);
  const Check* probe = find(checks, "probe", Status::kFail);
  ASSERT_NE(probe, nullptr) << dump(checks);
  EXPECT_EQ(probe->message.rfind("the measured probe stopped: peer load 0->1", 0), 0u) << probe->message;
  EXPECT_NE(probe->fix.find("nvidia-smi -r"), std::string::npos);

  r.probeNotes.clear();
  r.calibrationApplies = true;
  r.calibrationWhy = "calibration /etc/arfuse/cal.json applies (2 virtual ranks, ...)";
  EXPECT_NE(find(runChecks(r), "calibration", Status::kOk), nullptr);
}

TEST(DoctorChecks, RecordedMachineIsJudgedWithoutThisMachinesGpu) {
  Report r;
  r.topology = fixture("rtx5090_2x_nop2p.json");
  r.haveTopology = true;
  r.topologySource = "file tests/topo/fixtures/rtx5090_2x_nop2p.json";
  r.env = goodEnv(0);
  r.env.cudaDriverVersion = 0;
  r.env.nvmlLoaded = false;
  const auto checks = runChecks(r);
  EXPECT_EQ(find(checks, "gpu", Status::kOk)->message,
            "judging the recorded machine in tests/topo/fixtures/rtx5090_2x_nop2p.json (2 GPUs); this machine has 0 "
            "visible");
  EXPECT_EQ(find(checks, "driver", Status::kFail), nullptr) << dump(checks);
  EXPECT_NE(find(checks, "nvml", Status::kOk), nullptr) << dump(checks);  // the recording has NVML's facts
  EXPECT_EQ(exitCode(checks), 0) << dump(checks);
}

TEST(DoctorJson, IsValidJsonWithEverySection) {
  Report r = probed("rtxpro6000_8x_2socket.json");
  r.devices = {0, 1, 2, 3, 4, 5, 6, 7};
  r.selftestRan = true;
  r.selftest = {{"oneshot", false, "needs peer access: devices 2 and 5: \"quoted\"", 0, 0}};
  r.plan = {{1, 14336, true, "hoststaged", "hoststaged (one-shot variant): ..."}};
  const auto checks = runChecks(r);
  const std::string js = renderJson(r, checks);
  topo::json::Value v;
  std::string err;
  ASSERT_EQ(topo::json::parse(js, &v).into(&err), arfuseSuccess) << err << "\n" << js;
  ASSERT_EQ(v.kind, topo::json::Value::Kind::kObject);
  std::vector<std::string> keys;
  for (const auto& m : v.members) keys.push_back(m.key);
  EXPECT_EQ(keys, (std::vector<std::string>{"schema", "exit", "environment", "topology_source", "topology",
                                            "probe_notes", "group", "selftest", "selftest_skipped", "plan",
                                            "plan_error", "calibration", "checks"}));
  EXPECT_EQ(v.members[0].value.text, "arfuse-doctor/1");
  EXPECT_EQ(v.members[1].value.text, "1");
  // The embedded topology is the arfuse-topology/1 document itself.
  const topo::json::Value* topoValue = nullptr;
  for (const auto& m : v.members)
    if (m.key == "topology") topoValue = &m.value;
  ASSERT_NE(topoValue, nullptr);
  EXPECT_EQ(topoValue->kind, topo::json::Value::Kind::kObject);
  const size_t at = js.find("\"topology\": {") + 12;
  const size_t end = js.find("\n  },\n  \"probe_notes\"");
  std::string doc = js.substr(at, end + 4 - at);
  std::string unindented;
  for (size_t i = 0; i < doc.size(); ++i) {
    unindented += doc[i];
    if (doc[i] == '\n' && doc.compare(i + 1, 2, "  ") == 0) i += 2;
  }
  topo::Topology back;
  ASSERT_EQ(topo::fromJson(unindented, &back).into(&err), arfuseSuccess) << err;
  EXPECT_TRUE(back == r.topology);
  EXPECT_NE(js.find("\"status\": \"FAIL\", \"message\": \"P2P advertised but peer store failed between GPU 2 and 5"),
            std::string::npos);
  EXPECT_NE(js.find("\\\"quoted\\\""), std::string::npos);  // strings are escaped

  Report none;
  none.env = goodEnv(0);
  const std::string js0 = renderJson(none, runChecks(none));
  ASSERT_EQ(topo::json::parse(js0, &v).into(&err), arfuseSuccess) << err << "\n" << js0;
  EXPECT_NE(js0.find("\"topology\": null"), std::string::npos);
  EXPECT_NE(js0.find("\"selftest\": null"), std::string::npos);
}

// ---- the CLI ------------------------------------------------------------------------------------

struct CliRun {
  int rc = -1;
  std::string out;
};

CliRun runCli(const std::string& args) {
  CliRun r;
  const std::string cmd = std::string(ARFUSE_CLI) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int st = pclose(p);
  r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

TEST(DoctorCli, UsageErrorsExitTwo) {
  CliRun r = runCli("doctor --bogus");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("arfuse doctor: unknown option '--bogus' (see arfuse doctor --help)"), std::string::npos)
      << r.out;
  r = runCli("doctor --help");
  EXPECT_EQ(r.rc, 0);
  EXPECT_NE(r.out.find("usage: arfuse doctor"), std::string::npos);
  r = runCli("doctor --topology /nonexistent.json");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("--topology: /nonexistent.json: cannot open"), std::string::npos) << r.out;
}

TEST(DoctorCli, RecordedMachineWithABrokenPair) {
  const CliRun r =
      runCli("doctor --topology " + std::string(ARFUSE_SOURCE_DIR) + "/tests/topo/fixtures/rtxpro6000_8x_2socket.json");
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("FAIL  p2p          P2P advertised but peer store failed between GPU 2 and 5"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("Link       GPU0   GPU1"), std::string::npos) << r.out;  // the topology matrix
  EXPECT_NE(r.out.find("Self-test and plan table: skipped (--topology describes another machine)"), std::string::npos)
      << r.out;
}

TEST(DoctorCli, ThisMachine) {
  // Fast on any machine: no measured probes, no self-test.
  const CliRun r = runCli("doctor --no-measure --no-selftest");
  EXPECT_NE(r.out.find("build       arfuse "), std::string::npos) << r.out;  // the environment fingerprint
  EXPECT_NE(r.out.find("ARFUSE_CALIBRATION_FILE"), std::string::npos) << r.out;
  if (r.out.find("NONE VISIBLE") != std::string::npos) {
    EXPECT_EQ(r.rc, 1) << r.out;
    EXPECT_NE(r.out.find("FAIL  gpu          no CUDA device is visible"), std::string::npos) << r.out;
  } else {
    EXPECT_NE(r.out.find("Topology (probe)"), std::string::npos) << r.out;
    EXPECT_EQ(r.rc, r.out.find("Summary: 0 FAIL") != std::string::npos ? 0 : 1) << r.out;
  }
  const CliRun j = runCli("doctor --no-measure --no-selftest --json");
  topo::json::Value v;
  std::string err;
  EXPECT_EQ(topo::json::parse(j.out, &v).into(&err), arfuseSuccess) << err << "\n" << j.out;
  EXPECT_EQ(j.rc, r.rc);
}

TEST(DoctorCli, CalibrateWithoutGpuSaysSo) {
  // On a GPU machine this would calibrate for real (the GPU script runs that on purpose).
  if (runCli("doctor --no-measure --no-selftest").out.find("NONE VISIBLE") == std::string::npos)
    GTEST_SKIP() << "a GPU is visible";
  const CliRun r = runCli("doctor --calibrate --quick --out /tmp/arfuse_doctor_test_cal.json");
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("nothing to measure here"), std::string::npos) << r.out;
}

// ---- /dev/shm/arfuse-*: stale segments of groups killed during init (issue 16) -----------------------

std::string tempShmDir() {
  char tmpl[] = "/tmp/arfuse-doctor-shm-XXXXXX";
  return mkdtemp(tmpl);
}

TEST(DoctorShm, ListsOwnerAgeAndHoldersAndCleansOnlyTheDead) {
  const std::string dir = tempShmDir();
  auto make = [&](const std::string& n, size_t bytes) {
    const int fd = ::open((dir + "/" + n).c_str(), O_CREAT | O_RDWR, 0600);
    EXPECT_EQ(ftruncate(fd, static_cast<off_t>(bytes)), 0);
    return fd;
  };
  const int held = make("arfuse-00000000000000aa-g", 4096);  // kept open: an init in progress
  const int mappedFd = make("arfuse-00000000000000bb-g", 8192);
  void* map = mmap(nullptr, 8192, PROT_READ, MAP_SHARED, mappedFd, 0);  // mapped: a live group
  ::close(mappedFd);
  ::close(make("arfuse-00000000000000cc-h", 65536));  // nobody: its processes died
  ::close(make("unrelated-file", 10));

  ShmScan s = scanShm(dir);
  ASSERT_TRUE(s.listed) << s.error;
  ASSERT_EQ(s.segments.size(), 3u);
  std::map<std::string, const ShmSegmentInfo*> by;
  for (const ShmSegmentInfo& i : s.segments) by[i.name] = &i;
  ASSERT_TRUE(by.count("arfuse-00000000000000aa-g") && by.count("arfuse-00000000000000bb-g") &&
              by.count("arfuse-00000000000000cc-h"));
  EXPECT_EQ(by["arfuse-00000000000000aa-g"]->holders, std::vector<long>{static_cast<long>(getpid())});
  EXPECT_EQ(by["arfuse-00000000000000bb-g"]->holders, std::vector<long>{static_cast<long>(getpid())});
  EXPECT_TRUE(by["arfuse-00000000000000cc-h"]->holders.empty());
  EXPECT_EQ(by["arfuse-00000000000000cc-h"]->bytes, 65536);
  EXPECT_EQ(by["arfuse-00000000000000cc-h"]->uid, geteuid());
  EXPECT_LT(by["arfuse-00000000000000cc-h"]->ageSeconds, 60);

  Report r = probed("h200_1x.json");
  r.shm = s;
  const auto checks = runChecks(r);
  const Check* c = find(checks, "shm", Status::kWarn);
  ASSERT_NE(c, nullptr) << dump(checks);
  EXPECT_NE(c->message.find("1 arfuse segment(s) in /dev/shm that no live process holds (0.1 MiB"), std::string::npos)
      << c->message;
  EXPECT_NE(c->message.find("arfuse-00000000000000cc-h ("), std::string::npos) << c->message;
  EXPECT_EQ(c->fix, "`arfuse doctor --clean` removes them");

  int failures = -1;
  const std::vector<std::string> lines = cleanShm(s, dir, &failures);
  EXPECT_EQ(failures, 0);
  std::string all;
  for (const std::string& l : lines) all += l + "\n";
  EXPECT_NE(all.find("removed " + dir + "/arfuse-00000000000000cc-h (65536 B, owner "), std::string::npos) << all;
  EXPECT_NE(all.find("kept    " + dir + "/arfuse-00000000000000aa-g: held by pid " + std::to_string(getpid())),
            std::string::npos)
      << all;
  EXPECT_NE(all.find("kept    " + dir + "/arfuse-00000000000000bb-g: held by pid"), std::string::npos) << all;
  EXPECT_EQ(access((dir + "/arfuse-00000000000000cc-h").c_str(), F_OK), -1);
  EXPECT_EQ(access((dir + "/arfuse-00000000000000aa-g").c_str(), F_OK), 0);

  r.shm = scanShm(dir);
  EXPECT_NE(find(runChecks(r), "shm", Status::kOk), nullptr) << dump(runChecks(r));
  munmap(map, 8192);
  ::close(held);
  for (const char* n : {"arfuse-00000000000000aa-g", "arfuse-00000000000000bb-g", "unrelated-file"})
    unlink((dir + "/" + n).c_str());
  rmdir(dir.c_str());
}

// The real thing: a process that made its segment and was SIGKILLed during init leaves it in /dev/shm;
// doctor names it and --clean removes it.
TEST(DoctorShm, SegmentOfAKilledInitIsFoundAndRemovedByTheCli) {
  const std::string name = "/arfuse-" + std::to_string(100000 + getpid() % 100000) + "deadbeef-g";
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t pid = fork();
  if (pid == 0) {
    const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0 || ftruncate(fd, 1 << 20) != 0) _exit(1);
    void* p = mmap(nullptr, 1 << 20, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    static_cast<char*>(p)[0] = 1;
    if (write(ready[1], "x", 1) != 1) _exit(2);
    pause();
    _exit(0);
  }
  char x;
  ASSERT_EQ(read(ready[0], &x, 1), 1);
  ShmScan live = scanShm();
  bool heldWhileAlive = false;
  for (const ShmSegmentInfo& i : live.segments)
    if ("/" + i.name == name) heldWhileAlive = !i.holders.empty();
  EXPECT_TRUE(heldWhileAlive);
  kill(pid, SIGKILL);
  int st;
  waitpid(pid, &st, 0);

  const CliRun d = runCli("doctor --no-measure --no-selftest");
  EXPECT_NE(d.out.find("WARN  shm"), std::string::npos) << d.out;
  EXPECT_NE(d.out.find(name.substr(1) + " ("), std::string::npos) << d.out;
  const CliRun c = runCli("doctor --clean");
  EXPECT_EQ(c.rc, 0) << c.out;
  EXPECT_NE(c.out.find("removed /dev/shm" + name), std::string::npos) << c.out;
  EXPECT_EQ(access(("/dev/shm" + name).c_str(), F_OK), -1);
}

// Who may remove what (issue 37 item 5): a segment's name records its creator (transport/shm_name.h);
// a segment nobody maps is removed only when that creator is gone. As root, a segment of another
// user whose name records no creator is not guessed at (its creator may run in a PID namespace this
// /proc does not show), nor is a tagged one whose creator runs, or ran in another namespace.
TEST(DoctorShm, OnlySegmentsWhoseCreatorIsGoneAreRemoved) {
  const std::string dir = tempShmDir();
  auto make = [&](const std::string& n) {
    const int fd = ::open((dir + "/" + n).c_str(), O_CREAT | O_RDWR, 0600);
    EXPECT_EQ(ftruncate(fd, 4096), 0);
    ::close(fd);
  };
  // A creator that is gone: a child that exited (its pid is not reused within the test).
  const pid_t child = fork();
  if (child == 0) _exit(0);
  int st = 0;
  waitpid(child, &st, 0);
  const std::string me = shmCreatorTag();
  ShmCreator mine;
  ASSERT_TRUE(parseShmCreator("arfuse-0123456789abcdef-" + me + "-g", &mine));
  EXPECT_EQ(mine.pid, static_cast<long>(getpid()));
  EXPECT_GT(mine.start, 0u);
  EXPECT_GT(mine.pidns, 0u);
  auto tag = [](long pid, unsigned long long start, unsigned long long ns) {
    char t[96];
    std::snprintf(t, sizeof t, "c%lx.%llx.%llx", pid, start, ns);
    return std::string(t);
  };
  const std::string gone = "arfuse-00000000000000a1-" + tag(child, 1, mine.pidns) + "-g";
  const std::string reused = "arfuse-00000000000000a2-" + tag(getpid(), mine.start + 1, mine.pidns) + "-g";
  const std::string alive = "arfuse-00000000000000a3-" + me + "-h";
  const std::string elsewhere = "arfuse-00000000000000a4-" + tag(1, mine.start, 0x77) + "-g";
  const std::string untaggedOther = "arfuse-00000000000000a5-g";
  for (const std::string& n : {gone, reused, alive, elsewhere, untaggedOther}) make(n);
  const bool root = geteuid() == 0;
  if (root) ASSERT_EQ(chown((dir + "/" + untaggedOther).c_str(), 12345, 12345), 0);
  int failures = -1;
  std::string all;
  for (const std::string& l : cleanShm(scanShm(dir), dir, &failures)) all += l + "\n";
  EXPECT_EQ(failures, 0) << all;
  EXPECT_NE(all.find("removed " + dir + "/" + gone + " (4096 B, owner "), std::string::npos) << all;
  EXPECT_NE(all.find("its creator pid " + std::to_string(child) + " is gone, nobody held it)"), std::string::npos)
      << all;
  EXPECT_NE(all.find("removed " + dir + "/" + reused), std::string::npos) << all;  // the pid runs another process
  EXPECT_NE(
      all.find("kept    " + dir + "/" + alive + ": its creator, pid " + std::to_string(getpid()) + ", still runs"),
      std::string::npos)
      << all;
  EXPECT_NE(all.find("kept    " + dir + "/" + elsewhere + ": its creator, pid 1, ran in another PID namespace"),
            std::string::npos)
      << all;
  if (root) EXPECT_NE(all.find("kept    " + dir + "/" + untaggedOther + ": owned by "), std::string::npos) << all;
  for (const std::string& n : {alive, elsewhere, untaggedOther}) {
    EXPECT_EQ(access((dir + "/" + n).c_str(), F_OK), 0) << n;
    unlink((dir + "/" + n).c_str());
  }
  rmdir(dir.c_str());
}

// Segment names are anyone's to choose: `doctor` and `doctor --clean` print them escaped, one line
// each, and never an escape sequence.
TEST(DoctorShm, NamesAreEscapedWhereTheyArePrinted) {
  const std::string name = "arfuse-00000000000000b1-g\nremoved everything\x1b]0;owned\x07";
  const std::string path = "/dev/shm/" + name;
  const int fd = ::open(path.c_str(), O_CREAT | O_RDWR, 0600);
  ASSERT_GE(fd, 0);
  ::close(fd);
  for (const char* cmd : {"doctor --no-measure --no-selftest", "doctor --clean"}) {
    const CliRun r = runCli(cmd);
    const std::string out = "\n" + r.out;
    EXPECT_EQ(out.find("\nremoved everything"), std::string::npos) << cmd << ":\n" << r.out;
    EXPECT_EQ(out.find('\x1b'), std::string::npos) << cmd << ":\n" << r.out;
    EXPECT_EQ(out.find('\x07'), std::string::npos) << cmd << ":\n" << r.out;
    if (std::string(cmd) == "doctor --clean")  // (the report lists 4 stale segments at most: maybe not this one)
      EXPECT_NE(out.find("arfuse-00000000000000b1-g\\x0Aremoved everything\\x1B]0;owned\\x07"), std::string::npos)
          << r.out;
  }
  unlink(path.c_str());
}

TEST(DoctorChecks, MistypedArfuseNamesAreWarned) {
  Report r = probed("h200_1x.json");
  r.env.unknownEnv = {"ARFUSE_TIMOUT_MS is not an arfuse variable and is ignored (did you mean ARFUSE_TIMEOUT_MS?)"};
  const auto checks = runChecks(r);
  const Check* c = find(checks, "params", Status::kWarn);
  ASSERT_NE(c, nullptr) << dump(checks);
  EXPECT_EQ(c->message, r.env.unknownEnv[0]);
}

}  // namespace
}  // namespace checkup
}  // namespace cli
}  // namespace arfuse
