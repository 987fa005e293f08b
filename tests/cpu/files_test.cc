// Files arfuse reads and writes (issue 16): JSON input is a regular file under a size cap, parsed in
// bounded time and memory (duplicate keys by hash, not by scanning); log and dump files are created
// 0600, close-on-exec, and never written through a symbolic link.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>

#include "diag/dump.h"
#include "plan/calibration.h"
#include "topo/json.h"
#include "topo/topology.h"

namespace arfuse {
namespace {

std::string tempDir() {
  char tmpl[] = "/tmp/arfuse-files-XXXXXX";
  const char* d = mkdtemp(tmpl);
  return d ? d : "/tmp";
}

double secondsOf(const std::function<void()>& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

long maxRssKb() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

TEST(Files, DevZeroAndAFifoAreRefusedAtOnce) {
  std::string text, err;
  // The path names something else than a JSON file: the caller's argument, not the system, is wrong.
  double t = secondsOf([&] { EXPECT_EQ(topo::json::readFile("/dev/zero", &text).into(&err), arfuseInvalidArgument); });
  EXPECT_EQ(err, "/dev/zero: is a character device, not a regular file: give the path of a JSON file");
  EXPECT_LT(t, 1.0);

  const std::string dir = tempDir(), fifo = dir + "/topology.fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  // No writer: a blocking open would wait forever (the old std::ifstream did).
  t = secondsOf([&] { EXPECT_NE(topo::json::readFile(fifo, &text).into(&err), arfuseSuccess); });
  EXPECT_EQ(err, fifo + ": is a FIFO, not a regular file: give the path of a JSON file");
  EXPECT_LT(t, 1.0);

  // The two readers that take a user's path: --topology and ARFUSE_CALIBRATION_FILE.
  topo::Topology topo;
  t = secondsOf([&] { EXPECT_NE(topo::readJsonFile(fifo, &topo).into(&err), arfuseSuccess); });
  EXPECT_NE(err.find("is a FIFO"), std::string::npos) << err;
  EXPECT_LT(t, 1.0);
  PlanPolicy policy;
  std::string why;
  t = secondsOf([&] {
    EXPECT_NE(loadCalibrationPolicy("/dev/zero", {"GPU-x"}, "fp", 1, &policy, &why).into(&why), arfuseSuccess);
  });
  EXPECT_NE(why.find("/dev/zero: is a character device"), std::string::npos) << why;
  EXPECT_LT(t, 1.0);
  EXPECT_NE(topo::json::readFile(dir, &text).into(&err), arfuseSuccess);
  EXPECT_NE(err.find("is a directory"), std::string::npos) << err;
  unlink(fifo.c_str());
  rmdir(dir.c_str());
}

TEST(Files, SizeCapAndValueCap) {
  const std::string dir = tempDir(), big = dir + "/big.json";
  {
    std::ofstream f(big);
    f << "[";
    const std::string chunk(1 << 20, ' ');
    for (int i = 0; i < 17; ++i) f << chunk;  // 17 MiB of whitespace
    f << "]";
  }
  std::string text, err;
  EXPECT_NE(topo::json::readFile(big, &text).into(&err), arfuseSuccess);
  EXPECT_NE(err.find("bytes, over the limit of 16777216 bytes"), std::string::npos) << err;
  unlink(big.c_str());
  rmdir(dir.c_str());

  // 16 MiB of "0,": 8 Mi values was 3.3 GB of parse tree; now the parse stops at the value cap.
  std::string arr = "[";
  arr.reserve((16u << 20) + 2);
  while (arr.size() < (16u << 20) - 2) arr += "0,";
  arr += "0]";
  const long before = maxRssKb();
  topo::json::Value v;
  const double t = secondsOf([&] { EXPECT_NE(topo::json::parse(arr, &v).into(&err), arfuseSuccess); });
  EXPECT_NE(err.find("more than 1048576 values"), std::string::npos) << err;
  const long grewMb = (maxRssKb() - before) / 1024;
  std::printf("16 MiB array: stopped after %.2f s, peak RSS grew %ld MiB\n", t, grewMb);
  EXPECT_LT(t, 5.0);
  EXPECT_LT(grewMb, 512);
}

TEST(Files, DuplicateKeysAreFoundInLinearTime) {
  std::string doc = "{";
  for (int i = 0; i < 100000; ++i) doc += "\"k" + std::to_string(i) + "\":0,";
  doc += "\"k99999\":1}";
  topo::json::Value v;
  std::string err;
  const double t = secondsOf([&] { EXPECT_NE(topo::json::parse(doc, &v).into(&err), arfuseSuccess); });
  EXPECT_NE(err.find("duplicate key \"k99999\""), std::string::npos) << err;
  std::printf("100k keys: duplicate found in %.3f s\n", t);
  EXPECT_LT(t, 2.0);
}

TEST(Files, DumpFilesArePrivateAndNeverFollowALink) {
  const std::string dir = tempDir();
  const std::string out = dir + "/dump.log", target = dir + "/victim", link = dir + "/planted.log";
  const mode_t old = umask(022);
  std::string err;
  ASSERT_EQ(writeDump("arfuse-flight-recorder v1 rank=0\n", out.c_str()).into(&err), arfuseSuccess) << err;
  struct stat st;
  ASSERT_EQ(stat(out.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u) << "dumps name hosts, pids and addresses: not for other users";

  { std::ofstream(target) << "precious\n"; }
  ASSERT_EQ(symlink(target.c_str(), link.c_str()), 0);
  EXPECT_NE(writeDump("arfuse-flight-recorder v1 rank=0\n", link.c_str()).into(&err), arfuseSuccess);
  EXPECT_NE(err.find("it is a symbolic link; arfuse does not write through links"), std::string::npos) << err;
  std::ifstream f(target);
  std::stringstream ss;
  ss << f.rdbuf();
  EXPECT_EQ(ss.str(), "precious\n");
  umask(old);
  for (const std::string& p : {out, target, link}) unlink(p.c_str());
  rmdir(dir.c_str());
}

}  // namespace
}  // namespace arfuse
