#include "diag/watchdog.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "arfuse/arfuse.h"
#include "common/params.h"
#include "diag/records.h"

namespace arfuse {

namespace {

constexpr char kByteDump = 'D';
constexpr char kByteWake = 'W';

// --- SIGUSR1: the handler writes one byte to the pipe; nothing else. -----------------------------
// Installed once per process, the first time a group asks for the signal dump, and never removed:
// other code (Python's faulthandler.register(SIGUSR1, chain=True), a profiler) may install its own
// handler after ours and chain to ours, so taking ours away, or installing it a second time with
// theirs saved as "previous", would leave a chain that ends in a stale handler or loops (a segfault
// on the next SIGUSR1). While no watchdog runs, the handler only chains.
std::atomic<int> gSignalFd{-1};
struct sigaction gPrevAction;  // written once, before the handler is installed
std::atomic<bool> gSignalInstalled{false};
volatile sig_atomic_t gInHandler = 0;

void onSignal(int sig, siginfo_t* info, void* uc) {
  if (gInHandler) return;  // a chain that leads back to us: stop here instead of recursing
  gInHandler = 1;
  const int saved = errno;
  const int fd = gSignalFd.load(std::memory_order_relaxed);
  if (fd >= 0) {
    const char c = kByteDump;
    ssize_t r = write(fd, &c, 1);  // non-blocking: a full pipe already holds a pending dump
    (void)r;
  }
  errno = saved;
  // The application's own handler, if it had one, still runs.
  if (gPrevAction.sa_flags & SA_SIGINFO) {
    if (gPrevAction.sa_sigaction) gPrevAction.sa_sigaction(sig, info, uc);
  } else if (gPrevAction.sa_handler != SIG_DFL && gPrevAction.sa_handler != SIG_IGN) {
    gPrevAction.sa_handler(sig);
  }
  gInHandler = 0;
}

// False (with errno) when sigaction refused.
bool installSignalOnce() {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  if (gSignalInstalled.load()) return true;
  if (sigaction(SIGUSR1, nullptr, &gPrevAction) != 0) return false;
  struct sigaction act;
  std::memset(&act, 0, sizeof act);
  act.sa_sigaction = onSignal;
  act.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&act.sa_mask);
  if (sigaction(SIGUSR1, &act, nullptr) != 0) return false;
  gSignalInstalled.store(true);
  return true;
}

// --- Output ---------------------------------------------------------------------------------------
WatchdogSink gDefaultSink;
std::atomic<WatchdogSink*> gSink{nullptr};
WatchdogSink& sink() {
  WatchdogSink* s = gSink.load();
  return s ? *s : gDefaultSink;
}

// Lines and dumps made under the lock, emitted after it is released.
struct Output {
  bool isDump = false;
  LogLevel level = kLogInfo;
  LogContext ctx;
  std::string fields;
  int line = 0;
  std::string text;
};

// --- Per-group state -------------------------------------------------------------------------------
struct RankWatch {
  uint64_t stallCall = 0;  // latest running call and when it was first seen running
  std::chrono::steady_clock::time_point stallSince;
  bool stallWarned = false;
};
struct Tracked {
  RankWatch ranks[kMaxRanks];
};

uint64_t nowNs(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(b - a).count());
}

class Watchdog {
 public:
  bool add(WatchSource* s, const WatchdogOptions& o) {
    std::lock_guard<std::mutex> life(lifeMu_);
    {
      std::lock_guard<std::mutex> lock(mu_);
      sources_.emplace(s, Tracked());
    }
    if (!running_ && (o.periodMs > 0 || o.dumpOnSignal || s->tickMs() > 0))
      start(o);
    else if (running_ && s->tickMs() > 0)
      wake();  // the thread recomputes its period
    return running_;
  }

  void remove(WatchSource* s) {
    std::lock_guard<std::mutex> life(lifeMu_);
    bool empty;
    {
      std::lock_guard<std::mutex> lock(mu_);
      sources_.erase(s);
      empty = sources_.empty();
    }
    if (empty && running_) stop();
  }

  bool running() {
    std::lock_guard<std::mutex> life(lifeMu_);
    return running_;
  }

  // At process exit: stop before the CUDA runtime (set up before any group existed) unmaps the
  // groups' host memory.
  void shutdown() {
    std::lock_guard<std::mutex> life(lifeMu_);
    if (running_) stop();
  }

 private:
  void start(const WatchdogOptions& o) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
      ARFUSE_LOG(kLogWarn, LogContext(), "", "watchdog not started: pipe: %s", std::strerror(errno));
      return;
    }
    readFd_ = fds[0];
    writeFd_ = fds[1];
    options_ = o;
    quit_.store(false);
    if (o.dumpOnSignal) {
      if (installSignalOnce())
        gSignalFd.store(writeFd_);
      else
        ARFUSE_LOG(kLogWarn, LogContext(), "", "ARFUSE_DUMP_ON_SIGNAL: sigaction(SIGUSR1): %s", std::strerror(errno));
    }
    static std::once_flag once;
    std::call_once(once, [] {
      std::atexit([] { instance().shutdown(); });
      pthread_atfork(nullptr, nullptr, afterForkInChild);
    });
    thread_ = new std::thread([this] { loop(); });
    running_ = true;
  }

  // Wakes the thread (if the pipe is full it is awake anyway).
  void wake() {
    const char c = kByteWake;
    while (write(writeFd_, &c, 1) < 0 && errno == EINTR) {
    }
  }

  // The poll period: ARFUSE_WATCHDOG_MS's, or the smallest tick period of a source; -1: none.
  int periodMs() {
    std::lock_guard<std::mutex> lock(mu_);
    int p = options_.periodMs > 0 ? options_.periodMs : -1;
    for (auto& [source, tracked] : sources_) {
      const int t = source->tickMs();
      if (t > 0) p = p < 0 ? t : std::min(p, t);
    }
    return p;
  }

  void stop() {
    // The flag says quit; the byte only wakes the thread.
    quit_.store(true);
    wake();
    thread_->join();
    delete thread_;
    thread_ = nullptr;
    gSignalFd.store(-1);  // the handler stays installed and only chains from now on
    close(readFd_);
    close(writeFd_);
    readFd_ = writeFd_ = -1;
    running_ = false;
  }

  void loop() {
    for (;;) {
      pollfd p{readFd_, POLLIN, 0};
      const int n = poll(&p, 1, periodMs());
      bool dump = false;
      if (n > 0) {
        char buf[64];
        ssize_t k;
        while ((k = read(readFd_, buf, sizeof buf)) > 0)
          for (ssize_t i = 0; i < k; ++i) dump = dump || buf[i] == kByteDump;
      }
      if (quit_.load()) return;
      std::vector<Output> out;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (options_.periodMs > 0) check(&out);
        for (auto& [source, tracked] : sources_)
          if (source->tickMs() > 0) source->tick();
        if (dump) dumpAll(&out);
      }
      for (const Output& o : out) {
        if (o.isDump)
          sink().dump(o.text);
        else
          sink().log(o.level, o.ctx, o.fields, __FILE__, o.line, o.text);
      }
    }
  }

  void check(std::vector<Output>* out) {
    const auto now = std::chrono::steady_clock::now();
    for (auto& [source, tracked] : sources_) {
      const std::vector<DumpInput> ranks = source->snapshot();
      // An error anywhere in the group, or an abort, explains a call that stopped: no stall line.
      bool groupFailed = false;
      for (const DumpInput& in : ranks) {
        if (!in.shared) continue;
        groupFailed = groupFailed || readAbort(*in.shared);
        for (int r = 0; r < in.nranks && r < kMaxRanks && !groupFailed; ++r)
          groupFailed = static_cast<const volatile int&>(in.shared->records[r].valid) != 0;
      }
      for (const DumpInput& in : ranks) {
        if (!in.shared || in.rank < 0 || in.rank >= kMaxRanks) continue;
        RankWatch& w = tracked.ranks[in.rank];
        const LogContext ctx{in.rank, in.device, in.arch};
        ErrorRecord e;
        if (readErrorRecord(*in.shared, in.rank, &e) && claimErrorReport(in.shared, in.rank, e)) {
          Output o;
          o.level = kLogError;
          o.ctx = ctx;
          o.fields = errorRecordFields(e);
          o.line = __LINE__;
          o.text = describeErrorRecord(e, in.rank, in.timeoutNs) + "; next: " + nextStepFor(e.code);
          out->push_back(std::move(o));
        }
        checkStall(in, ctx, groupFailed, now, &w, out);
      }
    }
  }

  void checkStall(const DumpInput& in, const LogContext& ctx, bool groupFailed,
                  std::chrono::steady_clock::time_point now, RankWatch* w, std::vector<Output>* out) {
    FlightRing ring;
    readFlightRing(*in.shared, in.rank, &ring);
    const FlightEntry* latest = nullptr;
    for (const FlightEntry& f : ring.entries)
      if (f.call != 0 && (!latest || f.call > latest->call)) latest = &f;
    if (!latest || latest->endNs != 0) {
      w->stallCall = 0;
      return;
    }
    if (latest->call != w->stallCall) {
      w->stallCall = latest->call;
      w->stallSince = now;
      w->stallWarned = false;
      return;
    }
    const uint64_t running = nowNs(w->stallSince, now);
    if (w->stallWarned || groupFailed || running <= watchdogStallNs(in.timeoutNs, options_.minStallNs)) return;
    w->stallWarned = true;
    const CallDesc d = latest->desc;
    Output o;
    o.level = kLogWarn;
    o.ctx = ctx;
    o.fields = strprintf("call=%llu op=%s bytes=%lld dtype=%s path=%s", static_cast<unsigned long long>(latest->call),
                         callOpName(descOp(d)), callDescBytes(d),
                         arfuseDataTypeName(static_cast<arfuseDataType_t>(descDtype(d))), callDescPath(d));
    o.line = __LINE__;
    o.text = strprintf(
        "rank %d: call %llu (%s) still running after %.1f s of host time with no error recorded "
        "(timeout %.3f s); next: dump every rank (ARFUSE_DUMP_ON_SIGNAL=1, kill -USR1) and run "
        "`arfuse triage` on the dumps and logs; check that the GPU is not held by other work",
        in.rank, static_cast<unsigned long long>(latest->call), describeCallDesc(d, true).c_str(), running / 1e9,
        in.timeoutNs / 1e9);
    out->push_back(std::move(o));
  }

  void dumpAll(std::vector<Output>* out) {
    std::string text;
    for (auto& [source, tracked] : sources_)
      for (const DumpInput& in : source->snapshot()) text += formatDump(in);
    Output o;
    o.isDump = true;
    o.text = std::move(text);
    out->push_back(std::move(o));
  }

 public:
  static Watchdog& instance() {
    // Never destroyed: comms may be destroyed by static destructors that run after exit handlers.
    Watchdog* w = gInstance.load();
    if (w) return *w;
    static std::once_flag once;
    std::call_once(once, [] { gInstance.store(new Watchdog()); });
    return *gInstance.load();
  }

  // In the child of fork(): the thread did not come along, its locks may be held forever, and the
  // groups it watched belong to the parent. The child starts from a fresh, idle watchdog (the old
  // one is abandoned, never joined), and a SIGUSR1 in the child no longer writes into the parent's
  // pipe, so it never makes the parent dump.
  static void afterForkInChild() {
    gSignalFd.store(-1);
    Watchdog* old = gInstance.load();
    if (old && old->running_) {
      close(old->readFd_);
      close(old->writeFd_);
    }
    static Watchdog* abandoned = nullptr;  // kept reachable: abandoned on purpose, not leaked
    abandoned = old;
    gInstance.store(new Watchdog());
  }

 private:
  std::mutex lifeMu_;  // start / stop / add / remove (never taken by the thread)
  std::mutex mu_;      // sources_ and their state (the thread holds it for one poll cycle)
  static std::atomic<Watchdog*> gInstance;
  std::map<WatchSource*, Tracked> sources_;
  WatchdogOptions options_;
  std::thread* thread_ = nullptr;  // a pointer, so that a child of fork() can abandon it
  bool running_ = false;
  std::atomic<bool> quit_{false};
  int readFd_ = -1, writeFd_ = -1;
};

std::atomic<Watchdog*> Watchdog::gInstance{nullptr};

}  // namespace

void WatchdogSink::log(LogLevel level, const LogContext& ctx, const std::string& fields, const char* file, int line,
                       const std::string& message) {
  logLine(level, ctx, fields, file, line, message);
}

void WatchdogSink::dump(const std::string& text) {
  writeDump(text, nullptr);  // stderr: nowhere to report its own failure
  const std::string file = paramDebugFile();
  if (file.empty()) return;
  if (const Status written = writeDump(text, file.c_str()); !written.ok())
    ARFUSE_LOG(kLogWarn, LogContext(), "", "ARFUSE_DUMP_ON_SIGNAL: %s", written.message().c_str());
}

void watchdogSetSink(WatchdogSink* s) { gSink.store(s); }

WatchdogOptions watchdogOptionsFromEnv() {
  WatchdogOptions o;
  o.periodMs = paramWatchdogMs();
  o.dumpOnSignal = paramDumpOnSignal();
  return o;
}

bool watchdogRegister(WatchSource* source) { return watchdogRegister(source, watchdogOptionsFromEnv()); }

bool watchdogRegister(WatchSource* source, const WatchdogOptions& options) {
  if (!source) return watchdogRunning();
  return Watchdog::instance().add(source, options);
}

void watchdogUnregister(WatchSource* source) {
  if (source) Watchdog::instance().remove(source);
}

bool watchdogRunning() { return Watchdog::instance().running(); }

uint64_t watchdogStallNs(uint64_t timeoutNs, uint64_t minStallNs) { return std::max(timeoutNs, minStallNs); }

}  // namespace arfuse
