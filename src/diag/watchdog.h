// The host watchdog: one optional thread per process that watches every registered group's
// host-mapped area (diag/device_records.h GroupShared) and speaks up when the host cannot, e.g. while the
// application is blocked in a stream synchronise or a CUDA-graph replay:
//
//  - a newly recorded kernel error (records[r].valid of a local rank) -> its canonical ERROR line
//    at once, once per error: code=, call=, op=, bytes=, dtype=, path=, peer= ..., the
//    describeErrorRecord sentence and the next step;
//  - a stalled call: the same flight-recorder entry of a local rank still running (end 0) for more
//    than max(group timeout, 2 s) of host time with no error recorded -> one WARN line naming the
//    rank, the call and its op (the device-side timeout should have fired: something is wrong
//    below arfuse, or its blocks never ran);
//  - sources that ask for ticks (WatchSource::tickMs > 0: a group that spans hosts, whose NCCL
//    operations across hosts are bounded that way, diag/nccl_watch.h) are ticked at that period
//    whatever ARFUSE_WATCHDOG_MS says; the thread then runs while such a source is registered;
//  - ARFUSE_DUMP_ON_SIGNAL=1: SIGUSR1 -> every registered group's local ranks dumped (dump.h) to
//    stderr and to the ARFUSE_DEBUG_FILE file. The handler only writes one byte to a pipe
//    (async-signal-safe); the thread does the work. An earlier SIGUSR1 handler is still called.
//    The handler is installed once per process and never removed (another library may have
//    chained to it); with no watchdog running it only chains.
//
// ARFUSE_WATCHDOG_MS is the poll period (0 = no polling, the default). The thread runs while at
// least one group is registered and polling or the signal dump is on; it stops (joined) at the last
// unregister, and at process exit. Registration never waits for a GPU; unregistration waits at most
// for the thread's current poll cycle. A child of fork() starts with an idle watchdog of its own:
// it never touches the parent's thread, pipe or groups.
#pragma once

#include <stdint.h>

#include <string>
#include <vector>

#include "common/log.h"
#include "diag/dump.h"

namespace arfuse {

struct WatchdogOptions {
  int periodMs = 0;                     // poll period; 0: no error/stall polling
  bool dumpOnSignal = false;            // SIGUSR1 -> dump
  uint64_t minStallNs = 2000000000ull;  // a call is stalled after max(group timeout, this); tests lower it
};
// ARFUSE_WATCHDOG_MS / ARFUSE_DUMP_ON_SIGNAL.
WatchdogOptions watchdogOptionsFromEnv();

// What the watchdog asks of a group. Implemented by the library per group (in-process: all its
// ranks are local). Called on the watchdog thread, under the watchdog's lock: it must not block,
// and must not call watchdogRegister / watchdogUnregister.
class WatchSource {
 public:
  virtual ~WatchSource() = default;
  // One DumpInput per local, live rank of the group (rank, device, nranks, arch, timeoutNs,
  // shared = the group's host-mapped area, lastError). `shared` must stay valid until
  // watchdogUnregister(this) returns.
  virtual std::vector<DumpInput> snapshot() const = 0;
  // The period (ms) at which this source must be ticked, 0 for never; fixed for the source's life.
  // A source with ticks keeps the thread running (and polling at the smallest such period) even
  // when ARFUSE_WATCHDOG_MS is 0.
  virtual int tickMs() const { return 0; }
  // One tick, on the watchdog thread, under the watchdog's lock. It may block briefly (an abort)
  // and may log (logLine), but must not call watchdogRegister / watchdogUnregister.
  virtual void tick() {}
};

// Where the watchdog's output goes. The default prints log lines with arfuse::logLine (stderr and
// the ARFUSE_DEBUG_FILE file, subject to ARFUSE_LOG_LEVEL) and writes dumps to stderr and to the
// ARFUSE_DEBUG_FILE file. Called on the watchdog thread, outside its lock.
class WatchdogSink {
 public:
  virtual ~WatchdogSink() = default;
  virtual void log(LogLevel level, const LogContext& ctx, const std::string& fields, const char* file, int line,
                   const std::string& message);
  virtual void dump(const std::string& text);
};
// Replaces the sink (nullptr: the default). For tests; the sink must outlive its use.
void watchdogSetSink(WatchdogSink* sink);

// Adds a group. Starts the thread when it is not running and the options (the environment's, or
// `options`) turn polling or the signal dump on, or the source asks for ticks; options are fixed
// while the thread runs (a running thread only learns the new source's tick period).
// Returns true when the thread is running after the call.
bool watchdogRegister(WatchSource* source);
bool watchdogRegister(WatchSource* source, const WatchdogOptions& options);
// Removes a group; after it returns the thread no longer touches `source` or its memory. The last
// unregistration stops and joins the thread. Unknown sources are ignored.
void watchdogUnregister(WatchSource* source);
bool watchdogRunning();

// The stall threshold: max(timeoutNs, minStallNs), 2 s unless the options say otherwise.
uint64_t watchdogStallNs(uint64_t timeoutNs, uint64_t minStallNs = WatchdogOptions().minStallNs);

}  // namespace arfuse
