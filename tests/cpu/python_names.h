// The block of python/arfuse/_types.py's Algo members generated from the registry (algos/registry.h
// pythonAlgoMembers), as the file holds it: registry_test.cc keeps it equal to the registry's,
// dummy_path_test.cc shows a new path's member is the one line it adds. "" when the markers are missing.
#pragma once

#include <fstream>
#include <sstream>
#include <string>

namespace arfuse {
namespace testing_fixtures {

inline std::string committedPythonAlgoMembers() {
  std::ifstream f(std::string(ARFUSE_SOURCE_DIR) + "/python/arfuse/_types.py");
  std::stringstream text;
  text << f.rdbuf();
  const std::string py = text.str();
  const std::string begin = "    # BEGIN members generated from the registry (algos/registry.h pythonAlgoMembers)\n";
  const size_t from = py.find(begin), to = py.find("    # END members generated from the registry");
  if (from == std::string::npos || to == std::string::npos || to < from) return "";
  return py.substr(from + begin.size(), to - from - begin.size());
}

}  // namespace testing_fixtures
}  // namespace arfuse
