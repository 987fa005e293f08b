// Feeds lines to an Analyzer as one input and finishes it (the unit tests' way to run the analysis).
#pragma once

#include <string>
#include <vector>

#include "analyzer.h"

namespace triage_test {

inline arfuse::triage::Result analyse(arfuse::triage::Analyzer& a, const std::vector<std::string>& lines) {
  a.beginFile("x.log");
  for (const auto& l : lines) a.feed(l);
  a.endFile("none", 0, 0, "");
  return a.finish();
}

}  // namespace triage_test
