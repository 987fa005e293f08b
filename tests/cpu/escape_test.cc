// Untrusted text on its way out (issue 37 item 5): the one helper (base/printable.h), and the
// places that print what someone else chose -- a log line quoting an ARFUSE_* value or name, a CLI
// error quoting a JSON file, `arfuse env`. Each must stay one line and carry no terminal escape.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "base/printable.h"
#include "common/log.h"
#include "common/params.h"

namespace arfuse {
namespace {

bool hasRawControl(const std::string& s, bool newlinesAllowed) {
  for (unsigned char c : s)
    if ((c < 0x20 && c != '\t' && !(c == '\n' && newlinesAllowed)) || c == 0x7f) return true;
  return false;
}

TEST(Printable, EscapesControlsC1AndInvalidUtf8AndIsIdempotent) {
  EXPECT_EQ(printable("a\nb\x1b[31m\r\x7f\x07\t"), "a\\x0Ab\\x1B[31m\\x0D\\x7F\\x07\t");
  EXPECT_EQ(printable("a\nb", true), "a\nb");
  EXPECT_EQ(printable("\xc2\x9b"
                      "2J"),
            "\\xC2\\x9B2J");                                                       // C1 CSI
  EXPECT_EQ(printable("\xc2\xb5 \xf0\x9f\x98\x80"), "\xc2\xb5 \xf0\x9f\x98\x80");  // valid UTF-8 stays
  EXPECT_EQ(printable("\xff\xc0\xaf"), "\\xFF\\xC0\\xAF");                         // invalid and overlong
  EXPECT_EQ(printable(std::string("a\0b", 3)), "a\\x00b");
  const std::string once = printable("x\n\x1b]0;t\x07\xfe");
  EXPECT_EQ(printable(once), once);
}

TEST(Printable, EveryLogLineIsOneLine) {
  const std::string s = formatLogLine(kLogWarn, LogContext{}, "k=v", __FILE__, __LINE__,
                                      "ARFUSE_X=1\narfuse ERROR rank=0 dev=0 forged\x1b[2J");
  EXPECT_FALSE(hasRawControl(s, false)) << s;
  EXPECT_NE(s.find("ARFUSE_X=1\\x0Aarfuse ERROR rank=0 dev=0 forged\\x1B[2J"), std::string::npos) << s;
}

// What a process started with hostile ARFUSE_* values and names prints: its WARN lines come from the
// registry's first read, so a child reads it with those variables set.
TEST(Printable, ArfuseVariablesCannotForgeWarnLines) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 2);
    setenv("ARFUSE_TIMEOUT_MS", "5\narfuse ERROR rank=0 dev=0 sm_90 forged.cc:1 the group was aborted\x1b]0;x\x07", 1);
    setenv("ARFUSE_\x1b[31mRED", "1", 1);
    paramValues();
    _exit(0);
  }
  ::close(fds[1]);
  std::string err;
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0) err.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  int st = 0;
  waitpid(pid, &st, 0);
  EXPECT_FALSE(hasRawControl(err, true)) << err;
  size_t lines = 0, start = 0;
  for (size_t nl; (nl = err.find('\n', start)) != std::string::npos; start = nl + 1, ++lines)
    EXPECT_EQ(err.compare(start, 12, "arfuse WARN "), 0) << "a line that is not a WARN line: " << err.substr(start);
  EXPECT_EQ(lines, 2u) << err;
  EXPECT_NE(err.find("ARFUSE_TIMEOUT_MS=5\\x0Aarfuse ERROR rank=0"), std::string::npos) << err;
  EXPECT_NE(err.find("ARFUSE_\\x1B[31mRED is not an arfuse variable"), std::string::npos) << err;
}

// The CLI quoting a file it was given, or the environment.
std::string runCli(const std::string& envAndArgs) {
  const std::string cmd = envAndArgs + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while (p && (n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  if (p) pclose(p);
  return out;
}

TEST(Printable, CliErrorsQuotingAFileOrTheEnvironmentStayOneLine) {
  const std::string f = ::testing::TempDir() + "/escape_test_" + std::to_string(getpid()) + ".json";
  {
    std::ofstream o(f, std::ios::binary);
    o << "{\"schema\": \"arfuse-topology/1\", \"x\\nVERDICT: forged\\u001b]0;t\\u0007\": 1, "
         "\"x\\nVERDICT: forged\\u001b]0;t\\u0007\": 2}";
  }
  const std::string out = runCli(std::string(ARFUSE_CLI) + " plan --topology " + f);
  std::remove(f.c_str());
  EXPECT_FALSE(hasRawControl(out, true)) << out;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
  EXPECT_NE(out.find("duplicate key \"x\\x0AVERDICT: forged\\x1B]0;t\\x07\""), std::string::npos) << out;
  const std::string env =
      runCli("env ARFUSE_DEBUG_FILE=\"$(printf 'x\\033]0;t\\007')\" " + std::string(ARFUSE_CLI) + " env");
  EXPECT_FALSE(hasRawControl(env, true)) << env;
  EXPECT_NE(env.find("ARFUSE_DEBUG_FILE=x\\x1B]0;t\\x07 ignored"), std::string::npos) << env;
}

}  // namespace
}  // namespace arfuse
