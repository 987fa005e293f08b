// `arfuse selftest`: proves every path on this machine against an fp64 reference.
// Real ranks across GPUs when there are >= 2, virtual ranks on one GPU otherwise; none: says so and
// exits with kExitNoDevice.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "arfuse/arfuse.h"
#include "cli.h"
#include "common/no_device.h"
#include "harness/harness.h"
#include "selftest_args.h"

namespace arfuse {
namespace cli {
namespace {

struct Shape {
  int tokens, hidden;
};

void usage() {
  std::printf(
      "usage: arfuse selftest [--ranks N[,N...]] [--virtual] [--quick]\n"
      "       arfuse selftest --procs N [--algo A] [--virtual] [--timeout-ms T] [--kill-rank R] [--hosts H]\n"
      "                               [--graph]\n"
      "  Runs every arfuse path over fresh random inputs and checks each output against an fp64 reference\n"
      "  and for bitwise equality across ranks. With >= 2 GPUs the ranks are real GPUs; with one GPU they\n"
      "  are virtual ranks on it (correctness only); --virtual forces virtual ranks on GPU 0.\n"
      "  --procs N starts N processes, one rank each (arfuseCommInitRank; one GPU each when there are N,\n"
      "  else all on GPU 0), checks every output against fp64 and across ranks, and that nothing is left\n"
      "  in /dev/shm; --kill-rank R kills rank R after init: rank 0 must name it and destroy must return.\n"
      "  --hosts H simulates H hosts of N/H ranks each (ARFUSE_TEST_HOST_ID, TEST ONLY; NCCL over loopback\n"
      "  sockets with a host id per process), so the nccl and hierarchical paths across hosts run on one machine;\n"
      "  with --kill-rank R, rank R dies mid-run instead: every other rank must fail naming it within a bound.\n"
      "  --graph captures every call into a CUDA graph and replays it (with --hosts and --kill-rank: the\n"
      "  bound of captured NCCL operations, ARFUSE_NCCL_WATCH_GRAPHS=1).\n"
      "  Exit: 0 all passed, 1 a check failed, 2 usage, 3 no GPU.\n");
}

}  // namespace

std::string noDeviceReason() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  cudaGetLastError();
  return noDeviceCause(e, cudaGetErrorString(e));
}

int selftest(const std::vector<std::string>& args) {
  for (const std::string& a : args)
    if (a == "--procs") return selftestProcs(args);
  SelftestArgs parsed;
  std::string error;
  if (!parseSelftestArgs(args, &parsed, &error)) {
    std::fprintf(stderr, "arfuse selftest: %s (see arfuse selftest --help)\n", error.c_str());
    return kExitUsage;
  }
  if (parsed.help) {
    usage();
    return kExitOk;
  }
  std::vector<int> rankCounts = parsed.ranks;
  const bool quick = parsed.quick, forceVirtual = parsed.forceVirtual;
  const int ndev = harness::deviceCount();
  if (ndev == 0) {
    std::printf(
        "arfuse selftest: no CUDA device is visible, so nothing can be tested here.\n"
        "  Why: %s.\n"
        "  Run it on a machine with an NVIDIA GPU (one GPU is enough: it then uses virtual ranks).\n"
        "  Without a GPU, `arfuse plan` and `arfuse triage` still work.\n",
        noDeviceReason().c_str());
    return kExitNoDevice;
  }
  const bool virtualRanks = forceVirtual || ndev < 2;
  if (rankCounts.empty()) rankCounts = virtualRanks ? std::vector<int>{2, 4, 8} : std::vector<int>{ndev};
  std::printf("arfuse selftest: %s; %d device(s): %s%s\n", arfuseGetBuildInfo(), ndev, harness::deviceName(0).c_str(),
              ndev > 1 ? ", ..." : "");
  std::printf("ranks are %s\n\n",
              virtualRanks ? "VIRTUAL (several ranks share GPU 0; correctness only)" : "real GPUs, one rank per GPU");
  std::printf("%-6s %-5s %-7s %-7s %-8s %-10s %-11s %-11s %-9s %s\n", "ranks", "dtype", "tokens", "hidden", "op",
              "algo", "err_out", "err_resid", "identical", "result");

  const std::vector<Shape> shapes = quick ? std::vector<Shape>{{1, 7168}, {64, 4096}}
                                          : std::vector<Shape>{{1, 7168}, {3, 5120}, {16, 8192}, {255, 4096}};
  // (1 x 7168 and 3 x 5120 also run on the low-latency path, <= 64 KiB per rank; larger shapes do not.)
  const arfuseDataType_t dtypes[] = {arfuseBfloat16, arfuseFloat16, arfuseFloat32};
  int failed = 0, passed = 0;
  for (int n : rankCounts) {
    if (!virtualRanks && n > ndev) {
      std::printf("%-6d skipped: only %d GPUs (use --ranks <= %d)\n", n, ndev, ndev);
      continue;
    }
    std::vector<int> devices(n);
    for (int r = 0; r < n; ++r) devices[r] = virtualRanks ? 0 : r;
    std::vector<int> algos = {arfuseAlgoLowLatency, arfuseAlgoOneShot, arfuseAlgoTwoShot, arfuseAlgoHostStaged};
    if (!virtualRanks) algos.push_back(arfuseAlgoNccl);
    for (int algo : algos) {
      harness::World world(devices, 256, 8192, algo);
      if (!world.ok()) {
        std::printf("%-6d %-5s world for algo %s failed: %s\n", n, "-", arfuseAlgoName(arfuseAlgo_t(algo)),
                    world.error().c_str());
        ++failed;
        continue;
      }
      for (arfuseDataType_t dt : dtypes) {
        for (const Shape& s : shapes) {
          const long long bytes = static_cast<long long>(s.tokens) * s.hidden * (dt == arfuseFloat32 ? 4 : 2);
          if (algo == arfuseAlgoLowLatency && bytes > 64 * 1024) continue;  // beyond the low-latency path's limit
          for (arfuseOp_t op : {arfuseOpAllReduceAddRmsNorm, arfuseOpAllReduce}) {
            harness::CaseSpec spec;
            spec.op = op;
            spec.dtype = dt;
            spec.tokens = s.tokens;
            spec.hidden = s.hidden;
            spec.seed = 1000 + passed + failed;
            harness::CaseResult r = world.run(spec);
            r.ok ? ++passed : ++failed;
            std::printf("%-6d %-5s %-7d %-7d %-8s %-10s %-11.3e %-11.3e %-9s %s%s%s\n", n, arfuseDataTypeName(dt),
                        s.tokens, s.hidden, op == arfuseOpAllReduce ? "ar" : "ar+norm", r.algo.c_str(), r.errNorm,
                        r.errResidual, r.identical ? "yes" : "NO", r.ok ? "PASS" : "FAIL", r.ok ? "" : ": ",
                        r.ok ? "" : r.error.c_str());
          }
        }
      }
    }
  }
  std::printf("\nselftest: %d passed, %d failed\n", passed, failed);
  return failed ? kExitFailed : kExitOk;
}

}  // namespace cli
}  // namespace arfuse
