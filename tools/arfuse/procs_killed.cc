#include "procs_killed.h"

#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace arfuse {
namespace cli {

std::string simulatedRankName(int rank, int nranks, int hosts) {
  const int host = rank * hosts / nranks;
  const int local = rank - host * (nranks / hosts);
  return "rank " + std::to_string(rank) + " (host test:h" + std::to_string(host) + ", local rank " +
         std::to_string(local) + ")";
}

KilledVerdict judgeSurvivor(const std::string& log, const std::string& deadName, double boundS) {
  KilledVerdict v;
  v.boundS = boundS;
  std::istringstream in(log);
  std::string line;
  while (std::getline(in, line)) {
    if (line.find("DESTROY ok") != std::string::npos) v.destroyed = true;
    if (line.find(": CASE ") == std::string::npos) continue;
    const size_t fail = line.find(" FAIL");
    if (fail == std::string::npos) {
      if (v.failed && line.size() >= 5 && line.compare(line.size() - 5, 5, " PASS") == 0) v.passAfterFail = true;
      continue;
    }
    if (v.failed) continue;
    v.failed = true;
    v.named = line.find(deadName, fail) != std::string::npos;
    const size_t after = line.find(" FAIL after ", fail);
    if (after != std::string::npos) v.firstFailS = std::strtod(line.c_str() + after + 12, nullptr);
    v.bounded = v.firstFailS >= 0 && v.firstFailS <= boundS;
  }
  return v;
}

std::string KilledVerdict::describe() const {
  if (!failed) return "reported NO failure";
  char t[64];
  std::snprintf(t, sizeof t, "%.2f s (bound %.2f s)", firstFailS, boundS);
  std::string s = std::string(named ? "named the dead rank" : "did NOT name the dead rank") + ", first failure after " +
                  (firstFailS >= 0 ? std::string(t) : std::string("an unknown time")) +
                  (bounded ? "" : " -- NOT within the bound");
  if (passAfterFail) s += ", a later call reported SUCCESS";
  return s + (destroyed ? ", destroy ok" : ", destroy did NOT return ok");
}

}  // namespace cli
}  // namespace arfuse
