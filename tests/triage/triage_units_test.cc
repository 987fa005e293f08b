// Unit tests of the pieces: catalogue, literal scanner, line-format parser.
#include <gtest/gtest.h>

#include <random>
#include <sstream>

#include "analyse_lines.h"
#include "analyzer.h"
#include "catalog.h"
#include "lineformat.h"
#include "triage.h"

namespace arfuse {
namespace triage {
namespace {

TEST(TriageCatalog, BuiltinParsesAndIsComplete) {
  const Catalog& c = Catalog::builtin();
  int lineSigs = 0, origins = 0, echoes = 0;
  for (const auto& s : c.signatures()) {
    EXPECT_FALSE(s.meaning.empty()) << s.id;
    EXPECT_FALSE(s.remedy.empty()) << s.id;
    EXPECT_FALSE(s.next.empty()) << s.id;
    EXPECT_FALSE(s.source.empty()) << s.id;
    if (s.when == SigWhen::kLine) {
      ++lineSigs;
      EXPECT_FALSE(s.literals.empty()) << s.id;
    }
    origins += s.cls == SigClass::kOrigin;
    echoes += s.cls == SigClass::kEcho;
  }
  EXPECT_GE(lineSigs, 30);
  EXPECT_GE(origins, 30);
  EXPECT_GE(echoes, 8);
}

// The message of a catalogue that must not parse; every parse error is arfuseInvalidArgument.
std::string parseError(Catalog& c, std::string_view text) {
  const Status st = c.parse(text);
  EXPECT_EQ(st.code(), arfuseInvalidArgument) << text;
  return st.message();
}

TEST(TriageCatalog, ParseErrorsNameTheLine) {
  Catalog c;
  std::string err;
  err = parseError(c, "[a]\nclass = origin\npattern = x\nmeaning = m\nremedy = r\nnext = n\nsource = s\n");
  EXPECT_EQ(err, "catalogue line 7: signature 'a' needs a literal (the prefilter)");
  err = parseError(c, "[a]\nbogus = 1\n");
  EXPECT_EQ(err, "catalogue line 2: unknown field 'bogus'");
  err = parseError(c, "[a]\nclass = echo\nliteral = x\npattern = (\nmeaning = m\nremedy = r\nnext = n\nsource = s\n");
  EXPECT_NE(err.find("bad pattern"), std::string::npos) << err;
  // RE2 has no backreferences: a pattern that needs one is refused at parse time, not at match time.
  err = parseError(c,
                   "[a]\nclass = echo\nliteral = x\npattern = (a)\\1\nmeaning = m\nremedy = r\nnext = n\n"
                   "source = s\n");
  EXPECT_NE(err.find("bad pattern"), std::string::npos) << err;
  // An extract group the pattern does not have is a catalogue error.
  err = parseError(c,
                   "[a]\nclass = echo\nliteral = x\npattern = x(y)\nextract = k:2\nmeaning = m\nremedy = r\n"
                   "next = n\nsource = s\n");
  EXPECT_NE(err.find("capture group"), std::string::npos) << err;
  // An origin names its cause in a title (the verdict line starts with it).
  err = parseError(c,
                   "[a]\nclass = origin\nliteral = x\npattern = x\nmeaning = m\nremedy = r\nnext = n\n"
                   "source = s\n");
  EXPECT_NE(err.find("title"), std::string::npos) << err;
  // A value an enum key does not know is refused with the values it does know (the table that names them).
  err = parseError(c, "[a]\nclass = cause\n");
  EXPECT_NE(err.find("class must be origin, echo or context"), std::string::npos) << err;
  err = parseError(c, "[a]\nclass = echo\nwhen = always\n");
  EXPECT_NE(err.find("when must be line, traceback-end, frame, derived or knowledge"), std::string::npos) << err;
  const Status parsed = c.parse(
      "# ok\n[x.y]\nclass = echo\nweight = 60\nliteral = Foo | bar\npattern = (?i)foo+\nmeaning = m\n  more\n"
      "remedy = r\nnext = n\nsource = s\nexplained_by = nccl. cuda.\n");
  EXPECT_TRUE(parsed.ok()) << parsed.message();
  ASSERT_EQ(c.signatures().size(), 1u);
  EXPECT_EQ(c.sig(0).meaning, "m more");
  EXPECT_EQ(c.sig(0).literals.size(), 2u);
  EXPECT_EQ(c.sig(0).explainedBy, (std::vector<std::string>{"nccl.", "cuda."}));
  Matcher mm(c, {});
  SigMatch r;
  uint32_t extra = 0;
  EXPECT_TRUE(mm.match("a FOOO line", "a FOOO line", &r, &extra));  // (?i) ignores case
}

// The matcher looks for literals in the whole line and runs patterns on its message; here both are
// the line (parseLine's prefix stripping is tested below).
bool matchLine(const Matcher& m, std::string_view line, SigMatch* r, uint32_t* extra) {
  return m.match(line, line, r, extra);
}

TEST(TriageCatalog, HighestWeightWinsOnALine) {
  Matcher m(Catalog::builtin(), {});
  SigMatch r;
  uint32_t extra = 0;
  ASSERT_TRUE(matchLine(m, "gpu:1:2 [3] NCCL WARN socketProgress: Connection refused", &r, &extra));
  EXPECT_EQ(Catalog::builtin().sig(r.sig).id, "nccl.connect_refused");
  ASSERT_TRUE(
      matchLine(m, "arfuse WARN rank=3 dev=3 sm_120 path=oneshot disabled: ipc_open: invalid argument -> fallback=nccl",
                &r, &extra));
  EXPECT_EQ(Catalog::builtin().sig(r.sig).id, "arfuse.path_disabled");
  ASSERT_TRUE(
      matchLine(m,
                "[rank1]:[E1129 10:00:01.1 1 ProcessGroupNCCL.cpp:1] [Rank 1] Watchdog caught collective operation "
                "timeout: WorkNCCL(SeqNum=812, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran "
                "for 600123 milliseconds before timing out.",
                &r, &extra));
  EXPECT_EQ(Catalog::builtin().sig(r.sig).id, "c10d.watchdog_timeout");
  ASSERT_FALSE(r.details.empty());
  EXPECT_EQ(r.details[0].first, "seq");
  EXPECT_EQ(r.details[0].second, "812");
  EXPECT_FALSE(matchLine(m, "[2026-11-29 10:00:01 TP0] Decode batch. #running-req: 3, #token: 812", &r, &extra));
}

// The literal prefilter (an RE2::Set over every literal) reports exactly the literals a naive
// case-insensitive search finds: structural literals come back as bits of extraMask.
TEST(TriageMatcher, LiteralPrefilterAgreesWithNaiveSearch) {
  Catalog empty;
  const Status parsed = empty.parse("");
  ASSERT_TRUE(parsed.ok()) << parsed.message();
  std::vector<std::string> lits = {"he", "she", "his", "hers", "NCCL WARN", "a", "aaa", "xyz", "(802)", "-9"};
  Matcher m(empty, lits);
  std::mt19937 rng(5);
  const char alphabet[] = "heisrNCLWAN xyza(802)-9\xC3\x28";
  for (int t = 0; t < 2000; ++t) {
    std::string text;
    int n = rng() % 40;
    for (int i = 0; i < n; ++i) text.push_back(alphabet[rng() % (sizeof(alphabet) - 1)]);
    uint32_t got = 0, want = 0;
    SigMatch r;
    m.match(text, text, &r, &got);
    std::string lower;
    for (char c : text) lower.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
    for (size_t i = 0; i < lits.size(); ++i) {
      std::string ll;
      for (char c : lits[i]) ll.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
      if (lower.find(ll) != std::string::npos) want |= 1u << i;
    }
    EXPECT_EQ(got, want) << text;
  }
}

TEST(TriageLineFormat, Prefixes) {
  LineInfo i;
  parseLine("[2026-11-29 10:00:01 DP0 TP3 EP3] Load weight end.", &i);
  EXPECT_EQ(i.rank, 3);
  EXPECT_EQ(i.stamp.year, 2026);
  EXPECT_EQ(i.body, "Load weight end.");
  parseLine("[2026-11-29 10:00:01] Received sigquit from a child process.", &i);
  EXPECT_EQ(i.rank, -1);
  EXPECT_EQ(i.proc, "main");
  parseLine("(VllmWorker rank=2 pid=123) ERROR 11-29 10:00:01 [core.py:1] boom", &i);
  EXPECT_EQ(i.rank, 2);
  EXPECT_EQ(i.level, 'E');
  EXPECT_EQ(i.stamp.month, 11);
  EXPECT_EQ(i.body, "boom");
  parseLine("(Worker_TP5 pid=9) hello", &i);
  EXPECT_EQ(i.rank, 5);
  parseLine("(EngineCore_0 pid=7) INFO 11-29 10:00:01 [core.py:1] x", &i);
  EXPECT_EQ(i.rank, -1);
  EXPECT_EQ(i.proc, "EngineCore_0");
  parseLine(
      "[default4]:[rank4]:[E1129 10:00:01.123456 42 ProcessGroupNCCL.cpp:1234] [PG ID 0 PG GUID 0(default_pg) "
      "Rank 4] Watchdog",
      &i);
  EXPECT_EQ(i.rank, 4);
  EXPECT_EQ(i.level, 'E');
  EXPECT_EQ(i.body, "[PG ID 0 PG GUID 0(default_pg) Rank 4] Watchdog");
  parseLine("node-1:4242:4300 [3] NCCL WARN socketProgress: Connection refused", &i);
  EXPECT_EQ(i.dev, 3);
  EXPECT_EQ(i.level, 'W');
  EXPECT_EQ(i.ncclStream, "node-1:4242");
  EXPECT_EQ(i.body, "NCCL WARN socketProgress: Connection refused");
  parseLine("[ 91234.120051] NVRM: Xid (PCI:0000:ca:00): 79, pid=1306", &i);
  EXPECT_NEAR(i.uptime, 91234.120051, 1e-6);
  EXPECT_EQ(i.body, "NVRM: Xid (PCI:0000:ca:00): 79, pid=1306");
  parseLine("Nov 29 01:00:04 gpu-node-09 kernel: NVRM: Xid (PCI:0000:4b:00): 48", &i);
  EXPECT_EQ(i.stamp.month, 11);
  EXPECT_EQ(i.body, "NVRM: Xid (PCI:0000:4b:00): 48");
  parseLine("[Sun Nov 29 17:00:29 2026] Out of memory: Killed process 9902 (python3)", &i);
  EXPECT_EQ(i.stamp.year, 2026);
  EXPECT_EQ(i.body, "Out of memory: Killed process 9902 (python3)");
  parseLine("arfuse ERROR rank=0 dev=0 sm_90 code=arfusePeerTimeout comm.cc:311 waited", &i);
  EXPECT_STREQ(i.format, "arfuse");
  EXPECT_EQ(i.level, 'E');
  // Indented by the tool that printed it (`arfuse selftest --procs` shows each rank's log so).
  parseLine("  arfuse ERROR rank=2 dev=0 sm_90 code=arfusePeerTimeout multihost_watch.cc:272 NCCL", &i);
  EXPECT_STREQ(i.format, "arfuse");
  EXPECT_EQ(i.body, "arfuse ERROR rank=2 dev=0 sm_90 code=arfusePeerTimeout multihost_watch.cc:272 NCCL");
  parseLine("\tarfuse WARN rank=1 dev=0 sm_90 x", &i);
  EXPECT_EQ(i.level, 'W');
  // An indented line that only starts with the word (a traceback's source line) stays as it is.
  parseLine("    arfuse = load_library()", &i);
  EXPECT_STREQ(i.format, "plain");
  EXPECT_EQ(i.body, "    arfuse = load_library()");
}

TEST(TriageAnalyzer, ArfuseTokensAndUnprefixedRankInference) {
  Analyzer a(Catalog::builtin());
  a.beginFile("x.log");
  a.feed("[2026-11-29 10:00:01 TP6] capturing");
  a.feed("[TensorRT-LLM][ERROR] Assertion failed: allreduce fusion: unsupported on SM 120");
  a.feed(
      "[2026-11-29 10:00:02 TP1] arfuse ERROR rank=1 dev=1 sm_90 code=arfusePeerTimeout call=7 op=AllReduce "
      "bytes=64 path=oneshot comm.cc:311 rank 1 waited 5.0 s for rank 2 at call 7; next: dump it");
  a.endFile("none", 0, 0, "");
  Result r = a.finish();
  ASSERT_EQ(r.status, Result::kRootCause);
  const EventGroup& g = a.groups()[r.rootGroup];
  EXPECT_EQ(a.catalog().sig(g.sig).id, "flashinfer.fusion_unsupported_arch");
  EXPECT_EQ(g.first.rank, 6);
  EXPECT_TRUE(g.first.rankInferred);
  ASSERT_EQ(r.otherOrigins.size(), 1u);
  const EventGroup& t = a.groups()[r.otherOrigins[0]];
  EXPECT_EQ(t.detail("call"), "7");
  EXPECT_EQ(t.detail("site"), "comm.cc:311");
  EXPECT_EQ(t.detail("next"), "dump it");
  EXPECT_EQ(t.detail("stuck_rank"), "2");
}

}  // namespace
}  // namespace triage
}  // namespace arfuse

namespace arfuse {
namespace triage {
namespace {

using triage_test::analyse;

// A surface message gives way to the explanation on the line after "Last error:", even when no
// signature knows that explanation's wording.
TEST(TriageAnalyzer, LastErrorExplainsTheSurface) {
  Analyzer a(Catalog::builtin());
  Result r = analyse(a, {"[rank1]: torch.distributed.DistBackendError: NCCL error in: x.cpp:1, unhandled system error "
                         "(run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5",
                         "[rank1]: ncclSystemError: System call (e.g. socket, malloc) or external library call failed",
                         "[rank1]: Last error:", "[rank1]: socketPollConnect: a wording no signature has seen"});
  ASSERT_EQ(r.status, Result::kRootCause);
  const EventGroup& g = a.groups()[r.rootGroup];
  EXPECT_EQ(a.catalog().sig(g.sig).id, "nccl.socket_error");  // socketPollConnect is a known NCCL socket call

  Analyzer b(Catalog::builtin());
  r = analyse(b, {"RuntimeError: NCCL error: invalid usage (run with NCCL_DEBUG=WARN for details)",
                  "Last error:", "Something no catalogue entry describes"});
  ASSERT_EQ(r.status, Result::kRootCause);
  EXPECT_EQ(b.catalog().sig(b.groups()[r.rootGroup].sig).id, "nccl.last_error") << r.verdict;
  EXPECT_NE(r.verdict.find("Something no catalogue entry describes"), std::string::npos) << r.verdict;
  ASSERT_GE(r.explainedSurface, 0);  // outweighed by the surface (34 < 56), the explanation still wins
  EXPECT_EQ(b.catalog().sig(b.groups()[r.explainedSurface].sig).id, "nccl.invalid_usage");
  EXPECT_NE(r.verdict.find("(explains: "), std::string::npos) << r.verdict;
}

// A traceback cut off inside a fused all-reduce names the function instead of "no error line"; a cut
// in an unknown frame is still reported, with the frame.
TEST(TriageAnalyzer, CutTracebackNamesTheFunction) {
  Analyzer a(Catalog::builtin());
  Result r = analyse(
      a, {"[2026-11-29 10:00:01 TP3] Scheduler hit an exception: Traceback (most recent call last):",
          "  File \"/sgl/python/sglang/srt/layers/layernorm.py\", line 559, in forward_with_allreduce_fusion",
          "    return _forward_with_allreduce_fusion(",
          "  File \"/usr/lib/python3/flashinfer/comm/trtllm_ar.py\", line 812, in trtllm_allreduce_fusion",
          "    module.trtllm_allreduce_fusion(", "[2026-11-29 10:00:02] Received sigquit from a child process."});
  ASSERT_EQ(r.status, Result::kRootCause) << r.verdict;
  const EventGroup& g = a.groups()[r.rootGroup];
  EXPECT_EQ(a.catalog().sig(g.sig).id, "frame.fused_allreduce");
  EXPECT_EQ(g.first.rank, 3);
  EXPECT_NE(r.verdict.find("trtllm_allreduce_fusion"), std::string::npos) << r.verdict;
  EXPECT_FALSE(a.catalog().sig(g.sig).remedy.find("--enforce-disable-flashinfer-allreduce-fusion") ==
               std::string::npos);

  Analyzer b(Catalog::builtin());
  r = analyse(b, {"Traceback (most recent call last):", "  File \"/app/serve.py\", line 9, in main", "    run()"});
  // A cut traceback in an unknown function says where, not why: insufficient evidence, not a root cause.
  ASSERT_EQ(r.status, Result::kInsufficient) << r.verdict;
  EXPECT_EQ(b.catalog().sig(b.groups()[r.rootGroup].sig).id, "python.traceback_cut");
  EXPECT_NE(r.verdict.find("traceback cut off in main()"), std::string::npos) << r.verdict;
}

// Prefixes seen in real pastes: mpirun tags, docker compose, cloud logging, journald units, a
// Markdown quote, newer NCCL's file:line before "NCCL WARN".
TEST(TriageLineFormat, LauncherAndExportPrefixes) {
  LineInfo i;
  parseLine("[1,3]<stdout>:smc:29881:30401 [0] init.cc:497 NCCL WARN Duplicate GPU detected", &i);
  EXPECT_EQ(i.rank, 3);
  EXPECT_EQ(i.dev, 0);
  EXPECT_EQ(i.body, "NCCL WARN Duplicate GPU detected");
  parseLine("vllm-1  | NVIDIA GeForce RTX 5070 Ti with CUDA capability sm_120", &i);
  EXPECT_EQ(i.proc, "vllm-1");
  EXPECT_EQ(i.body, "NVIDIA GeForce RTX 5070 Ti with CUDA capability sm_120");
  parseLine("ERROR 2025-04-05T00:01:19.209237575Z [2025-04-05 00:01:19] Received sigquit", &i);
  EXPECT_EQ(i.stamp.year, 2025);
  EXPECT_EQ(i.body, "Received sigquit");
  parseLine("Oct 04 15:02:41 llm sd-webui-forge-start[394]: RuntimeError: CUDA error", &i);
  EXPECT_EQ(i.stamp.month, 10);
  EXPECT_EQ(i.body, "RuntimeError: CUDA error");
  parseLine("> 9d31:840:858 [0] NCCL INFO Bootstrap : Using eth0", &i);
  EXPECT_EQ(i.body, "NCCL INFO Bootstrap : Using eth0");
  parseLine("[3] include/shm.h:28 NCCL WARN Call to posix_fallocate failed", &i);
  EXPECT_EQ(i.dev, 3);
  EXPECT_EQ(i.body, "NCCL WARN Call to posix_fallocate failed");
  parseLine("ERROR 06-06 14:09:57 worker_base.py:148]     torch._C._cuda_init()", &i);
  EXPECT_EQ(i.body, "    torch._C._cuda_init()");  // indentation kept for the traceback reader
  parseLine("2025-03-08 02:04:48,693 - __main__ - INFO - [2025-03-08 02:04:48 TP0] Scheduler hit an exception", &i);
  EXPECT_EQ(i.rank, 0);
  EXPECT_EQ(i.body, "Scheduler hit an exception");
}

}  // namespace
}  // namespace triage
}  // namespace arfuse
