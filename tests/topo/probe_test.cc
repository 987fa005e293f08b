// The probe's pure mappings (NVML levels and statuses, bus ids, UUIDs, NVLink counts through
// NVSwitches) and its behaviour where NVML or the GPU is missing: a reported condition, never a crash.
#include "topo/probe.h"

#include <gtest/gtest.h>

#include "topo/nvml.h"
#include "topo/probe_map.h"

namespace arfuse {
namespace topo {
namespace {

TEST(ProbeMap, NvmlTopologyLevels) {
  EXPECT_EQ(pcieFromNvmlLevel(0), PcieLink::kSameBoard);
  EXPECT_EQ(pcieFromNvmlLevel(10), PcieLink::kSameSwitch);
  EXPECT_EQ(pcieFromNvmlLevel(20), PcieLink::kMultiSwitch);
  EXPECT_EQ(pcieFromNvmlLevel(30), PcieLink::kHostBridge);
  EXPECT_EQ(pcieFromNvmlLevel(40), PcieLink::kSameSocket);
  EXPECT_EQ(pcieFromNvmlLevel(50), PcieLink::kCrossSocket);
  EXPECT_EQ(pcieFromNvmlLevel(5), PcieLink::kUnknown);
  EXPECT_EQ(pcieFromNvmlLevel(60), PcieLink::kUnknown);
}

TEST(ProbeMap, NvmlP2pStatuses) {
  EXPECT_EQ(p2pFromNvml(0, 0), P2pStatus::kOk);
  EXPECT_EQ(p2pFromNvml(0, 1), P2pStatus::kChipsetNotSupported);
  EXPECT_EQ(p2pFromNvml(0, 2), P2pStatus::kGpuNotSupported);
  EXPECT_EQ(p2pFromNvml(0, 3), P2pStatus::kTopologyNotSupported);
  EXPECT_EQ(p2pFromNvml(0, 4), P2pStatus::kDisabledByRegkey);
  EXPECT_EQ(p2pFromNvml(0, 5), P2pStatus::kNotSupported);
  EXPECT_EQ(p2pFromNvml(0, 6), P2pStatus::kUnknown);
  // The call itself failing: NOT_SUPPORTED is an answer, anything else is not.
  EXPECT_EQ(p2pFromNvml(3, 0), P2pStatus::kNotSupported);
  EXPECT_EQ(p2pFromNvml(1, 0), P2pStatus::kUnknown);
  EXPECT_EQ(p2pFromNvml(999, 0), P2pStatus::kUnknown);
}

TEST(ProbeMap, BusIds) {
  EXPECT_EQ(normalizeBusId("0000:1B:00.0"), "00000000:1b:00.0");  // CUDA's and NVML's legacy spelling
  EXPECT_EQ(normalizeBusId("00000000:18:00.0"), "00000000:18:00.0");
  EXPECT_EQ(normalizeBusId("1b:00.0"), "00000000:1b:00.0");
  EXPECT_EQ(normalizeBusId("0001:c1:1f.7"), "00000001:c1:1f.7");
  EXPECT_EQ(normalizeBusId("0:1b:0.0"), "00000000:1b:00.0");  // the probe formats CUDA's numbers this way
  EXPECT_EQ(normalizeBusId(""), "");
  EXPECT_EQ(normalizeBusId("GPU-1234"), "");
  EXPECT_EQ(normalizeBusId("0000:1b:00"), "");
  EXPECT_EQ(normalizeBusId("0000:1b:20.0"), "");  // device numbers stop at 0x1f
  EXPECT_EQ(normalizeBusId("0000:1b:00.0 "), "");
  EXPECT_EQ(sysfsBusId("00000000:1b:00.0"), "0000:1b:00.0");
  EXPECT_EQ(sysfsBusId("00000001:c1:00.0"), "0001:c1:00.0");
}

TEST(ProbeMap, UuidAndVersions) {
  const unsigned char b[16] = {0xd0, 0x34, 0x53, 0x86, 0x7c, 0xbe, 0xe9, 0x39,
                               0x78, 0x65, 0x4d, 0xb0, 0x4f, 0x14, 0x33, 0x06};
  EXPECT_EQ(formatGpuUuid(b), "GPU-d0345386-7cbe-e939-7865-4db04f143306");
  EXPECT_EQ(cudaVersionText(12080), "12.8");
  EXPECT_EQ(cudaVersionText(13000), "13.0");
  EXPECT_EQ(cudaVersionText(12090), "12.9");
}

TEST(ProbeMap, NvlinksThroughNvSwitch) {
  // HGX: every GPU has 18 links, all to NVSwitches -> NV18 between every pair.
  std::vector<std::string> bus;
  std::vector<NvlinkEnds> ends(8);
  for (int i = 0; i < 8; ++i) {
    bus.push_back(normalizeBusId(std::to_string(0x18 + 0x10 * i) + ":00.0"));
    ends[i].switchLinks = 18;
  }
  auto m = nvlinkMatrix(bus, ends);
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 8; ++j) EXPECT_EQ(m[i][j], i == j ? 0 : 18) << i << "," << j;
  // A GPU with fewer trained links sets the pace of its pairs; a GPU without NVLink has none.
  ends[3].switchLinks = 12;
  ends[7].switchLinks = 0;
  m = nvlinkMatrix(bus, ends);
  EXPECT_EQ(m[3][0], 12);
  EXPECT_EQ(m[0][3], 12);
  EXPECT_EQ(m[7][0], 0);
  EXPECT_EQ(m[0][7], 0);
  EXPECT_EQ(m[1][2], 18);
}

TEST(ProbeMap, DirectNvlinksCountPerLink) {
  // Two H200 NVL boards bridged: links end at the peer GPU's bus id, one entry per link.
  std::vector<std::string> bus = {"00000000:18:00.0", "00000000:2a:00.0", "00000000:3b:00.0"};
  std::vector<NvlinkEnds> ends(3);
  ends[0].gpuPeers.assign(4, bus[1]);
  ends[1].gpuPeers.assign(4, bus[0]);
  ends[2].gpuPeers = {"00000000:99:00.0"};  // a GPU outside this process's view is ignored
  auto m = nvlinkMatrix(bus, ends);
  EXPECT_EQ(m[0][1], 4);
  EXPECT_EQ(m[1][0], 4);
  EXPECT_EQ(m[0][2], 0);
  EXPECT_EQ(m[2][0], 0);
  EXPECT_EQ(m[2][1], 0);
}

TEST(ProbeMap, NumaNodeText) {
  EXPECT_EQ(parseNumaNode("1\n"), 1);
  EXPECT_EQ(parseNumaNode("0"), 0);
  EXPECT_FALSE(parseNumaNode("-1\n").has_value());  // no affinity reported
  EXPECT_FALSE(parseNumaNode("").has_value());
  EXPECT_FALSE(parseNumaNode("x").has_value());
}

TEST(Nvml, MissingLibraryIsAReportedCondition) {
  nvml::Library lib;
  EXPECT_FALSE(lib.open("libarfuse-test-no-such-nvml.so.1"));
  EXPECT_FALSE(lib.loaded());
  EXPECT_EQ(lib.error().rfind("libarfuse-test-no-such-nvml.so.1: cannot open shared object file", 0), 0u)
      << lib.error();
  // Every query on an unloaded library answers "unknown", never crashes.
  EXPECT_EQ(lib.driverVersion(), "");
  EXPECT_EQ(lib.nvmlVersion(), "");
  nvml::GpuFacts g = lib.gpu("00000000:18:00.0");
  EXPECT_FALSE(g.found);
  EXPECT_FALSE(g.error.empty());
  nvml::PairFacts p = lib.pair("00000000:18:00.0", "00000000:2a:00.0");
  EXPECT_EQ(p.read, P2pStatus::kUnknown);
  EXPECT_EQ(p.pcie, PcieLink::kUnknown);
}

TEST(Nvml, LibraryWithoutNvmlSymbolsIsTooOld) {
  nvml::Library lib;
  EXPECT_FALSE(lib.open("libm.so.6"));  // loads, but has no nvmlInit
  EXPECT_NE(lib.error().find("lacks nvmlInit_v2 (NVML too old)"), std::string::npos) << lib.error();
}

TEST(Probe, WithoutNvmlStillDescribesTheMachineOrSaysWhyNot) {
  ProbeOptions opt;
  opt.measure = false;
  opt.nvmlLibrary = "libarfuse-test-no-such-nvml.so.1";
  ProbeResult r = probeTopology(opt);
  EXPECT_FALSE(r.nvmlLoaded);
  EXPECT_NE(r.nvmlError.find("libarfuse-test-no-such-nvml.so.1: cannot open"), std::string::npos) << r.nvmlError;
  EXPECT_FALSE(r.measured);
  EXPECT_EQ(r.topology.source, "probe");
  EXPECT_FALSE(r.topology.nvmlVersion.has_value());
  ASSERT_TRUE(r.topology.cudaRuntimeVersion.has_value());
  if (!r.ok) {  // no GPU here (the CPU machines): one clear sentence, no topology
    EXPECT_NE(r.error.find("no CUDA device is visible"), std::string::npos) << r.error;
    EXPECT_EQ(r.topology.size(), 0);
    return;
  }
  // A GPU machine without NVML: CUDA's facts only; NVML's stay unknown, and a note says why.
  EXPECT_GE(r.topology.size(), 1);
  EXPECT_EQ(r.topology.gpus[0].uuid.rfind("GPU-", 0), 0u);
  for (const Link& l : r.topology.links) {
    EXPECT_EQ(l.pcie, PcieLink::kUnknown);
    EXPECT_FALSE(l.nvlinks.has_value());
    EXPECT_FALSE(l.measured.any());
  }
  bool noted = false;
  for (const auto& n : r.topology.notes) noted |= n.find("NVML unavailable") != std::string::npos;
  EXPECT_TRUE(noted);
}

}  // namespace
}  // namespace topo
}  // namespace arfuse
