// Every fixtures/NAME.expect is one test: run `arfuse triage` on its inputs (default NAME.log) and
// check the exit code, the root-cause signature, the evidence rank and phrases of the report.
//
// .expect fields (one per line, '#' comments):
//   inputs = a.log b.dmesg     files relative to the fixtures directory
//   exit = 0|1                 expected exit code
//   root = signature id        expected root cause (exit 0)
//   status = echoes_only|no_evidence
//   rank = N                   rank of the evidence line
//   contains = text            must appear in the text report (repeatable)
//   absent = text              must not appear in the text report (repeatable)
//   naive_grep_only_args = 1   the naive grep must match only the server_args line
#include <dirent.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>

#include "expect_files.h"
#include "triage.h"

namespace {

const std::string kDir = ARFUSE_TRIAGE_FIXTURES;

struct Expect {
  std::string name;
  std::vector<std::string> inputs;
  int exit = 0;
  std::string root, status, rank;
  std::vector<std::string> contains, absent;
  bool naiveGrep = false;
};

// gtest prints parameters in test names and failures: show the fixture's name, not its bytes.
void PrintTo(const Expect& e, std::ostream* os) { *os << e.name; }

std::vector<Expect> loadExpects() {
  std::vector<Expect> out;
  for (const triage_test::ExpectFile& f : triage_test::readExpectFiles(kDir)) {
    Expect x;
    x.name = f.name;
    for (const auto& [k, v] : f.fields) {
      if (k == "inputs") {
        std::istringstream ss(v);
        std::string t;
        while (ss >> t) x.inputs.push_back(kDir + "/" + t);
      } else if (k == "exit") {
        x.exit = std::stoi(v);
      } else if (k == "root") {
        x.root = v;
      } else if (k == "status") {
        x.status = v;
      } else if (k == "rank") {
        x.rank = v;
      } else if (k == "contains") {
        x.contains.push_back(v);
      } else if (k == "absent") {
        x.absent.push_back(v);
      } else if (k == "naive_grep_only_args") {
        x.naiveGrep = v == "1";
      }
    }
    if (x.inputs.empty()) x.inputs.push_back(kDir + "/" + x.name + ".log");
    out.push_back(x);
  }
  return out;
}

int run(std::vector<std::string> args, std::string* out) {
  std::ostringstream o, e;
  int rc = arfuse::triage::runCli(args, o, e);
  *out = o.str() + e.str();
  return rc;
}

// The JSON report from "nranks" on, with the input's path replaced.
std::string withoutPath(std::string json, const std::string& path) {
  json = json.substr(json.find("\"nranks\""));
  for (size_t p; (p = json.find(path)) != std::string::npos;) json.replace(p, path.size(), "INPUT");
  return json;
}

class Fixture : public ::testing::TestWithParam<Expect> {};

TEST_P(Fixture, RootCause) {
  const Expect& x = GetParam();
  std::string text, json;
  int rc = run(x.inputs, &text);
  std::vector<std::string> jargs = x.inputs;
  jargs.push_back("--json");
  int rcJson = run(jargs, &json);
  EXPECT_EQ(rc, x.exit) << text;
  EXPECT_EQ(rcJson, rc);
  if (!x.root.empty()) {
    // A symptom with no cause (status insufficient_evidence) is reported as "symptom", not "root_cause".
    const bool symptom = x.status == "insufficient_evidence";
    EXPECT_NE(json.find(symptom ? "\"symptom\":{" : "\"root_cause\":{"), std::string::npos) << json;
    // The root cause's event is the first "event" object: its id comes right after.
    size_t ev = json.find("\"event\":{\"id\":\"");
    ASSERT_NE(ev, std::string::npos) << text;
    std::string id = json.substr(ev + 15, json.find('"', ev + 15) - ev - 15);
    EXPECT_EQ(id, x.root) << text;
  }
  if (!x.status.empty()) {
    EXPECT_NE(json.find("\"status\":\"" + x.status + "\""), std::string::npos) << text;
  }
  if (!x.rank.empty()) {
    size_t ev = json.find("\"event\":{");
    ASSERT_NE(ev, std::string::npos);
    size_t first = json.find("\"first\":{", ev);
    size_t rk = json.find("\"rank\":", first);
    std::string got = json.substr(rk + 7, json.find(',', rk) - rk - 7);
    EXPECT_EQ(got, x.rank) << text;
  }
  for (const auto& c : x.contains) EXPECT_NE(text.find(c), std::string::npos) << "missing '" << c << "' in:\n" << text;
  for (const auto& a : x.absent) EXPECT_EQ(text.find(a), std::string::npos) << "unexpected '" << a << "' in:\n" << text;
  if (x.naiveGrep) {
    std::ifstream in(x.inputs[0]);
    std::regex naive("Traceback|Exception|NCCL error|RuntimeError|sigquit");
    std::string line;
    int hits = 0, argsHits = 0;
    while (std::getline(in, line))
      if (std::regex_search(line, naive)) {
        ++hits;
        argsHits += line.find("server_args=") != std::string::npos;
      }
    EXPECT_EQ(hits, 1);
    EXPECT_EQ(argsHits, 1);
  }
}

std::string nameOf(const ::testing::TestParamInfo<Expect>& i) { return triage_test::testName(i.param.name); }

INSTANTIATE_TEST_SUITE_P(Triage, Fixture, ::testing::ValuesIn(loadExpects()), nameOf);

TEST(TriageFixtures, AtLeast25) { EXPECT_GE(loadExpects().size(), 25u); }

// Compressed input: the same verdict from a .gz (detected by content, whatever its name).
TEST(TriageInput, GzipSameAsPlain) {
  std::string src = kDir + "/sglang_nccl_warn_after_sigquit.log";
  std::string gz = ::testing::TempDir() + "/triage_fixture_copy.log";  // no .gz suffix on purpose
  std::ifstream in(src, std::ios::binary);
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  gzFile g = gzopen(gz.c_str(), "wb");
  ASSERT_NE(g, nullptr);
  gzwrite(g, data.data(), static_cast<unsigned>(data.size()));
  gzclose(g);
  std::string a, b;
  EXPECT_EQ(run({src, "--json"}, &a), 0);
  EXPECT_EQ(run({gz, "--json"}, &b), 0);
  EXPECT_NE(b.find("\"compression\":\"gzip\""), std::string::npos) << b;
  // Identical apart from the input description.
  EXPECT_EQ(withoutPath(a, src), withoutPath(b, gz));
  std::remove(gz.c_str());
}

TEST(TriageInput, XzSameAsPlain) {
  std::string src = kDir + "/sglang_p2p_unsupported.log";
  std::string xz = ::testing::TempDir() + "/triage_fixture_copy.xz";
  if (std::system(("xz -c " + src + " > " + xz + " 2>/dev/null").c_str()) != 0) GTEST_SKIP() << "no xz tool";
  std::string a, b;
  int rc = run({xz, "--json"}, &b);
  std::remove(xz.c_str());
  if (b.find("no liblzma") != std::string::npos) GTEST_SKIP() << "built without liblzma";
  EXPECT_EQ(rc, 0) << b;
  EXPECT_EQ(run({src, "--json"}, &a), 0);
  EXPECT_EQ(withoutPath(a, src), withoutPath(b, xz));
}

TEST(TriageCli, UnknownFlagIsUsageError) {
  std::string out;
  EXPECT_EQ(run({"--frobnicate"}, &out), 2);
  EXPECT_NE(out.find("--frobnicate"), std::string::npos);
  EXPECT_EQ(run({kDir + "/does_not_exist.log"}, &out), 2);
  EXPECT_EQ(run({"--context"}, &out), 2);
  EXPECT_EQ(run({"--context", "x"}, &out), 2);
  EXPECT_EQ(run({"--help"}, &out), 0);
  EXPECT_NE(out.find("usage: arfuse triage"), std::string::npos);
}

TEST(TriageCli, ContextShowsLinesAroundEvidence) {
  std::string out;
  EXPECT_EQ(run({kDir + "/sglang_p2p_unsupported.log", "--context", "2"}, &out), 0);
  EXPECT_NE(out.find("LINES AROUND THE EVIDENCE"), std::string::npos) << out;
  EXPECT_NE(out.find("> "), std::string::npos);
  EXPECT_NE(out.find("custom_all_reduce.py"), std::string::npos) << out;  // a line before the evidence
}

}  // namespace
