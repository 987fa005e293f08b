#include "selftest_args.h"

#include <cerrno>
#include <cstdlib>

#include "algos/registry.h"
#include "arfuse/arfuse.h"
#include "args.h"

namespace arfuse {
namespace cli {

const char* selftestUsage() {
  static const std::string text = std::string(
      "usage: arfuse selftest [--ranks=N[,N...]] [--virtual] [--quick]\n"
      "       arfuse selftest --procs=N [--algo=A] [--virtual] [--timeout-ms=T] [--kill-rank=R] [--hosts=H]\n"
      "                               [--graph]\n"
      "  Runs every arfuse path over fresh random inputs and checks each output against an fp64 reference\n"
      "  and for bitwise equality across ranks. With >= 2 GPUs the ranks are real GPUs; with one GPU they\n"
      "  are virtual ranks on it (correctness only); --virtual forces virtual ranks on GPU 0.\n"
      "  --procs N starts N processes, one rank each (arfuseCommInitRank; one GPU each when there are N,\n"
      "  else all on GPU 0), checks every output against fp64 and across ranks, and that nothing is left\n"
      "  in /dev/shm; --kill-rank R kills rank R after init: rank 0 must name it and destroy must return.\n"
      "  --algo A forces a path: " +
      algoNamesText(", ", ", ") +
      " (default auto).\n"
      "  --hosts H simulates H hosts of N/H ranks each (ARFUSE_TEST_HOST_ID, TEST ONLY; NCCL over loopback\n"
      "  sockets with a host id per process), so the nccl and hierarchical paths across hosts run on one\n"
      "  machine; with --kill-rank R, rank R dies mid-run instead: every other rank must fail naming it\n"
      "  within a bound. --graph captures every call into a CUDA graph and replays it (with --hosts and\n"
      "  --kill-rank: the bound of captured NCCL operations, ARFUSE_NCCL_WATCH_GRAPHS). Every option also\n"
      "  takes its value as --name VALUE.\n"
      "  Exit status: 0 all passed, 1 a check failed, 2 usage error, 3 no GPU (or a build without CUDA).\n");
  return text.c_str();
}

bool isProcsRun(const std::vector<std::string>& args) {
  for (const std::string& a : args) {
    if (a == "--") break;
    if (a == "--procs" || a.rfind("--procs=", 0) == 0) return true;
  }
  return false;
}

bool parseSelftestArgs(const std::vector<std::string>& args, SelftestArgs* out, std::string* error) {
  SelftestArgs a;
  Options o;
  o.value({"--ranks"}, [&a](const std::string& k, const std::string& v, std::string* e) {
    return parseIntListArg(k, v, 2, ARFUSE_MAX_RANKS, &a.ranks, e);
  });
  o.flag({"--virtual"}, [&a] { a.forceVirtual = true; });
  o.flag({"--quick"}, [&a] { a.quick = true; });
  o.flag({"-h", "--help"}, [&a] { a.help = true; });
  if (!o.parse(args, error)) return false;
  *out = a;
  return true;
}

bool parseProcsArgs(const std::vector<std::string>& args, ProcsArgs* out, std::string* error) {
  ProcsArgs p;
  Options o;
  auto integer = [](int* dst, long long lo, long long hi) {
    return [dst, lo, hi](const std::string& k, const std::string& v, std::string* e) {
      return parseIntArg(k, v, lo, hi, dst, e);
    };
  };
  o.value({"--procs"}, integer(&p.nranks, 2, ARFUSE_MAX_RANKS));
  o.value({"--proc-rank"}, integer(&p.rank, 0, ARFUSE_MAX_RANKS - 1));
  o.value({"--kill-rank"}, integer(&p.killRank, 1, ARFUSE_MAX_RANKS - 1));
  o.value({"--timeout-ms"}, integer(&p.timeoutMs, 100, 3600000));
  o.value({"--hosts"}, integer(&p.hosts, 2, ARFUSE_MAX_RANKS));
  o.value({"--proc-dir"}, [&p](const std::string& k, const std::string& v, std::string* e) {
    if (v.empty()) return *e = wantsError(k, "a directory", v), false;
    p.dir = v;
    return true;
  });
  o.value({"--seed"}, [&p](const std::string& k, const std::string& v, std::string* e) {
    bool digits = !v.empty() && v.size() <= 20;
    for (char c : v) digits = digits && c >= '0' && c <= '9';
    errno = 0;
    const unsigned long long s = digits ? std::strtoull(v.c_str(), nullptr, 10) : 0;
    if (!digits || errno == ERANGE) return *e = wantsError(k, "a whole number from 0 to 2^64 - 1", v), false;
    p.seed = s;
    return true;
  });
  o.value({"--algo"}, [&p](const std::string& k, const std::string& v, std::string* e) {
    int a = 0;
    if (!parseAlgoArg(k, v, &a, e)) return false;
    p.algo = a == arfuseAlgoAuto ? -1 : a;
    return true;
  });
  o.flag({"--virtual"}, [&p] { p.forceVirtual = true; });
  o.flag({"--graph"}, [&p] { p.graph = true; });
  o.flag({"-h", "--help"}, [&p] { p.help = true; });
  if (!o.parse(args, error)) return false;
  *out = p;
  return true;
}

bool checkProcsArgs(const ProcsArgs& p, std::string* error) {
  const int n = p.nranks;
  if (n == 0)
    return *error = "--procs: give the number of processes (2.." + std::to_string(ARFUSE_MAX_RANKS) + ")", false;
  if (p.killRank >= n)
    return *error = "--kill-rank " + std::to_string(p.killRank) + ": must be 1.." + std::to_string(n - 1) +
                    " (rank 0 reports)",
           false;
  if (p.hosts != 0 && (p.hosts > n || n % p.hosts != 0))
    return *error = "--hosts " + std::to_string(p.hosts) + ": must be 2.." + std::to_string(n) +
                    " and divide --procs " + std::to_string(n),
           false;
  if (p.rank >= n)
    return *error = "--proc-rank " + std::to_string(p.rank) + ": must be 0.." + std::to_string(n - 1), false;
  if (p.rank >= 0 && p.dir.empty()) return *error = "--proc-rank needs --proc-dir (a worker of the launcher)", false;
  return true;
}

}  // namespace cli
}  // namespace arfuse
