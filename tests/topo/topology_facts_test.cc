// Facts derived from the topology on every recorded machine: islands, the P2P verdict and its reason,
// the fabric fingerprint, the pull/push hint and the human-readable matrix.
#include <gtest/gtest.h>

#include <set>

#include "topo_fixtures.h"

namespace arfuse {
namespace topo {
namespace {

using testing_fixtures::allFixtures;
using testing_fixtures::load;
using Islands = std::vector<std::vector<int>>;

std::vector<int> range(int n) {
  std::vector<int> v(n);
  for (int i = 0; i < n; ++i) v[i] = i;
  return v;
}

// ---- islands --------------------------------------------------------------------------------

TEST(TopoIslands, NvSwitchIsOneIslandOfEight) {
  EXPECT_EQ(islands(load("h200_8x_nvswitch")), (Islands{{0, 1, 2, 3, 4, 5, 6, 7}}));
  EXPECT_EQ(islands(load("h200_2x_nvlink")), (Islands{{0, 1}}));
  EXPECT_EQ(islands(load("h200_4x_recorded")), (Islands{{0, 1, 2, 3}}));
}

TEST(TopoIslands, OnePcieSwitchIsOneIsland) {
  EXPECT_EQ(islands(load("rtxpro6000_4x_switch")), (Islands{{0, 1, 2, 3}}));
}

TEST(TopoIslands, TwoSwitchesAndTwoSocketsSplitFourPlusFour) {
  EXPECT_EQ(islands(load("rtxpro6000_8x_2switch")), (Islands{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  // The broken 2 -> 5 store crosses sockets anyway, so it does not change the split.
  EXPECT_EQ(islands(load("rtxpro6000_8x_2socket")), (Islands{{0, 1, 2, 3}, {4, 5, 6, 7}}));
}

TEST(TopoIslands, NoP2pGivesSingletons) {
  EXPECT_EQ(islands(load("rtx5090_2x_nop2p")), (Islands{{0}, {1}}));
  EXPECT_EQ(islands(load("l40s_8x_noswitch")), (Islands{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}}));
}

TEST(TopoIslands, SubsetOfDevices) {
  Topology t = load("rtxpro6000_8x_2switch");
  EXPECT_EQ(islands(t, {6, 1, 5, 1, 42}), (Islands{{1}, {5, 6}}));
  EXPECT_EQ(islands(t, {4, 5, 6, 7}), (Islands{{4, 5, 6, 7}}));
  EXPECT_EQ(islands(t, std::vector<int>{}), Islands{});
}

TEST(TopoIslands, FailedPairInsideAnIslandCostsOneGpu) {
  Topology t = load("rtxpro6000_4x_switch");
  t.link(1, 3).measured.peerLoad = false;
  EXPECT_EQ(islands(t), (Islands{{0, 1, 2}, {3}}));
  t = load("rtxpro6000_8x_2switch");
  t.link(6, 5).canAccessPeer = false;
  EXPECT_EQ(islands(t), (Islands{{0, 1, 2, 3}, {4, 5, 7}, {6}}));
}

TEST(TopoIslands, CollapsedBandwidthMeansNotPeerCapable) {
  // Reported PIX and P2P ok, but both directions crawl: traffic goes through system memory.
  Topology t = load("rtxpro6000_4x_switch");
  t.link(0, 2).measured.readGBps = 1.1;
  t.link(0, 2).measured.writeGBps = 0.9;
  EXPECT_EQ(islands(t), (Islands{{0, 1, 3}, {2}}));
  // A write collapse alone is not a problem: reads are still fast (the fixture's normal state).
  EXPECT_EQ(pairProblem(load("rtxpro6000_4x_switch"), 0, 2), "");
  IslandOptions strict;
  strict.minUsableGBps = 60;
  EXPECT_EQ(islands(load("rtxpro6000_4x_switch"), strict), (Islands{{0}, {1}, {2}, {3}}));
}

TEST(TopoIslands, NvlinkPairsInsidePcie) {
  // Two NVLink-bridged pairs on PCIe across sockets: each bridge is an island.
  Topology t = makeTopology(4);
  for (Link& l : t.links) {
    l.canAccessPeer = true;
    bool pair = l.from / 2 == l.to / 2;
    if (pair) l.nvlinks = 4;
    l.pcie = pair ? PcieLink::kSameSocket : PcieLink::kCrossSocket;
  }
  EXPECT_EQ(islands(t), (Islands{{0, 1}, {2, 3}}));
}

TEST(TopoIslands, EveryFixtureIsAPartition) {
  for (const auto& name : allFixtures()) {
    SCOPED_TRACE(name);
    Topology t = load(name);
    std::set<int> seen;
    for (const auto& isl : islands(t)) {
      for (int g : isl) EXPECT_TRUE(seen.insert(g).second) << "GPU " << g << " in two islands";
    }
    EXPECT_EQ(static_cast<int>(seen.size()), t.size());
  }
}

// ---- p2pAll ---------------------------------------------------------------------------------

TEST(TopoP2p, ProvenWhenMeasured) {
  P2pVerdict v = p2pAll(load("rtxpro6000_4x_switch"), range(4));
  EXPECT_TRUE(v.ok);
  EXPECT_TRUE(v.proven);
  EXPECT_EQ(v.reason, "P2P among all 4 devices, peer load and store measured on all 12 ordered pairs");
}

TEST(TopoP2p, ReportedOnlyWhenNotMeasured) {
  P2pVerdict v = p2pAll(load("h200_8x_nvswitch"), range(8));
  EXPECT_TRUE(v.ok);
  EXPECT_FALSE(v.proven);
  EXPECT_EQ(v.reason, "P2P among all 8 devices as reported (peer load and store measured on 0 of 56 ordered pairs)");
}

TEST(TopoP2p, NamesTheFirstFailingPair) {
  EXPECT_EQ(p2pAll(load("rtx5090_2x_nop2p"), {0, 1}).reason, "devices 0 and 1: cudaDeviceCanAccessPeer(0, 1) = 0");
  EXPECT_EQ(p2pAll(load("l40s_8x_noswitch"), {3, 6}).reason, "devices 3 and 6: cudaDeviceCanAccessPeer(3, 6) = 0");
  P2pVerdict v = p2pAll(load("rtxpro6000_8x_2socket"), range(8));
  EXPECT_FALSE(v.ok);
  EXPECT_FALSE(v.proven);
  EXPECT_EQ(v.reason, "devices 2 and 5: P2P advertised but a peer store by 2 into 5 failed (ACS or IOMMU likely)");
  // Order follows the caller's device list, so the message names the pair as the caller sees it.
  EXPECT_EQ(p2pAll(load("rtxpro6000_8x_2socket"), {5, 2}).reason,
            "devices 5 and 2: P2P advertised but a peer store by 2 into 5 failed (ACS or IOMMU likely)");
  // Within a socket everything works and was measured.
  v = p2pAll(load("rtxpro6000_8x_2socket"), {4, 5, 6, 7});
  EXPECT_TRUE(v.ok);
  EXPECT_TRUE(v.proven);
}

TEST(TopoP2p, OneSidedAccessFails) {
  Topology t = load("h200_2x_nvlink");
  t.link(1, 0).canAccessPeer = false;
  EXPECT_EQ(p2pAll(t, {0, 1}).reason, "devices 0 and 1: cudaDeviceCanAccessPeer(1, 0) = 0");
}

TEST(TopoP2p, SystemMemoryRoutingIsReported) {
  Topology t = load("rtxpro6000_4x_switch");
  t.link(3, 1).measured.readGBps = 1.2;
  t.link(3, 1).measured.writeGBps = 0.8;
  EXPECT_EQ(p2pAll(t, range(4)).reason,
            "devices 1 and 3: peer bandwidth 3->1 is 1.2 GB/s (below 5.0): traffic is likely routed through system "
            "memory");
}

TEST(TopoP2p, VirtualRanksAndBadDevices) {
  Topology t = load("rtx5090_2x_nop2p");
  P2pVerdict v = p2pAll(t, {1, 1, 1});
  EXPECT_TRUE(v.ok);
  EXPECT_EQ(v.reason, "a single device: no peer access needed");
  v = p2pAll(t, {0, 2});
  EXPECT_FALSE(v.ok);
  EXPECT_EQ(v.reason, "device 2 is not in the topology (2 GPUs)");
}

// ---- fingerprint ----------------------------------------------------------------------------

TEST(TopoFingerprint, StableAndDistinct) {
  std::set<std::string> prints;
  for (const auto& name : allFixtures()) {
    Topology t = load(name);
    std::string f = fabricFingerprint(t);
    EXPECT_EQ(f.size(), 21u) << f;
    EXPECT_EQ(f.rfind("fab1-", 0), 0u) << f;
    EXPECT_EQ(f, fabricFingerprint(t));
    Topology back;
    std::string err;
    ASSERT_EQ(fromJson(toJson(t), &back).into(&err), arfuseSuccess) << err;
    EXPECT_EQ(fabricFingerprint(back), f);
    prints.insert(f);
  }
  EXPECT_EQ(prints.size(), allFixtures().size());
}

TEST(TopoFingerprint, PinnedValue) {
  // FNV-1a over a fixed text: the value must not change between builds or platforms, or every
  // calibration file recorded so far would silently stop matching.
  Topology t = makeTopology(2);
  t.gpus[0].uuid = "GPU-a";
  t.gpus[1].uuid = "GPU-b";
  EXPECT_EQ(fabricFingerprintInput(t),
            "arfuse-fabric/1\ngpu 0 GPU-a\ngpu 1 GPU-b\n"
            "link 0>1 cap=0 r=unknown w=unknown a=unknown nv=- pcie=unknown load=- store=-\n"
            "link 1>0 cap=0 r=unknown w=unknown a=unknown nv=- pcie=unknown load=- store=-\n");
  EXPECT_EQ(
      fabricFingerprint(t), "fab1-" + [] {
        uint64_t h = 0xcbf29ce484222325ull;
        for (unsigned char c : std::string("arfuse-fabric/1\ngpu 0 GPU-a\ngpu 1 GPU-b\n"
                                           "link 0>1 cap=0 r=unknown w=unknown a=unknown nv=- pcie=unknown "
                                           "load=- store=-\n"
                                           "link 1>0 cap=0 r=unknown w=unknown a=unknown nv=- pcie=unknown "
                                           "load=- store=-\n")) {
          h = (h ^ c) * 0x100000001b3ull;
        }
        char buf[17];
        std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
        return std::string(buf);
      }());
}

TEST(TopoFingerprint, SensitiveToLinksAndGpusNotToNumbers) {
  const Topology base = load("rtxpro6000_8x_2switch");
  const std::string f = fabricFingerprint(base);
  Topology t = base;
  t.link(2, 6).pcie = PcieLink::kCrossSocket;
  EXPECT_NE(fabricFingerprint(t), f);
  t = base;
  t.link(0, 1).nvlinks = 4;
  EXPECT_NE(fabricFingerprint(t), f);
  t = base;
  t.link(7, 3).canAccessPeer = false;
  EXPECT_NE(fabricFingerprint(t), f);
  t = base;
  t.link(5, 4).measured.peerStore = false;
  EXPECT_NE(fabricFingerprint(t), f);
  t = base;
  std::swap(t.gpus[0].uuid, t.gpus[1].uuid);  // same machine, devices renumbered
  EXPECT_NE(fabricFingerprint(t), f);
  // Run-to-run noise and bookkeeping do not invalidate a calibration.
  t = base;
  t.link(0, 1).measured.readGBps = 24.1;
  t.link(0, 1).measured.flagLatencyUs = 2.7;
  t.notes.push_back("re-measured");
  t.hostname = "renamed";
  t.driverVersion = "580.00";
  EXPECT_EQ(fabricFingerprint(t), f);
}

// ---- pull / push ----------------------------------------------------------------------------

TEST(TopoAccess, CollapsingWritesMeanPull) {
  Topology t = load("rtxpro6000_4x_switch");
  AccessHint h = accessHint(t.link(0, 1));
  EXPECT_EQ(h.access, Access::kPull);
  EXPECT_EQ(h.reason, "0->1: pull, peer reads are faster (read 52.4 GB/s, write 2.7 GB/s)");
  h = groupAccessHint(t, range(4));
  EXPECT_EQ(h.access, Access::kPull);
  EXPECT_EQ(h.reason, "pull: slowest pair reads at 52.0 GB/s, writes at 2.5 GB/s over 12 ordered pairs");
}

TEST(TopoAccess, WriteFriendlySwitchMeansPush) {
  Topology t = load("rtxpro6000_8x_2switch");
  EXPECT_EQ(accessHint(t.link(4, 5)).access, Access::kPush);
  EXPECT_EQ(groupAccessHint(t, {0, 1, 2, 3}).access, Access::kPush);
  // Across switches reads and writes are close, and the cross-switch pairs are the slowest.
  AccessHint h = groupAccessHint(t, range(8));
  EXPECT_EQ(h.access, Access::kEither);
  EXPECT_EQ(h.reason, "either: slowest pair reads at 19.2 GB/s, writes at 20.6 GB/s over 56 ordered pairs");
}

TEST(TopoAccess, UnknownWithoutBothNumbers) {
  Topology t = load("h200_8x_nvswitch");
  EXPECT_EQ(accessHint(t.link(0, 1)).access, Access::kUnknown);
  EXPECT_EQ(groupAccessHint(t, range(8)).access, Access::kUnknown);
  EXPECT_EQ(groupAccessHint(t, range(8)).reason, "bandwidth not measured for 0->1");
  Topology s = load("rtxpro6000_8x_2socket");  // 2 -> 5 has no write number (the store failed)
  EXPECT_EQ(accessHint(s.link(2, 5)).access, Access::kUnknown);
  EXPECT_EQ(accessHint(s.link(5, 2)).access, Access::kPull);  // cross-socket: 11.3 read vs 8.5 write
  EXPECT_EQ(accessHint(load("h200_2x_nvlink").link(0, 1)).access, Access::kEither);
}

// ---- describe -------------------------------------------------------------------------------

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(TopoDescribe, NvSwitchMatrix) {
  std::string d = describe(load("h200_8x_nvswitch"));
  EXPECT_TRUE(has(d, "arfuse topology: 8 GPUs, source handwritten, host hgx-h200-a\n")) << d;
  EXPECT_TRUE(has(d, "driver 570.124.06, CUDA runtime 12.8, NCCL 2.26.2\n")) << d;
  EXPECT_TRUE(has(d, "GPU0    NVIDIA H200, sm_90, 132 SMs, 140.4 GiB, 00000000:18:00.0, NUMA 0, GPU-")) << d;
  EXPECT_TRUE(has(d, "Link       GPU0   GPU1   GPU2   GPU3   GPU4   GPU5   GPU6   GPU7   NUMA\n")) << d;
  EXPECT_TRUE(has(d, "GPU5       NV18   NV18   NV18   NV18   NV18      X   NV18   NV18      1\n")) << d;
  EXPECT_TRUE(has(d, "GPU0          X     ok     ok     ok     ok     ok     ok     ok\n")) << d;
  EXPECT_TRUE(has(d, "Islands: [0 1 2 3 4 5 6 7]\n")) << d;
  EXPECT_TRUE(has(d, "P2P (all GPUs): reported, ")) << d;
  EXPECT_FALSE(has(d, "Peer read GB/s")) << d;  // nothing measured, no empty matrix
}

TEST(TopoDescribe, PcieLabelsAndP2pCells) {
  std::string d = describe(load("l40s_8x_noswitch"));
  EXPECT_TRUE(has(d, "GPU0          X    PHB   NODE   NODE    SYS    SYS    SYS    SYS      0\n")) << d;
  EXPECT_TRUE(has(d, "GPU6        SYS    SYS    SYS    SYS   NODE   NODE      X    PHB      1\n")) << d;
  EXPECT_TRUE(has(d, "GPU1         no      X     no     no     no     no     no     no\n")) << d;
  EXPECT_TRUE(has(d, "Islands: [0] [1] [2] [3] [4] [5] [6] [7]\n")) << d;
  EXPECT_TRUE(has(d, "NCCL 2.21.5")) << d;

  d = describe(load("rtxpro6000_8x_2socket"));
  EXPECT_TRUE(has(d, "GPU2         ok     ok      X     ok     ok   FAIL     ok     ok\n")) << d;
  EXPECT_TRUE(has(d, "GPU5         ok     ok     ok     ok     ok      X     ok     ok\n")) << d;
  EXPECT_TRUE(has(d, "Peer write GB/s, all pairs at once")) << d;
  EXPECT_TRUE(has(d, "P2P (all GPUs): no, devices 2 and 5: P2P advertised but a peer store")) << d;

  d = describe(load("rtxpro6000_8x_2switch"));
  EXPECT_TRUE(has(d, "GPU4       NODE   NODE   NODE   NODE      X    PIX    PIX    PIX      0\n")) << d;
  EXPECT_TRUE(has(d, "Islands: [0 1 2 3] [4 5 6 7]\n")) << d;

  d = describe(load("rtx5090_2x_nop2p"));
  EXPECT_TRUE(has(d, "NCCL ?")) << d;
  EXPECT_TRUE(has(d, "GPU1        PHB      X      0\n")) << d;
  EXPECT_TRUE(has(d, "sm_120, 170 SMs")) << d;
}

TEST(TopoDescribe, MeasuredMatrices) {
  std::string d = describe(load("rtxpro6000_4x_switch"));
  EXPECT_TRUE(has(d, "Read       GPU0   GPU1   GPU2   GPU3\nGPU0          X   52.4   52.0   52.6\n")) << d;
  EXPECT_TRUE(has(d, "Write      GPU0   GPU1   GPU2   GPU3\nGPU0          X    2.7    2.5    2.8\n")) << d;
  EXPECT_TRUE(has(d, "Pull/push (all GPUs): pull: slowest pair reads at 52.0 GB/s")) << d;
  EXPECT_TRUE(has(d, "Note: One PCIe Gen5 switch;")) << d;
}

TEST(TopoDescribe, LinkLabels) {
  Link l;
  EXPECT_EQ(linkLabel(l), "?");
  l.pcie = PcieLink::kMultiSwitch;
  EXPECT_EQ(linkLabel(l), "PXB");
  l.pcie = PcieLink::kSameBoard;
  EXPECT_EQ(linkLabel(l), "PIX");
  l.nvlinks = 0;
  EXPECT_EQ(linkLabel(l), "PIX");
  l.nvlinks = 12;
  EXPECT_EQ(linkLabel(l), "NV12");
}

TEST(TopoNames, EnumsRoundTripThroughTheirJsonNames) {
  for (PcieLink v : {PcieLink::kSameBoard, PcieLink::kSameSwitch, PcieLink::kMultiSwitch, PcieLink::kHostBridge,
                     PcieLink::kSameSocket, PcieLink::kCrossSocket, PcieLink::kUnknown}) {
    EXPECT_EQ(parsePcieLink(pcieLinkName(v)), v);
  }
  for (P2pStatus v :
       {P2pStatus::kOk, P2pStatus::kChipsetNotSupported, P2pStatus::kGpuNotSupported, P2pStatus::kTopologyNotSupported,
        P2pStatus::kDisabledByRegkey, P2pStatus::kNotSupported, P2pStatus::kUnknown}) {
    EXPECT_EQ(parseP2pStatus(p2pStatusName(v)), v);
  }
  EXPECT_FALSE(parsePcieLink("PIX").has_value());
}

TEST(TopoValidate, CatchesStructuralMistakes) {
  Topology t = makeTopology(2);
  EXPECT_EQ(validate(t), "gpus[0].uuid is empty");
  t.gpus[0].uuid = "GPU-a";
  t.gpus[1].uuid = "GPU-b";
  t.gpus[0].ccMajor = t.gpus[1].ccMajor = 9;
  t.gpus[0].smCount = t.gpus[1].smCount = 132;
  EXPECT_EQ(validate(t), "");
  t.links.pop_back();
  EXPECT_EQ(validate(t), "links has 1 entries, expected 2");
  EXPECT_EQ(validate(Topology{}), "no GPUs");
}

}  // namespace
}  // namespace topo
}  // namespace arfuse
