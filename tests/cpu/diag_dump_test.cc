// The flight-recorder dump (src/diag/dump.h): its exact lines, and `arfuse triage` reading dumps of
// a synthetic group back to the right verdict.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "analyzer.h"
#include "catalog.h"
#include "diag/dump.h"
#include "diag/records.h"
#include "diag_test_util.h"
#include "triage.h"

namespace arfuse {
namespace {

using namespace testing_diag;

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

DumpInput input(const GroupShared* s, int rank, int nranks) {
  DumpInput in;
  in.rank = rank;
  in.device = rank;
  in.nranks = nranks;
  in.arch = 90;
  in.timeoutNs = 300000000ull;
  in.shared = s;
  return in;
}

// Every rank's dump, concatenated as a server's stderr would hold them.
std::string dumpAll(const GroupShared* s, int nranks) {
  std::string text;
  for (int r = 0; r < nranks; ++r) text += formatDump(input(s, r, nranks));
  return text;
}

struct Verdict {
  triage::Result result;
  std::vector<triage::EventGroup> groups;
  std::string rootId;
};

Verdict analyse(const std::string& text) {
  triage::Analyzer a(triage::Catalog::builtin());
  a.beginFile("server.log");
  for (const std::string& l : lines(text)) a.feed(l);
  a.endFile("", text.size(), "");
  Verdict v;
  v.result = a.finish();
  v.groups = a.groups();
  if (v.result.rootGroup >= 0) v.rootId = a.catalog().sig(v.groups[v.result.rootGroup].sig).id;
  return v;
}

TEST(DiagDump, WrappedRingOldestFirstWithPendingCallAndRecord) {
  auto s = newShared();
  // 70 calls: the ring of 64 holds calls 7..70; call 70 is still running (aborted).
  stampRun(s.get(), 0, 1, 70, true);
  record(s.get(), 0, kErrPeerTimeout, 2, 70, fusedDesc(), {0, 0}, 5, 0);
  DumpInput in = input(s.get(), 0, 4);
  in.lastError = "arfusePeerTimeout: rank 0 waited 0.300 s for rank 2\nat call 70";
  const std::vector<std::string> l = lines(formatDump(in));
  ASSERT_EQ(l.size(), 1u + 64u + 3u);
  EXPECT_EQ(l[0], "arfuse-flight-recorder v1 rank=0 dev=0 nranks=4 arch=sm_90 timeout_s=0.300 abort=1 entries=64");
  EXPECT_EQ(l[1],
            "entry=0 epoch=7 op=AllReduceAddRmsNorm bytes=14336 dtype=bf16 path=oneshot start_ns=1000063000 "
            "end_ns=1000070100 tokens=1 hidden=7168");
  for (int i = 0; i < 64; ++i)
    EXPECT_EQ(l[1 + i].rfind("entry=" + std::to_string(i) + " epoch=" + std::to_string(7 + i) + " ", 0), 0u)
        << l[1 + i];
  EXPECT_EQ(l[64],
            "entry=63 epoch=70 op=AllReduceAddRmsNorm bytes=14336 dtype=bf16 path=oneshot start_ns=1000630000 "
            "end_ns=pending tokens=1 hidden=7168");
  EXPECT_EQ(l[65],
            "arfuse-error-record rank=0 peer=2 block=5 epoch=70 phase=0 code=peer_timeout "
            "mine=AllReduceAddRmsNorm/bf16/1x7168/oneshot");
  EXPECT_EQ(l[66],
            "arfuse-dump-note rank=0 error: rank 0 waited 0.300 s for rank 2 at call 70 (block 5, phase 0) in "
            "AllReduceAddRmsNorm bf16 tokens=1 hidden=7168 (14336 B, path oneshot); the group is aborted; next: " +
                nextStepFor(kErrPeerTimeout));
  // The last error is kept on one line.
  EXPECT_EQ(l[67],
            "arfuse-dump-note rank=0 last_error: arfusePeerTimeout: rank 0 waited 0.300 s for rank 2 at call 70");
}

TEST(DiagDump, EmptySlotsMisplacedSlotsAndHostStagedVariant) {
  auto s = newShared();
  const CallDesc hs = makeCallDesc(arfuseOpAllReduce, arfuseFloat32, arfuseAlgoHostStaged, 1, 2, 1024);
  stamp(s.get(), 1, 1, hs, 500, 900);
  stamp(s.get(), 1, 2, hs, 1000, 0);
  // A slot whose call does not belong there (being rewritten) is left out.
  s->flight[1].entries[10].call = 3;
  const std::vector<std::string> l = lines(formatDump(input(s.get(), 1, 2)));
  ASSERT_EQ(l.size(), 3u);
  EXPECT_EQ(l[0], "arfuse-flight-recorder v1 rank=1 dev=1 nranks=2 arch=sm_90 timeout_s=0.300 abort=0 entries=2");
  EXPECT_EQ(l[1],
            "entry=0 epoch=1 op=AllReduce bytes=8192 dtype=fp32 path=hoststaged start_ns=500 end_ns=900 tokens=2 "
            "hidden=1024 variant=twoshot");
  EXPECT_EQ(l[2],
            "entry=1 epoch=2 op=AllReduce bytes=8192 dtype=fp32 path=hoststaged start_ns=1000 end_ns=pending "
            "tokens=2 hidden=1024 variant=twoshot");
  // No group area: the header alone.
  DumpInput none = input(nullptr, 0, 2);
  none.arch = 0;
  EXPECT_EQ(formatDump(none), "arfuse-flight-recorder v1 rank=0 dev=0 nranks=2 timeout_s=0.300 abort=0 entries=0\n");
}

// Rank 2 never launched call 70; rank 0 timed out waiting for it, ranks 1 and 3 left on the abort.
TEST(DiagDump, TriageNamesTheRankEveryoneWaitsFor) {
  auto s = newShared();
  for (int r : {0, 1, 3}) stampRun(s.get(), r, 1, 70, true);
  stampRun(s.get(), 2, 1, 69, false);
  record(s.get(), 0, kErrPeerTimeout, 2, 70, fusedDesc(), {0, 0}, 5, 0);
  const Verdict v = analyse(dumpAll(s.get(), 4));
  ASSERT_EQ(v.result.status, triage::Result::kRootCause);
  EXPECT_EQ(v.rootId, "arfuse.fr_laggard");
  const triage::EventGroup& root = v.groups[v.result.rootGroup];
  EXPECT_EQ(root.detail("stuck_rank"), "2");
  EXPECT_EQ(root.detail("last_completed_by_rank"), "0:69(pending 70) 1:69(pending 70) 2:69 3:69(pending 70)");
  EXPECT_NE(root.text.find("error records of rank 0 name it"), std::string::npos) << root.text;
  EXPECT_EQ(v.result.nranks, 4);
  // The dump's lines raise no other origin: the notes are not classified, the record is context.
  for (size_t i = 0; i < v.groups.size(); ++i) {
    if (static_cast<int>(i) == v.result.rootGroup) continue;
    EXPECT_NE(v.groups[i].cls, triage::SigClass::kOrigin) << v.groups[i].raw;
  }

  // Without the error record the epochs alone single rank 2 out.
  s->records[0] = ErrorRecord{};
  s->abort = 0;
  const Verdict w = analyse(dumpAll(s.get(), 4));
  EXPECT_EQ(w.rootId, "arfuse.fr_laggard");
  EXPECT_EQ(w.groups[w.result.rootGroup].detail("stuck_rank"), "2");
  EXPECT_NE(w.groups[w.result.rootGroup].text.find("reached epoch 69 while the others reached 70"), std::string::npos);
}

TEST(DiagDump, TriageCliReadsADumpFile) {
  auto s = newShared();
  for (int r : {0, 1, 3}) stampRun(s.get(), r, 1, 12, true);
  stampRun(s.get(), 2, 1, 11, false);
  for (int r : {0, 1, 3}) record(s.get(), r, kErrPeerTimeout, 2, 12, fusedDesc(), {0, 0}, r, 0);
  const std::string path = ::testing::TempDir() + "arfuse_dump_cli_" + std::to_string(getpid()) + ".txt";
  std::remove(path.c_str());
  std::string err;
  for (int r = 0; r < 4; ++r)
    ASSERT_EQ(writeDump(formatDump(input(s.get(), r, 4)), path.c_str()).into(&err), arfuseSuccess) << err;
  std::ostringstream out, errs;
  EXPECT_EQ(triage::runCli({path}, out, errs), 0) << out.str() << errs.str();
  EXPECT_NE(out.str().find("rank 2 is the one the others wait for: error records of ranks 0,1,3 name it"),
            std::string::npos)
      << out.str();
  std::remove(path.c_str());
}

// Ranks 0, 1, 3 made the fused call; rank 2 made a plain all-reduce of two tokens.
TEST(DiagDump, TriageNamesADivergentCallAndTheOddRank) {
  auto s = newShared();
  const CallDesc fused = fusedDesc(1, 7168);
  const CallDesc plain = makeCallDesc(arfuseOpAllReduce, arfuseBfloat16, arfuseAlgoOneShot, 0, 2, 7168);
  for (int r : {0, 1, 3}) {
    stampRun(s.get(), r, 1, 311, true, fused);
    record(s.get(), r, kErrMismatch, 2, 311, fused, plain, 0, 3);
  }
  stampRun(s.get(), 2, 1, 310, false, fused);
  stamp(s.get(), 2, 311, plain, 2000000000ull, 0);
  record(s.get(), 2, kErrMismatch, 0, 311, plain, fused, 0, 3);
  const std::string text = dumpAll(s.get(), 4);
  EXPECT_NE(text.find("arfuse-error-record rank=2 peer=0 block=0 epoch=311 phase=3 code=mismatch "
                      "mine=AllReduce/bf16/2x7168/oneshot theirs=AllReduceAddRmsNorm/bf16/1x7168/oneshot"),
            std::string::npos)
      << text;
  const Verdict v = analyse(text);
  ASSERT_EQ(v.result.status, triage::Result::kRootCause);
  EXPECT_EQ(v.rootId, "arfuse.fr_divergent");
  const triage::EventGroup& root = v.groups[v.result.rootGroup];
  EXPECT_EQ(root.detail("odd_rank"), "2");
  EXPECT_EQ(root.detail("call"), "311");
  EXPECT_EQ(root.text,
            "divergent call at call 311: rank 0 made AllReduceAddRmsNorm/bf16/1x7168/oneshot, rank 2 made "
            "AllReduce/bf16/2x7168/oneshot (error records of ranks 0-3)");
  // Mismatch records are not waits: no laggard is made up from them.
  for (const auto& g : v.groups) EXPECT_NE(triage::Catalog::builtin().sig(g.sig).id, "arfuse.fr_laggard");
}

TEST(DiagDump, TriageNamesConcurrentUse) {
  auto s = newShared();
  stampRun(s.get(), 0, 1, 9, true);
  stampRun(s.get(), 1, 1, 9, true);
  record(s.get(), 1, kErrConcurrent, -1, 9, fusedDesc(), {0, 0}, 0, 4);
  const Verdict v = analyse(dumpAll(s.get(), 2));
  ASSERT_EQ(v.result.status, triage::Result::kRootCause);
  EXPECT_EQ(v.rootId, "arfuse.fr_concurrent");
  EXPECT_EQ(v.groups[v.result.rootGroup].text,
            "two calls of rank 1 ran at the same time (call 9): a communicator must be used from one stream at a time "
            "(error record of rank 1)");
}

TEST(DiagDump, WriteDumpExpandsThePatternAndAppends) {
  const std::string pattern = ::testing::TempDir() + "arfuse_dump_%p.txt";
  const std::string path = ::testing::TempDir() + "arfuse_dump_" + std::to_string(getpid()) + ".txt";
  std::remove(path.c_str());
  std::string err;
  ASSERT_EQ(writeDump("one\n", pattern.c_str()).into(&err), arfuseSuccess) << err;
  ASSERT_EQ(writeDump("two\n", pattern.c_str()).into(&err), arfuseSuccess) << err;
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  EXPECT_EQ(ss.str(), "one\ntwo\n");
  std::remove(path.c_str());

  ::testing::internal::CaptureStderr();
  EXPECT_EQ(writeDump("to stderr\n", nullptr).into(&err), arfuseSuccess);
  EXPECT_EQ(writeDump("dash\n", "-").into(&err), arfuseSuccess);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "to stderr\ndash\n");

  EXPECT_NE(writeDump("x\n", "/nonexistent-dir/arfuse.%p").into(&err), arfuseSuccess);
  EXPECT_EQ(err, "cannot open /nonexistent-dir/arfuse." + std::to_string(getpid()) + ": No such file or directory");
}

}  // namespace
}  // namespace arfuse
