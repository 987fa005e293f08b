// Real logs quoted from public issue threads (tests/triage/real/NAME.log), each with NAME.expect:
//   source = URL of the thread (and the comment that establishes the cause)
//   cause = the root cause as the thread establishes it, in words
//   verdict = RE2 regex: the VERDICT line must match it for the cause to count as named
//   absent_verdict = RE2 regex the VERDICT line must not match (e.g. "GPU out of memory" for a host OOM)
//   root = signature id the report must name; exit = 0|1
//   remedy = text the report's remedy must contain
//   class = the classes of misses the log exercises (see kClasses)
//   explanation = RE2 regex the report's explanation (the VERDICT line and the ROOT CAUSE / NO ROOT CAUSE
//                 block up to ALSO SEEN: meaning, remedy, capture list) must match: naming the right line
//                 is not enough when the story told about it is wrong
//
// Scoring is by the verdict line (and, where the log states one, the explanation rule). The same rules are
// applied to two naive baselines - the first and the last line matching (?i)error|exception|fail, the
// line standing for both verdict and explanation - so the score and the baselines are judged alike; all
// three are printed and written to triage_real_logs.json.
#include <dirent.h>
#include <gtest/gtest.h>
#include <re2/re2.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

#include "expect_files.h"
#include "triage.h"

namespace {

const std::string kReal = ARFUSE_TRIAGE_REAL;
// Logs gathered after the catalogue was frozen (at 3a5d9ce) and scored before any change for them: the
// out-of-sample estimate. Same format; scored and reported, not held to the 85 % goal.
const std::string kHoldout = ARFUSE_TRIAGE_HOLDOUT;
// Logs gathered for issue 35 and written down (with their verdict and explanation rules) before any change
// for them: never tuned on. Scored and reported.
const std::string kHoldout35 = ARFUSE_TRIAGE_HOLDOUT35;

// The classes of misses two issues found: the first round's, then issue 35's (the grep floor, an origin
// behind a generic echo, an honest decline, the explanation following the quoted error, messages spanning
// lines, NCCL's own formats, INFO lines as evidence, undefined symbols, driver lines without an Xid, the
// environment beyond one server, configuration errors).
const char* kClasses[] = {"bare_exception", "many_wordings",    "missing_signature", "explanation_wins",
                          "host_memory",    "cut_traceback",    "remedy_matches",    "input_format",
                          "grep_floor",     "origin_over_echo", "decline",           "explanation_follows_error",
                          "multi_line",     "nccl_format",      "info_evidence",     "undefined_symbol",
                          "driver_no_xid",  "environment",      "config_error"};

struct RealLog {
  std::string name, source, cause, verdict, absent, root, remedy, explanation;
  int exit = 0;
  std::vector<std::string> classes;
};
void PrintTo(const RealLog& r, std::ostream* os) { *os << r.name; }

std::vector<RealLog> loadReal(const std::string& dir = kReal) {
  std::vector<RealLog> out;
  for (const triage_test::ExpectFile& f : triage_test::readExpectFiles(dir)) {
    RealLog x;
    x.name = f.name;
    for (const auto& [k, v] : f.fields) {
      if (k == "source") x.source = v;
      if (k == "cause") x.cause = v;
      if (k == "verdict") x.verdict = v;
      if (k == "absent_verdict") x.absent = v;
      if (k == "root") x.root = v;
      if (k == "remedy") x.remedy = v;
      if (k == "explanation") x.explanation = v;
      if (k == "exit") x.exit = std::stoi(v);
      if (k == "class") {
        std::istringstream ss(v);
        std::string t;
        while (ss >> t) x.classes.push_back(t);
      }
    }
    out.push_back(x);
  }
  return out;
}

int run(const std::vector<std::string>& args, std::string* out) {
  std::ostringstream o, e;
  int rc = arfuse::triage::runCli(args, o, e);
  *out = o.str();
  return rc;
}

std::string verdictLine(const std::string& report) {
  size_t v = report.find("VERDICT: ");
  return v == std::string::npos ? "" : report.substr(v, report.find('\n', v) - v);
}

// Does `line` name the cause, by the fixture's rule?
bool names(const RealLog& x, const std::string& line) {
  RE2 want(x.verdict);
  if (!RE2::PartialMatch(line, want)) return false;
  if (x.absent.empty()) return true;
  RE2 bad(x.absent);
  return !RE2::PartialMatch(line, bad);
}

// The report's explanation: the verdict line and the block after it, up to the first of the sections that
// list other events (ALSO SEEN, CONTEXT, TIMELINE, ORDERING).
std::string explanationOf(const std::string& report) {
  const size_t v = report.find("VERDICT: ");
  if (v == std::string::npos) return "";
  size_t end = report.size();
  for (const char* s : {"\nALSO SEEN", "\nCONTEXT (", "\nTIMELINE", "\nORDERING"}) {
    const size_t e = report.find(s, v);
    if (e != std::string::npos) end = std::min(end, e);
  }
  return report.substr(v, end - v);
}

// Does the explanation tell the established cause (where the log states a rule for it)?
bool explains(const RealLog& x, const std::string& text) {
  return x.explanation.empty() || RE2::PartialMatch(text, RE2(x.explanation));
}

// The naive baselines: first and last line matching (?i)error|exception|fail.
void naiveLines(const std::string& path, std::string* first, std::string* last) {
  static const RE2 naive("(?i)error|exception|fail");
  std::ifstream in(path, std::ios::binary);
  std::string line;
  first->clear();
  last->clear();
  while (std::getline(in, line)) {
    if (!RE2::PartialMatch(line, naive)) continue;
    if (first->empty()) *first = line;
    *last = line;
  }
}

class Real : public ::testing::TestWithParam<RealLog> {};

TEST_P(Real, CitedAndDiagnosed) {
  const RealLog& x = GetParam();
  EXPECT_EQ(x.source.rfind("https://github.com/", 0), 0u) << x.name << ": cite the thread (source = URL)";
  EXPECT_FALSE(x.cause.empty()) << x.name << ": say what the thread established (cause = ...)";
  ASSERT_FALSE(x.verdict.empty()) << x.name << ": the verdict rule (verdict = regex)";
  ASSERT_TRUE(RE2(x.verdict).ok()) << x.verdict;
  ASSERT_TRUE(x.explanation.empty() || RE2(x.explanation).ok()) << x.explanation;
  for (const auto& c : x.classes)
    EXPECT_TRUE(std::find(std::begin(kClasses), std::end(kClasses), c) != std::end(kClasses)) << "unknown class " << c;
  const std::string log = kReal + "/" + x.name + ".log";
  std::string text, json;
  EXPECT_EQ(run({log}, &text), x.exit) << text;
  EXPECT_EQ(run({log, "--json"}, &json), x.exit);
  if (!x.root.empty()) {
    size_t ev = json.find("\"event\":{\"id\":\"");
    ASSERT_NE(ev, std::string::npos) << text;
    EXPECT_EQ(json.substr(ev + 15, json.find('"', ev + 15) - ev - 15), x.root) << text;
  }
  // Logs that state an explanation rule (issue 35's) are held to their verdict rule one by one too.
  if (!x.explanation.empty()) EXPECT_TRUE(names(x, verdictLine(text))) << x.name << ": " << verdictLine(text);
  if (!x.explanation.empty())
    EXPECT_TRUE(RE2::PartialMatch(explanationOf(text), RE2(x.explanation)))
        << x.name << ": the explanation must match " << x.explanation << "\n"
        << text;
  if (!x.remedy.empty()) {
    size_t r = text.find("\n  remedy:");
    ASSERT_NE(r, std::string::npos) << text;
    size_t e = r + 1;  // the field ends at the next line that is not a continuation (indented deeper)
    while ((e = text.find('\n', e + 1)) != std::string::npos && text.compare(e, 4, "\n   ") == 0) {
    }
    EXPECT_NE(text.substr(r, e - r).find(x.remedy), std::string::npos) << text;
  }
}

std::string nameOf(const ::testing::TestParamInfo<RealLog>& i) { return triage_test::testName(i.param.name); }

INSTANTIATE_TEST_SUITE_P(Triage, Real, ::testing::ValuesIn(loadReal()), nameOf);

// Holdout logs are cited like the others; their verdicts are only scored.
TEST(TriageRealLogs, HoldoutLogsAreCited) {
  for (const std::string& dir : {kHoldout, kHoldout35})
    for (const auto& x : loadReal(dir)) {
      EXPECT_EQ(x.source.rfind("https://github.com/", 0), 0u) << x.name;
      EXPECT_FALSE(x.cause.empty()) << x.name;
      EXPECT_TRUE(RE2(x.verdict).ok()) << x.name;
      EXPECT_TRUE(x.explanation.empty() || RE2(x.explanation).ok()) << x.name;
    }
}

std::string jsonStr(const std::string& s) {
  std::string o = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    if (c >= 0x20 && c < 0x80) o += static_cast<char>(c);
  }
  return o + "\"";
}

struct Score {
  size_t logs = 0;
  int ours = 0, oursLine = 0, first = 0, last = 0, firstLine = 0;
  std::string rows;
};

Score score(const std::string& dir, const char* label) {
  Score sc;
  const auto logs = loadReal(dir);
  sc.logs = logs.size();
  std::ostringstream rows;
  for (const auto& x : logs) {
    const std::string log = dir + "/" + x.name + ".log";
    std::string text, f, l;
    const int rc = run({log}, &text);
    const std::string v = verdictLine(text);
    naiveLines(log, &f, &l);
    const bool lineOk = names(x, v);
    const bool a = lineOk && explains(x, explanationOf(text)) && (x.explanation.empty() || rc == x.exit);
    const bool b = names(x, f) && explains(x, f), c = names(x, l) && explains(x, l);
    sc.ours += a;
    sc.oursLine += lineOk;
    sc.first += b;
    sc.last += c;
    sc.firstLine += names(x, f);
    if (!a)
      std::printf("[ %s ] MISS %s%s\n    cause:   %s\n    verdict: %s\n", label, x.name.c_str(),
                  lineOk ? " (the verdict names the line; the explanation or exit code does not fit)" : "",
                  x.cause.c_str(), v.c_str());
    rows << (rows.tellp() > 0 ? ",\n" : "") << "      {\"name\": " << jsonStr(x.name)
         << ", \"source\": " << jsonStr(x.source) << ", \"verdict_names_cause\": " << (a ? "true" : "false")
         << ", \"naive_first\": " << (b ? "true" : "false") << ", \"naive_last\": " << (c ? "true" : "false") << "}";
  }
  const double n = static_cast<double>(std::max<size_t>(sc.logs, 1));
  std::printf(
      "[ %s ] %zu logs: the report names the cause in %d (%.1f %%; the verdict line alone in %d); naive grep "
      "(?i)error|exception|fail, first match: %d (%.1f %%; the line alone in %d), last match: %d (%.1f %%)\n",
      label, sc.logs, sc.ours, 100.0 * sc.ours / n, sc.oursLine, sc.first, 100.0 * sc.first / n, sc.firstLine, sc.last,
      100.0 * sc.last / n);
  sc.rows = rows.str();
  return sc;
}

std::string scoreJson(const Score& s) {
  std::ostringstream j;
  j << "{\"logs\": " << s.logs << ", \"verdict_names_cause\": " << s.ours
    << ", \"verdict_line_names_cause\": " << s.oursLine << ", \"naive_first_match\": " << s.first
    << ", \"naive_first_line_only\": " << s.firstLine << ", \"naive_last_match\": " << s.last
    << ",\n    \"per_log\": [\n"
    << s.rows << "\n    ]}";
  return j.str();
}

// The goal: >= 85 % of >= 40 real logs named by the verdict line, beside the naive baselines;
// the holdout set is scored the same way and reported beside it.
TEST(TriageRealLogs, ScoreByVerdictLineAgainstNaiveGrep) {
  const Score real = score(kReal, "real-logs"), held = score(kHoldout, "holdout"),
              held35 = score(kHoldout35, "holdout35");
  std::ofstream j(ARFUSE_TRIAGE_SCORE_JSON);
  j << "{\n  \"schema\": \"arfuse.triage.real_logs.v1\",\n  \"naive_rule\": \"first / last line matching "
       "(?i)error|exception|fail\",\n  \"real\": "
    << scoreJson(real) << ",\n  \"holdout\": " << scoreJson(held) << ",\n  \"holdout35\": " << scoreJson(held35)
    << "\n}\n";
  ASSERT_GE(real.logs, 40u);
  EXPECT_GE(real.ours / static_cast<double>(real.logs), 0.85);
  EXPECT_GE(held.logs, 1u);
  EXPECT_GE(held35.logs, 20u);
}

// Every class of misses the issue lists has real logs, and the verdict names their cause.
TEST(TriageRealLogs, EveryClassOfMissesIsCovered) {
  const auto logs = loadReal();
  std::map<std::string, std::pair<int, int>> byClass;  // class -> (logs, named)
  for (const auto& x : logs) {
    std::string text;
    run({kReal + "/" + x.name + ".log"}, &text);
    const bool ok = names(x, verdictLine(text));
    for (const auto& c : x.classes) {
      ++byClass[c].first;
      byClass[c].second += ok;
    }
  }
  for (const char* c : kClasses) {
    EXPECT_GE(byClass[c].first, 1) << "no real log exercises class " << c;
    std::printf("[ real-logs ] class %-18s %d logs, %d named\n", c, byClass[c].first, byClass[c].second);
  }
}

}  // namespace
