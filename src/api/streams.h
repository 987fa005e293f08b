// What stream a call really runs on, and whether two ranks of one group that share a GPU can use
// their streams together. Pure host code (no CUDA calls): the library feeds it the handle and,
// for a created stream, its flags; the CPU tests feed it synthetic ones.
//
// A handle is not an identity. cudaStreamPerThread names a different stream in every host thread
// (and on every device); 0 and cudaStreamLegacy name one stream per device, the legacy default
// stream, which also waits for (and is waited for by) every blocking stream of its device - the
// per-thread default stream included. Two ranks on one GPU whose calls wait for each other must
// therefore neither resolve to one stream nor pair the legacy stream with a blocking one: either
// way one rank's kernel queues behind the other's, which waits for it until the timeout.
#pragma once

#include <stdint.h>

#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"

namespace arfuse {

enum class StreamKind : uint8_t { kNone = 0, kCreated, kLegacy, kPerThread };

struct StreamIdentity {
  StreamKind kind = StreamKind::kNone;  // kNone: no call seen yet
  uint64_t key = 0;                     // kCreated: the handle; kPerThread: the host thread; kLegacy: 0
  int device = -1;                      // the device the call runs on (default streams are per device)
  bool blocking = false;                // synchronises with the legacy default stream
  uintptr_t handle = 0;                 // as the caller passed it, for messages
};

// Handle values of the CUDA runtime's special streams (cuda_runtime_api.h: cudaStreamLegacy,
// cudaStreamPerThread), spelled here so that this file needs no CUDA header.
constexpr uintptr_t kLegacyHandle = 0x1;
constexpr uintptr_t kPerThreadHandle = 0x2;

// A small number unique to the calling host thread for the life of the process.
uint64_t hostThreadKey();

// The identity of `handle` used on `device` by host thread `threadKey`. createdFlags: for a created
// stream, cudaStreamGetFlags's result (bit 0x1 = cudaStreamNonBlocking), or -1 when unknown (a
// stream being captured into a graph cannot meet the legacy stream, so it counts as non-blocking).
StreamIdentity resolveStream(uintptr_t handle, int device, uint64_t threadKey, int createdFlags);

// "" when ranks on one device may use these two streams together; otherwise why not, as a clause
// ("both resolve to the per-thread default stream of host thread 3 on device 0").
std::string streamConflict(const StreamIdentity& mine, const StreamIdentity& theirs);

// "stream 0x55d0c0 (created, blocking)", "the legacy default stream (handle 0) of device 0", ...
std::string describeStream(const StreamIdentity& s);

// The streams the ranks of one in-process group last ran calls on (Group::streamCheck, made by
// api.cc at the group's first checked call). Two ranks on one GPU must never share a stream, nor
// pair the legacy default stream with a blocking one: a rank's call waits for its peers' calls,
// which would queue behind it.
class StreamCheck {
 public:
  // devices[r]: the CUDA device of rank r.
  explicit StreamCheck(std::vector<int> devices) : devices_(std::move(devices)), last_(devices_.size()) {}
  // Records the stream rank r's call runs on, unless it conflicts (streamConflict) with the last
  // stream of another rank on r's device: then fails with arfuseInvalidUsage naming both ranks, the
  // device, the stream and why they meet (the caller puts its entry point's name before it), and
  // records nothing.
  Status record(int r, const StreamIdentity& mine);

 private:
  std::mutex mu_;
  const std::vector<int> devices_;
  std::vector<StreamIdentity> last_;
};

}  // namespace arfuse
