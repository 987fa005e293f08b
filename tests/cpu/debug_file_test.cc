// Runs with ARFUSE_DEBUG_FILE=<dir>/arfuse.%p.log (set by CTest): a failing call through the real
// library must leave its canonical line in this process's file, not only on stderr.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "arfuse/arfuse.h"
#include "common/log.h"

TEST(DebugFile, PatternExpansion) {
  EXPECT_EQ(arfuse::expandDebugPath("/tmp/a.%h.%p.log", 42, "node7"), "/tmp/a.node7.42.log");
  EXPECT_EQ(arfuse::expandDebugPath("plain%", 1, "h"), "plain%");
  EXPECT_EQ(arfuse::expandDebugPath("%x%p", 3, "h"), "%x3");
}

TEST(DebugFile, ErrorLinesReachThePerProcessFile) {
  const char* pattern = std::getenv("ARFUSE_DEBUG_FILE");
  ASSERT_NE(pattern, nullptr) << "run through CTest, which sets ARFUSE_DEBUG_FILE";
  const std::string path = arfuse::expandDebugPath(pattern, static_cast<long>(getpid()), "");
  std::remove(path.c_str());
  EXPECT_EQ(arfuseAddRmsNorm(nullptr, nullptr, nullptr, 1e-6f, nullptr, nullptr, 1, 64, arfuseBfloat16, nullptr),
            arfuseInvalidArgument);
  std::ifstream f(path);
  ASSERT_TRUE(f) << "no debug file at " << path;
  std::stringstream ss;
  ss << f.rdbuf();
  EXPECT_NE(ss.str().find("arfuse ERROR rank=- dev=- code=arfuseInvalidArgument"), std::string::npos) << ss.str();
  EXPECT_NE(ss.str().find("x is NULL"), std::string::npos) << ss.str();
}
