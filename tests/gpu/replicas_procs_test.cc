// ARFUSE_CHECK_REPLICAS=1 in a multi-process group (issue 37 item 8c): two processes, one rank each,
// both on GPU 0 (arfuseCommInitRank; CTest sets the variable). The launcher starts two copies of
// this executable as workers; rank 0 makes the unique id and hands it over through a pipe.
//   call 1: equal residual_in and weight on both ranks -> success, equal outputs on both ranks;
//   call 2: rank 1's weight differs in one element -> arfuseMismatch on both ranks, the comparing
//           rank naming rank 1, the tensor and the element, the other rank naming rank 1 from the
//           group's shared error record; a third call fails fast.
// Exit 0 pass, 1 fail, 77 skipped (no GPU).
#include <cuda_runtime.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "arfuse/arfuse.h"

extern char** environ;

namespace {

constexpr int kTokens = 2, kHidden = 1024;

std::vector<uint16_t> randomBf16(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint16_t> v(n);
  for (uint16_t& x : v)
    x = static_cast<uint16_t>(0x3c00 + rng() % 0x0400) ^ (rng() & 1 ? 0x8000 : 0);  // |x| in [2^-7, 2^-6)
  return v;
}

uint64_t fnv(const std::vector<uint16_t>& v) {
  uint64_t h = 1469598103934665603ull;
  for (uint16_t x : v) h = (h ^ x) * 1099511628211ull;
  return h;
}

int worker(int rank, const std::string& idHex, int outFd) {
  cudaSetDevice(0);
  arfuseUniqueId id;
  if (rank == 0) {
    if (arfuseGetUniqueId(&id) != arfuseSuccess)
      return std::printf("rank 0: arfuseGetUniqueId: %s\n", arfuseGetLastError()), 1;
    static const char* hex = "0123456789abcdef";
    std::string s;
    for (size_t i = 0; i < sizeof id.internal; ++i) {
      const unsigned char c = static_cast<unsigned char>(id.internal[i]);
      s += hex[c >> 4];
      s += hex[c & 15];
    }
    if (write(outFd, s.data(), s.size()) != static_cast<ssize_t>(s.size())) return 1;
    close(outFd);
  } else {
    for (size_t i = 0; i < sizeof id.internal; ++i)
      id.internal[i] = static_cast<char>(std::stoi(idHex.substr(2 * i, 2), nullptr, 16));
  }
  arfuseConfig_t cfg = ARFUSE_CONFIG_INITIALIZER;
  cfg.maxTokens = kTokens;
  cfg.maxHidden = kHidden;
  cfg.dtypeMask = ARFUSE_DTYPE_BIT(arfuseBfloat16);
  cfg.timeoutMs = 5000;
  arfuseComm_t comm = nullptr;
  if (arfuseCommInitRank(&comm, 2, id, rank, 0, &cfg) != arfuseSuccess)
    return std::printf("rank %d: init: %s\n", rank, arfuseGetLastError()), 1;
  const size_t n = static_cast<size_t>(kTokens) * kHidden;
  uint16_t *x, *res, *w, *norm, *rout;
  for (uint16_t** p : {&x, &res, &w, &norm, &rout}) cudaMalloc(p, n * 2);
  cudaStream_t stream;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  auto call = [&](uint32_t weightSeed, int badElement) {
    const std::vector<uint16_t> xs = randomBf16(n, 10 + rank), rs = randomBf16(n, 20);
    std::vector<uint16_t> ws = randomBf16(kHidden, weightSeed);
    if (badElement >= 0) ws[badElement] ^= 0x0001;
    cudaMemcpy(x, xs.data(), n * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(res, rs.data(), n * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(w, ws.data(), kHidden * 2, cudaMemcpyHostToDevice);
    cudaMemset(norm, 0xFF, n * 2);
    cudaDeviceSynchronize();
    arfuseResult_t st =
        arfuseAllReduceAddRmsNorm(x, res, w, 1e-6f, norm, rout, kTokens, kHidden, arfuseBfloat16, comm, stream);
    cudaStreamSynchronize(stream);
    arfuseResult_t async = arfuseSuccess;
    arfuseCommGetAsyncError(comm, &async);
    return st != arfuseSuccess ? st : async;
  };
  int failed = 0;
  const arfuseResult_t s1 = call(30, -1);
  std::vector<uint16_t> out(n);
  cudaMemcpy(out.data(), norm, n * 2, cudaMemcpyDeviceToHost);
  std::printf("rank %d: call 1 %s hash=%016llx\n", rank, arfuseGetErrorName(s1),
              static_cast<unsigned long long>(fnv(out)));
  failed += s1 != arfuseSuccess;
  const arfuseResult_t s2 = call(30, rank == 1 ? 77 : -1);
  const std::string text = arfuseCommGetLastError(comm);
  std::printf("rank %d: call 2 %s: %s\n", rank, arfuseGetErrorName(s2), text.c_str());
  failed += s2 != arfuseMismatch;
  failed += text.find("rank 1") == std::string::npos;
  const arfuseResult_t s3 = call(30, -1);
  std::printf("rank %d: call 3 %s\n", rank, arfuseGetErrorName(s3));
  failed += s3 != arfuseMismatch;
  std::fflush(stdout);
  arfuseCommDestroy(comm);
  return failed ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 3 && std::string(argv[1]) == "--worker") {
    const int rank = std::atoi(argv[2]);
    return worker(rank, argc >= 4 ? argv[3] : "", argc >= 5 ? std::atoi(argv[4]) : -1);
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("SKIPPED: needs a CUDA GPU. Run scripts/gpu_check.sh on a GPU machine.\n");
    return 77;
  }
  const char* on = std::getenv("ARFUSE_CHECK_REPLICAS");
  if (!on || std::string(on) != "1")
    return std::printf("FAIL: run through CTest (it sets ARFUSE_CHECK_REPLICAS=1)\n"), 1;
  int p[2];
  if (pipe(p) != 0) return 1;
  auto spawn = [&](std::vector<std::string> args) {
    std::vector<char*> av;
    for (std::string& a : args) av.push_back(a.data());
    av.push_back(nullptr);
    pid_t pid = -1;
    posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, av.data(), environ);
    return pid;
  };
  const pid_t r0 = spawn({argv[0], "--worker", "0", "", std::to_string(p[1])});
  close(p[1]);
  std::string hex;
  char buf[512];
  ssize_t k;
  while ((k = read(p[0], buf, sizeof buf)) > 0) hex.append(buf, static_cast<size_t>(k));
  close(p[0]);
  const pid_t r1 = hex.size() == 256 ? spawn({argv[0], "--worker", "1", hex}) : -1;
  int st0 = 0, st1 = 0;
  waitpid(r0, &st0, 0);
  if (r1 > 0) waitpid(r1, &st1, 0);
  const bool ok = r1 > 0 && WIFEXITED(st0) && WEXITSTATUS(st0) == 0 && WIFEXITED(st1) && WEXITSTATUS(st1) == 0;
  std::printf("%s: ARFUSE_CHECK_REPLICAS across processes\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}
