// base/status.h: one error currency inside the library, with a file:line trail like NCCL's NCCLCHECK.
#include "base/status.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "common/log.h"

namespace arfuse {
namespace {

int raisedAt = 0, passedAt = 0, outerAt = 0;

Status inner(bool fail) {
  raisedAt = __LINE__ + 1;
  if (fail) return ARFUSE_FAIL(arfuseUnsupported, "device %d cannot map host memory", 3);
  return Status();
}

Status middle(bool fail) {
  passedAt = __LINE__ + 1;
  ARFUSE_CHECK(inner(fail));
  return Status();
}

Status outer(bool fail) {
  outerAt = __LINE__ + 1;
  ARFUSE_CHECK(middle(fail));
  return Status();
}

TEST(Status, FailureKeepsCodeAndMessageAndGathersTheTrail) {
  const Status s = outer(true);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), arfuseUnsupported);
  EXPECT_EQ(s.message(), "device 3 cannot map host memory");
  const std::string f = "status_test.cc:";
  EXPECT_EQ(s.trail(), f + std::to_string(raisedAt) + " <- " + f + std::to_string(passedAt) + " <- " + f +
                           std::to_string(outerAt));
  EXPECT_EQ(s.line(), raisedAt);  // the log line at the boundary names where it was raised
  EXPECT_NE(std::string(s.file()).find("status_test.cc"), std::string::npos);
}

Status textCheck(const std::string& answer) {
  raisedAt = __LINE__ + 1;
  ARFUSE_CHECK_PREFIXED("arfuseThing: ", answer.empty() ? Status() : Status(arfuseInvalidArgument, answer));
  return Status();
}

TEST(Status, TextCheckRaisesOnlyANonEmptyAnswer) {
  EXPECT_TRUE(textCheck("").ok());
  const Status s = textCheck("eps=-1: must be >= 0");
  EXPECT_EQ(s.code(), arfuseInvalidArgument);
  EXPECT_EQ(s.message(), "arfuseThing: eps=-1: must be >= 0");
  EXPECT_EQ(s.line(), raisedAt);
}

TEST(Status, SuccessHasNoTrailAndLeavesTheMessageAlone) {
  const Status s = outer(false);
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), arfuseSuccess);
  EXPECT_TRUE(s.trail().empty());
  std::string message = "untouched";
  EXPECT_EQ(s.into(&message), arfuseSuccess);
  EXPECT_EQ(message, "untouched");
  EXPECT_EQ(outer(true).into(&message), arfuseUnsupported);
  EXPECT_EQ(message, "device 3 cannot map host memory");
}

std::vector<std::string> frames;
void recordFrame(const char* file, int line, arfuseResult_t code) {
  const char* slash = std::strrchr(file, '/');
  frames.push_back(strprintf("%s:%d -> %s", slash ? slash + 1 : file, line, arfuseGetErrorName(code)));
}

// base/status.h cannot log (it is below common): each frame goes to the sink common/log.cc installs
// at load, the DEBUG line `file:line -> code`; a layer that links no log (a rendezvous fuzz target)
// keeps the trail without printing it.
TEST(Status, EveryFrameReachesTheTrailSinkThatTheLogInstalled) {
  EXPECT_EQ(statusTrailSink().load(), commonStatusTrailSink());
  setStatusTrailSink(recordFrame);
  frames.clear();
  const Status s = outer(true);
  setStatusTrailSink(commonStatusTrailSink());
  const std::string f = "status_test.cc:";
  EXPECT_EQ(frames, (std::vector<std::string>{f + std::to_string(raisedAt) + " -> arfuseUnsupported",
                                              f + std::to_string(passedAt) + " -> arfuseUnsupported",
                                              f + std::to_string(outerAt) + " -> arfuseUnsupported"}));
  setStatusTrailSink(nullptr);
  EXPECT_EQ(outer(true).trail(), s.trail());  // no sink: nothing printed, the trail kept
  setStatusTrailSink(commonStatusTrailSink());
}

}  // namespace
}  // namespace arfuse
