// The grep floor, checked on every log the tests hold (fixtures/, real/, holdout/; not holdout35/, which is
// scored, never tuned on, so a failure there is reported rather than fixed): wherever a
// grep for the first error line finds one, triage must not answer "no error line". It names a root cause,
// says the evidence is insufficient (a symptom it read), or - when it says the logs hold only echoes -
// lists that very line among the events it read. A verdict is never worse than grep.
#include <dirent.h>
#include <gtest/gtest.h>
#include <re2/re2.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "expect_files.h"
#include "triage.h"

namespace {

struct Log {
  std::string name;
  std::vector<std::string> inputs;
};
void PrintTo(const Log& l, std::ostream* os) { *os << l.name; }

// Every NAME.expect of a directory; its inputs (fixtures may name several), else NAME.log.
std::vector<Log> logsIn(const std::string& dir, const std::string& label) {
  std::vector<Log> out;
  for (const auto& f : triage_test::readExpectFiles(dir)) {
    Log l;
    l.name = label + "_" + f.name;
    for (const auto& [k, v] : f.fields)
      if (k == "inputs") {
        std::istringstream ss(v);
        std::string t;
        while (ss >> t) l.inputs.push_back(dir + "/" + t);
      }
    if (l.inputs.empty()) l.inputs.push_back(dir + "/" + f.name + ".log");
    out.push_back(l);
  }
  return out;
}

std::vector<Log> allLogs() {
  std::vector<Log> v;
  for (const auto& [dir, label] : std::vector<std::pair<std::string, std::string>>{
           {ARFUSE_TRIAGE_FIXTURES, "fixtures"}, {ARFUSE_TRIAGE_REAL, "real"}, {ARFUSE_TRIAGE_HOLDOUT, "holdout"}})
    for (auto& l : logsIn(dir, label)) v.push_back(l);
  return v;
}

// The first-error grep: the first line matching (?i)error|exception|fail, as the score's baseline.
bool firstErrorLine(const std::vector<std::string>& inputs, std::string* file, int* line) {
  static const RE2 grep("(?i)error|exception|fail");
  for (const auto& in : inputs) {
    std::ifstream f(in, std::ios::binary);
    std::string l;
    int n = 0;
    while (std::getline(f, l)) {
      ++n;
      if (RE2::PartialMatch(l, grep)) {
        *file = in;
        *line = n;
        return true;
      }
    }
  }
  return false;
}

class Floor : public ::testing::TestWithParam<Log> {};

TEST_P(Floor, NeverWorseThanTheFirstErrorGrep) {
  const Log& l = GetParam();
  std::string file;
  int line = 0;
  if (!firstErrorLine(l.inputs, &file, &line)) return;  // nothing for the grep to find: nothing to be worse than
  std::vector<std::string> args = l.inputs;
  args.push_back("--json");
  std::ostringstream o, e;
  arfuse::triage::runCli(args, o, e);
  const std::string json = o.str();
  ASSERT_EQ(json.find("\"status\":\"no_evidence\""), std::string::npos)
      << l.name << ": the grep finds " << file << ":" << line << " but the verdict says there is no error line\n"
      << json.substr(0, 600);
  if (json.find("\"status\":\"echoes_only\"") != std::string::npos) {
    const std::string occ = "{\"file\":\"" + file + "\",\"line\":" + std::to_string(line) + ",";
    EXPECT_NE(json.find(occ), std::string::npos)
        << l.name << ": only echoes, yet the line the grep finds (" << file << ":" << line << ") is not among them";
  }
}

std::string nameOf(const ::testing::TestParamInfo<Log>& i) { return triage_test::testName(i.param.name); }

INSTANTIATE_TEST_SUITE_P(Triage, Floor, ::testing::ValuesIn(allLogs()), nameOf);

}  // namespace
