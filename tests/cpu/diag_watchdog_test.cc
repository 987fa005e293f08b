// The host watchdog (src/diag/watchdog.h) with a fake group: an error line once, a stall warning
// once, a dump on SIGUSR1, and a clean stop.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "common/params.h"
#include "diag/records.h"
#include "diag/watchdog.h"
#include "diag_test_util.h"

namespace arfuse {
namespace {

using namespace testing_diag;
using namespace std::chrono_literals;

struct Line {
  LogLevel level;
  LogContext ctx;
  std::string fields, file, message;
};

class CaptureSink : public WatchdogSink {
 public:
  void log(LogLevel level, const LogContext& ctx, const std::string& fields, const char* file, int,
           const std::string& message) override {
    std::lock_guard<std::mutex> l(mu_);
    lines_.push_back({level, ctx, fields, file, message});
    cv_.notify_all();
  }
  void dump(const std::string& text) override {
    std::lock_guard<std::mutex> l(mu_);
    dumps_.push_back(text);
    cv_.notify_all();
  }
  std::vector<Line> lines(LogLevel level) {
    std::lock_guard<std::mutex> l(mu_);
    std::vector<Line> out;
    for (const Line& x : lines_)
      if (x.level == level) out.push_back(x);
    return out;
  }
  std::vector<std::string> dumps() {
    std::lock_guard<std::mutex> l(mu_);
    return dumps_;
  }
  // Waits until pred() holds (true) or the deadline passes (false).
  template <typename P>
  bool waitFor(P pred, std::chrono::milliseconds limit = 5000ms) {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_for(l, limit, [&] { return pred(lines_, dumps_); });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Line> lines_;
  std::vector<std::string> dumps_;
};

size_t count(const std::vector<Line>& ls, LogLevel level) {
  size_t n = 0;
  for (const Line& l : ls) n += l.level == level;
  return n;
}

// A two-rank in-process group whose area the test writes as its kernels would.
class FakeGroup : public WatchSource {
 public:
  explicit FakeGroup(uint64_t timeoutNs = 50000000ull) : shared(newShared()), timeoutNs_(timeoutNs) {}
  ~FakeGroup() override { forgetErrorReports(shared.get()); }  // as the library does when it frees a group
  std::vector<DumpInput> snapshot() const override {
    std::vector<DumpInput> v;
    for (int r = 0; r < 2; ++r) {
      DumpInput in;
      in.rank = r;
      in.device = r + 4;
      in.nranks = 2;
      in.arch = 90;
      in.timeoutNs = timeoutNs_;
      in.shared = shared.get();
      v.push_back(in);
    }
    return v;
  }
  std::unique_ptr<GroupShared> shared;

 private:
  uint64_t timeoutNs_;
};

class Watchdog : public ::testing::Test {
 protected:
  void SetUp() override { watchdogSetSink(&sink); }
  void TearDown() override {
    EXPECT_FALSE(watchdogRunning()) << "a test left the watchdog running";
    watchdogSetSink(nullptr);
  }
  CaptureSink sink;
};

WatchdogOptions polling(int ms, uint64_t minStallNs = 10000000000ull) {  // no stall lines unless asked
  WatchdogOptions o;
  o.periodMs = ms;
  o.minStallNs = minStallNs;
  return o;
}

TEST_F(Watchdog, OffByDefaultStartsNothing) {
  FakeGroup g;
  EXPECT_FALSE(watchdogRegister(&g, WatchdogOptions()));
  EXPECT_FALSE(watchdogRunning());
  watchdogUnregister(&g);
  watchdogUnregister(&g);  // unknown: ignored
}

TEST_F(Watchdog, RecordedErrorPrintsOneCanonicalErrorLine) {
  FakeGroup g;
  stampRun(g.shared.get(), 0, 1, 5, true);
  stampRun(g.shared.get(), 1, 1, 5, true);
  ASSERT_TRUE(watchdogRegister(&g, polling(5)));
  std::this_thread::sleep_for(30ms);
  EXPECT_TRUE(sink.lines(kLogError).empty());
  record(g.shared.get(), 1, kErrPeerTimeout, 0, 5, fusedDesc(), {0, 0}, 3, 1);
  ASSERT_TRUE(sink.waitFor([](const std::vector<Line>& ls, const auto&) { return count(ls, kLogError) > 0; }));
  std::this_thread::sleep_for(100ms);  // twenty more polls: still one line
  watchdogUnregister(&g);
  EXPECT_FALSE(watchdogRunning());
  const std::vector<Line> errors = sink.lines(kLogError);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].ctx.rank, 1);
  EXPECT_EQ(errors[0].ctx.device, 5);
  EXPECT_EQ(errors[0].ctx.arch, 90);
  EXPECT_EQ(errors[0].fields,
            "code=arfusePeerTimeout call=5 op=AllReduceAddRmsNorm bytes=14336 dtype=bf16 path=oneshot peer=0 block=3 "
            "phase=1");
  EXPECT_EQ(errors[0].message.rfind("rank 1 waited 0.050 s for rank 0 at call 5 (block 3, phase 1) in "
                                    "AllReduceAddRmsNorm bf16 tokens=1 hidden=7168 (14336 B, path oneshot); the group "
                                    "is aborted; next: ",
                                    0),
            0u)
      << errors[0].message;
  EXPECT_NE(errors[0].file.find("watchdog.cc"), std::string::npos);
  // The aborted call is explained by the error: no stall warning for it.
  EXPECT_TRUE(sink.lines(kLogWarn).empty());
  // The full canonical line parses as triage expects.
  const std::string line =
      formatLogLine(kLogError, errors[0].ctx, errors[0].fields, errors[0].file.c_str(), 1, errors[0].message);
  EXPECT_EQ(line.rfind("arfuse ERROR rank=1 dev=5 sm_90 code=arfusePeerTimeout call=5 ", 0), 0u) << line;
}

TEST_F(Watchdog, EachErrorOfEachRankOnce) {
  FakeGroup g;
  ASSERT_TRUE(watchdogRegister(&g, polling(5)));
  record(g.shared.get(), 0, kErrMismatch, 1, 311, fusedDesc(1, 7168),
         makeCallDesc(arfuseOpAllReduce, arfuseBfloat16, arfuseAlgoOneShot, 0, 2, 7168), 0, 3);
  record(g.shared.get(), 1, kErrMismatch, 0, 311,
         makeCallDesc(arfuseOpAllReduce, arfuseBfloat16, arfuseAlgoOneShot, 0, 2, 7168), fusedDesc(1, 7168), 0, 3);
  ASSERT_TRUE(sink.waitFor([](const std::vector<Line>& ls, const auto&) { return count(ls, kLogError) >= 2; }));
  std::this_thread::sleep_for(60ms);
  watchdogUnregister(&g);
  const std::vector<Line> errors = sink.lines(kLogError);
  ASSERT_EQ(errors.size(), 2u);
  EXPECT_EQ(errors[0].ctx.rank, 0);
  EXPECT_EQ(errors[1].ctx.rank, 1);
  EXPECT_EQ(errors[0].fields.rfind("code=arfuseMismatch call=311 op=AllReduceAddRmsNorm bytes=14336 ", 0), 0u);
  EXPECT_EQ(errors[0].message.rfind("divergent call at call 311: rank 0 made AllReduceAddRmsNorm bf16 tokens=1 "
                                    "hidden=7168 (14336 B), rank 1 made AllReduce bf16 tokens=2 hidden=7168 (28672 B)",
                                    0),
            0u)
      << errors[0].message;
}

// The library's failing call and the watchdog share the claim: whoever comes second stays quiet.
TEST_F(Watchdog, ErrorAlreadyReportedByTheLibraryIsNotRepeated) {
  FakeGroup g;
  record(g.shared.get(), 0, kErrPeerTimeout, 1, 7, fusedDesc(), {0, 0}, 0, 0);
  ASSERT_TRUE(claimErrorReport(g.shared.get(), 0, g.shared->records[0]));  // the API path printed it
  ASSERT_TRUE(watchdogRegister(&g, polling(5)));
  record(g.shared.get(), 1, kErrPeerTimeout, 0, 7, fusedDesc(), {0, 0}, 0, 0);
  ASSERT_TRUE(sink.waitFor([](const std::vector<Line>& ls, const auto&) { return count(ls, kLogError) > 0; }));
  std::this_thread::sleep_for(50ms);
  watchdogUnregister(&g);
  const std::vector<Line> errors = sink.lines(kLogError);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].ctx.rank, 1);
  EXPECT_FALSE(claimErrorReport(g.shared.get(), 1, g.shared->records[1]));
}

TEST_F(Watchdog, StalledCallWarnsOnceNamingRankCallAndOp) {
  FakeGroup g(10000000ull);                  // 10 ms timeout: the 100 ms floor is the threshold
  stampRun(g.shared.get(), 0, 1, 3, true);   // call 3 of rank 0 never finishes
  stampRun(g.shared.get(), 1, 1, 3, false);  // rank 1 is idle
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(watchdogRegister(&g, polling(5, 100000000ull)));
  ASSERT_TRUE(sink.waitFor([](const std::vector<Line>& ls, const auto&) { return count(ls, kLogWarn) > 0; }));
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 100ms);
  std::this_thread::sleep_for(250ms);  // past the threshold again: still one line
  watchdogUnregister(&g);
  const std::vector<Line> warns = sink.lines(kLogWarn);
  ASSERT_EQ(warns.size(), 1u);
  EXPECT_EQ(warns[0].ctx.rank, 0);
  EXPECT_EQ(warns[0].fields, "call=3 op=AllReduceAddRmsNorm bytes=14336 dtype=bf16 path=oneshot");
  EXPECT_EQ(warns[0].message.rfind("rank 0: call 3 (AllReduceAddRmsNorm bf16 tokens=1 hidden=7168 (14336 B, path "
                                   "oneshot)) still running after ",
                                   0),
            0u)
      << warns[0].message;
  EXPECT_TRUE(sink.lines(kLogError).empty());
}

TEST_F(Watchdog, NextStalledCallWarnsAgainButFinishedCallsDoNot) {
  FakeGroup g(10000000ull);
  stampRun(g.shared.get(), 0, 1, 3, true);
  ASSERT_TRUE(watchdogRegister(&g, polling(5, 60000000ull)));
  ASSERT_TRUE(sink.waitFor([](const std::vector<Line>& ls, const auto&) { return count(ls, kLogWarn) == 1; }));
  // Call 3 finishes, call 4 starts and finishes quickly: nothing more.
  g.shared->flight[0].entries[2].endNs = 1;
  stamp(g.shared.get(), 0, 4, fusedDesc(), 5, 6);
  std::this_thread::sleep_for(150ms);
  EXPECT_EQ(sink.lines(kLogWarn).size(), 1u);
  // Call 5 hangs: a second warning, for call 5.
  stamp(g.shared.get(), 0, 5, fusedDesc(), 7, 0);
  ASSERT_TRUE(sink.waitFor([](const std::vector<Line>& ls, const auto&) { return count(ls, kLogWarn) == 2; }));
  watchdogUnregister(&g);
  EXPECT_EQ(sink.lines(kLogWarn)[1].fields.rfind("call=5 ", 0), 0u);
}

TEST_F(Watchdog, DefaultStallFloorIsTwoSeconds) {
  EXPECT_EQ(watchdogStallNs(300000000ull), 2000000000ull);
  EXPECT_EQ(watchdogStallNs(10000000000ull), 10000000000ull);
  EXPECT_EQ(WatchdogOptions().minStallNs, 2000000000ull);
}

int gPreviousHandlerCalls = 0;
void previousHandler(int) { ++gPreviousHandlerCalls; }

TEST_F(Watchdog, Sigusr1DumpsEveryGroupAndChainsThePreviousHandler) {
  struct sigaction prev, mine;
  std::memset(&mine, 0, sizeof mine);
  mine.sa_handler = previousHandler;
  sigemptyset(&mine.sa_mask);
  ASSERT_EQ(sigaction(SIGUSR1, &mine, &prev), 0);
  gPreviousHandlerCalls = 0;

  FakeGroup a, b;
  stampRun(a.shared.get(), 0, 1, 4, true);
  record(b.shared.get(), 1, kErrConcurrent, -1, 9, fusedDesc(), {0, 0}, 0, 4);
  WatchdogOptions o;
  o.dumpOnSignal = true;  // no polling: the thread only waits for the signal
  ASSERT_TRUE(watchdogRegister(&a, o));
  ASSERT_TRUE(watchdogRegister(&b, o));
  ASSERT_EQ(raise(SIGUSR1), 0);
  ASSERT_TRUE(sink.waitFor([](const auto&, const std::vector<std::string>& d) { return !d.empty(); }));
  EXPECT_EQ(gPreviousHandlerCalls, 1);
  const std::string dump = sink.dumps()[0];
  // Two groups of two ranks: four dumps in one text.
  size_t headers = 0;
  for (size_t p = 0; (p = dump.find("arfuse-flight-recorder v1 ", p)) != std::string::npos; ++p) ++headers;
  EXPECT_EQ(headers, 4u) << dump;
  EXPECT_NE(dump.find("arfuse-flight-recorder v1 rank=0 dev=4 nranks=2 arch=sm_90 timeout_s=0.050 abort=0 entries=4\n"),
            std::string::npos)
      << dump;
  EXPECT_NE(dump.find("entry=3 epoch=4 op=AllReduceAddRmsNorm bytes=14336 dtype=bf16 path=oneshot start_ns=1000036000 "
                      "end_ns=pending"),
            std::string::npos);
  EXPECT_NE(dump.find("arfuse-error-record rank=1 peer=-1 block=0 epoch=9 phase=4 code=concurrent"), std::string::npos);
  // Without polling there is no error line: only the dump was asked for.
  EXPECT_TRUE(sink.lines(kLogError).empty());

  watchdogUnregister(&a);
  EXPECT_TRUE(watchdogRunning());  // b is still registered
  watchdogUnregister(&b);
  EXPECT_FALSE(watchdogRunning());
  // The handler stays (another library may have chained to it since) and now only chains: the
  // previous handler runs, nothing is dumped.
  struct sigaction now;
  ASSERT_EQ(sigaction(SIGUSR1, nullptr, &now), 0);
  EXPECT_TRUE(now.sa_flags & SA_SIGINFO);
  EXPECT_NE(now.sa_handler, previousHandler);
  ASSERT_EQ(raise(SIGUSR1), 0);
  EXPECT_EQ(gPreviousHandlerCalls, 2);
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(sink.dumps().size(), 1u);
  (void)prev;  // not restored: arfuse's handler is installed for the life of the process
}

// What faulthandler.register(SIGUSR1, chain=True) does: its own work, then the handler it replaced.
int gChainCalls = 0;
struct sigaction gChainPrev;
void chainHandler(int sig, siginfo_t* info, void* uc) {
  ++gChainCalls;
  if (gChainPrev.sa_flags & SA_SIGINFO) {
    if (gChainPrev.sa_sigaction) gChainPrev.sa_sigaction(sig, info, uc);
  } else if (gChainPrev.sa_handler != SIG_DFL && gChainPrev.sa_handler != SIG_IGN) {
    gChainPrev.sa_handler(sig);
  }
}

// The sequence that crashed a Python server (issue 16): arfuse installs its handler, Python's
// faulthandler chains to it, the last group is destroyed, a new one is created, SIGUSR1. Before the
// fix the restart saved faulthandler's handler as arfuse's "previous", and the two called each other
// until the stack ran out (SIGSEGV). Run in a fresh process (threadsafe death test) so that the
// handler is installed by this test.
TEST_F(Watchdog, HandlerChainedAfterOursSurvivesARestart) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        CaptureSink local;
        watchdogSetSink(&local);
        WatchdogOptions o;
        o.dumpOnSignal = true;
        {
          FakeGroup a;
          watchdogRegister(&a, o);
          struct sigaction act;
          std::memset(&act, 0, sizeof act);
          act.sa_sigaction = chainHandler;
          act.sa_flags = SA_SIGINFO;
          sigemptyset(&act.sa_mask);
          sigaction(SIGUSR1, &act, &gChainPrev);
          watchdogUnregister(&a);
        }
        FakeGroup b;
        watchdogRegister(&b, o);
        raise(SIGUSR1);
        const bool dumped =
            local.waitFor([](const auto&, const std::vector<std::string>& d) { return !d.empty(); }, 3000ms);
        watchdogUnregister(&b);
        watchdogSetSink(nullptr);
        std::fprintf(stderr, "dumped=%d chain_calls=%d\n", dumped ? 1 : 0, gChainCalls);
        std::_Exit(dumped && gChainCalls == 1 ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "dumped=1 chain_calls=1");
}

// A child of fork() inherits the handler and the pipe but not the thread. Before the fix its SIGUSR1
// made the parent dump, and its exit joined a thread that does not exist in it.
TEST_F(Watchdog, ForkedChildNeitherDumpsTheParentNorHangsAtExit) {
  FakeGroup g;
  WatchdogOptions o = polling(5);
  o.dumpOnSignal = true;
  ASSERT_TRUE(watchdogRegister(&g, o));
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    raise(SIGUSR1);
    std::exit(0);  // runs the atexit handlers, the watchdog's shutdown among them
  }
  int status = -1;
  const auto t0 = std::chrono::steady_clock::now();
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() - t0 > 10s) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      ADD_FAILURE() << "the forked child hung at exit";
      break;
    }
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  std::this_thread::sleep_for(200ms);
  EXPECT_TRUE(sink.dumps().empty()) << "the child's SIGUSR1 made the parent dump";
  watchdogUnregister(&g);
}

TEST_F(Watchdog, RestartsAfterTheLastUnregister) {
  for (int round = 0; round < 3; ++round) {
    FakeGroup g;
    ASSERT_TRUE(watchdogRegister(&g, polling(2)));
    record(g.shared.get(), 0, kErrPeerTimeout, 1, 10 + round, fusedDesc(), {0, 0}, 0, 0);
    ASSERT_TRUE(sink.waitFor([&](const std::vector<Line>& ls, const auto&) {
      return count(ls, kLogError) == static_cast<size_t>(round + 1);
    }));
    watchdogUnregister(&g);
    EXPECT_FALSE(watchdogRunning());
  }
  EXPECT_EQ(sink.lines(kLogError)[2].fields.rfind("code=arfusePeerTimeout call=12 ", 0), 0u);
}

// A group that spans hosts: its NCCL watch asks for ticks (WatchSource::tickMs).
class TickingSource : public WatchSource {
 public:
  explicit TickingSource(int ms) : ms_(ms) {}
  std::vector<DumpInput> snapshot() const override { return {}; }
  int tickMs() const override { return ms_; }
  void tick() override { ++ticks; }
  std::atomic<int> ticks{0};

 private:
  int ms_;
};

TEST_F(Watchdog, SourceWithTicksRunsTheThreadEvenWithPollingOff) {
  TickingSource t(5);
  EXPECT_TRUE(watchdogRegister(&t, WatchdogOptions()));  // ARFUSE_WATCHDOG_MS=0, no signal dump
  const auto until = std::chrono::steady_clock::now() + 5s;
  while (t.ticks.load() < 5 && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(5ms);
  EXPECT_GE(t.ticks.load(), 5);
  watchdogUnregister(&t);
  EXPECT_FALSE(watchdogRunning());
  const int after = t.ticks.load();
  std::this_thread::sleep_for(30ms);
  EXPECT_EQ(t.ticks.load(), after);  // never touched after its unregistration
}

TEST_F(Watchdog, SourceWithTicksJoiningARunningThreadSetsItsPeriod) {
  FakeGroup g;
  ASSERT_TRUE(watchdogRegister(&g, polling(2000)));  // a slow poll
  TickingSource t(5);
  ASSERT_TRUE(watchdogRegister(&t, polling(2000)));
  const auto until = std::chrono::steady_clock::now() + 1s;
  while (t.ticks.load() < 10 && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(5ms);
  EXPECT_GE(t.ticks.load(), 10) << "ticked at the source's 5 ms, not the 2 s poll";
  watchdogUnregister(&t);
  watchdogUnregister(&g);
  EXPECT_FALSE(watchdogRunning());
}

// The test binary runs with ARFUSE_WATCHDOG_MS=25, ARFUSE_DUMP_ON_SIGNAL=1 and ARFUSE_DEBUG_FILE set
// (tests/cpu/CMakeLists.txt).
TEST_F(Watchdog, OptionsComeFromTheEnvironment) {
  const WatchdogOptions o = watchdogOptionsFromEnv();
  EXPECT_EQ(o.periodMs, 25);
  EXPECT_TRUE(o.dumpOnSignal);
  EXPECT_EQ(paramWatchdogMs(), 25);
  EXPECT_TRUE(paramDumpOnSignal());
  FakeGroup g;
  EXPECT_TRUE(watchdogRegister(&g));
  watchdogUnregister(&g);
}

TEST_F(Watchdog, DefaultSinkWritesDumpsToStderrAndTheDebugFile) {
  const char* pattern = std::getenv("ARFUSE_DEBUG_FILE");
  ASSERT_NE(pattern, nullptr);
  std::string path = pattern;
  path.replace(path.find("%p"), 2, std::to_string(getpid()));
  std::remove(path.c_str());
  WatchdogSink plain;
  ::testing::internal::CaptureStderr();
  plain.dump("arfuse-flight-recorder v1 rank=0 dev=0 nranks=1 timeout_s=1.000 abort=0 entries=0\n");
  EXPECT_EQ(::testing::internal::GetCapturedStderr(),
            "arfuse-flight-recorder v1 rank=0 dev=0 nranks=1 timeout_s=1.000 abort=0 entries=0\n");
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  EXPECT_EQ(ss.str(), "arfuse-flight-recorder v1 rank=0 dev=0 nranks=1 timeout_s=1.000 abort=0 entries=0\n");
  std::remove(path.c_str());
}

}  // namespace
}  // namespace arfuse
