// Shared by the topology tests: the recorded fixtures and a loader that fails the test loudly.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "topo/topology.h"

namespace arfuse {
namespace topo {
namespace testing_fixtures {

inline const std::vector<std::string>& allFixtures() {
  static const std::vector<std::string> kNames = {
      "h200_8x_nvswitch",      "h200_2x_nvlink",   "rtxpro6000_4x_switch", "rtxpro6000_8x_2switch",
      "rtxpro6000_8x_2socket", "rtx5090_2x_nop2p", "l40s_8x_noswitch",
      "h200_4x_recorded",  // `arfuse doctor --save-topology` on a real 4 x H200 VM (issue 10)
  };
  return kNames;
}

inline std::string fixturePath(const std::string& name) {
  return std::string(ARFUSE_TOPO_FIXTURES) + "/" + name + ".json";
}

inline Topology load(const std::string& name) {
  Topology t;
  std::string err;
  EXPECT_EQ(readJsonFile(fixturePath(name), &t).into(&err), arfuseSuccess) << err;
  return t;
}

// Every GPU of a topology, in order: the device list of a group spanning the machine.
inline std::vector<int> allDevices(const Topology& t) {
  std::vector<int> d;
  for (int i = 0; i < t.size(); ++i) d.push_back(i);
  return d;
}

}  // namespace testing_fixtures
}  // namespace topo
}  // namespace arfuse
