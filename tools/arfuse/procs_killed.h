// `arfuse selftest --procs N --hosts H --kill-rank R`: what the launcher requires of every rank that
// survives a rank killed mid-run across hosts (docs/multihost.md "Safety"). Pure text checks on a
// rank's log, CPU-tested (tests/cpu/procs_killed_test.cc).
#pragma once

#include <string>

namespace arfuse {
namespace cli {

// How arfuse's messages name rank `rank` of a selftest over simulated hosts (rank r on host
// h<r * H / N>, local rank = its order there): "rank 3 (host test:h1, local rank 1)".
std::string simulatedRankName(int rank, int nranks, int hosts);

struct KilledVerdict {
  bool failed = false;         // some call reported a failure
  bool named = false;          // the first failure names the dead rank
  double firstFailS = -1;      // how long the first failing call took (its "FAIL after X s")
  bool bounded = false;        // firstFailS <= the bound
  bool passAfterFail = false;  // a call reported success after the first failure (garbage)
  bool destroyed = false;      // "DESTROY ok"
  bool ok() const { return failed && named && bounded && !passAfterFail && destroyed; }
  std::string describe()
      const;  // "named rank 3, first failure after 3.21 s (bound 14.00 s), destroy ok" or what is missing
  double boundS = 0;
};

// The survivor's log: lines "rank q: CASE <name> algo=<a> err_...=... PASS", "rank q: CASE <name>
// algo=<a> FAIL after <s> s: <message>", "rank q: DESTROY ok in ...".
KilledVerdict judgeSurvivor(const std::string& log, const std::string& deadName, double boundS);

}  // namespace cli
}  // namespace arfuse
