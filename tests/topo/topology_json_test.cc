// JSON form of the topology: exact round trips on every recorded fixture, a byte-stable writer, and a
// strict reader whose errors name the field and its line:column.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "topo_fixtures.h"

namespace arfuse {
namespace topo {
namespace {

using testing_fixtures::allFixtures;
using testing_fixtures::fixturePath;
using testing_fixtures::load;

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string replaceOnce(std::string s, const std::string& from, const std::string& to) {
  size_t p = s.find(from);
  EXPECT_NE(p, std::string::npos) << "test setup: '" << from << "' not found";
  if (p != std::string::npos) s.replace(p, from.size(), to);
  return s;
}

// A small valid document; the error tests below break one thing at a time.
const char* kTwoGpus = R"({
  "schema": "arfuse-topology/1",
  "source": "handwritten",
  "notes": [],
  "gpus": [
    {"index": 0, "name": "A", "uuid": "GPU-a", "pci_bus_id": "00000000:01:00.0", "cc_major": 9, "cc_minor": 0, "sm_count": 132, "memory_bytes": 1024},
    {"index": 1, "name": "B", "uuid": "GPU-b", "pci_bus_id": "00000000:02:00.0", "cc_major": 9, "cc_minor": 0, "sm_count": 132, "memory_bytes": 1024}
  ],
  "links": [
    {"from": 0, "to": 1, "can_access_peer": true, "p2p_read": "ok", "p2p_write": "ok", "p2p_atomics": "ok", "nvlinks": 18, "pcie": "same_socket"},
    {"from": 1, "to": 0, "can_access_peer": true, "p2p_read": "ok", "p2p_write": "ok", "p2p_atomics": "ok", "nvlinks": 18, "pcie": "same_socket", "measured": {"read_gbps": 300.5}}
  ]
}
)";

std::string readError(const std::string& text) {
  Topology t;
  std::string err;
  EXPECT_NE(fromJson(text, &t).into(&err), arfuseSuccess) << "accepted:\n" << text;
  return err;
}

TEST(TopoJson, EveryFixtureRoundTripsExactly) {
  for (const auto& name : allFixtures()) {
    SCOPED_TRACE(name);
    Topology a = load(name);
    ASSERT_GE(a.size(), 2);
    std::string once = toJson(a);
    Topology b;
    std::string err;
    ASSERT_EQ(fromJson(once, &b).into(&err), arfuseSuccess) << err;
    EXPECT_TRUE(a == b);
    EXPECT_EQ(toJson(b), once);  // byte-stable
  }
}

TEST(TopoJson, FixturesAreInCanonicalForm) {
  // The files are what the writer produces, so a re-recorded machine diffs only where it changed.
  for (const auto& name : allFixtures()) {
    SCOPED_TRACE(name);
    EXPECT_EQ(toJson(load(name)), slurp(fixturePath(name)));
  }
}

TEST(TopoJson, FixtureValuesAreRead) {
  Topology t = load("rtxpro6000_4x_switch");
  ASSERT_EQ(t.size(), 4);
  EXPECT_EQ(t.gpus[2].name, "NVIDIA RTX PRO 6000 Blackwell Server Edition");
  EXPECT_EQ(t.gpus[2].ccMajor, 12);
  EXPECT_EQ(t.gpus[2].ccMinor, 0);
  EXPECT_EQ(t.gpus[2].smCount, 188);
  EXPECT_EQ(t.gpus[2].pciBusId, "00000000:1a:00.0");
  EXPECT_EQ(t.gpus[2].numaNode, 0);
  EXPECT_EQ(t.gpus[2].memoryBytes, 97887LL * 1048576);
  EXPECT_EQ(t.driverVersion, "575.57.08");
  const Link& l = t.link(0, 1);
  EXPECT_TRUE(l.canAccessPeer);
  EXPECT_EQ(l.pcie, PcieLink::kSameSwitch);
  EXPECT_EQ(l.p2pAtomics, P2pStatus::kNotSupported);
  EXPECT_FALSE(l.nvlinks.has_value());
  EXPECT_EQ(l.measured.readGBps, 52.4);
  EXPECT_EQ(l.measured.writeGBps, 2.7);
  EXPECT_EQ(l.measured.peerStore, true);

  Topology g = load("rtx5090_2x_nop2p");
  EXPECT_FALSE(g.ncclVersion.has_value());
  EXPECT_FALSE(g.hostname.has_value());
  EXPECT_FALSE(g.link(1, 0).canAccessPeer);
  EXPECT_FALSE(g.link(1, 0).measured.any());
  EXPECT_EQ(load("h200_8x_nvswitch").link(3, 4).nvlinks, 18);
}

TEST(TopoJson, OptionalFieldsAbsentAndPresentRoundTrip) {
  Topology t = makeTopology(3);
  t.source = "probe";
  for (int i = 0; i < 3; ++i) {
    t.gpus[i].uuid = "GPU-" + std::to_string(i);
    t.gpus[i].ccMajor = 8;
    t.gpus[i].smCount = 1;
  }
  t.gpus[1].numaNode = 1;
  t.notes = {"quote \" backslash \\ tab \t newline \n bell \x07 utf8 \xc2\xb5s"};
  t.link(0, 2).nvlinks = 0;  // NVML present, no NVLink: distinct from absent
  t.link(2, 1).measured.flagLatencyUs = 1e-7;
  t.link(2, 1).measured.readGBps = 0.1 + 0.2;  // needs all 17 digits
  t.link(1, 2).measured.peerLoad = false;
  std::string js = toJson(t);
  Topology back;
  std::string err;
  ASSERT_EQ(fromJson(js, &back).into(&err), arfuseSuccess) << err;
  EXPECT_TRUE(back == t);
  EXPECT_FALSE(back.gpus[0].numaNode.has_value());
  EXPECT_EQ(back.link(0, 2).nvlinks, 0);
  EXPECT_FALSE(back.link(0, 1).nvlinks.has_value());
  EXPECT_EQ(*back.link(2, 1).measured.readGBps, 0.1 + 0.2);
  EXPECT_FALSE(back.link(1, 2).measured.peerStore.has_value());
  EXPECT_NE(js.find("\"nvlinks\": 0"), std::string::npos);
  EXPECT_EQ(js.find("null"), std::string::npos);  // absent is omitted, never null
}

TEST(TopoJson, ReaderAcceptsTheBaseDocument) {
  Topology t;
  std::string err;
  ASSERT_EQ(fromJson(kTwoGpus, &t).into(&err), arfuseSuccess) << err;
  EXPECT_EQ(t.link(1, 0).measured.readGBps, 300.5);
  EXPECT_EQ(t.source, "handwritten");
}

TEST(TopoJson, MissingFieldIsNamed) {
  std::string doc = replaceOnce(kTwoGpus, R"("sm_count": 132, "memory_bytes": 1024},
    {"index": 1)",
                                R"("memory_bytes": 1024},
    {"index": 1)");
  EXPECT_EQ(readError(doc), "gpus[0].sm_count at 6:5: missing required field \"sm_count\" in the object starting here");
  EXPECT_EQ(readError(replaceOnce(kTwoGpus, R"("source": "handwritten",)", "")),
            "source at 1:1: missing required field \"source\" in the object starting here");
}

TEST(TopoJson, WrongTypeIsNamed) {
  EXPECT_EQ(readError(replaceOnce(kTwoGpus, R"("cc_major": 9, "cc_minor": 0, "sm_count": 132, "memory_bytes": 1024},
    {"index": 1)",
                                  R"("cc_major": "9", "cc_minor": 0, "sm_count": 132, "memory_bytes": 1024},
    {"index": 1)")),
            "gpus[0].cc_major at 6:94: expected an integer, got a string");
  EXPECT_EQ(readError(replaceOnce(kTwoGpus, R"("can_access_peer": true)", R"("can_access_peer": 1)")),
            "links[0].can_access_peer at 10:45: expected true or false, got a number");
  EXPECT_EQ(readError(replaceOnce(kTwoGpus, R"("read_gbps": 300.5)", R"("read_gbps": "fast")")),
            "links[1].measured.read_gbps at 11:173: expected a number, got a string");
  EXPECT_EQ(readError(replaceOnce(kTwoGpus, R"("sm_count": 132)", R"("sm_count": 132.0)")),
            "gpus[0].sm_count at 6:124: expected an integer, got 132.0");
  EXPECT_EQ(readError(replaceOnce(kTwoGpus, R"("notes": [])", R"("notes": [7])")),
            "notes[0] at 4:13: expected a string, got a number");
  EXPECT_EQ(readError(replaceOnce(kTwoGpus, R"("read_gbps": 300.5)", R"("read_gbps": null)")),
            "links[1].measured.read_gbps at 11:173: expected a number, got null");
}

TEST(TopoJson, BadSchemaVersionIsRejected) {
  EXPECT_EQ(readError(replaceOnce(kTwoGpus, "arfuse-topology/1", "arfuse-topology/2")),
            "schema at 2:13: unsupported schema \"arfuse-topology/2\" (this reader understands "
            "\"arfuse-topology/1\")");
  EXPECT_EQ(readError(replaceOnce(kTwoGpus, R"("schema": "arfuse-topology/1",)", "")),
            "schema at 1:1: missing required field \"schema\" in the object starting here");
}

TEST(TopoJson, TrailingGarbageIsRejected) {
  EXPECT_EQ(readError(std::string(kTwoGpus) + "x"),
            "JSON syntax error at 14:1: unexpected text after the end of the document");
  EXPECT_EQ(readError(std::string(kTwoGpus) + "{}"),
            "JSON syntax error at 14:1: unexpected text after the end of the document");
  // Trailing whitespace is fine.
  Topology t;
  std::string err;
  EXPECT_EQ(fromJson(std::string(kTwoGpus) + "\n\n  \n", &t).into(&err), arfuseSuccess) << err;
}

TEST(TopoJson, UnknownAndDuplicateFieldsAreRejected) {
  EXPECT_EQ(readError(replaceOnce(kTwoGpus, R"("read_gbps": 300.5)", R"("read_gpbs": 300.5)")),
            "links[1].measured.read_gpbs at 11:160: unknown field");
  EXPECT_EQ(
      readError(replaceOnce(kTwoGpus, R"("source": "handwritten",)", R"("source": "handwritten", "source": "probe",)")),
      "JSON syntax error at 3:28: duplicate key \"source\"");
}

TEST(TopoJson, BadEnumAndStructureAreRejected) {
  EXPECT_EQ(readError(replaceOnce(kTwoGpus, R"("pcie": "same_socket"},)", R"("pcie": "PIX"},)")),
            "links[0].pcie at 10:132: unknown value \"PIX\"");
  EXPECT_EQ(readError(replaceOnce(kTwoGpus, R"({"from": 0, "to": 1,)", R"({"from": 1, "to": 1,)")),
            "links[0] at 10:5: expected the pair 0->1, found 1->1 (links list every ordered pair once, sorted by "
            "from, then to)");
  EXPECT_EQ(readError(replaceOnce(kTwoGpus, R"({"index": 1,)", R"({"index": 3,)")),
            "gpus[1].index at 7:15: is 3 but this is entry 1 (gpus are listed in index order, starting at 0)");
  EXPECT_EQ(readError(replaceOnce(kTwoGpus, R"("uuid": "GPU-b")", R"("uuid": "GPU-a")")),
            "invalid topology: gpus[1].uuid GPU-a appears twice");
  EXPECT_EQ(readError(replaceOnce(kTwoGpus, R"("nvlinks": 18, "pcie": "same_socket", "measured")",
                                  R"("nvlinks": -1, "pcie": "same_socket", "measured")")),
            "links[1].nvlinks at 11:120: -1 is out of range [0, 64]");
  EXPECT_EQ(readError(replaceOnce(kTwoGpus, R"("read_gbps": 300.5)", R"("read_gbps": -3)")),
            "links[1].measured.read_gbps at 11:173: must not be negative, got -3");
}

TEST(TopoJson, SyntaxErrorsHaveLineAndColumn) {
  EXPECT_EQ(readError(""), "JSON syntax error at 1:1: unexpected end of input (expected a value)");
  EXPECT_EQ(readError("[1, 2]"), "(document) at 1:1: expected an object, got an array");
  EXPECT_EQ(readError("{\n  \"schema\": \"arfuse-topology/1\",\n  \"source\": 'x'\n}"),
            "JSON syntax error at 3:13: unexpected character ''' (expected a value)");
  EXPECT_EQ(readError("{\"schema\": 01}"), "JSON syntax error at 1:13: leading zeros are not allowed in numbers");
  EXPECT_EQ(readError("{\"a\": \"x\ny\"}"), "JSON syntax error at 1:9: control character inside a string (escape it)");
  EXPECT_EQ(readError("{\"a\": [1, 2,]}"), "JSON syntax error at 1:13: unexpected character ']' (expected a value)");
  EXPECT_EQ(readError(std::string(100, '[')), "JSON syntax error at 1:66: nesting deeper than 64 levels");
}

TEST(TopoJson, StringEscapesDecode) {
  std::string doc = replaceOnce(kTwoGpus, R"("name": "A")", R"("name": "\u00b5\ud83d\ude00\/\"")");
  Topology t;
  std::string err;
  ASSERT_EQ(fromJson(doc, &t).into(&err), arfuseSuccess) << err;
  EXPECT_EQ(t.gpus[0].name, "\xc2\xb5\xf0\x9f\x98\x80/\"");
  EXPECT_NE(readError(replaceOnce(kTwoGpus, R"("name": "A")", R"("name": "\ud83d")")).find("unpaired UTF-16"),
            std::string::npos);
}

TEST(TopoJson, EveryTruncationIsAnErrorNotACrash) {
  // A file cut short (disk full, interrupted copy) must be reported, never half-read.
  const std::string doc = kTwoGpus;
  const size_t end = doc.rfind('}');
  for (size_t n = 0; n <= end; ++n) {
    Topology t;
    std::string err;
    EXPECT_NE(fromJson(doc.substr(0, n), &t).into(&err), arfuseSuccess) << "prefix of " << n << " bytes accepted";
    EXPECT_FALSE(err.empty());
  }
}

TEST(TopoJson, ReadFileNamesThePath) {
  Topology t;
  std::string err;
  // A file that cannot be opened is a system error; what is in a file that opens, an invalid argument.
  EXPECT_EQ(readJsonFile("/nonexistent/topology.json", &t).into(&err), arfuseSystemError);
  EXPECT_EQ(err, "/nonexistent/topology.json: cannot open: No such file or directory");
}

}  // namespace
}  // namespace topo
}  // namespace arfuse
