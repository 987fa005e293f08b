#include "api/streams.h"

#include <atomic>

#include "common/log.h"

namespace arfuse {

uint64_t hostThreadKey() {
  static std::atomic<uint64_t> next{1};
  thread_local const uint64_t key = next.fetch_add(1, std::memory_order_relaxed);
  return key;
}

StreamIdentity resolveStream(uintptr_t handle, int device, uint64_t threadKey, int createdFlags) {
  StreamIdentity s;
  s.device = device;
  s.handle = handle;
  if (handle == 0 || handle == kLegacyHandle) {  // arfuse is built with legacy default-stream semantics
    s.kind = StreamKind::kLegacy;
    s.blocking = true;
  } else if (handle == kPerThreadHandle) {
    s.kind = StreamKind::kPerThread;
    s.key = threadKey;
    s.blocking = true;  // the per-thread default stream synchronises with the legacy one
  } else {
    s.kind = StreamKind::kCreated;
    s.key = handle;
    s.blocking = createdFlags >= 0 && (createdFlags & 0x1) == 0;
  }
  return s;
}

std::string streamConflict(const StreamIdentity& a, const StreamIdentity& b) {
  if (a.kind == StreamKind::kNone || b.kind == StreamKind::kNone || a.device != b.device) return "";
  if (a.kind == b.kind && a.key == b.key) {
    switch (a.kind) {
      case StreamKind::kLegacy:
        return strprintf("both use the legacy default stream of device %d (handles %#zx and %#zx name that one stream)",
                         a.device, static_cast<size_t>(a.handle), static_cast<size_t>(b.handle));
      case StreamKind::kPerThread:
        return strprintf("both use the per-thread default stream of host thread %llu on device %d",
                         static_cast<unsigned long long>(a.key), a.device);
      default:
        return strprintf("both use stream %#zx", static_cast<size_t>(a.handle));
    }
  }
  const StreamIdentity* legacy = a.kind == StreamKind::kLegacy ? &a : b.kind == StreamKind::kLegacy ? &b : nullptr;
  const StreamIdentity* other = legacy == &a ? &b : &a;
  if (legacy && other->blocking)
    return strprintf(
        "one uses the legacy default stream of device %d and the other %s, which the legacy stream "
        "waits for and which waits for it",
        a.device, describeStream(*other).c_str());
  return "";
}

std::string describeStream(const StreamIdentity& s) {
  switch (s.kind) {
    case StreamKind::kLegacy:
      return strprintf("the legacy default stream (handle %#zx) of device %d", static_cast<size_t>(s.handle), s.device);
    case StreamKind::kPerThread:
      return strprintf("the per-thread default stream of host thread %llu on device %d",
                       static_cast<unsigned long long>(s.key), s.device);
    case StreamKind::kCreated:
      return strprintf("stream %#zx (%s)", static_cast<size_t>(s.handle), s.blocking ? "blocking" : "non-blocking");
    default:
      return "no stream";
  }
}

Status StreamCheck::record(int r, const StreamIdentity& mine) {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t q = 0; q < devices_.size(); ++q) {
    if (static_cast<int>(q) == r || devices_[q] != devices_[r]) continue;
    const std::string why = streamConflict(mine, last_[q]);
    if (!why.empty())
      return ARFUSE_FAIL(arfuseInvalidUsage,
                         "rank %d and rank %zu of this group share device %d and stream %p, in effect (%s): a call "
                         "waits for its peers' calls, which would queue behind it on that stream forever. Give every "
                         "rank its own stream, created with cudaStreamNonBlocking",
                         r, q, devices_[r], reinterpret_cast<void*>(mine.handle), why.c_str());
  }
  last_[r] = mine;
  return Status();
}

}  // namespace arfuse
