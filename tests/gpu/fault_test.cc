// Fault injection: divergent calls, a late rank, two streams at once, a skipped call with timing,
// and a soak of a million graph-replayed calls. In gpu_test (Gpu_*) the ranks are virtual, on GPU 0;
// in multigpu_test (Gpu2_*) rank r runs on GPU r % (number of GPUs). Requirement in the name.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "arfuse/arfuse.h"
#include "gpu_fixture.h"

namespace arfuse {
namespace {

using gpufixture::Clock;
using gpufixture::rankDevice;
using gpufixture::secondsSince;

// Test suite names carry the requirement: Gpu_ (one GPU, virtual ranks) or Gpu2_ (distinct GPUs).
#if ARFUSE_TEST_MIN_GPUS >= 2
#define FAULT_SUITE Gpu2_Fault
#define SOAK_SUITE Gpu2_Soak
#else
#define FAULT_SUITE Gpu_Fault
#define SOAK_SUITE Gpu_Soak
#endif

// A group of n ranks (see rankDevice) with one stream each and fp32 buffers of `elems` per rank.
struct Group : gpufixture::RankGroup {
  std::vector<float*> in, out;
  std::vector<std::vector<float>> host;  // inputs
  size_t elems;

  Group(int nranks, int algo, int timeoutMs, size_t elemsPerRank, int maxTokens = 64, int maxHidden = 4096)
      : RankGroup(nranks), in(nranks), out(nranks), host(nranks), elems(elemsPerRank) {
    const std::vector<int>& devs = devices;
    create(gpufixture::testConfig(maxTokens, maxHidden, algo, timeoutMs));
    std::mt19937 rng(1234 + n * 7 + algo);
    std::uniform_int_distribution<int> q(-1024, 1024);
    for (int r = 0; r < n; ++r) {
      cudaSetDevice(devs[r]);
      cudaMalloc(&in[r], elems * sizeof(float));
      cudaMalloc(&out[r], elems * sizeof(float));
      host[r].resize(elems);
      for (float& v : host[r]) v = static_cast<float>(q(rng) | 1) / 1024.f;  // never 0; sums exact in fp32
      cudaMemcpy(in[r], host[r].data(), elems * sizeof(float), cudaMemcpyHostToDevice);
      cudaMemset(out[r], 0xFF, elems * sizeof(float));  // poison: NaN
      cudaDeviceSynchronize();  // the legacy-stream memsets finish before any call on the non-blocking streams
    }
    cudaSetDevice(devs[0]);
  }
  int dev(int r) const { return rankDevice(r); }
  ~Group() {
    destroy();
    for (int r = 0; r < n; ++r) {
      cudaFree(in[r]);
      cudaFree(out[r]);
    }
  }
  arfuseResult_t allReduce(int r, int tokens, int hidden, cudaStream_t s = nullptr) {
    return arfuseAllReduce(in[r], out[r], tokens, hidden, arfuseFloat32, comms[r], s ? s : streams[r]);
  }
  void syncAll() {
    for (int r = 0; r < n; ++r) cudaStreamSynchronize(streams[r]);
  }
  arfuseResult_t asyncError(int r, std::string* text) {
    arfuseResult_t e = arfuseSuccess;
    EXPECT_EQ(arfuseCommGetAsyncError(comms[r], &e), arfuseSuccess);
    *text = arfuseCommGetLastError(comms[r]);
    return e;
  }
};

const int kPaths[] = {arfuseAlgoLowLatency, arfuseAlgoOneShot, arfuseAlgoTwoShot, arfuseAlgoHostStaged};
std::string pathName(int a) { return arfuseAlgoName(arfuseAlgo_t(a)); }

class FAULT_SUITE : public ::testing::TestWithParam<int> {};

// Rank 2 calls with fewer tokens: every rank reports arfuseMismatch naming both calls, quickly
// (by the descriptor exchange, not by the timeout).
TEST_P(FAULT_SUITE, DifferentSizeIsAMismatchOnEveryRank) {
  const int algo = GetParam();
  Group g(3, algo, /*timeoutMs=*/5000, 4 * 1024);
  ASSERT_EQ(g.init, arfuseSuccess) << arfuseGetLastError();
  const auto t0 = Clock::now();
  for (int r = 0; r < 3; ++r) ASSERT_EQ(g.allReduce(r, r == 2 ? 2 : 4, 1024), arfuseSuccess) << arfuseGetLastError();
  g.syncAll();
  EXPECT_LT(secondsSince(t0), 2.5) << "a mismatch must not wait for the 5 s timeout";
  for (int r = 0; r < 3; ++r) {
    std::string text;
    EXPECT_EQ(g.asyncError(r, &text), arfuseMismatch) << pathName(algo) << " rank " << r << ": " << text;
    EXPECT_NE(text.find("divergent call"), std::string::npos) << text;
    EXPECT_NE(text.find("tokens=4"), std::string::npos) << text;
    EXPECT_NE(text.find("tokens=2"), std::string::npos) << text;
  }
  // Later calls fail fast with the recorded error; destroy (in ~Group) returns.
  const auto t1 = Clock::now();
  EXPECT_EQ(g.allReduce(0, 4, 1024), arfuseMismatch);
  EXPECT_LT(secondsSince(t1), 0.05);
}

// Same bytes, different dtype (fp16 vs bf16) and different op: still a mismatch.
TEST_P(FAULT_SUITE, DifferentDtypeOrOpIsAMismatch) {
  const int algo = GetParam();
  for (int variant = 0; variant < 2; ++variant) {
    Group g(2, algo, 5000, 4 * 1024);
    ASSERT_EQ(g.init, arfuseSuccess) << arfuseGetLastError();
    void* w;
    cudaSetDevice(g.dev(1));  // used by rank 1
    cudaMalloc(&w, 1024 * 4);
    cudaMemset(w, 0x3c, 1024 * 4);
    cudaDeviceSynchronize();
    for (int r = 0; r < 2; ++r) {
      arfuseResult_t st;
      if (variant == 0)  // 4 x 1024 x 2 B either way
        st = arfuseAllReduce(g.in[r], g.out[r], 4, 1024, r == 0 ? arfuseBfloat16 : arfuseFloat16, g.comms[r],
                             g.streams[r]);
      else if (r == 0)
        st = arfuseAllReduce(g.in[r], g.out[r], 2, 1024, arfuseBfloat16, g.comms[r], g.streams[r]);
      else
        st = arfuseAllReduceAddRmsNorm(g.in[r], g.in[r] + 2048, w, 1e-6f, g.out[r], g.out[r] + 2048, 2, 1024,
                                       arfuseBfloat16, g.comms[r], g.streams[r]);
      ASSERT_EQ(st, arfuseSuccess) << arfuseGetLastError();
    }
    g.syncAll();
    for (int r = 0; r < 2; ++r) {
      std::string text;
      EXPECT_EQ(g.asyncError(r, &text), arfuseMismatch) << pathName(algo) << " variant " << variant << ": " << text;
      EXPECT_NE(text.find(variant == 0 ? "fp16" : "AllReduceAddRmsNorm"), std::string::npos) << text;
    }
    cudaFree(w);
  }
}

// A rank that calls 300 ms late (timeout 3 s): correct result, no error.
TEST_P(FAULT_SUITE, LateRankWithinTheTimeoutIsFine) {
  const int algo = GetParam();
  Group g(3, algo, /*timeoutMs=*/3000, 4 * 1024);
  ASSERT_EQ(g.init, arfuseSuccess) << arfuseGetLastError();
  for (int r = 0; r < 2; ++r) ASSERT_EQ(g.allReduce(r, 4, 1024), arfuseSuccess);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ASSERT_EQ(g.allReduce(2, 4, 1024), arfuseSuccess);
  g.syncAll();
  for (int r = 0; r < 3; ++r) {
    std::string text;
    EXPECT_EQ(g.asyncError(r, &text), arfuseSuccess) << text;
    std::vector<float> got(g.elems);
    cudaMemcpy(got.data(), g.out[r], g.elems * sizeof(float), cudaMemcpyDeviceToHost);
    int wrong = 0;
    for (size_t i = 0; i < g.elems; ++i) {
      const float want = g.host[0][i] + g.host[1][i] + g.host[2][i];  // exact
      if (std::memcmp(&got[i], &want, 4) != 0) ++wrong;
    }
    EXPECT_EQ(wrong, 0) << pathName(algo) << " rank " << r;
  }
}

// A rank that never calls: both peers end within timeout + a poll interval and name it.
TEST_P(FAULT_SUITE, SkippedCallIsNamedByEveryPeerWithinTheTimeout) {
  const int algo = GetParam();
  Group g(3, algo, /*timeoutMs=*/400, 4 * 1024);
  ASSERT_EQ(g.init, arfuseSuccess) << arfuseGetLastError();
  const auto t0 = Clock::now();
  for (int r = 0; r < 2; ++r) ASSERT_EQ(g.allReduce(r, 4, 1024), arfuseSuccess);
  for (int r = 0; r < 2; ++r) ASSERT_EQ(cudaStreamSynchronize(g.streams[r]), cudaSuccess);
  const double took = secondsSince(t0);
  EXPECT_GE(took, 0.39);
  EXPECT_LT(took, 0.4 + 0.25) << "timeout + one poll interval (and scheduling slack)";
  for (int r = 0; r < 2; ++r) {
    std::string text;
    EXPECT_EQ(g.asyncError(r, &text), arfusePeerTimeout) << text;
    EXPECT_NE(text.find("for rank 2"), std::string::npos) << pathName(algo) << " rank " << r << ": " << text;
  }
  EXPECT_EQ(g.allReduce(2, 4, 1024), arfusePeerTimeout);  // the late rank is refused too: the group is aborted
}

// Two calls of one rank on two streams at the same time break the single-in-flight protocol: the
// second is caught on the device and the group fails with arfuseInvalidUsage, naming the misuse.
TEST_P(FAULT_SUITE, TwoStreamsAtOnceAreRefused) {
  const int algo = GetParam();
  Group g(2, algo, /*timeoutMs=*/3000, 4 * 1024);
  ASSERT_EQ(g.init, arfuseSuccess) << arfuseGetLastError();
  cudaStream_t other;
  cudaSetDevice(g.dev(0));
  cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking);
  const auto t0 = Clock::now();
  ASSERT_EQ(g.allReduce(0, 1, 1024), arfuseSuccess);  // waits for rank 1, which never calls
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_EQ(g.allReduce(0, 1, 1024, other), arfuseSuccess);
  ASSERT_EQ(cudaStreamSynchronize(g.streams[0]), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(other), cudaSuccess);
  EXPECT_LT(secondsSince(t0), 2.5) << "detected at once, not by the timeout";
  std::string text;
  EXPECT_EQ(g.asyncError(0, &text), arfuseInvalidUsage) << text;
  EXPECT_NE(text.find("two calls of rank 0 ran at the same time"), std::string::npos) << text;
  cudaStreamDestroy(other);
}

// The kernels stamp every call into the flight recorder (graph replays included); the dump lists them
// in the format `arfuse triage` reads, and after a divergent call it carries the error record.
TEST_P(FAULT_SUITE, FlightRecorderDumpListsTheCallsAndTheError) {
  const int algo = GetParam();
  Group g(2, algo, 5000, 4 * 1024);
  ASSERT_EQ(g.init, arfuseSuccess) << arfuseGetLastError();
  for (int c = 0; c < 5; ++c)
    for (int r = 0; r < 2; ++r) ASSERT_EQ(g.allReduce(r, 1 + c % 4, 1024), arfuseSuccess);
  g.syncAll();
  char path[] = "/tmp/arfuse-dump-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  ASSERT_EQ(arfuseCommDumpState(g.comms[1], path), arfuseSuccess) << arfuseCommGetLastError(g.comms[1]);
  auto slurp = [&] {
    std::string text;
    if (FILE* f = std::fopen(path, "r")) {
      char buf[4096];
      size_t n;
      while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
      std::fclose(f);
    }
    return text;
  };
  std::string text = slurp();
  EXPECT_NE(text.find("arfuse-flight-recorder v1 rank=1"), std::string::npos) << text;
  int entries = 0;
  for (size_t at = text.find("entry="); at != std::string::npos; at = text.find("entry=", at + 1)) ++entries;
  EXPECT_EQ(entries, 5) << text;
  EXPECT_NE(text.find("epoch=5"), std::string::npos) << text;
  EXPECT_NE(text.find("bytes=16384"), std::string::npos) << text;  // call 4: 4 x 1024 fp32
  EXPECT_EQ(text.find("pending"), std::string::npos) << "every call finished: " << text;
  // A divergent call: the record appears in the dump.
  ASSERT_EQ(g.allReduce(0, 4, 1024), arfuseSuccess);
  ASSERT_EQ(g.allReduce(1, 2, 1024), arfuseSuccess);
  g.syncAll();
  std::remove(path);
  ASSERT_EQ(arfuseCommDumpState(g.comms[1], path), arfuseSuccess);
  text = slurp();
  EXPECT_NE(text.find("mismatch"), std::string::npos) << text;
  std::remove(path);
  EXPECT_EQ(arfuseCommDumpState(g.comms[1], "/nonexistent-dir/x"), arfuseSystemError);
}

#if ARFUSE_TEST_MIN_GPUS < 2
// Two ranks of one group on one GPU and one stream would wait for each other forever: the second
// call is refused before anything is launched, naming both ranks.
TEST(Gpu_Misuse, TwoRanksOnOneStreamAreRefused) {
  Group g(2, arfuseAlgoOneShot, /*timeoutMs=*/300, 4 * 1024);
  ASSERT_EQ(g.init, arfuseSuccess) << arfuseGetLastError();
  ASSERT_EQ(g.allReduce(0, 4, 1024), arfuseSuccess);
  EXPECT_EQ(g.allReduce(1, 4, 1024, g.streams[0]), arfuseInvalidUsage);
  const std::string text = arfuseCommGetLastError(g.comms[1]);
  EXPECT_NE(text.find("rank 1 and rank 0 of this group share device 0 and stream"), std::string::npos) << text;
  g.syncAll();  // rank 0's call ends by its timeout: nothing hangs
  std::string async;
  EXPECT_EQ(g.asyncError(0, &async), arfusePeerTimeout) << async;
}

#endif

INSTANTIATE_TEST_SUITE_P(Paths, FAULT_SUITE, ::testing::ValuesIn(kPaths),
                         [](const ::testing::TestParamInfo<int>& i) { return pathName(i.param); });

// 10^6 calls per rank, CUDA-graph replayed, across four sizes (both the low-latency and one-shot
// paths under auto): no error, and every replay's outputs bitwise equal to one eager call's.
TEST(SOAK_SUITE, MillionGraphReplayedCallsAcrossSizes) {
  const int n = 2, callsPerGraph = 1000, replays = 1000;
  const int sizes[4] = {1, 4, 16, 128};  // x 2048 fp32: 8 KiB .. 1 MiB
  const int hidden = 2048;
  Group g(n, -1, 5000, static_cast<size_t>(4) * 128 * hidden, 128, hidden);
  ASSERT_EQ(g.init, arfuseSuccess) << arfuseGetLastError();
  // Per size: its own slice of the output so each size's result survives to the end.
  std::vector<std::vector<float*>> outs(n, std::vector<float*>(4));
  for (int r = 0; r < n; ++r) {
    cudaSetDevice(g.dev(r));
    for (int k = 0; k < 4; ++k) cudaMalloc(&outs[r][k], static_cast<size_t>(sizes[k]) * hidden * 4);
  }
  // Reference: one eager call per size.
  std::vector<std::vector<std::vector<float>>> ref(n, std::vector<std::vector<float>>(4));
  for (int k = 0; k < 4; ++k) {
    for (int r = 0; r < n; ++r)
      ASSERT_EQ(arfuseAllReduce(g.in[r], outs[r][k], sizes[k], hidden, arfuseFloat32, g.comms[r], g.streams[r]),
                arfuseSuccess);
    g.syncAll();
    for (int r = 0; r < n; ++r) {
      ref[r][k].resize(static_cast<size_t>(sizes[k]) * hidden);
      cudaMemcpy(ref[r][k].data(), outs[r][k], ref[r][k].size() * 4, cudaMemcpyDeviceToHost);
      cudaSetDevice(g.dev(r));
      cudaMemset(outs[r][k], 0xFF, ref[r][k].size() * 4);
      cudaDeviceSynchronize();
    }
  }
  std::vector<cudaGraphExec_t> execs(n);
  for (int r = 0; r < n; ++r) {
    cudaSetDevice(g.dev(r));
    cudaGraph_t graph;
    ASSERT_EQ(cudaStreamBeginCapture(g.streams[r], cudaStreamCaptureModeThreadLocal), cudaSuccess);
    for (int c = 0; c < callsPerGraph; ++c) {
      const int k = c % 4;
      ASSERT_EQ(arfuseAllReduce(g.in[r], outs[r][k], sizes[k], hidden, arfuseFloat32, g.comms[r], g.streams[r]),
                arfuseSuccess);
    }
    ASSERT_EQ(cudaStreamEndCapture(g.streams[r], &graph), cudaSuccess);
    ASSERT_EQ(cudaGraphInstantiate(&execs[r], graph, 0), cudaSuccess);
    cudaGraphDestroy(graph);
  }
  const auto t0 = Clock::now();
  for (int i = 0; i < replays; ++i)
    for (int r = 0; r < n; ++r) {
      if (g.dev(r) != g.dev(0)) cudaSetDevice(g.dev(r));
      ASSERT_EQ(cudaGraphLaunch(execs[r], g.streams[r]), cudaSuccess);
      if (g.dev(r) != g.dev(0)) cudaSetDevice(g.dev(0));
    }
  g.syncAll();
  std::printf("[ info ] %d calls per rank in %.2f s\n", callsPerGraph * replays, secondsSince(t0));
  for (int r = 0; r < n; ++r) {
    std::string text;
    EXPECT_EQ(g.asyncError(r, &text), arfuseSuccess) << text;
    for (int k = 0; k < 4; ++k) {
      std::vector<float> got(ref[r][k].size());
      cudaMemcpy(got.data(), outs[r][k], got.size() * 4, cudaMemcpyDeviceToHost);
      EXPECT_EQ(std::memcmp(got.data(), ref[r][k].data(), got.size() * 4), 0) << "rank " << r << " size " << sizes[k];
      EXPECT_EQ(std::memcmp(got.data(), ref[0][k].data(), got.size() * 4), 0) << "ranks differ, size " << sizes[k];
    }
    cudaGraphExecDestroy(execs[r]);
    for (int k = 0; k < 4; ++k) cudaFree(outs[r][k]);
  }
}

}  // namespace
}  // namespace arfuse
