#include "plan_args.h"

#include "algos/registry.h"
#include "args.h"
#include "common/params.h"
#include "policy/config.h"

namespace arfuse {
namespace cli {

const char* planUsage() {
  static const std::string text = std::string(
      "usage: arfuse plan [--ranks=N] [--hidden=H] [--tokens=T,T,...] [--dtype=bf16|fp16|fp32]\n"
      "                   [--no-p2p] [--virtual] [--algo=A] [--allreduce] [--hosts=H]\n"
      "                   [--topology=FILE.json [--devices=0,1,...]]\n"
      "  Prints the algorithm, launch geometry and reason the library's plan gives for each token count\n"
      "  on a described machine. No GPU needed. The machine is printed first. Without --topology it is\n"
      "  an assumed one: N GPUs (default 8) of 132 SMs, one rank each, P2P between every pair but no\n"
      "  NVLink, and NCCL; --no-p2p takes P2P away (the plan then uses host staging or NCCL), --virtual\n"
      "  puts every rank on one GPU (virtual ranks, no NCCL).\n"
      "  --topology reads a machine description (docs/topology.md; recorded and hand-written examples in\n"
      "  tests/topo/fixtures) and plans for ranks on --devices (default: every GPU in it).\n"
      "  --algo " +
      algoNamesText("|", "|") +
      " forces a path, as ARFUSE_ALGO\n"
      "  does. --hosts H plans for a group over H hosts like the described one (its ranks per host): the\n"
      "  nccl or hierarchical path across hosts, with the reason (docs/multihost.md).\n"
      "  --allreduce plans arfuseAllReduce instead of the fused call. Defaults: --hidden 7168, --tokens\n"
      "  1,2,4,...,2048, --dtype bf16. Every option also takes its value as --name VALUE.\n"
      "  Exit status: 0 every token count has a plan, 1 one has none (its row says why), 2 usage error.\n");
  return text.c_str();
}

bool parsePlanArgs(const std::vector<std::string>& args, PlanArgs* out, std::string* error) {
  PlanArgs a;
  Options o;
  o.flag({"-h", "--help"}, [&] { a.help = true; });
  o.value({"--ranks"}, [&](const std::string& k, const std::string& v, std::string* error) {
    if (!parseIntArg(k, v, 1, ARFUSE_MAX_RANKS, &a.ranks, error)) return false;
    a.ranksGiven = true;
    return true;
  });
  o.value({"--hidden"}, [&](const std::string& k, const std::string& v, std::string* error) {
    return parseHiddenArg(k, v, &a.hidden, error);
  });
  o.value({"--tokens"}, [&](const std::string& k, const std::string& v, std::string* error) {
    return parseIntListArg(k, v, 1, 1 << 20, &a.tokens, error);
  });
  o.value({"--devices"}, [&](const std::string& k, const std::string& v, std::string* error) {
    return parseIntListArg(k, v, 0, 1023, &a.devices, error);
  });
  o.value({"--topology"}, [&](const std::string& k, const std::string& v, std::string* error) {
    if (v.empty()) return *error = wantsError(k, "a file name", v), false;
    a.topology = v;
    return true;
  });
  o.value({"--dtype"}, [&](const std::string& k, const std::string& v, std::string* error) {
    return parseDtypeArg(k, v, &a.dtype, error);
  });
  o.value({"--algo"}, [&](const std::string& k, const std::string& v, std::string* error) {
    return parseAlgoArg(k, v, &a.algo, error);
  });
  o.flag({"--no-p2p"}, [&] { a.noP2p = true; });
  o.flag({"--virtual"}, [&] { a.virtualRanks = true; });
  o.flag({"--allreduce"}, [&] { a.allreduce = true; });
  o.value({"--hosts"}, [&](const std::string& k, const std::string& v, std::string* error) {
    return parseIntArg(k, v, 2, ARFUSE_MAX_RANKS, &a.hosts, error);
  });
  if (!o.parse(args, error)) return false;
  if (a.help) return *out = a, true;
  if (!a.topology.empty() && (a.ranksGiven || a.noP2p || a.virtualRanks))
    return *error =
               "--topology describes the machine: --ranks, --no-p2p and --virtual do not apply (choose the "
               "ranks' GPUs with --devices, a GPU named twice is a virtual rank)",
           false;
  if (a.topology.empty() && !a.devices.empty())
    return *error = "--devices names GPUs of a --topology file; without one use --ranks", false;
  if (a.noP2p && a.virtualRanks)
    return *error = "--no-p2p with --virtual: ranks on one GPU always reach each other's memory; drop one", false;
  *out = a;
  return true;
}

}  // namespace cli
}  // namespace arfuse

namespace arfuse {
namespace cli {

ResolvedPolicy planPolicy(const PlanArgs& a, const topo::Topology& t, const std::vector<int>& devices,
                          const ExplicitLimits& explicitEnv, const std::string& calibrationFile) {
  topo::Topology named = t;
  for (topo::Gpu& g : named.gpus)
    if (g.uuid.empty()) g.uuid = "GPU-assumed-" + std::to_string(g.index);
  PolicyInputs in;
  // As arfuseCommInitAll with a default config: the environment over the built-in defaults.
  ResolvedConfig rc;
  if (resolveConfig(nullptr, static_cast<int>(devices.size()), &rc).ok()) {
    in.configured = rc.policy;
  } else {  // ARFUSE_ALGO=local for several ranks (init would refuse it): the environment's limits still hold
    in.configured.oneShotMaxBytes = paramOneShotMaxBytes();
    in.configured.hostOneShotMaxBytes = paramHostOneShotMaxBytes();
    in.configured.hostStagedMaxBytes = paramHostStagedMaxBytes();
  }
  if (a.algo != arfuseAlgoAuto) {
    in.configured.forcedAlgo = a.algo;
    in.configured.forcedBy = "--algo";
  }
  in.explicitEnv = explicitEnv;
  for (int d : devices) in.uuids.push_back(d >= 0 && d < named.size() ? named.gpus[d].uuid : "");
  in.topology = &named;
  in.calibrationFile = calibrationFile;
  return resolvePolicy(in);
}

}  // namespace cli
}  // namespace arfuse
