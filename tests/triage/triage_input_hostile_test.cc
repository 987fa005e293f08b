// triage's input layer against inputs built to hurt it (issue 37 items 2, 4 and 5): line splitting
// that must stay linear on '\r'-only data, directory walks that must neither block on a FIFO nor
// follow a link out of the directory, and names that must not forge report lines. Slow cases run in
// a child under an alarm; the bounds are generous and are not speed targets.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>

#include "../hostile_util.h"
#include "input.h"
#include "triage.h"

namespace arfuse {
namespace triage {
namespace {

using hostile::finishesWithin;

class RepeatSource : public ByteSource {
 public:
  RepeatSource(char c, size_t bytes) : c_(c), left_(bytes) {}
  long read(char* dst, size_t n) override {
    n = std::min(n, left_);
    std::memset(dst, c_, n);
    left_ -= n;
    return static_cast<long>(n);
  }

 private:
  char c_;
  size_t left_;
};

std::string tempDir(const std::string& name) { return hostile::freshDir("triage_input_" + name); }
void writeFile(const std::string& path, const std::string& data) { hostile::writeBytes(path, data); }

const char* kIllegal = "RuntimeError: CUDA error: an illegal memory access was encountered\n";

// Every byte a lone '\r' (a progress bar gone wrong): one empty segment per byte. Each segment used
// to search its 64 KiB window for '\n' again (~1 us per byte: 100 MB took 100 s).
TEST(TriageInputHostile, CarriageReturnsOnlyStayLinear) {
  const size_t bytes = size_t{16} << 20;
  double took = 0;
  const bool ok = finishesWithin(
      8,
      [&] {
        LineReader r(std::make_unique<RepeatSource>('\r', bytes));
        std::string_view seg;
        bool same = false;
        size_t n = 0, nonEmpty = 0;
        while (r.next(&seg, &same)) {
          ++n;
          nonEmpty += !seg.empty();
        }
        // Empty redraws are not delivered; the stream's last '\r' ends its one line.
        return n == 1 && nonEmpty == 0 && r.bytes() == bytes;
      },
      &took);
  std::printf("[ hostile ] 16 MiB of '\\r': %.2f s\n", took);
  EXPECT_TRUE(ok) << "did not read 16 MiB of '\\r' within 8 s";
  // The same with '\n' and with "\r\n" (the searches for one terminator must not cost the other).
  for (const char* unit : {"\n", "\r\n", "a\rb\n"}) {
    std::string data;
    while (data.size() < (4u << 20)) data += unit;
    struct StringSource : ByteSource {
      std::string s;
      size_t at = 0;
      long read(char* dst, size_t n) override {
        n = std::min(n, s.size() - at);
        std::memcpy(dst, s.data() + at, n);
        at += n;
        return static_cast<long>(n);
      }
    };
    auto src = std::make_unique<StringSource>();
    src->s = data;
    const bool split = finishesWithin(
        8,
        [&] {
          LineReader r(std::move(src));
          std::string_view seg;
          bool same = false;
          size_t lines = 0;
          while (r.next(&seg, &same)) lines += !same;
          return lines > 0;
        },
        &took);
    EXPECT_TRUE(split) << "unit '" << unit << "'";
  }
}

// A file that is a FIFO by the time triage opens it (the walk saw a regular file; the name is
// anyone's to replace in a shared log directory): skipped with a warning, never waited on.
TEST(TriageInputHostile, WalkedFileThatBecameAFifoIsSkipped) {
  const std::string d = tempDir("fifo");
  writeFile(d + "/a.log", "hello\n");
  writeFile(d + "/b.log", kIllegal);
  double took = 0;
  const bool ok = finishesWithin(
      10,
      [&] {
        InputSet s;
        if (!s.add(d).ok()) return false;
        unlink((d + "/a.log").c_str());
        if (mkfifo((d + "/a.log").c_str(), 0644) != 0) return false;
        LogInput in;
        std::vector<std::string> names;
        while (s.next(&in)) names.push_back(in.name);
        bool warned = false;
        for (const auto& w : s.warnings()) warned = warned || w.find("a.log: is now a FIFO") != std::string::npos;
        return names.size() == 1 && names[0] == d + "/b.log" && warned && s.skipped() == 1;
      },
      &took);
  std::system(("rm -rf '" + d + "'").c_str());
  EXPECT_TRUE(ok) << "blocked on the FIFO (or did not skip it with a warning) after " << took << " s";
}

// Symbolic links in a walked directory: to a file inside it, followed; to one outside it (a 0600
// file of whoever runs triage), not followed, with a warning naming both.
TEST(TriageInputHostile, LinksOutOfTheWalkedDirectoryAreNotFollowed) {
  const std::string d = tempDir("links"), outside = tempDir("outside");
  mkdir((d + "/logs").c_str(), 0755);
  writeFile(d + "/logs/rank0.log", "hello\n");
  writeFile(outside + "/secret", std::string("secret line: ") + kIllegal);
  chmod((outside + "/secret").c_str(), 0600);
  ASSERT_EQ(symlink((d + "/logs/rank0.log").c_str(), (d + "/logs/inside.log").c_str()), 0);
  ASSERT_EQ(symlink((outside + "/secret").c_str(), (d + "/logs/rank1.log").c_str()), 0);
  InputSet s;
  const Status added = s.add(d + "/logs");
  ASSERT_TRUE(added.ok()) << added.message();
  LogInput in;
  std::vector<std::string> names;
  while (s.next(&in)) names.push_back(in.name);
  EXPECT_EQ(names, (std::vector<std::string>{d + "/logs/inside.log", d + "/logs/rank0.log"}));
  bool warned = false;
  for (const auto& w : s.warnings()) warned = warned || w.find("rank1.log: a symbolic link to") != std::string::npos;
  EXPECT_TRUE(warned);
  // Through the CLI: the secret is nowhere in the report.
  std::ostringstream out, errs;
  runCli({d + "/logs"}, out, errs);
  EXPECT_EQ(out.str().find("secret line"), std::string::npos) << out.str();
  // A link given on the command line is the caller's choice: followed.
  std::ostringstream out2, errs2;
  EXPECT_EQ(runCli({d + "/logs/rank1.log"}, out2, errs2), 0) << out2.str() << errs2.str();
  std::system(("rm -rf '" + d + "' '" + outside + "'").c_str());
}

// File and tar member names are any string: a newline in one must not print a line of its own.
TEST(TriageInputHostile, NamesCannotForgeReportLines) {
  const std::string d = tempDir("names");
  const std::string forged = "x\nVERDICT: forged verdict\n\x1b]0;title\x07.log";
  writeFile(d + "/" + forged, kIllegal);
  for (bool json : {false, true}) {
    std::ostringstream out, errs;
    std::vector<std::string> args = {d};
    if (json) args.push_back("--json");
    EXPECT_EQ(runCli(args, out, errs), 0) << out.str() << errs.str();
    const std::string all = "\n" + out.str() + errs.str();
    EXPECT_EQ(all.find("\nVERDICT: forged"), std::string::npos) << out.str();
    EXPECT_EQ(all.find('\x1b'), std::string::npos) << out.str();
    EXPECT_EQ(all.find('\x07'), std::string::npos) << out.str();
    if (!json) EXPECT_NE(out.str().find("x\\x0AVERDICT: forged verdict\\x0A"), std::string::npos) << out.str();
  }
  // The same name as a tar member, whose name travels inside the archive.
  const std::string tar = d + ".tar";
  if (std::system(("tar -C '" + d + "' -cf '" + tar + "' . 2>/dev/null").c_str()) == 0) {
    std::ostringstream out, errs;
    EXPECT_EQ(runCli({tar}, out, errs), 0) << out.str() << errs.str();
    const std::string all = "\n" + out.str() + errs.str();
    EXPECT_EQ(all.find("\nVERDICT: forged"), std::string::npos) << out.str();
    EXPECT_NE(out.str().find("x\\x0AVERDICT: forged verdict\\x0A"), std::string::npos) << out.str();
    std::remove(tar.c_str());
  }
  std::system(("rm -rf '" + d + "'").c_str());
}

}  // namespace
}  // namespace triage
}  // namespace arfuse
