// arfuse_proxy_floor: the measured floor of a synchronous call on this machine's ranks -- what the
// fused call's time must contain whatever its kernel does, timed the way `arfuse bench` times it.
//
// Each rank (a virtual rank on GPU 0 by default; one GPU per rank with --gpus) runs its own CUDA
// graph of --calls launches of one kernel on its own stream, with programmatic dependent launch (PDL)
// between consecutive launches, exactly as arfuse's calls are captured by the bench harness
// (tools/harness/timing.cc: one graph per rank, events inside each graph after its first call, the
// figure the slowest rank's time per call). The kernel is one of:
//   launch:  pdlWait and launch_dependents only. n independent chains on one device: the cost of
//            n streams' back-to-back launches, with no dependency between ranks.
//   barrier: what every arfuse call does at least once. Thread 0 takes the CTA's epoch with one
//            device atomic before pdlWait (as arfuse's entry does, device/protocol.cuh); after the
//            wait, thread t < n stores the epoch into CTA b's slot of this rank in rank t's flag
//            buffer, then polls this rank's own slots until every peer's epoch has arrived: one
//            one-way trip from every rank to every rank, nothing else.
//   copy:    not a call but the two copy rates the floors' bytes are divided by (scripts/
//            perf_compare.py), on this GPU, so that a call's floor is that of the GPU it ran on: an SM
//            copy (harness/copy_kernel.h) of 2 x 4096 x 7168 bf16 (234.9 MB read and written per
//            call) rotating over sets that exceed twice the L2 together (harness/rotation.h): the HBM
//            rate, `copy_hbm`; and of 2 x 256 x 7168 bf16 (14.7 MB), one set, hot in L2: `copy_l2`.
//            The same graphs of --calls copies, the median of the replays.
// A rank at epoch e+1 may overwrite its slot in a peer before that peer has read e (it passed e's
// barrier, which only needs the peer's store), so the poll waits for >= e. Nothing else is
// exchanged, so relaxed (volatile) stores and loads suffice.
//
// PROXY: on virtual ranks every rank's chain shares one GPU's front end and SMs; the figure is the
// floor of the proxy, not of a machine with a GPU per rank (take that with --gpus).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <initializer_list>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "args.h"  // tools/arfuse: the subcommands' option grammar
#include "device/memory.cuh"
#include "harness/copy_kernel.h"
#include "harness/rotation.h"

namespace {

constexpr int kMaxRanks = 8;

struct FloorArgs {
  unsigned* flags[kMaxRanks];  // rank r's slots: [cta][src], on rank r's device
  unsigned long long* epochs;  // this rank's per-CTA epoch counters
  int rank, nranks;
};

using arfuse::pdlLaunchDependents;  // from sm_90; no-ops below (device/memory.cuh)
using arfuse::pdlWait;

__global__ void launchKernel(FloorArgs) {
  pdlWait();
  pdlLaunchDependents();
}

__global__ void barrierKernel(const __grid_constant__ FloorArgs a) {
  __shared__ unsigned sEpoch;
  if (threadIdx.x == 0) sEpoch = static_cast<unsigned>(atomicAdd(&a.epochs[blockIdx.x], 1ull) + 1);
  __syncthreads();
  pdlWait();
  const unsigned e = sEpoch;
  const int t = threadIdx.x;
  if (t < a.nranks && t != a.rank)
    *reinterpret_cast<volatile unsigned*>(a.flags[t] + blockIdx.x * kMaxRanks + a.rank) = e;
  if (t < a.nranks && t != a.rank) {
    const volatile unsigned* mine = a.flags[a.rank] + blockIdx.x * kMaxRanks + t;
    while (static_cast<int>(*mine - e) < 0) {
    }
  }
  __syncthreads();
  pdlLaunchDependents();
}

struct Options {
  std::vector<int> ranks{1, 2, 4, 8}, ctas{1, 4, 16, 32, 64, 128};
  std::vector<std::string> modes{"launch", "barrier", "copy"};
  int threads = 256, calls = 20, iters = 50, warmup = 10;
  bool gpus = false;
  std::string json;
};

const char* kUsage =
    "usage: arfuse_proxy_floor [--ranks 1,2,4,8] [--ctas 1,4,16,32,64,128] [--threads 256] [--modes "
    "launch,barrier,copy]\n"
    "                          [--calls 20] [-n 50] [-w 10] [--gpus] [-J out.json]\n"
    "  the floor of a synchronous call (docs/perf.md, \"The proxy's own floor\"): per rank one CUDA graph of\n"
    "  --calls PDL-chained launches; virtual ranks on GPU 0 unless --gpus (one GPU per rank, peer access);\n"
    "  copy: GPU 0's SM copy rates from HBM and from L2 (the floors' bandwidths), once, whatever --ranks\n";

// The arguments, in the grammar and wording of every `arfuse` subcommand (tools/arfuse/args.h).
// Threads: at least one per rank (thread t signals rank t).
bool parse(int argc, char** argv, Options* o, std::string* err) {
  namespace cli = arfuse::cli;
  cli::Options opts;
  bool help = false;
  opts.flag({"-h", "--help"}, [&] { help = true; });
  opts.flag({"--gpus"}, [&] { o->gpus = true; });
  const auto list = [](std::vector<int>* out, long long hi) {
    return [out, hi](const std::string& k, const std::string& v, std::string* e) {
      return cli::parseIntListArg(k, v, 1, hi, out, e);
    };
  };
  const auto one = [](int* out, long long lo, long long hi) {
    return [out, lo, hi](const std::string& k, const std::string& v, std::string* e) {
      return cli::parseIntArg(k, v, lo, hi, out, e);
    };
  };
  opts.value({"--ranks"}, list(&o->ranks, kMaxRanks));
  opts.value({"--ctas"}, list(&o->ctas, 1024));
  opts.value({"--threads"}, one(&o->threads, kMaxRanks, 1024));
  opts.value({"--calls"}, one(&o->calls, 2, 100000));
  opts.value({"-n"}, one(&o->iters, 1, 100000));
  opts.value({"-w"}, one(&o->warmup, 0, 100000));
  opts.text({"-J"}, &o->json);
  opts.value({"--modes"}, [o](const std::string& k, const std::string& v, std::string* e) {
    o->modes.clear();
    std::stringstream ss(v);
    std::string m;
    int index = 0;
    while (std::getline(ss, m, ',')) {
      if (!cli::parseChoiceArg(k, m, {"launch", "barrier", "copy"}, &index, e)) return false;
      o->modes.push_back(m);
    }
    if (o->modes.empty() || v.back() == ',') {
      *e = cli::wantsError(k, "a comma-separated list of launch, barrier and copy", v);
      return false;
    }
    return true;
  });
  if (!opts.parse(std::vector<std::string>(argv + 1, argv + argc), err)) {
    *err += std::string("\n") + kUsage;
    return false;
  }
  if (help) {
    std::fputs(kUsage, stdout);
    std::exit(0);
  }
  return true;
}

#define F_CUDA(call)                                             \
  do {                                                           \
    const cudaError_t e_ = (call);                               \
    if (e_ != cudaSuccess) {                                     \
      *err = std::string(#call) + ": " + cudaGetErrorString(e_); \
      return false;                                              \
    }                                                            \
  } while (0)

struct Row {
  std::string mode;
  int ranks, ctas;
  double median, min, max;
  double bytesMoved = 0;  // copy rows: bytes read and written per call
};

// One configuration: n ranks, `ctas` CTAs per rank, timed as the bench harness times a call.
bool timeOne(const Options& o, const std::string& mode, int n, int ctas, Row* row, std::string* err) {
  std::vector<int> dev(n, 0);
  if (o.gpus)
    for (int r = 0; r < n; ++r) dev[r] = r;
  std::vector<unsigned*> flags(n, nullptr);
  std::vector<unsigned long long*> epochs(n, nullptr);
  std::vector<cudaStream_t> streams(n, nullptr);
  std::vector<cudaEvent_t> start(n, nullptr), end(n, nullptr);
  std::vector<cudaGraphExec_t> execs(n, nullptr);
  const size_t flagBytes = static_cast<size_t>(ctas) * kMaxRanks * sizeof(unsigned);
  for (int r = 0; r < n; ++r) {
    F_CUDA(cudaSetDevice(dev[r]));
    F_CUDA(cudaMalloc(&flags[r], flagBytes));
    F_CUDA(cudaMemset(flags[r], 0, flagBytes));
    F_CUDA(cudaMalloc(&epochs[r], ctas * sizeof(unsigned long long)));
    F_CUDA(cudaMemset(epochs[r], 0, ctas * sizeof(unsigned long long)));
    F_CUDA(cudaStreamCreateWithFlags(&streams[r], cudaStreamNonBlocking));
    F_CUDA(cudaEventCreate(&start[r]));
    F_CUDA(cudaEventCreate(&end[r]));
  }
  void (*kernel)(FloorArgs) = mode == "launch" ? launchKernel : barrierKernel;
  // Every rank's CTAs must be resident at once on a shared GPU, or the barrier never completes.
  int perSm = 0, sms = 0;
  F_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&perSm, kernel, o.threads, 0));
  F_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev[0]));
  const int sharing = o.gpus ? 1 : n;
  if (static_cast<long long>(sharing) * ctas > static_cast<long long>(perSm) * sms) {
    *err = std::to_string(sharing) + " x " + std::to_string(ctas) + " CTAs of " + std::to_string(o.threads) +
           " threads exceed the " + std::to_string(perSm * sms) + " this GPU keeps resident; lower --ctas or --threads";
    return false;
  }
  for (int r = 0; r < n; ++r) {
    F_CUDA(cudaSetDevice(dev[r]));
    FloorArgs a = {};
    for (int p = 0; p < n; ++p) a.flags[p] = flags[p];
    a.epochs = epochs[r];
    a.rank = r;
    a.nranks = n;
    cudaGraph_t g;
    F_CUDA(cudaStreamBeginCapture(streams[r], cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < o.calls; ++i) {
      if (i == 1) F_CUDA(cudaEventRecordWithFlags(start[r], streams[r], cudaEventRecordExternal));
      cudaLaunchConfig_t cfg = {};
      cfg.gridDim = dim3(static_cast<unsigned>(ctas));
      cfg.blockDim = dim3(static_cast<unsigned>(o.threads));
      cfg.stream = streams[r];
      cudaLaunchAttribute attr;
      attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
      attr.val.programmaticStreamSerializationAllowed = 1;
      cfg.attrs = &attr;
      cfg.numAttrs = 1;
      F_CUDA(cudaLaunchKernelEx(&cfg, kernel, a));
    }
    F_CUDA(cudaEventRecordWithFlags(end[r], streams[r], cudaEventRecordExternal));
    F_CUDA(cudaStreamEndCapture(streams[r], &g));
    F_CUDA(cudaGraphInstantiate(&execs[r], g, 0));
    F_CUDA(cudaGraphDestroy(g));
  }
  std::vector<double> us;
  for (int it = 0; it < o.warmup + o.iters; ++it) {
    for (int r = 0; r < n; ++r) {
      F_CUDA(cudaSetDevice(dev[r]));
      F_CUDA(cudaGraphLaunch(execs[r], streams[r]));
    }
    double worst = 0;
    for (int r = 0; r < n; ++r) {
      F_CUDA(cudaSetDevice(dev[r]));
      F_CUDA(cudaStreamSynchronize(streams[r]));
      float ms = 0;
      F_CUDA(cudaEventElapsedTime(&ms, start[r], end[r]));
      worst = std::max(worst, static_cast<double>(ms));
    }
    if (it >= o.warmup) us.push_back(worst * 1000.0 / (o.calls - 1));
  }
  for (int r = 0; r < n; ++r) {
    cudaSetDevice(dev[r]);
    cudaGraphExecDestroy(execs[r]);
    cudaEventDestroy(start[r]);
    cudaEventDestroy(end[r]);
    cudaStreamDestroy(streams[r]);
    cudaFree(flags[r]);
    cudaFree(epochs[r]);
  }
  std::sort(us.begin(), us.end());
  *row = Row{mode, n, ctas, us[us.size() / 2], us.front(), us.back()};
  return true;
}

// Mode copy: `copyBytes` copied per call on GPU 0, over as many sets as keep it out of L2 (hbm) or
// one (L2), in one graph of --calls copies; the median, min and max per call over the replays.
bool timeCopy(const Options& o, const std::string& mode, size_t copyBytes, Row* row, std::string* err) {
  F_CUDA(cudaSetDevice(0));
  int l2 = 0;
  F_CUDA(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
  const bool hbm = mode == "copy_hbm";
  const int sets = hbm ? arfuse::harness::rotationSets(2 * copyBytes, static_cast<size_t>(l2), o.calls) : 1;
  if (hbm && !arfuse::harness::rotationBeatsL2(sets, 2 * copyBytes, static_cast<size_t>(l2))) {
    *err = "the copy's " + std::to_string(sets) + " sets do not exceed twice the L2 (" + std::to_string(l2) +
           " B); raise --calls";
    return false;
  }
  std::vector<void*> src(sets, nullptr), dst(sets, nullptr);
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, end = nullptr;
  cudaGraphExec_t exec = nullptr;
  std::vector<double> us;
  const bool ok = [&] {
    for (int k = 0; k < sets; ++k) {
      F_CUDA(cudaMalloc(&src[k], copyBytes));
      F_CUDA(cudaMalloc(&dst[k], copyBytes));
      F_CUDA(cudaMemset(src[k], 0x3c, copyBytes));
    }
    F_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    F_CUDA(cudaEventCreate(&start));
    F_CUDA(cudaEventCreate(&end));
    cudaGraph_t g;
    F_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < o.calls; ++i) {
      if (i == 1) F_CUDA(cudaEventRecordWithFlags(start, stream, cudaEventRecordExternal));
      F_CUDA(static_cast<cudaError_t>(arfuse::harness::launchCopy(dst[i % sets], src[i % sets], copyBytes, stream)));
    }
    F_CUDA(cudaEventRecordWithFlags(end, stream, cudaEventRecordExternal));
    F_CUDA(cudaStreamEndCapture(stream, &g));
    F_CUDA(cudaGraphInstantiate(&exec, g, 0));
    F_CUDA(cudaGraphDestroy(g));
    for (int it = 0; it < o.warmup + o.iters; ++it) {
      F_CUDA(cudaGraphLaunch(exec, stream));
      F_CUDA(cudaStreamSynchronize(stream));
      float ms = 0;
      F_CUDA(cudaEventElapsedTime(&ms, start, end));
      if (it >= o.warmup) us.push_back(ms * 1000.0 / (o.calls - 1));
    }
    return true;
  }();  // false with *err set (F_CUDA)
  if (exec) cudaGraphExecDestroy(exec);
  if (start) cudaEventDestroy(start);
  if (end) cudaEventDestroy(end);
  if (stream) cudaStreamDestroy(stream);
  for (int k = 0; k < sets; ++k) {
    cudaFree(src[k]);
    cudaFree(dst[k]);
  }
  if (!ok) return false;
  std::sort(us.begin(), us.end());
  *row = Row{mode, 1, sets, us[us.size() / 2], us.front(), us.back(), 2.0 * static_cast<double>(copyBytes)};
  return true;
}

bool enablePeers(int n, std::string* err) {
  for (int a = 0; a < n; ++a)
    for (int b = 0; b < n; ++b) {
      if (a == b) continue;
      int can = 0;
      F_CUDA(cudaDeviceCanAccessPeer(&can, a, b));
      if (!can) {
        *err = "--gpus: GPU " + std::to_string(a) + " has no peer access to GPU " + std::to_string(b) +
               "; the barrier stores into the peer's memory (run without --gpus for virtual ranks)";
        return false;
      }
      F_CUDA(cudaSetDevice(a));
      const cudaError_t e = cudaDeviceEnablePeerAccess(b, 0);
      cudaGetLastError();  // "already enabled" is fine
      if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) {
        *err = "cudaDeviceEnablePeerAccess(" + std::to_string(b) + ") on GPU " + std::to_string(a) + ": " +
               cudaGetErrorString(e);
        return false;
      }
    }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  std::string err;
  if (!parse(argc, argv, &o, &err)) {
    std::fprintf(stderr, "arfuse_proxy_floor: %s\n", err.c_str());
    return 2;
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "arfuse_proxy_floor: no CUDA device (%s); this benchmark needs a GPU\n",
                 cudaGetErrorString(cudaGetLastError()));
    return 3;
  }
  const int most = *std::max_element(o.ranks.begin(), o.ranks.end());
  if (o.gpus && most > devices) {
    std::fprintf(stderr, "arfuse_proxy_floor: --gpus --ranks %d needs %d GPUs, this machine has %d\n", most, most,
                 devices);
    return 2;
  }
  if (o.gpus && !enablePeers(most, &err)) {
    std::fprintf(stderr, "arfuse_proxy_floor: %s\n", err.c_str());
    return 2;
  }
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  std::printf("# %s floor, %s, %d threads per CTA, %d calls per graph, median of %d replays (%s)\n",
              o.gpus ? "real-rank" : "PROXY (virtual ranks on GPU 0)", prop.name, o.threads, o.calls, o.iters,
              "us per call, slowest rank");
  std::printf("%-8s %5s %5s %9s %9s %9s\n", "mode", "ranks", "ctas", "median", "min", "max");
  std::vector<Row> rows;
  for (const std::string& m : o.modes) {
    if (m == "copy") {
      // 2 x tokens x 7168 bf16 per call (see the top of this file); `ctas` in the row: the sets.
      for (const auto& [mode, tokens] : {std::pair<const char*, size_t>{"copy_hbm", 4096}, {"copy_l2", 256}}) {
        Row row;
        if (!timeCopy(o, mode, 2 * tokens * 7168 * 2, &row, &err)) {
          // The barrier rows stand without it: perf_compare.py then says it used the H200's rates.
          std::fprintf(stderr, "arfuse_proxy_floor: %s: %s (no copy row)\n", mode, err.c_str());
          cudaGetLastError();
          continue;
        }
        std::printf("%-8s %5s %5d %9.2f %9.2f %9.2f  (%.1f MB read + written: %.0f GB/s; ctas = sets)\n", mode, "-",
                    row.ctas, row.median, row.min, row.max, row.bytesMoved / 1e6, row.bytesMoved / (row.median * 1e3));
        std::fflush(stdout);
        rows.push_back(row);
      }
      continue;
    }
    for (int n : o.ranks)
      for (int c : o.ctas) {
        Row row;
        if (!timeOne(o, m, n, c, &row, &err)) {
          std::fprintf(stderr, "arfuse_proxy_floor: %s ranks=%d ctas=%d: %s\n", m.c_str(), n, c, err.c_str());
          return 1;
        }
        std::printf("%-8s %5d %5d %9.2f %9.2f %9.2f\n", m.c_str(), n, c, row.median, row.min, row.max);
        std::fflush(stdout);
        rows.push_back(row);
      }
  }
  if (!o.json.empty()) {
    std::string command = "arfuse_proxy_floor";
    for (int i = 1; i < argc; ++i) command += std::string(" ") + argv[i];
    int driver = 0, runtime = 0;
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    char date[32];
    const std::time_t now = std::time(nullptr);
    std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    std::ofstream f(o.json);
    f << "{\n  \"schema\": \"arfuse-proxy-floor/1\",\n  \"date\": \"" << date << "\",\n  \"command\": \"" << command
      << "\",\n  \"gpu\": \"" << prop.name << "\",\n  \"cuda_driver_api\": " << driver
      << ",\n  \"cuda_runtime\": " << runtime << ",\n  \"ranks_on\": \"" << (o.gpus ? "gpus" : "virtual (PROXY)")
      << "\",\n  \"threads\": " << o.threads << ",\n  \"calls_per_graph\": " << o.calls << ",\n  \"iters\": " << o.iters
      << ",\n  \"unit\": \"us per call, slowest rank, median of the replays\",\n  \"rows\": [\n";
    for (size_t i = 0; i < rows.size(); ++i) {
      f << "    {\"mode\": \"" << rows[i].mode << "\", \"ranks\": " << rows[i].ranks << ", \"ctas\": " << rows[i].ctas
        << ", \"median_us\": " << rows[i].median << ", \"min_us\": " << rows[i].min << ", \"max_us\": " << rows[i].max;
      if (rows[i].bytesMoved > 0)
        f << ", \"sets\": " << rows[i].ctas << ", \"bytes_moved\": " << static_cast<long long>(rows[i].bytesMoved)
          << ", \"gbps\": " << rows[i].bytesMoved / (rows[i].median * 1e3);
      f << "}" << (i + 1 < rows.size() ? "," : "") << "\n";
    }
    f << "  ]\n}\n";
    if (!f) {
      std::fprintf(stderr, "arfuse_proxy_floor: -J %s: cannot write\n", o.json.c_str());
      return 1;
    }
  }
  return 0;
}
