// The `arfuse` command-line tool: one binary, one subcommand per job.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <nccl.h>

#include "arfuse/arfuse.h"
#include "cli.h"
#include "common/params.h"
#include "harness/harness.h"
#include "plan/from_topology.h"
#include "plan/plan.h"
#include "triage.h"

#include <iostream>

namespace arfuse {
namespace cli {
namespace {

void usage(FILE* f) {
  std::fprintf(f,
               "usage: arfuse <command> [args]\n"
               "commands:\n"
               "  selftest   check every path on this machine against an fp64 reference (needs a GPU)\n"
               "  bench      time arfuse against the unfused baseline; JSON output (needs a GPU)\n"
               "  doctor     environment, topology, self-test, plan per size and checks with fixes; --calibrate\n"
               "  plan       explain which algorithm a call would use and why (no GPU needed)\n"
               "  triage     find the root cause of a crashed or hung multi-GPU server from its logs\n"
               "  env        list every ARFUSE_* variable, its value and where it came from\n"
               "  version    library build, CUDA, NCCL and visible devices\n"
               "Run `arfuse <command> --help` for a command's options.\n");
}

int version() {
  std::printf("%s\n", arfuseGetBuildInfo());
  int nccl = 0;
  if (ncclGetVersion(&nccl) == ncclSuccess)  // the library loaded at run time, which may differ from the header
    std::printf("nccl at run time: %d.%d.%d\n", nccl / 10000, (nccl / 100) % 100, nccl % 100);
  const int n = harness::deviceCount();
  if (n == 0) std::printf("devices: none visible\n");
  for (int d = 0; d < n; ++d) std::printf("device %d: %s\n", d, harness::deviceName(d).c_str());
  return kExitOk;
}

int env(const std::vector<std::string>& args) {
  if (!args.empty() && args[0] == "--markdown") {
    std::printf("%s", paramsMarkdown().c_str());
    return kExitOk;
  }
  if (!args.empty()) {
    std::fprintf(stderr, "arfuse env: unknown argument '%s' (use --markdown or nothing)\n", args[0].c_str());
    return kExitUsage;
  }
  for (const ParamValue& v : paramValues()) {
    std::printf("%-26s %-10s (%s)%s%s\n", v.spec->name, v.value.c_str(), v.fromEnvironment ? "environment" : "default",
                v.error.empty() ? "" : "  WARNING: ", v.error.c_str());
  }
  return kExitOk;
}

bool parseDtype(const std::string& s, arfuseDataType_t* d) {
  for (int i = 0; i < arfuseNumDataTypes; ++i)
    if (s == arfuseDataTypeName(arfuseDataType_t(i))) return *d = arfuseDataType_t(i), true;
  return false;
}

int plan(const std::vector<std::string>& args) {
  Fabric f;
  f.nranks = 8;
  f.maxBlocks = 64;
  f.smCount = 132;
  f.nccl = true;
  f.lowLatencyMaxBytes = 64 * 1024;
  PlanRequest req;
  req.hidden = 7168;
  Limits limits;
  limits.maxTokens = 1 << 20;
  limits.maxHidden = 1 << 20;
  PlanPolicy policy;
  policy.oneShotMaxBytes = paramOneShotMaxBytes();
  policy.hostOneShotMaxBytes = paramHostOneShotMaxBytes();
  policy.hostStagedMaxBytes = paramHostStagedMaxBytes();
  std::vector<int> tokens = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048};
  std::string topologyPath;
  std::vector<int> devices;
  auto parseList = [](const std::string& list, std::vector<int>* out) {
    out->clear();
    for (size_t p = 0; p <= list.size();) {
      size_t c = list.find(',', p);
      out->push_back(std::atoi(list.substr(p, c == std::string::npos ? std::string::npos : c - p).c_str()));
      if (c == std::string::npos) break;
      p = c + 1;
    }
  };
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto next = [&](const char* what) -> const char* {
      if (i + 1 >= args.size()) {
        std::fprintf(stderr, "arfuse plan: %s needs a value\n", what);
        std::exit(kExitUsage);
      }
      return args[++i].c_str();
    };
    if (a == "--ranks") {
      f.nranks = std::atoi(next("--ranks"));
    } else if (a == "--hidden") {
      req.hidden = std::atoi(next("--hidden"));
    } else if (a == "--tokens") {
      parseList(next("--tokens"), &tokens);
    } else if (a == "--topology") {
      topologyPath = next("--topology");
    } else if (a == "--devices") {
      parseList(next("--devices"), &devices);
    } else if (a == "--dtype") {
      if (!parseDtype(next("--dtype"), &req.dtype)) {
        std::fprintf(stderr, "arfuse plan: --dtype must be bf16, fp16 or fp32\n");
        return kExitUsage;
      }
    } else if (a == "--no-p2p") {
      f.p2p = false;
      f.p2pDetail = "--no-p2p given";
    } else if (a == "--virtual") {
      f.virtualRanks = true;
      f.nccl = false;
      f.ncclDetail = "virtual ranks";
    } else if (a == "--algo") {
      const int al = parseAlgoName(next("--algo"));
      if (al < 0) {
        std::fprintf(stderr, "arfuse plan: --algo must be auto, lowlatency, oneshot, twoshot or nccl\n");
        return kExitUsage;
      }
      policy.forcedAlgo = al;
      policy.forcedBy = "--algo";
    } else if (a == "--allreduce") {
      req.op = arfuseOpAllReduce;
    } else if (a == "-h" || a == "--help") {
      std::printf(
          "usage: arfuse plan [--ranks N] [--hidden H] [--tokens T,T,...] [--dtype bf16|fp16|fp32]\n"
          "                   [--no-p2p] [--virtual] [--algo A] [--allreduce]\n"
          "                   [--topology FILE.json [--devices 0,1,...]]\n"
          "  Prints the algorithm, launch geometry and reason the library's plan gives for each token count on a\n"
          "  described machine (default: 8 ranks with P2P and NCCL, 132 SMs, 64 blocks, 64 KiB low-latency\n"
          "  limit). No GPU needed. --topology reads a machine description (docs/topology.md; recorded\n"
          "  examples in tests/topo/fixtures) and plans for ranks on --devices (default: every GPU in it).\n");
      return kExitOk;
    } else {
      std::fprintf(stderr, "arfuse plan: unknown argument '%s' (see arfuse plan --help)\n", a.c_str());
      return kExitUsage;
    }
  }
  if (!topologyPath.empty()) {
    topo::Topology t;
    std::string err;
    if (!topo::readJsonFile(topologyPath, &t, &err)) {
      std::fprintf(stderr, "arfuse plan: --topology: %s\n", err.c_str());
      return kExitUsage;
    }
    if (devices.empty())
      for (int d = 0; d < t.size(); ++d) devices.push_back(d);
    if (!fabricFromTopology(t, devices, /*ncclAvailable=*/true, &f, &err)) {
      std::fprintf(stderr, "arfuse plan: --devices: %s\n", err.c_str());
      return kExitUsage;
    }
    bool oneShotFromEnv = false;  // as the library does at init: an explicit setting wins
    for (const ParamValue& v : paramValues())
      oneShotFromEnv |= v.fromEnvironment && std::string(v.spec->name) == "ARFUSE_ONESHOT_MAX_BYTES";
    if (!oneShotFromEnv) applyFabricDefaults(t, devices, &policy);
    std::printf("%s\n", topo::describe(t).c_str());
    std::printf("ranks %d%s, peer access: %s, block cap %d, low-latency limit %lld B\n\n", f.nranks,
                f.virtualRanks ? " (virtual)" : "", f.p2p ? "yes" : ("no: " + f.p2pDetail).c_str(), f.maxBlocks,
                f.lowLatencyMaxBytes);
  }
  if (f.nranks < 1 || f.nranks > ARFUSE_MAX_RANKS) {
    std::fprintf(stderr, "arfuse plan: --ranks must be 1..%d\n", ARFUSE_MAX_RANKS);
    return kExitUsage;
  }
  std::printf("%-7s %-10s %-10s %-7s %-7s %s\n", "tokens", "bytes", "algo", "blocks", "threads", "reason");
  int rc = kExitOk;
  for (int t : tokens) {
    req.tokens = t;
    Plan p = makePlan(f, limits, policy, req);
    if (p.status != arfuseSuccess) {
      std::printf("%-7d %-10s %-10s %-7s %-7s %s: %s\n", t, "-", "-", "-", "-", arfuseGetErrorName(p.status),
                  p.reason.c_str());
      rc = kExitFailed;
      continue;
    }
    std::printf("%-7d %-10lld %-10s %-7d %-7d %s\n", t, static_cast<long long>(t) * req.hidden * dtypeSize(req.dtype),
                arfuseAlgoName(p.algo), p.blocks, p.threads, p.reason.c_str());
  }
  return rc;
}

}  // namespace
}  // namespace cli
}  // namespace arfuse

int main(int argc, char** argv) {
  using namespace arfuse::cli;
  if (argc < 2) {
    usage(stderr);
    return kExitUsage;
  }
  const std::string cmd = argv[1];
  std::vector<std::string> args(argv + 2, argv + argc);
  if (cmd == "selftest") return selftest(args);
  if (cmd == "bench") return bench(args);
  if (cmd == "doctor") return doctor(args);
  if (cmd == "plan") return plan(args);
  if (cmd == "triage") return arfuse::triage::runCli(args, std::cout, std::cerr);
  if (cmd == "env") return env(args);
  if (cmd == "version" || cmd == "--version") return version();
  if (cmd == "help" || cmd == "-h" || cmd == "--help") {
    usage(stdout);
    return kExitOk;
  }
  std::fprintf(stderr, "arfuse: unknown command '%s'\n", cmd.c_str());
  usage(stderr);
  return kExitUsage;
}
