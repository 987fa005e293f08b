// `arfuse selftest`: proves every path on this machine against an fp64 reference.
// Real ranks across GPUs when there are >= 2, virtual ranks on one GPU otherwise; none: says so and
// exits with kExitNoDevice.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "arfuse/arfuse.h"
#include "args.h"
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

}  // namespace

std::string noDeviceReason() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  cudaGetLastError();
  return noDeviceCause(e, cudaGetErrorString(e));
}

int noDeviceExit(const std::string& command) {
  std::printf(
      "arfuse %s: no CUDA device is visible, so nothing can be tested here.\n"
      "  Why: %s.\n"
      "  Run it on a machine with an NVIDIA GPU (one GPU is enough: it then uses virtual ranks).\n"
      "  Without a GPU, `arfuse plan` and `arfuse triage` still work.\n",
      command.c_str(), noDeviceReason().c_str());
  return kExitNoDevice;
}

int selftest(const std::vector<std::string>& args) {
  if (isProcsRun(args)) return selftestProcs(args);
  SelftestArgs parsed;
  std::string error;
  if (!parseSelftestArgs(args, &parsed, &error)) return usageError("selftest", error);
  if (parsed.help) {
    std::printf("%s", selftestUsage());
    return kExitOk;
  }
  std::vector<int> rankCounts = parsed.ranks;
  const bool quick = parsed.quick, forceVirtual = parsed.forceVirtual;
  const int ndev = harness::deviceCount();
  if (ndev == 0) return noDeviceExit("selftest");
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
      std::printf("%-6d skipped: only %s (use --ranks <= %d)\n", n, countOf(ndev, "GPU").c_str(), ndev);
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
