// What the probe adds to the model: host-memory measurements, PCIe generation and width, solo peer
// reads, the NVML version; the system-memory detour detector built on them; and the calibration key.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "topo_fixtures.h"

namespace arfuse {
namespace topo {
namespace {

using testing_fixtures::fixturePath;
using testing_fixtures::load;

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Two GPUs on one PCIe Gen4 switch, P2P reported everywhere; the tests set what was measured.
Topology gen4Pair() {
  Topology t = makeTopology(2);
  t.source = "handwritten";
  for (int i = 0; i < 2; ++i) {
    t.gpus[i].uuid = "GPU-" + std::to_string(i);
    t.gpus[i].ccMajor = 8;
    t.gpus[i].ccMinor = 9;
    t.gpus[i].smCount = 142;
    t.gpus[i].pcieGen = 4;
    t.gpus[i].pcieWidth = 16;
  }
  for (Link& l : t.links) {
    l.canAccessPeer = true;
    l.p2pRead = l.p2pWrite = P2pStatus::kOk;
    l.pcie = PcieLink::kSameSwitch;
    l.measured.peerLoad = l.measured.peerStore = true;
  }
  return t;
}

TEST(TopoMeasured, NewFieldsRoundTrip) {
  Topology t = gen4Pair();
  t.nvmlVersion = "12.575.57.08";
  t.gpus[0].host.readGBps = 24.5;
  t.gpus[0].host.writeGBps = 22.25;
  t.gpus[0].host.flagRoundTripUs = 1.6;
  t.gpus[1].host.flagRoundTripUs = 2.0;  // one value alone is fine
  t.link(0, 1).measured.soloReadGBps = 25.1;
  const std::string js = toJson(t);
  EXPECT_TRUE(has(js, "\"nvml_version\": \"12.575.57.08\",\n")) << js;
  EXPECT_TRUE(has(js,
                  "\"pcie_gen\": 4, \"pcie_width\": 16, \"measured\": {\"host_read_gbps\": 24.5, "
                  "\"host_write_gbps\": 22.25, \"host_flag_rtt_us\": 1.6}}"))
      << js;
  EXPECT_TRUE(has(js, "\"measured\": {\"host_flag_rtt_us\": 2}}")) << js;
  EXPECT_TRUE(has(js, "\"solo_read_gbps\": 25.1}")) << js;
  Topology back;
  std::string err;
  ASSERT_EQ(fromJson(js, &back).into(&err), arfuseSuccess) << err;
  EXPECT_TRUE(back == t);
  EXPECT_EQ(back.gpus[0].pcieGen, 4);
  EXPECT_EQ(back.gpus[0].host.writeGBps, 22.25);
  EXPECT_FALSE(back.gpus[1].host.readGBps.has_value());
  EXPECT_EQ(back.link(0, 1).measured.soloReadGBps, 25.1);
  EXPECT_FALSE(back.link(1, 0).measured.soloReadGBps.has_value());
  EXPECT_EQ(toJson(back), js);
}

TEST(TopoMeasured, ReaderIsStrictAboutTheNewFields) {
  const std::string js = toJson(gen4Pair());
  auto err = [&](const std::string& from, const std::string& to) {
    std::string s = js;
    size_t p = s.find(from);
    EXPECT_NE(p, std::string::npos) << from;
    s.replace(p, from.size(), to);
    Topology t;
    std::string e;
    EXPECT_NE(fromJson(s, &t).into(&e), arfuseSuccess) << s;
    return e;
  };
  EXPECT_EQ(err("\"pcie_width\": 16}", "\"pcie_width\": 16, \"measured\": {\"host_read_gpbs\": 3}}"),
            "gpus[0].measured.host_read_gpbs at 6:177: unknown field");
  EXPECT_EQ(err("\"pcie_gen\": 4", "\"pcie_gen\": 0"), "gpus[0].pcie_gen at 6:143: 0 is out of range [1, 16]");
  EXPECT_EQ(err("\"pcie_width\": 16}", "\"pcie_width\": 16, \"measured\": []}"),
            "gpus[0].measured at 6:176: expected an object, got an array");
  EXPECT_EQ(err("\"peer_store\": true}", "\"peer_store\": true, \"solo_read_gbps\": -1}"),
            "links[0].measured.solo_read_gbps at 10:207: must not be negative, got -1");
}

TEST(TopoMeasured, OneGpuFixture) {
  Topology t = load("h200_1x");
  ASSERT_EQ(t.size(), 1);
  EXPECT_TRUE(t.links.empty());
  EXPECT_EQ(t.gpus[0].host.readGBps, 50.0);
  EXPECT_EQ(t.gpus[0].host.flagRoundTripUs, 1.6);
  EXPECT_EQ(t.nvmlVersion, "13.580.159.04");
  std::ifstream f(fixturePath("h200_1x"), std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  EXPECT_EQ(toJson(t), ss.str());  // kept in canonical form
  EXPECT_EQ(islands(t), (std::vector<std::vector<int>>{{0}}));
  P2pVerdict v = p2pAll(t, {0, 0, 0});
  EXPECT_TRUE(v.ok);
  EXPECT_EQ(v.reason, "a single device: no peer access needed");
  const std::string d = describe(t);
  EXPECT_TRUE(has(d, "NVML 13.580.159.04\n")) << d;
  EXPECT_TRUE(has(d, ", PCIe Gen5 x16\n")) << d;
  EXPECT_TRUE(has(d,
                  "Pinned host memory, per GPU alone (what the host-staged path uses)\n"
                  "GPU0    read 50.0 GB/s, write 47.0 GB/s, flag round trip 1.6 us\n"))
      << d;
  EXPECT_TRUE(has(d, "One GPU: no pairs, so no link, P2P or peer measurements.\n")) << d;
  EXPECT_FALSE(has(d, "Legend")) << d;
}

TEST(TopoMeasured, NominalLinkBandwidth) {
  Topology t = gen4Pair();
  EXPECT_DOUBLE_EQ(*linkNominalGBps(t, 0, 1), 1.969 * 16);
  t.gpus[1].pcieGen = 5;  // the slower end decides
  t.gpus[1].pcieWidth = 8;
  EXPECT_DOUBLE_EQ(*linkNominalGBps(t, 0, 1), 1.969 * 8);
  t.gpus[0].pcieGen = 5;
  EXPECT_DOUBLE_EQ(*linkNominalGBps(t, 1, 0), 3.938 * 8);
  t.gpus[0].pcieGen.reset();
  EXPECT_FALSE(linkNominalGBps(t, 0, 1).has_value());
  t.link(0, 1).nvlinks = 18;  // NVLink: 20 GB/s per link as the floor of every generation
  EXPECT_DOUBLE_EQ(*linkNominalGBps(t, 0, 1), 360.0);
  EXPECT_FALSE(linkNominalGBps(load("rtxpro6000_4x_switch"), 0, 1).has_value());  // no gen/width recorded
}

TEST(TopoMeasured, PeerReadFarBelowTheLinkMeansSystemMemory) {
  Topology t = gen4Pair();
  t.link(0, 1).measured.soloReadGBps = 24.0;
  t.link(1, 0).measured.soloReadGBps = 23.0;
  EXPECT_EQ(pairProblem(t, 0, 1), "");
  EXPECT_TRUE(p2pAll(t, {0, 1}).proven);

  // 2.9 GB/s alone on a Gen4 x16 link (31.5 GB/s nominal).
  t.link(1, 0).measured.soloReadGBps = 2.9;
  EXPECT_EQ(pairProblem(t, 0, 1),
            "devices 0 and 1: a peer read 1->0 alone reaches 2.9 GB/s, under 10.0% of the 31.5 GB/s its link "
            "(PIX) allows: traffic is likely routed through system memory");
  // A concurrent number above the absolute 5 GB/s floor does not hide it: only the ratio catches this.
  t.link(1, 0).measured.readGBps = 6.0;
  t.link(1, 0).measured.soloReadGBps = 2.9;
  EXPECT_NE(pairProblem(t, 0, 1).find("routed through system memory"), std::string::npos);
  P2pVerdict v = p2pAll(t, {0, 1});
  EXPECT_FALSE(v.ok);
  EXPECT_NE(v.reason.find("a peer read 1->0 alone reaches 2.9 GB/s"), std::string::npos) << v.reason;
  EXPECT_EQ(islands(t), (std::vector<std::vector<int>>{{0}, {1}}));

  // On a Gen5 x16 pair, 5.5 GB/s alone is under a tenth of 63 GB/s, though above the 5 GB/s floor.
  t = gen4Pair();
  for (Gpu& g : t.gpus) g.pcieGen = 5;
  t.link(0, 1).measured.soloReadGBps = 5.5;
  EXPECT_NE(pairProblem(t, 0, 1).find("under 10.0% of the 63.0 GB/s"), std::string::npos) << pairProblem(t, 0, 1);
  IslandOptions lenient;
  lenient.minFractionOfLink = 0.05;
  EXPECT_EQ(pairProblem(t, 0, 1, lenient), "");
  // Without the link's generation and width there is no ratio to judge.
  t.gpus[0].pcieGen.reset();
  EXPECT_EQ(pairProblem(t, 0, 1), "");
}

TEST(TopoMeasured, SoloReadMatrixInDescribe) {
  Topology t = gen4Pair();
  t.link(0, 1).measured.soloReadGBps = 24.0;
  t.link(1, 0).measured.soloReadGBps = 23.5;
  const std::string d = describe(t);
  EXPECT_TRUE(has(d,
                  "Peer read GB/s, one pair at a time (row pulls from column)\n"
                  "Solo       GPU0   GPU1\nGPU0          X   24.0\nGPU1       23.5      X\n"))
      << d;
  EXPECT_FALSE(has(d, "Pinned host memory")) << d;
}

TEST(TopoCalibrationKey, SubTopology) {
  Topology t = load("rtxpro6000_8x_2socket");
  Topology s = subTopology(t, {5, 2, 5});
  ASSERT_EQ(s.size(), 2);
  EXPECT_EQ(s.gpus[0].uuid, t.gpus[5].uuid);
  EXPECT_EQ(s.gpus[0].index, 0);
  EXPECT_EQ(s.gpus[1].uuid, t.gpus[2].uuid);
  EXPECT_TRUE(s.link(1, 0).measured == t.link(2, 5).measured);  // the failed store 2 -> 5 travels along
  EXPECT_EQ(s.link(1, 0).from, 1);
  EXPECT_EQ(s.link(1, 0).to, 0);
  EXPECT_EQ(validate(s), "");
  EXPECT_EQ(s.driverVersion, t.driverVersion);
}

TEST(TopoCalibrationKey, IndependentOfOrderNumberingAndMeasurements) {
  Topology t = load("rtxpro6000_8x_2switch");
  const std::string k = calibrationFingerprint(t, {0, 1, 2, 3});
  EXPECT_EQ(k.rfind("fab1-", 0), 0u);
  EXPECT_EQ(calibrationFingerprint(t, {3, 1, 0, 2}), k);        // rank order
  EXPECT_EQ(calibrationFingerprint(t, {0, 0, 1, 1, 2, 3}), k);  // virtual ranks
  EXPECT_NE(calibrationFingerprint(t, {0, 1, 2, 4}), k);        // other GPUs
  EXPECT_NE(calibrationFingerprint(t, {0, 1, 2}), k);
  // The same four GPUs seen under other ordinals (CUDA_VISIBLE_DEVICES=3,2,1,0): same key.
  Topology r = subTopology(t, {3, 2, 1, 0});
  EXPECT_EQ(calibrationFingerprint(r, {0, 1, 2, 3}), k);
  // Measured facts are not part of the key (a process that only reads NVML and CUDA computes it)...
  Topology m = t;
  m.link(0, 1).measured = Measured{};
  m.link(2, 3).measured.readGBps = 1.0;
  EXPECT_EQ(calibrationFingerprint(m, {0, 1, 2, 3}), k);
  // ...but reported ones are.
  m.link(0, 1).pcie = PcieLink::kCrossSocket;
  EXPECT_NE(calibrationFingerprint(m, {0, 1, 2, 3}), k);
  // A single GPU (virtual ranks) has a key of its own.
  EXPECT_EQ(calibrationFingerprint(t, {2, 2}), calibrationFingerprint(t, {2}));
  EXPECT_NE(calibrationFingerprint(t, {2}), calibrationFingerprint(t, {3}));
}

}  // namespace
}  // namespace topo
}  // namespace arfuse
