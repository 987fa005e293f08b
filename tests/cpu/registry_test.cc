// The algorithm registry (src/algos/registry.h): the plan walks its entries in order, for auto and
// for a forced algorithm, and a path added to it -- here a dummy, registered by this test only --
// is planned and reported with its own reason without any other change to the library.
#include "algos/registry.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "plan_fixtures.h"
#include "python_names.h"

namespace arfuse {
namespace {

using testing_fixtures::nvlink8;
using testing_fixtures::req;

// An id no real path has.
// Inside the enum's range of values (its enumerators 0..arfuseNumAlgos fit 4 bits, so 0..15): a value
// outside it is undefined behaviour, which the sanitized CPU suite (UBSan) reports.
const arfuseAlgo_t kDummy = arfuseAlgo_t(15);
static_assert(15 > arfuseNumAlgos, "the dummy id must not be a real path's");

// The dummy path takes calls of exactly 3 tokens.
Verdict dummyCan(const PlanContext& c) {
  if (c.req.tokens != 3) return Verdict::no(strprintf("algo=dummy (forced by %s) takes 3 tokens only", c.forcedBy));
  return Verdict::yes(strprintf("dummy: %lld B in 3 tokens%s", c.bytes, c.forced ? " (forced)" : ""));
}
Verdict dummyGeometry(const PlanContext&) {
  Plan p;
  p.blocks = 7;
  p.threads = 96;
  return Verdict::fitted(p);
}
void dummyWorkspace(const WorkspaceInputs&, Workspace* w) { w->llBytes += 4096; }

// Registers the dummy before `before` for the test's lifetime.
struct DummyPath {
  explicit DummyPath(arfuseAlgo_t before) {
    AlgoEntry e;
    e.algo = kDummy;
    e.name = "dummy";
    e.canImplement = dummyCan;
    e.geometry = dummyGeometry;
    e.workspace = dummyWorkspace;
    EXPECT_TRUE(addAlgo(e, before));
  }
  ~DummyPath() { removeAlgo(kDummy); }
};

TEST(Registry, OneEntryPerPathInPlanOrder) {
  std::vector<std::string> names;
  for (const AlgoEntry& e : algoRegistry()) {
    names.push_back(e.name);
    EXPECT_STREQ(e.name, arfuseAlgoName(e.algo));
    EXPECT_EQ(findAlgo(e.algo), &e);
    EXPECT_NE(e.canImplement, nullptr);
    EXPECT_NE(e.geometry, nullptr);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"local", "lowlatency", "hoststaged", "hierarchical", "nccl", "oneshot",
                                             "twoshot"}));
  EXPECT_EQ(findAlgo(kDummy), nullptr);
}

// A path's names are its entry's: the C ABI's name, the parser of ARFUSE_ALGO and --algo, the
// lists the CLI and the refusals print, and the Python package's Algo members (generated from the
// registry: the block in python/arfuse/_types.py is pythonAlgoMembers(), to the byte).
TEST(Registry, NamesComeFromTheEntries) {
  for (const AlgoEntry& e : algoRegistry()) {
    EXPECT_STREQ(arfuseAlgoName(e.algo), e.name);
    EXPECT_EQ(parseAlgoName(e.name), e.algo);
    EXPECT_NE(algoNamesText().find(e.name), std::string::npos);
  }
  EXPECT_STREQ(arfuseAlgoName(arfuseAlgoAuto), "auto");
  EXPECT_EQ(parseAlgoName("auto"), arfuseAlgoAuto);
  EXPECT_STREQ(arfuseAlgoName(arfuseAlgo_t(15)), "unknown");
  EXPECT_EQ(parseAlgoName("bogus"), -1);
  EXPECT_EQ(testing_fixtures::committedPythonAlgoMembers(), pythonAlgoMembers())
      << "python/arfuse/_types.py's Algo members are not the registry's; put these between its markers:\n"
      << pythonAlgoMembers();
}

// The public ids (arfuseAlgo_t's enumerators) are the entries' names in the header's spelling:
// arfuseAlgo<enumName> = <id> for every entry with an id below arfuseNumAlgos.
TEST(Registry, PublicIdsAreTheHeadersEnumerators) {
  std::ifstream f(std::string(ARFUSE_SOURCE_DIR) + "/include/arfuse/arfuse.h");
  std::stringstream text;
  text << f.rdbuf();
  for (const AlgoEntry& e : algoRegistry()) {
    if (e.algo >= arfuseNumAlgos) continue;
    const std::string enumerator = strprintf("arfuseAlgo%s = %d", e.enumName, static_cast<int>(e.algo));
    EXPECT_NE(text.str().find(enumerator), std::string::npos) << enumerator << " is not in arfuse.h";
  }
}

// The lookup table follows the list: an added path is found by its id, the entries after it still
// by theirs, and after its removal it is gone again.
TEST(Registry, LookupFollowsTheList) {
  {
    DummyPath dummy(arfuseAlgoOneShot);
    const AlgoEntry* d = findAlgo(kDummy);
    ASSERT_NE(d, nullptr);
    EXPECT_STREQ(d->name, "dummy");
    EXPECT_FALSE(addAlgo(*d, arfuseAlgoAuto));  // the id is taken
    for (const AlgoEntry& e : algoRegistry()) EXPECT_EQ(findAlgo(e.algo), &e);
  }
  EXPECT_EQ(findAlgo(kDummy), nullptr);
  for (const AlgoEntry& e : algoRegistry()) EXPECT_EQ(findAlgo(e.algo), &e);
  EXPECT_EQ(findAlgo(arfuseAlgoAuto), nullptr);  // auto is no path
}

TEST(Registry, AutoPlanWalksAnAddedPath) {
  const Fabric f = nvlink8();
  // 3 tokens of 7168 bf16 = 43008 B: low-latency, before the dummy's place.
  DummyPath dummy(arfuseAlgoOneShot);
  Plan p = makePlan(f, Limits{}, PlanPolicy{}, req(3));
  EXPECT_EQ(p.algo, arfuseAlgoLowLatency);
  // Above the low-latency size the walk reaches the dummy, which takes 3 tokens only.
  p = makePlan(f, Limits{}, PlanPolicy{}, req(3, 16384));
  EXPECT_EQ(p.status, arfuseSuccess);
  EXPECT_EQ(p.algo, kDummy);
  EXPECT_EQ(p.reason, "dummy: 98304 B in 3 tokens");
  EXPECT_EQ(p.blocks, 7);
  EXPECT_EQ(p.threads, 96);
  // Other calls walk past it, with the reasons they had without it.
  p = makePlan(f, Limits{}, PlanPolicy{}, req(5));
  EXPECT_EQ(p.algo, arfuseAlgoOneShot);
  EXPECT_EQ(p.reason.rfind("oneshot: ", 0), 0u) << p.reason;
}

TEST(Registry, ForcedPlanFindsAnAddedPath) {
  const Fabric f = nvlink8();
  PlanPolicy forced;
  forced.forcedAlgo = kDummy;
  forced.forcedBy = "config";
  {
    const Plan unknown = makePlan(f, Limits{}, forced, req(3));
    EXPECT_EQ(unknown.status, arfuseInvalidArgument);  // not registered: not an algorithm
    EXPECT_NE(unknown.reason.find("algo=15 (forced by config): not an algorithm"), std::string::npos) << unknown.reason;
  }
  DummyPath dummy(arfuseAlgoTwoShot);
  Plan p = makePlan(f, Limits{}, forced, req(3));
  EXPECT_EQ(p.status, arfuseSuccess);
  EXPECT_EQ(p.algo, kDummy);
  EXPECT_EQ(p.reason, "dummy: 43008 B in 3 tokens (forced)");
  p = makePlan(f, Limits{}, forced, req(4));
  EXPECT_EQ(p.status, arfuseUnsupported);
  EXPECT_EQ(p.reason, "algo=dummy (forced by config) takes 3 tokens only");
}

TEST(Registry, WorkspaceAddsEveryEntrysBuffers) {
  const Workspace before = workspaceFor(Limits{}, 8, 64, 0);
  DummyPath dummy(arfuseAlgoTwoShot);
  const Workspace with = workspaceFor(Limits{}, 8, 64, 0);
  EXPECT_EQ(with.llBytes, before.llBytes + 4096);
  EXPECT_EQ(with.stagingBytes, before.stagingBytes);
  EXPECT_EQ(with.ncclBytes, before.ncclBytes);
}

}  // namespace
}  // namespace arfuse
