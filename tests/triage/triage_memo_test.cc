// The memos (src/triage/memo.h) only skip work: a report must not depend on them. Every log of the
// fixtures, the real logs and both holdout sets is analysed three ways - with the memos as shipped, with
// every memo off (the plain path: each line scanned, matched, classified and keyed anew) and with memos of
// eight texts (evicting all the time) - and the text and JSON reports must be byte-identical. Each log is
// read twice as two inputs, so repeated texts are answered from the memo.
#include <dirent.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "analyzer.h"
#include "input.h"
#include "memo.h"
#include "report.h"

namespace {

using arfuse::triage::Analyzer;
using arfuse::triage::Catalog;
using arfuse::triage::TextMemo;

std::vector<std::string> logsIn(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string n = e->d_name;
      if (n.size() > 4 && (n.compare(n.size() - 4, 4, ".log") == 0 || n.find(".dmesg") != std::string::npos))
        out.push_back(dir + "/" + n);
    }
    closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The CLI's loop (cli.cc) with a chosen memo size; returns the text report and the JSON report.
std::string report(const std::string& path, size_t memoEntries) {
  arfuse::triage::InputSet inputs;
  for (int twice = 0; twice < 2; ++twice) {
    const arfuse::Status added = inputs.add(path);
    EXPECT_TRUE(added.ok()) << added.message();
  }
  Analyzer an(Catalog::builtin(), 2, memoEntries);
  arfuse::triage::LogInput in;
  while (inputs.next(&in)) {
    an.beginFile(in.name);
    std::string_view line;
    bool sameLine = false;
    while (in.reader->next(&line, &sameLine)) an.feed(line, sameLine);
    an.endFile(in.compression, in.reader->bytes(), in.reader->windowedLines(), in.reader->error());
  }
  const arfuse::triage::Result r = an.finish();
  arfuse::triage::ReportOptions o;
  o.contextLines = 2;
  std::ostringstream text, json;
  arfuse::triage::writeText(an, r, o, text);
  arfuse::triage::writeJson(an, r, o, json);
  return text.str() + "\n---\n" + json.str();
}

TEST(TriageMemo, ReportsAreTheSameWithAndWithoutTheMemos) {
  std::vector<std::string> logs;
  for (const char* dir : {ARFUSE_TRIAGE_FIXTURES, ARFUSE_TRIAGE_REAL, ARFUSE_TRIAGE_HOLDOUT, ARFUSE_TRIAGE_HOLDOUT35}) {
    const std::vector<std::string> l = logsIn(dir);
    logs.insert(logs.end(), l.begin(), l.end());
  }
  ASSERT_GT(logs.size(), 100u);
  for (const std::string& log : logs) {
    const std::string shipped = report(log, arfuse::triage::Matcher::kMemoEntries);
    EXPECT_EQ(shipped, report(log, 0)) << log << ": the memoised report differs from the plain path's";
    EXPECT_EQ(shipped, report(log, 8)) << log << ": the report differs when the memos evict constantly";
  }
}

TEST(TriageMemo, RemembersByTextAndTagEvictsTheLeastRecentAndKeepsItsBudget) {
  TextMemo<int> m(8, 64, 1024);  // two sets of four
  m.put("alpha", 1, 10);
  m.put("alpha", 2, 20);
  ASSERT_NE(m.find("alpha", 1), nullptr);
  EXPECT_EQ(*m.find("alpha", 1), 10);
  EXPECT_EQ(*m.find("alpha", 2), 20);
  EXPECT_EQ(m.find("alpha", 3), nullptr);
  EXPECT_EQ(m.find("alphb", 1), nullptr);
  m.put(std::string(65, 'x'), 0, 1);  // over maxText: never kept
  EXPECT_EQ(m.find(std::string(65, 'x'), 0), nullptr);
  // Many texts through two sets of four: at most eight are kept, the most recently used survive.
  for (int i = 0; i < 100; ++i) m.put("t" + std::to_string(i), 0, i);
  int kept = 0;
  for (int i = 0; i < 100; ++i)
    if (const int* v = m.find("t" + std::to_string(i), 0)) {
      EXPECT_EQ(*v, i);
      ++kept;
    }
  EXPECT_LE(kept, 8);
  EXPECT_GE(kept, 1);
  EXPECT_NE(m.find("t99", 0), nullptr);
  // The budget bounds the bytes kept: 1024 bytes hold at most a few 60-byte texts' buffers.
  TextMemo<int> small(64, 512, 256);
  for (int i = 0; i < 64; ++i) small.put(std::string(60, static_cast<char>('a' + i % 26)) + std::to_string(i), 0, i);
  EXPECT_LE(small.bytesKept(), 256u);
  TextMemo<int> off(0, 512, 1024);
  off.put("alpha", 0, 1);
  EXPECT_EQ(off.find("alpha", 0), nullptr);
}

}  // namespace
