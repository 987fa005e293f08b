#include "bench_args.h"

#include <algorithm>
#include <cstdlib>

#include "nccl_sweep.h"

namespace arfuse {
namespace cli {
namespace {

bool toInt(const std::string& s, long long lo, long long hi, long long* v) {
  if (s.empty()) return false;
  char* end = nullptr;
  long long x = std::strtoll(s.c_str(), &end, 10);
  long long mult = 1;
  if (*end == 'K' || *end == 'k')
    mult = 1024, ++end;
  else if (*end == 'M' || *end == 'm')
    mult = 1024 * 1024, ++end;
  else if (*end == 'G' || *end == 'g')
    mult = 1024LL * 1024 * 1024, ++end;
  if (*end != '\0') return false;
  x *= mult;
  if (x < lo || x > hi) return false;
  *v = x;
  return true;
}

const ModelPreset kModels[] = {
    {"kimi-k2", 7168, 61},
    {"deepseek-v3", 7168, 61},
    {"llama-3-70b", 8192, 80},
    {"qwen3-235b", 4096, 94},
};

}  // namespace

const char* algoName(int algo) { return algo == kAlgoNcclSymm ? "nccl-symm" : arfuseAlgoName(arfuseAlgo_t(algo)); }

namespace {

// nccl-tests' names (-d bfloat16 / half / float) and arfuse's (bf16 / fp16 / fp32).
bool parseDtype(const std::string& v, arfuseDataType_t* d) {
  if (v == "bf16" || v == "bfloat16") return *d = arfuseBfloat16, true;
  if (v == "fp16" || v == "half" || v == "float16") return *d = arfuseFloat16, true;
  if (v == "fp32" || v == "float" || v == "float32") return *d = arfuseFloat32, true;
  return false;
}

bool parseAlgo(const std::string& v, int* algo) {
  if (v == "nccl-symm") return *algo = kAlgoNcclSymm, true;
  for (int k = 0; k < arfuseNumAlgos; ++k)
    if (v == arfuseAlgoName(arfuseAlgo_t(k))) return *algo = k, true;
  return false;
}

// The items of a comma list, empty ones included ("a,,b" -> a, "", b).
std::vector<std::string> commaItems(const std::string& v) {
  std::vector<std::string> items;
  size_t p = 0;
  while (true) {
    const size_t c = v.find(',', p);
    items.push_back(v.substr(p, c == std::string::npos ? std::string::npos : c - p));
    if (c == std::string::npos) return items;
    p = c + 1;
  }
}

}  // namespace

const ModelPreset* findModel(const std::string& name) {
  for (const ModelPreset& m : kModels)
    if (name == m.name) return &m;
  return nullptr;
}

const char* benchUsage() {
  return "usage: arfuse bench [options]\n"
         "  --op fused|allreduce|addrmsnorm  what to time (default fused: all-reduce + add + RMSNorm;\n"
         "                                   addrmsnorm: single GPU against a device copy of the same bytes)\n"
         "  --tokens T,T,...                 token counts (default 1,2,4,...,2048)\n"
         "  -b BYTES -e BYTES -f FACTOR      or a message-size sweep (bytes per rank; K/M/G suffixes)\n"
         "  --hidden H                       hidden size (default 7168)\n"
         "  -d, --dtype bf16|fp16|fp32       (default bf16; nccl-tests' bfloat16, half, float also work)\n"
         "  --ranks N                        ranks: real GPUs when there are N, else virtual ranks on GPU 0\n"
         "  --algo LIST                      comma list of auto, lowlatency, oneshot, twoshot, hoststaged, nccl,\n"
         "                                   hierarchical (groups that span hosts: see --hosts),\n"
         "                                   nccl-symm, or all (the default: every one this machine can run).\n"
         "                                   The baselines, each NCCL all-reduce + arfuse's add+RMSNorm kernel:\n"
         "                                     nccl       cudaMalloc buffers (NCCL's classic kernels)\n"
         "                                     nccl-symm  ncclMemAlloc buffers registered as a symmetric window\n"
         "                                                (NCCL 2.27+ symmetric kernels; the JSON names the\n"
         "                                                kernels that ran, read from the captured graph)\n"
         "                                   Ratios (vs_best) are against the best baseline at each size\n"
         "  --procs N                        one process per rank, as serving engines run (arfuseCommInitRank,\n"
         "                                   ncclCommInitRank); with fewer than N GPUs every process shares\n"
         "                                   GPU 0 (arfuse only: NCCL refuses two ranks on one GPU; the\n"
         "                                   times are then a PROXY, not performance)\n"
         "  --procs-timeout S                bound on the whole --procs run, seconds (default 300)\n"
         "  --hosts H                        with --procs N: H simulated hosts of N/H ranks (TEST ONLY:\n"
         "                                   ARFUSE_TEST_HOST_ID; NCCL over loopback sockets with a host id\n"
         "                                   per process): times hierarchical against nccl across hosts;\n"
         "                                   default --algo auto,hierarchical,nccl (docs/multihost.md)\n"
         "  --machine LABEL                  name of this machine in the JSON (scripts/perf_table.py puts\n"
         "                                   the runs of one machine, and bench/peers.py's, in one table)\n"
         "  --epilogue LIST                  comma list of epilogues to time (--op fused and addrmsnorm;\n"
         "                                   default none):\n"
         "                                     none            arfuseAllReduceAddRmsNorm / arfuseAddRmsNorm (today's "
         "table)\n"
         "                                     plain           the same work through arfuseAllReduceEpilogue\n"
         "                                     first           first layer: no residual_in\n"
         "                                     plusone         (1 + w) weights (Gemma, Qwen3.5)\n"
         "                                     fp8             FP8 E4M3, static scale read from a device float\n"
         "                                     fp8-token       FP8 E4M3, a float scale per token\n"
         "                                     nvfp4           NVFP4, linear E4M3 block scales\n"
         "                                     nvfp4-swizzled  NVFP4, 128x4 swizzled block scales\n"
         "                                   The quantised ones write residual_out + quant_out + scales and\n"
         "                                   NOT norm_out (serving: the next GEMM reads only the quantised\n"
         "                                   tensor). addrmsnorm: bytes_moved = what the call reads and\n"
         "                                   writes, and the copy moves exactly those bytes. fused: the nccl\n"
         "                                   row stays the unfused baseline (no epilogue, no quantisation)\n"
         "  -n ITERS -w WARMUP               timed and warm-up graph replays (default 50, 10)\n"
         "  --calls C                        calls captured per graph (default 20)\n"
         "  -c 0|1                           check every result against fp64 first (default 1)\n"
         "  -G N                             CUDA-graph replays timed, N >= 1 (nccl-tests' -G; here the same as\n"
         "                                   -n N: every figure is taken from graph replays, since eager timing\n"
         "                                   of microsecond kernels measures the host, so -G 0 is refused)\n"
         "  -J FILE                          write results as JSON\n"
         "  --virtual                        put every rank on GPU 0: times are a PROXY for the kernels' own\n"
         "                                   cost (labelled so in the table and the JSON), not performance\n"
         "  --model kimi-k2|deepseek-v3|llama-3-70b|qwen3-235b   hidden size and layer count presets\n"
         "  --layers L                       layer count (overrides the preset)\n"
         "  --verify-pass                    time one speculative-decoding verify pass: 2 x layers fused\n"
         "                                   calls captured in one CUDA graph, arfuse (auto) against the\n"
         "                                   baseline, in ms per pass, for each token count\n"
         "  --nccl-sweep[=SPEC]              then re-run the NCCL baseline under other NCCL settings, each in\n"
         "                                   a fresh process, to show what NCCL tuning alone buys (needs one\n"
         "                                   GPU per rank, >= 2). SPEC: comma-separated axes (default\n"
         "                                   proto,algo,channels):\n"
         "                                     proto[:LL/LL128/Simple]   NCCL_PROTO\n"
         "                                     algo[:Ring/Tree]          NCCL_ALGO (also NVLS, PAT, ...)\n"
         "                                     channels[:1/2/4/8/16]     NCCL_MIN_NCHANNELS = NCCL_MAX_NCHANNELS\n"
         "                                     NCCL_NAME:V1/V2           any NCCL variable, values required\n"
         "                                   axes joined by '*' are crossed: proto*algo = every pair.\n"
         "                                   Children inherit your NCCL_* environment; only the swept\n"
         "                                   variables change. `--algo auto --nccl-sweep` is the quick form\n"
         "  --nccl-sweep-timeout S           bound on each sweep child, seconds (default 120)\n"
         "  --nccl-sweep-child FILE          internal: what each sweep child runs (baseline only, JSON to FILE)\n";
}

namespace {

// What no single flag decides: -G against -n, the flags --procs, --verify-pass, --epilogue and
// --nccl-sweep rule out or need, and the token list of a -b/-e/-f byte sweep.
bool finishBenchArgs(long long b, long long e, long long f, int graphReplays, bool itersGiven, BenchArgs* out,
                     std::string* error) {
  BenchArgs& a = *out;
  if (graphReplays) {
    if (itersGiven && graphReplays != a.iters) {
      *error = "-G " + std::to_string(graphReplays) + " and -n " + std::to_string(a.iters) +
               " disagree: both set the timed CUDA-graph replays; give one";
      return false;
    }
    a.iters = graphReplays;
  }
  if (a.hosts && !a.procs) {
    *error = "--hosts " + std::to_string(a.hosts) + " needs --procs N (one process per rank on the simulated hosts)";
    return false;
  }
  if (a.procs || a.procRank >= 0) {
    std::string why;
    if (a.procRank >= 0 && (!a.procs || a.procDir.empty()))
      why = "--proc-rank (internal) needs --procs and --proc-dir";
    else if (a.procRank >= a.procs)
      why = "--proc-rank " + std::to_string(a.procRank) + " must be below --procs";
    else if (a.op == "addrmsnorm")
      why = "--op addrmsnorm is one GPU, one process; drop --procs";
    else if (a.ranks && a.ranks != a.procs)
      why = "--ranks " + std::to_string(a.ranks) + " and --procs " + std::to_string(a.procs) +
            " disagree (one process per rank)";
    else if (a.verifyPass)
      why = "--verify-pass runs in process only for now; drop --procs";
    else if (a.epilogueTable())
      why = "--epilogue runs in process only for now; drop --procs";
    else if (a.ncclSweep || !a.ncclSweepChild.empty())
      why = "--nccl-sweep runs in process; drop --procs";
    else if (a.hosts && (a.procs % a.hosts != 0 || a.hosts > a.procs))
      why = "--hosts " + std::to_string(a.hosts) + " must divide --procs " + std::to_string(a.procs) +
            " (the same number of ranks on every host)";
    if (!why.empty()) {
      *error = "--procs: " + why;
      return false;
    }
    a.ranks = a.procs;
  }
  if (a.verifyPass && a.layers == 0) {
    *error = "--verify-pass needs a layer count: give --model or --layers";
    return false;
  }
  if (a.verifyPass && std::find(a.algos.begin(), a.algos.end(), kAlgoNcclSymm) != a.algos.end()) {
    *error = "--verify-pass compares one arfuse path with arfuse's NCCL baseline; drop nccl-symm from --algo";
    return false;
  }
  if (a.verifyPass && a.algos.size() > 1) {
    *error = "--verify-pass times one arfuse path (auto, or the one --algo names) against the baseline; give one";
    return false;
  }
  if (a.verifyPass && a.op != "fused") {
    *error = "--verify-pass times the fused operation; drop --op " + a.op;
    return false;
  }
  if (a.epilogueTable()) {
    std::string why;
    if (a.op == "allreduce")
      why = "applies to --op fused and addrmsnorm (all-reduce has no epilogue)";
    else if (a.verifyPass)
      why = "--verify-pass times arfuseAllReduceAddRmsNorm only; drop --epilogue";
    else if (a.ncclSweep)
      why = "--nccl-sweep re-runs the baseline, which has no epilogue; drop --epilogue";
    else if (!a.ncclSweepChild.empty())
      why = "a sweep child times the baseline only";
    for (int e : a.epilogues)
      if (why.empty() && harness::epilogueForm(e).nvfp4() && a.hidden % 16)
        why = std::string(harness::epilogueName(e)) +
              " needs --hidden a multiple of 16 (NVFP4 blocks of 16); --hidden " + std::to_string(a.hidden);
    if (!why.empty()) {
      *error = "--epilogue: " + why;
      return false;
    }
  }
  if (a.ncclSweep) {
    std::string why;
    if (a.op == "addrmsnorm")
      why = "--op addrmsnorm has no NCCL baseline; use --op fused or allreduce";
    else if (a.virtualRanks)
      why = "NCCL needs one GPU per rank; drop --virtual";
    else if (a.ranks == 1)
      why = "NCCL needs at least 2 ranks; use --ranks 2 or more";
    else if (!a.ncclSweepChild.empty())
      why = "--nccl-sweep-child is a sweep's child and cannot sweep itself";
    if (!why.empty()) {
      *error = "--nccl-sweep: " + why;
      return false;
    }
  }
  if (!a.ncclSweepChild.empty() && (a.ranks < 2 || a.op == "addrmsnorm" || a.virtualRanks)) {
    *error = "--nccl-sweep-child (internal) needs --ranks >= 2, real ranks and --op fused or allreduce";
    return false;
  }
  if ((b >= 0) != (e >= 0)) {
    *error = "-b and -e go together (bytes per rank from -b to -e, times -f)";
    return false;
  }
  if (b >= 0) {
    if (e < b) {
      *error = "-e must be >= -b";
      return false;
    }
    const long long row = static_cast<long long>(a.hidden) * (a.dtype == arfuseFloat32 ? 4 : 2);
    a.tokens.clear();
    for (long long s = b; s <= e; s *= f) {
      long long t = s / row;
      if (t < 1) t = 1;
      if (a.tokens.empty() || a.tokens.back() != t) a.tokens.push_back(static_cast<int>(t));
    }
  }
  return true;
}

}  // namespace

bool parseBenchArgs(const std::vector<std::string>& args, BenchArgs* out, std::string* error) {
  BenchArgs a;
  a.commandLine = "arfuse bench";
  for (const std::string& s : args) a.commandLine += " " + s;
  a.rawArgs = args;
  long long b = -1, e = -1, f = 2;
  int graphReplays = 0;
  bool itersGiven = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& k = args[i];
    auto value = [&](std::string* v) {
      if (i + 1 >= args.size()) {
        *error = k + " needs a value";
        return false;
      }
      *v = args[++i];
      return true;
    };
    std::string v;
    long long x = 0;
    if (k == "-h" || k == "--help") {
      a.help = true;
    } else if (k == "--op") {
      if (!value(&v)) return false;
      if (v != "fused" && v != "allreduce" && v != "addrmsnorm") {
        *error = "--op " + v + ": use fused, allreduce or addrmsnorm";
        return false;
      }
      a.op = v;
    } else if (k == "--tokens") {
      if (!value(&v)) return false;
      a.tokens.clear();
      for (const std::string& item : commaItems(v)) {
        if (!toInt(item, 1, 1 << 20, &x)) {
          *error = "--tokens: '" + item + "' is not a token count in 1..1048576";
          return false;
        }
        a.tokens.push_back(static_cast<int>(x));
      }
    } else if (k == "-b" || k == "-e" || k == "-f") {
      if (!value(&v)) return false;
      if (!toInt(v, k == "-f" ? 2 : 1, 1LL << 40, &x)) {
        *error = k + " " + v + (k == "-f" ? ": factor must be an integer >= 2" : ": not a byte count");
        return false;
      }
      (k == "-b" ? b : k == "-e" ? e : f) = x;
    } else if (k == "--hidden") {
      if (!value(&v)) return false;
      if (!toInt(v, 8, 1 << 20, &x) || x % 8) {
        *error = "--hidden " + v + ": must be a positive multiple of 8";
        return false;
      }
      a.hidden = static_cast<int>(x);
    } else if (k == "--dtype" || k == "-d") {
      if (!value(&v)) return false;
      if (!parseDtype(v, &a.dtype)) {
        *error = k + " " + v + ": use bf16, fp16 or fp32 (or nccl-tests' bfloat16, half, float)";
        return false;
      }
    } else if (k == "--ranks") {
      if (!value(&v)) return false;
      if (!toInt(v, 1, ARFUSE_MAX_RANKS, &x)) {
        *error = "--ranks " + v + ": must be 1.." + std::to_string(ARFUSE_MAX_RANKS);
        return false;
      }
      a.ranks = static_cast<int>(x);
    } else if (k == "--algo") {
      if (!value(&v)) return false;
      a.algos.clear();
      for (const std::string& item : v == "all" ? std::vector<std::string>{} : commaItems(v)) {
        int algo = 0;
        if (!parseAlgo(item, &algo)) {
          *error = "--algo " + item +
                   ": use a comma list of auto, lowlatency, oneshot, twoshot, hoststaged, nccl, "
                   "hierarchical, nccl-symm, or all";
          return false;
        }
        if (std::find(a.algos.begin(), a.algos.end(), algo) != a.algos.end()) {
          *error = "--algo: '" + item + "' is given twice";
          return false;
        }
        a.algos.push_back(algo);
      }
    } else if (k == "--epilogue") {
      if (!value(&v)) return false;
      a.epilogues.clear();
      for (const std::string& item : commaItems(v)) {
        int kind = 0;
        if (!harness::parseEpilogue(item, &kind)) {
          *error = "--epilogue: '" + item + "' is not an epilogue; use a comma list of " + harness::epilogueNameList();
          return false;
        }
        for (int e : a.epilogues)
          if (e == kind) {
            *error = "--epilogue: '" + item + "' is given twice";
            return false;
          }
        a.epilogues.push_back(kind);
      }
    } else if (k == "-n" || k == "-w" || k == "--calls") {
      if (!value(&v)) return false;
      if (!toInt(v, k == "-w" ? 0 : 1, 1000000, &x)) {
        *error = k + " " + v + ": must be an integer" + (k == "-w" ? " >= 0" : " >= 1");
        return false;
      }
      (k == "-n" ? a.iters : k == "-w" ? a.warmup : a.callsPerGraph) = static_cast<int>(x);
      if (k == "-n") itersGiven = true;
    } else if (k == "-c") {
      if (!value(&v)) return false;
      if (v != "0" && v != "1") {
        *error = "-c " + v + ": use 0 or 1";
        return false;
      }
      a.check = v == "1";
    } else if (k == "-G") {
      if (!value(&v)) return false;
      if (v == "0") {
        *error =
            "-G 0: only CUDA-graph timing is implemented (eager timing of microsecond kernels measures the "
            "host); give -G N (N >= 1 replays) or leave -G out";
        return false;
      }
      if (!toInt(v, 1, 1000000, &x)) {
        *error = "-G " + v + ": the number of timed CUDA-graph replays, an integer >= 1";
        return false;
      }
      graphReplays = static_cast<int>(x);
    } else if (k == "--virtual") {
      a.virtualRanks = true;
    } else if (k == "--verify-pass") {
      a.verifyPass = true;
    } else if (k == "--model") {
      if (!value(&v)) return false;
      const ModelPreset* m = findModel(v);
      if (!m) {
        *error = "--model " + v + ": use kimi-k2, deepseek-v3, llama-3-70b or qwen3-235b";
        return false;
      }
      a.model = m->name;
      a.hidden = m->hidden;
      a.layers = m->layers;
    } else if (k == "--layers") {
      if (!value(&v)) return false;
      if (!toInt(v, 1, 1000, &x)) {
        *error = "--layers " + v + ": must be 1..1000";
        return false;
      }
      a.layers = static_cast<int>(x);
    } else if (k == "--nccl-sweep" || k.compare(0, 13, "--nccl-sweep=") == 0) {
      a.ncclSweep = true;
      if (k.size() > 12) {
        a.ncclSweepSpec = k.substr(13);
      } else if (i + 1 < args.size() && !args[i + 1].empty() && args[i + 1][0] != '-') {
        a.ncclSweepSpec = args[++i];  // --nccl-sweep SPEC: a SPEC never starts with '-'
      }
      std::vector<NcclSetting> settings;
      if (!expandNcclSweep(a.ncclSweepSpec, &settings, error)) return false;
    } else if (k == "--nccl-sweep-timeout") {
      if (!value(&v)) return false;
      if (!toInt(v, 1, 3600, &x)) {
        *error = "--nccl-sweep-timeout " + v + ": seconds, 1..3600";
        return false;
      }
      a.ncclSweepTimeoutS = static_cast<int>(x);
    } else if (k == "--nccl-sweep-child") {
      if (!value(&a.ncclSweepChild)) return false;
    } else if (k == "--procs" || k == "--procs-timeout" || k == "--proc-rank") {
      if (!value(&v)) return false;
      const long long lo = k == "--procs" ? 2 : k == "--proc-rank" ? 0 : 1;
      const long long hi = k == "--procs-timeout" ? 7200 : ARFUSE_MAX_RANKS - (k == "--proc-rank" ? 1 : 0);
      if (!toInt(v, lo, hi, &x)) {
        *error = k + " " + v + ": must be " + std::to_string(lo) + ".." + std::to_string(hi) +
                 (k == "--procs-timeout" ? " seconds" : "");
        return false;
      }
      (k == "--procs" ? a.procs : k == "--proc-rank" ? a.procRank : a.procsTimeoutS) = static_cast<int>(x);
    } else if (k == "--proc-dir") {
      if (!value(&a.procDir)) return false;
    } else if (k == "--hosts") {
      if (!value(&v)) return false;
      if (!toInt(v, 2, ARFUSE_MAX_RANKS, &x)) {
        *error = "--hosts " + v + ": must be 2.." + std::to_string(ARFUSE_MAX_RANKS);
        return false;
      }
      a.hosts = static_cast<int>(x);
    } else if (k == "--machine") {
      if (!value(&a.machine)) return false;
      if (a.machine.empty()) {
        *error = "--machine needs a label, e.g. --machine h200x4";
        return false;
      }
    } else if (k == "-J") {
      if (!value(&v)) return false;
      a.jsonPath = v;
    } else {
      *error = "unknown argument '" + k + "'";
      return false;
    }
  }
  if (!finishBenchArgs(b, e, f, graphReplays, itersGiven, &a, error)) return false;
  *out = a;
  return true;
}

}  // namespace cli
}  // namespace arfuse
