// Issue 15 item 5: two virtual ranks of one group on GPU 0 whose streams are really one stream (the
// per-thread default stream of one thread; 0 and cudaStreamLegacy) or serialise (the legacy stream
// with a blocking stream) are refused with a message naming both ranks - not left to hang to the
// timeout. The streams that are really distinct (per-thread streams of two threads, the legacy
// stream with a non-blocking one) work and give correct sums. Requirement in the name: Gpu_*.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <thread>
#include <vector>

#include "arfuse/arfuse.h"
#include "fused_check.h"
#include "gpu_fixture.h"

namespace arfuse {
namespace {

using fusedcheck::Host;
using fusedcheck::Tensor;

constexpr int kTokens = 2, kHidden = 1024;
constexpr size_t kElems = static_cast<size_t>(kTokens) * kHidden;

// Two virtual ranks on GPU 0 (the streams they are called on are what each test varies).
struct TwoVirtualRanks : gpufixture::CommGroup {
  explicit TwoVirtualRanks(int timeoutMs) : CommGroup({0, 0}) {
    create(gpufixture::testConfig(kTokens, kHidden, -1, timeoutMs, ARFUSE_DTYPE_BIT(arfuseBfloat16)));
  }
};

// Rank 0 is called first on `s0`, then rank 1 on `s1`, which must be refused naming `why`. Rank 0's
// kernel, left without its peer, ends at the timeout and the group reports it.
void expectRefused(cudaStream_t s0, cudaStream_t s1, const std::string& why) {
  TwoVirtualRanks g(300);
  ASSERT_EQ(g.init, arfuseSuccess) << arfuseGetLastError();
  Tensor in0(0, kElems), in1(0, kElems), out0(0, kElems), out1(0, kElems);
  std::mt19937 rng(5);
  in0.upload(fusedcheck::randomBf16(kElems, rng));
  in1.upload(fusedcheck::randomBf16(kElems, rng));
  ASSERT_EQ(arfuseAllReduce(in0.d, out0.d, kTokens, kHidden, arfuseBfloat16, g.comms[0], s0), arfuseSuccess)
      << arfuseCommGetLastError(g.comms[0]);
  EXPECT_EQ(arfuseAllReduce(in1.d, out1.d, kTokens, kHidden, arfuseBfloat16, g.comms[1], s1), arfuseInvalidUsage);
  const std::string text = arfuseCommGetLastError(g.comms[1]);
  EXPECT_NE(text.find("rank 1 and rank 0 of this group share device 0 and stream"), std::string::npos) << text;
  EXPECT_NE(text.find(why), std::string::npos) << text;
  cudaDeviceSynchronize();  // rank 0's kernel times out (300 ms)
  arfuseResult_t async = arfuseSuccess;
  EXPECT_EQ(arfuseCommGetAsyncError(g.comms[0], &async), arfuseSuccess);
  EXPECT_EQ(async, arfusePeerTimeout) << arfuseCommGetLastError(g.comms[0]);
  const Host o1 = out1.download();
  for (uint16_t v : o1) ASSERT_EQ(v, 0xFFFF) << "the refused call wrote its output";
}

// Both ranks called (rank 0 on s0 from this thread, rank 1 on s1 from `other` when given) must
// give the fp64 sum, bitwise equal on both ranks.
void expectWorks(cudaStream_t s0, cudaStream_t s1, bool rank1OnAnotherThread) {
  TwoVirtualRanks g(20000);
  ASSERT_EQ(g.init, arfuseSuccess) << arfuseGetLastError();
  Tensor in0(0, kElems), in1(0, kElems), out0(0, kElems), out1(0, kElems);
  std::mt19937 rng(11);
  const std::vector<Host> xs = {fusedcheck::randomBf16(kElems, rng), fusedcheck::randomBf16(kElems, rng)};
  in0.upload(xs[0]);
  in1.upload(xs[1]);
  cudaDeviceSynchronize();
  arfuseResult_t r1 = arfuseInternalError;
  auto callRank1 = [&] {
    r1 = arfuseAllReduce(in1.d, out1.d, kTokens, kHidden, arfuseBfloat16, g.comms[1], s1);
    cudaStreamSynchronize(s1);
  };
  ASSERT_EQ(arfuseAllReduce(in0.d, out0.d, kTokens, kHidden, arfuseBfloat16, g.comms[0], s0), arfuseSuccess)
      << arfuseCommGetLastError(g.comms[0]);
  if (rank1OnAnotherThread)
    std::thread(callRank1).join();
  else
    callRank1();
  EXPECT_EQ(r1, arfuseSuccess) << arfuseCommGetLastError(g.comms[1]);
  cudaStreamSynchronize(s0);
  cudaDeviceSynchronize();
  arfuseResult_t async = arfuseSuccess;
  arfuseCommGetAsyncError(g.comms[0], &async);
  ASSERT_EQ(async, arfuseSuccess) << arfuseCommGetLastError(g.comms[0]);
  const Host o0 = out0.download(), o1 = out1.download();
  EXPECT_EQ(o0, o1) << "ranks differ";
  EXPECT_LT(fusedcheck::relErr(fusedcheck::sumReference(xs), o0), fusedcheck::kBf16Tolerance);
}

TEST(Gpu_Streams, PerThreadStreamOfOneThreadIsRefused) {
  expectRefused(cudaStreamPerThread, cudaStreamPerThread, "per-thread default stream of host thread");
}

TEST(Gpu_Streams, PerThreadStreamsOfTwoThreadsWork) {
  // Each thread's cudaStreamPerThread is its own stream: rank 0 from this thread, rank 1 from another.
  expectWorks(cudaStreamPerThread, cudaStreamPerThread, true);
}

TEST(Gpu_Streams, ZeroAndCudaStreamLegacyAreOneStream) {
  expectRefused(nullptr, cudaStreamLegacy, "legacy default stream of device 0");
}

TEST(Gpu_Streams, LegacyStreamWithABlockingStreamIsRefused) {
  cudaSetDevice(0);
  cudaStream_t blocking;
  ASSERT_EQ(cudaStreamCreate(&blocking), cudaSuccess);
  expectRefused(nullptr, blocking, "which the legacy stream waits for");
  cudaStreamDestroy(blocking);
}

TEST(Gpu_Streams, LegacyStreamWithANonBlockingStreamWorks) {
  cudaSetDevice(0);
  cudaStream_t nonBlocking;
  ASSERT_EQ(cudaStreamCreateWithFlags(&nonBlocking, cudaStreamNonBlocking), cudaSuccess);
  expectWorks(nullptr, nonBlocking, false);
  cudaStreamDestroy(nonBlocking);
}

}  // namespace
}  // namespace arfuse
