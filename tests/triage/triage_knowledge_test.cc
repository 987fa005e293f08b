// Unit tests of issue 35's pieces: the error-line rule of the grep floor, the error table and its lookup by
// captured text, the environment facts, the logger formats, messages that span lines, and how generic
// reports and symptoms rank. Lines here are written for the test (the real logs are in real/).
#include <gtest/gtest.h>

#include "analyse_lines.h"
#include "analyzer.h"
#include "catalog.h"
#include "environment.h"
#include "errorline.h"
#include "lineformat.h"

namespace arfuse {
namespace triage {
namespace {

using triage_test::analyse;

std::string rootId(const Analyzer& a, const Result& r) {
  return r.rootGroup < 0 ? "" : a.catalog().sig(a.groups()[r.rootGroup].sig).id;
}

TEST(TriageErrorLine, LevelWordsInAnyFormat) {
  EXPECT_EQ(classifyErrorLine("[TensorRT-LLM][ERROR] Assertion failed: x", 0).strength, 3);
  EXPECT_EQ(classifyErrorLine("[TRT] [E] 6: something", 0).strength, 3);
  EXPECT_EQ(classifyErrorLine("ERRO[0000] error waiting for container", 0).strength, 3);
  EXPECT_EQ(classifyErrorLine("level=error msg=\"failed to start\"", 0).strength, 3);
  EXPECT_EQ(classifyErrorLine("{\"level\":\"error\",\"msg\":\"x\"}", 0).strength, 3);
  EXPECT_EQ(classifyErrorLine("2024-01-22 14:32:27 | ERROR | stderr | boom", 0).strength, 3);
  EXPECT_GE(classifyErrorLine("nvidia-container-cli: requirement error: unsatisfied condition", 0).strength, 2);
  EXPECT_GE(classifyErrorLine("Failed to initialize NVML: could not load NVML library.", 0).strength, 1);
  EXPECT_GE(classifyErrorLine("hip_code_object.cpp:92: guarantee(false && \"no binary\")", 0).strength, 1);
  // An exception named inside the line, not at its start.
  const ErrorLine e = classifyErrorLine("(Worker pid=7) RuntimeError: CUDA error: unknown error", 0);
  EXPECT_EQ(e.strength, 2);
  EXPECT_EQ(e.exceptionAt, 15u);
  // Info and debug lines are never error lines, whatever they say; ordinary lines neither.
  EXPECT_EQ(classifyErrorLine("[TRT] [I] error_recorder configured", 0).strength, 0);
  EXPECT_EQ(classifyErrorLine("NCCL INFO error handling enabled", 'I').strength, 0);
  EXPECT_EQ(classifyErrorLine("Decode batch. #running-req: 3, #token: 812", 0).strength, 0);
  EXPECT_EQ(classifyErrorLine("exited with code 0", 0).strength, 0);
  // A warning only counts with a failure in it, and then as a warning.
  EXPECT_EQ(classifyErrorLine("[W] deprecated option", 0).strength, 0);
  EXPECT_TRUE(classifyErrorLine("WARNING: Failed to open libfoo.so", 0).warning);
  EXPECT_TRUE(classifyErrorLine("ERROR Worker died unexpectedly, see above", 0).echoLike);
}

TEST(TriageErrorLine, ExceptionNames) {
  EXPECT_EQ(findExceptionName("torch.OutOfMemoryError: CUDA out of memory"), 0u);
  EXPECT_EQ(findExceptionName("x tensorrt_llm::common::TllmException: boom"), 2u);
  EXPECT_EQ(findExceptionName("hipErrorNoBinaryForGpu: Unable to find code object"), 0u);
  EXPECT_EQ(findExceptionName("ray.exceptions.RayTaskError(ValueError): bad"), 0u);
  EXPECT_EQ(findExceptionName("UserWarning: not an error"), std::string_view::npos);
  EXPECT_EQ(findExceptionName("error_file: <N/A>"), std::string_view::npos);
}

// The error table: one entry per error, found by its printed text, its names or its code, and the entry
// for the situation (its context) before the general one.
TEST(TriageKnowledge, LookupByTextNameCodeAndContext) {
  const Catalog& c = Catalog::builtin();
  auto id = [&](int k) { return k < 0 ? std::string("-") : c.sig(k).id; };
  EXPECT_EQ(id(c.lookup("cuda", "peer access is not supported between these two devices", "", false)),
            "cuda.peer_access_unsupported");
  EXPECT_EQ(id(c.lookup("cuda", "invalid argument", "Failed: Cuda error custom_all_reduce.cuh:455", false)),
            "cuda.ipc_invalid_argument");
  EXPECT_EQ(id(c.lookup("cuda", "invalid argument", "transport/nvls.cc:158 NCCL WARN Cuda failure", false)),
            "cudaerr.nvls_invalid_argument");
  EXPECT_EQ(id(c.lookup("cuda", "invalid argument", "enqueue.cc:1500 NCCL WARN", false)), "cudaerr.invalid_value");
  EXPECT_EQ(id(c.lookup("any", "cudaErrorIllegalAddress", "", true)), "cuda.illegal_address");
  EXPECT_EQ(id(c.lookup("ibv", "12", "", false)), "ibv.retry_exc_err");
  EXPECT_EQ(id(c.lookup("ibv", "IBV_WC_WR_FLUSH_ERR", "", false)), "ibv.wr_flush_err");
  EXPECT_EQ(id(c.lookup("xid", "154", "", false)), "xidk.154");
  // In a whole message a CUDA text counts only after CUDA's own marker.
  EXPECT_EQ(id(c.lookup("any", "RuntimeError: CUDA error: initialization error", "", true)), "cudaerr.initialization");
  EXPECT_EQ(c.lookup("any", "ValueError: invalid argument --foo", "", true), -1);
}

// A signature that only quotes an error takes the story of the error it quotes.
TEST(TriageKnowledge, TheExplanationFollowsTheErrorText) {
  Analyzer a(Catalog::builtin());
  Result r = analyse(a, {"Failed: Cuda error /x/csrc/custom_all_reduce.cuh:307 'peer access is not supported between "
                         "these two devices'"});
  ASSERT_EQ(r.status, Result::kRootCause) << r.verdict;
  const EventGroup& g = a.groups()[r.rootGroup];
  EXPECT_EQ(a.catalog().sig(g.sig).id, "custom_ar.cuda_error");
  ASSERT_GE(g.knowledge, 0);
  EXPECT_EQ(a.catalog().sig(g.knowledge).id, "cuda.peer_access_unsupported");
  EXPECT_NE(r.verdict.find("peer access (P2P)"), std::string::npos) << r.verdict;

  Analyzer b(Catalog::builtin());
  r = analyse(b, {"Failed: Cuda error /x/csrc/custom_all_reduce.cuh:455 'invalid argument'"});
  EXPECT_EQ(b.catalog().sig(b.groups()[r.rootGroup].knowledge).id, "cuda.ipc_invalid_argument") << r.verdict;
}

TEST(TriageEnvironment, FactsAndTheArchitectureTable) {
  EnvFacts f;
  f.note("host:1:1 [0] NCCL INFO NCCL version 2.25.1+cuda12.2");
  f.note("host:1:1 [0] NCCL INFO cudaDriverVersion 12080");
  f.note("GPU 0: NVIDIA GeForce RTX 5090 (UUID: GPU-x)");
  EXPECT_EQ(f.nccl, "2.25.1");
  EXPECT_EQ(f.ncclCuda, "12.2");
  EXPECT_EQ(f.driverCuda, 12080);
  EXPECT_TRUE(f.archs.count(120));
  const auto notes = environmentNotes(f);
  ASSERT_FALSE(notes.empty());
  EXPECT_NE(notes[0].find("predates sm_120"), std::string::npos) << notes[0];
  EXPECT_NE(notes[0].find("2.26.2"), std::string::npos) << notes[0];
  EXPECT_EQ(archOfGpuName("NVIDIA H100 80GB HBM3"), 90);
  EXPECT_EQ(archOfGpuName("NVIDIA A100-SXM4-80GB"), 80);
  EXPECT_EQ(archOfGpuName("NVIDIA A10G"), 86);
  EXPECT_EQ(archOfGpuName("Tesla T4"), 75);
  EXPECT_EQ(archOfGpuName("NVIDIA RTX PRO 6000 Blackwell Workstation Edition"), 120);
  EXPECT_EQ(archOfGpuName("NVIDIA B200"), 100);
  EnvFacts g;
  g.note(
      "Bfloat16 is only supported on GPUs with compute capability of at least 8.0. Your Tesla T4 GPU has "
      "compute capability 7.5.");
  EXPECT_FALSE(g.archs.count(80));  // "at least 8.0" is a requirement, not the GPU
  EXPECT_TRUE(g.archs.count(75));
}

TEST(TriageLineFormat, LevelColumnsOfOtherLoggers) {
  LineInfo i;
  parseLine("ERROR:    Exception in ASGI application", &i);
  EXPECT_EQ(i.level, 'E');
  EXPECT_EQ(i.body, "Exception in ASGI application");
  parseLine("WARNING:vllm.engine:something odd", &i);
  EXPECT_EQ(i.level, 'W');
  EXPECT_EQ(i.body, "something odd");
  parseLine("2024-01-22 14:32:27 | ERROR | stderr |   File \"/x/runpy.py\", line 196, in _run_module_as_main", &i);
  EXPECT_EQ(i.level, 'E');
  EXPECT_EQ(i.body, "  File \"/x/runpy.py\", line 196, in _run_module_as_main");
  parseLine("2025-05-28T03:35:37.857Z ERROR engine.run_mp_engine: CUDA error: x", &i);
  EXPECT_EQ(i.level, 'E');
  EXPECT_EQ(i.body, "engine.run_mp_engine: CUDA error: x");
  parseLine("[02/20/2024-10:56:21] [E] Error[2]: Assertion engine failed.", &i);
  EXPECT_EQ(i.stamp.year, 2024);
  EXPECT_EQ(i.body, "[E] Error[2]: Assertion engine failed.");
  parseLine("gpu-bql-144-103:18553:18611 [0] include/socket.h:360 WARN Call to connect failed : Connection timed out",
            &i);  // NCCL <= 2.3
  EXPECT_EQ(i.level, 'W');
  EXPECT_EQ(i.body, "WARN Call to connect failed : Connection timed out");
}

// Messages that continue on the next line are read whole, and matched again whole.
TEST(TriageAnalyzer, MessagesSpanLines) {
  Analyzer a(Catalog::builtin());
  Result r = analyse(a, {"RuntimeError: Failed: CUDA error /src/deep_ep.cpp:200",
                         "'peer access is not supported between these two devices'", "next unrelated line"});
  EXPECT_EQ(rootId(a, r), "cuda.peer_access_unsupported") << r.verdict;
  EXPECT_NE(a.groups()[r.rootGroup].text.find("deep_ep.cpp:200 'peer access"), std::string::npos);
  EXPECT_EQ(a.groups()[r.rootGroup].text.find("unrelated"), std::string::npos);
  // A bare AssertionError takes the assert statement under its frame as its message.
  Analyzer b(Catalog::builtin());
  r = analyse(b, {"Traceback (most recent call last):", "  File \"/sgl/utils.py\", line 9, in divide",
                  "    assert numerator % denominator == 0", "AssertionError"});
  EXPECT_EQ(rootId(b, r), "python.config_error") << r.verdict;
  EXPECT_NE(r.verdict.find("assert numerator % denominator == 0"), std::string::npos) << r.verdict;
}

// Generic reports rank by time: the tool's error before the Python exception that reports it.
TEST(TriageAnalyzer, TheOriginBeforeTheGenericEcho) {
  Analyzer a(Catalog::builtin());
  Result r = analyse(a, {"[TensorRT-LLM][ERROR] Assertion failed: mpiSize == tp * pp (/src/x.cpp:12)",
                         "Traceback (most recent call last):", "  File \"/app/run.py\", line 3, in <module>",
                         "    main()", "RuntimeError: Executor creation failed"});
  EXPECT_EQ(rootId(a, r), "grep.error_line") << r.verdict;
  EXPECT_NE(r.verdict.find("mpiSize == tp * pp"), std::string::npos) << r.verdict;
  EXPECT_NE(r.verdict.find("no catalogue entry"), std::string::npos) << r.verdict;
  // The line right above a traceback only announces it: the exception says what failed.
  Analyzer b(Catalog::builtin());
  r = analyse(b, {"ERROR 10-26 11:35:32 registry.py:267] Error in inspecting model architecture 'LlamaForCausalLM'",
                  "ERROR 10-26 11:35:32 registry.py:267] Traceback (most recent call last):",
                  "ERROR 10-26 11:35:32 registry.py:267]   File \"/v/registry.py\", line 9, in f",
                  "ERROR 10-26 11:35:32 registry.py:267] KeyError: 'qwen9'"});
  EXPECT_EQ(rootId(b, r), "python.exception") << r.verdict;
}

// A symptom is never a root cause while a cause is seen; alone, it is insufficient evidence.
TEST(TriageAnalyzer, SymptomsDeclineHonestly) {
  Analyzer a(Catalog::builtin());
  Result r = analyse(a, {"Segmentation fault (core dumped)"});
  EXPECT_EQ(r.status, Result::kInsufficient);
  EXPECT_NE(r.verdict.find("insufficient evidence"), std::string::npos) << r.verdict;
  EXPECT_FALSE(r.capture.empty());
  Analyzer b(Catalog::builtin());
  r = analyse(
      b, {"[TensorRT-LLM][ERROR] CUDA runtime error in cudaMalloc: out of memory", "Segmentation fault (core dumped)"});
  EXPECT_EQ(r.status, Result::kRootCause) << r.verdict;
  EXPECT_EQ(rootId(b, r), "cuda.oom") << r.verdict;
}

// A driver failure without an Xid explains the CUDA errors the workers print next.
TEST(TriageAnalyzer, DriverFailureExplainsTheWorkersCudaErrors) {
  Analyzer a(Catalog::builtin());
  Result r = analyse(a, {"[  84.7] NVRM: _kgspRpcRecvPoll: GSP RPC timeout for function 76",
                         "RuntimeError: CUDA error: unspecified launch failure"});
  EXPECT_EQ(rootId(a, r), "gpu.gsp_timeout") << r.verdict;
  bool tied = false;
  for (int e : r.echoes) tied = tied || a.catalog().sig(a.groups()[e].sig).id == "cuda.launch_failure";
  EXPECT_TRUE(tied);
}

}  // namespace
}  // namespace triage
}  // namespace arfuse
