#include "bench_args.h"

#include <algorithm>
#include <cstdlib>

#include "algos/registry.h"
#include "args.h"
#include "nccl_sweep.h"

namespace arfuse {
namespace cli {
namespace {

const ModelPreset kModels[] = {
    {"kimi-k2", 7168, 61},
    {"deepseek-v3", 7168, 61},
    {"llama-3-70b", 8192, 80},
    {"qwen3-235b", 4096, 94},
};

}  // namespace

const char* algoName(int algo) { return algo == kAlgoNcclSymm ? "nccl-symm" : arfuseAlgoName(arfuseAlgo_t(algo)); }

namespace {

// --algo's words: the algorithms (args.h), nccl-symm, and all.
std::vector<std::string> benchAlgoNames() {
  std::vector<std::string> names = algoArgNames();
  names.push_back("nccl-symm");
  return names;
}

int benchAlgoOf(const std::string& name) {
  if (name == "nccl-symm") return kAlgoNcclSymm;
  int algo = 0;
  std::string ignored;
  parseAlgoArg("--algo", name, &algo, &ignored);
  return algo;
}

std::vector<std::string> epilogueNames() {
  std::vector<std::string> names;
  for (int k = 0; k < harness::kNumEpilogues; ++k) names.push_back(harness::epilogueName(k));
  return names;
}

}  // namespace

const ModelPreset* findModel(const std::string& name) {
  for (const ModelPreset& m : kModels)
    if (name == m.name) return &m;
  return nullptr;
}

const char* benchUsage() {
  static const std::string text = std::string(
      "usage: arfuse bench [options]   (each value as --name=VALUE or --name VALUE; -x VALUE or -xVALUE)\n"
      "  --op fused|allreduce|addrmsnorm  what to time (default fused: all-reduce + add + RMSNorm;\n"
      "                                   addrmsnorm: single GPU against a device copy of the same bytes)\n"
      "  --tokens T,T,...                 token counts (default 1,2,4,...,2048)\n"
      "  -b BYTES -e BYTES -f FACTOR      or a message-size sweep (bytes per rank; K/M/G suffixes)\n"
      "  --hidden H                       hidden size (default 7168)\n"
      "  -d, --dtype bf16|fp16|fp32       (default bf16; nccl-tests' bfloat16, half, float also work)\n"
      "  --ranks N                        ranks: real GPUs when there are N, else virtual ranks on GPU 0\n"
      "  --algo LIST                      comma list of path names (" +
      algoNamesText(", ", ", ") +
      ";\n"
      "                                   hierarchical: groups that span hosts, see --hosts),\n"
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
      "  --nccl-sweep-child FILE          internal: what each sweep child runs (baseline only, JSON to FILE)\n"
      "  Exit status: 0 every result checked out, 1 a result was wrong or a run failed, 2 usage error,\n"
      "  3 no GPU (or a build without CUDA) or too few for what was asked.\n");
  return text.c_str();
}

namespace {

// What the options set beyond BenchArgs: the -b/-e/-f byte sweep and -G, which finishBenchArgs
// turns into tokens and iters.
struct BenchParse {
  BenchArgs a;
  long long b = -1, e = -1, f = 2;
  int graphReplays = 0;
  bool itersGiven = false;
};

// A whole-number option of lo..hi.
void intOption(Options* o, const char* name, long long lo, long long hi, int* out) {
  o->value({name}, [lo, hi, out](const std::string& k, const std::string& v, std::string* error) {
    return parseIntArg(k, v, lo, hi, out, error);
  });
}

// --op, --tokens, -b/-e/-f, --hidden, -d, --model, --layers: what one call computes, and its sizes.
void addShapeOptions(Options* o, BenchParse* p) {
  BenchArgs& a = p->a;
  o->value({"--op"}, [&a](const std::string& k, const std::string& v, std::string* error) {
    static const std::vector<std::string> kOps = {"fused", "allreduce", "addrmsnorm"};
    int op = 0;
    if (!parseChoiceArg(k, v, kOps, &op, error)) return false;
    a.op = kOps[op];
    return true;
  });
  o->value({"--tokens"}, [&a](const std::string& k, const std::string& v, std::string* error) {
    return parseIntListArg(k, v, 1, 1 << 20, &a.tokens, error);
  });
  o->value({"-b", "-e"}, [p](const std::string& k, const std::string& v, std::string* error) {
    return parseBytesArg(k, v, 1, 1LL << 40, k == "-b" ? &p->b : &p->e, error);
  });
  o->value({"-f"}, [p](const std::string& k, const std::string& v, std::string* error) {
    int f = 0;
    if (!parseIntArg(k, v, 2, 1 << 20, &f, error)) return false;
    p->f = f;
    return true;
  });
  o->value({"--hidden"}, [&a](const std::string& k, const std::string& v, std::string* error) {
    return parseHiddenArg(k, v, &a.hidden, error);
  });
  o->value({"--dtype", "-d"}, [&a](const std::string& k, const std::string& v, std::string* error) {
    return parseDtypeArg(k, v, &a.dtype, error);
  });
  o->value({"--model"}, [&a](const std::string& k, const std::string& v, std::string* error) {
    std::vector<std::string> names;
    for (const ModelPreset& m : kModels) names.push_back(m.name);
    int i = 0;
    if (!parseChoiceArg(k, v, names, &i, error)) return false;
    a.model = kModels[i].name;
    a.hidden = kModels[i].hidden;
    a.layers = kModels[i].layers;
    return true;
  });
  intOption(o, "--layers", 1, 1000, &a.layers);
}

// --ranks, --virtual, --algo, --epilogue, --verify-pass: which paths run, on which ranks.
void addPathOptions(Options* o, BenchParse* p) {
  BenchArgs& a = p->a;
  intOption(o, "--ranks", 1, ARFUSE_MAX_RANKS, &a.ranks);
  o->flag({"--virtual"}, [&a] { a.virtualRanks = true; });
  o->value({"--algo"}, [&a](const std::string& k, const std::string& v, std::string* error) {
    a.algos.clear();
    if (v == "all") return true;
    std::vector<int> picked;
    const std::vector<std::string> names = benchAlgoNames();
    if (!parseChoiceListArg(k, v, names, &picked, error, "all, or ")) return false;
    for (int i : picked) a.algos.push_back(benchAlgoOf(names[i]));
    return true;
  });
  o->value({"--epilogue"}, [&a](const std::string& k, const std::string& v, std::string* error) {
    std::vector<int> picked;
    if (!parseChoiceListArg(k, v, epilogueNames(), &picked, error)) return false;
    a.epilogues.clear();
    for (int i : picked) a.epilogues.push_back(i);  // a position in epilogueNames() is the epilogue's kind
    return true;
  });
  o->flag({"--verify-pass"}, [&a] { a.verifyPass = true; });
}

// -n, -w, --calls, -G, -c, -J, --machine: how it is timed and checked, and where results go.
void addTimingOptions(Options* o, BenchParse* p) {
  BenchArgs& a = p->a;
  o->value({"-n", "-w", "--calls"}, [p](const std::string& k, const std::string& v, std::string* error) {
    int x = 0;
    if (!parseIntArg(k, v, k == "-w" ? 0 : 1, 1000000, &x, error)) return false;
    (k == "-n" ? p->a.iters : k == "-w" ? p->a.warmup : p->a.callsPerGraph) = x;
    if (k == "-n") p->itersGiven = true;
    return true;
  });
  o->value({"-G"}, [p](const std::string& k, const std::string& v, std::string* error) {
    if (v == "0") {
      *error =
          "-G 0: only CUDA-graph timing is implemented (eager timing of microsecond kernels measures the "
          "host); give -G N (N >= 1 replays) or leave -G out";
      return false;
    }
    return parseIntArg(k, v, 1, 1000000, &p->graphReplays, error);
  });
  o->value({"-c"}, [&a](const std::string& k, const std::string& v, std::string* error) {
    int check = 0;
    if (!parseChoiceArg(k, v, {"0", "1"}, &check, error)) return false;
    a.check = check == 1;
    return true;
  });
  o->text({"-J"}, &a.jsonPath);
  o->value({"--machine"}, [&a](const std::string& k, const std::string& v, std::string* error) {
    if (v.empty()) return *error = wantsError(k, "a label, e.g. --machine=h200x4", v), false;
    a.machine = v;
    return true;
  });
}

// --procs, --procs-timeout, --proc-rank, --proc-dir, --hosts, --nccl-sweep*: runs over other processes.
void addProcessOptions(Options* o, BenchParse* p) {
  BenchArgs& a = p->a;
  intOption(o, "--procs", 2, ARFUSE_MAX_RANKS, &a.procs);
  intOption(o, "--proc-rank", 0, ARFUSE_MAX_RANKS - 1, &a.procRank);
  intOption(o, "--procs-timeout", 1, 7200, &a.procsTimeoutS);
  o->text({"--proc-dir"}, &a.procDir);
  intOption(o, "--hosts", 2, ARFUSE_MAX_RANKS, &a.hosts);
  // --nccl-sweep[=SPEC] or --nccl-sweep SPEC: a SPEC never starts with '-'.
  o->optionalValue("--nccl-sweep", [&a](const std::string* spec, std::string* error) {
    a.ncclSweep = true;
    if (spec) a.ncclSweepSpec = *spec;
    std::vector<NcclSetting> settings;
    return expandNcclSweep(a.ncclSweepSpec, &settings, error);
  });
  intOption(o, "--nccl-sweep-timeout", 1, 3600, &a.ncclSweepTimeoutS);
  o->text({"--nccl-sweep-child"}, &a.ncclSweepChild);
}

// -G against -n: both set the timed replays.
bool resolveReplays(BenchParse* p, std::string* error) {
  BenchArgs& a = p->a;
  if (p->graphReplays) {
    if (p->itersGiven && p->graphReplays != a.iters) {
      *error = "-G " + std::to_string(p->graphReplays) + " and -n " + std::to_string(a.iters) +
               " disagree: both set the timed CUDA-graph replays; give one";
      return false;
    }
    a.iters = p->graphReplays;
  }
  return true;
}

// --hosts and --procs, and what --procs rules out; a --procs run has one rank per process.
bool checkProcs(BenchArgs* out, std::string* error) {
  BenchArgs& a = *out;
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
  return true;
}

// What --verify-pass needs: a layer count, one arfuse path against the NCCL baseline, the fused call.
bool checkVerifyPass(const BenchArgs& a, std::string* error) {
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
  return true;
}

// What an --epilogue table rules out, and NVFP4's blocks of 16.
bool checkEpilogues(const BenchArgs& a, std::string* error) {
  if (!a.epilogueTable()) return true;
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
      why = std::string(harness::epilogueName(e)) + " needs --hidden a multiple of 16 (NVFP4 blocks of 16); --hidden " +
            std::to_string(a.hidden);
  if (!why.empty()) {
    *error = "--epilogue: " + why;
    return false;
  }
  return true;
}

// What an NCCL sweep, and a sweep's child, need: the baseline on real ranks, two or more.
bool checkNcclSweep(const BenchArgs& a, std::string* error) {
  if (a.ncclSweep) {
    std::string why;
    if (a.op == "addrmsnorm")
      why = "--op addrmsnorm has no NCCL baseline; use --op fused or allreduce";
    else if (a.virtualRanks)
      why = "NCCL needs one GPU per rank; drop --virtual";
    else if (a.ranks == 1)
      why = "NCCL needs at least 2 ranks; use --ranks=2 or more";
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
  return true;
}

// -b/-e/-f: the token counts of bytes per rank from -b to -e, times -f (one row per distinct count).
bool byteSweepTokens(BenchParse* p, std::string* error) {
  BenchArgs& a = p->a;
  const long long b = p->b, e = p->e, f = p->f;
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

// What no single option decides, in this order (--procs sets the ranks the sweep checks read).
bool finishBenchArgs(BenchParse* p, std::string* error) {
  return resolveReplays(p, error) && checkProcs(&p->a, error) && checkVerifyPass(p->a, error) &&
         checkEpilogues(p->a, error) && checkNcclSweep(p->a, error) && byteSweepTokens(p, error);
}

}  // namespace

bool parseBenchArgs(const std::vector<std::string>& args, BenchArgs* out, std::string* error) {
  BenchParse p;
  p.a.commandLine = "arfuse bench";
  for (const std::string& s : args) p.a.commandLine += " " + s;
  p.a.rawArgs = args;
  Options o;
  o.flag({"-h", "--help"}, [&p] { p.a.help = true; });
  addShapeOptions(&o, &p);
  addPathOptions(&o, &p);
  addTimingOptions(&o, &p);
  addProcessOptions(&o, &p);
  if (!o.parse(args, error) || !finishBenchArgs(&p, error)) return false;
  *out = p.a;
  return true;
}

}  // namespace cli
}  // namespace arfuse
