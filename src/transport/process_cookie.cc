#include "transport/process_cookie.h"

#include <pthread.h>
#include <unistd.h>

#include <chrono>
#include <mutex>
#include <random>

namespace arfuse {
namespace {

std::mutex gMu;
uint64_t gCookie = 0;
pid_t gOwner = 0;  // the process that drew gCookie (a second guard for children not made by fork())

// std::random_device reads the kernel's entropy on Linux; the clock, the PID and an address are
// mixed in so that even a deterministic random_device cannot give two processes one value.
uint64_t draw() {
  std::random_device rd;
  uint64_t v = static_cast<uint64_t>(rd()) << 32 ^ rd();
  uint64_t extra = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  extra ^= static_cast<uint64_t>(getpid()) << 40;
  extra ^= reinterpret_cast<uintptr_t>(&extra);
  // splitmix64 finaliser over the extra bits, then xor: one bad source cannot cancel the others.
  extra += 0x9E3779B97F4A7C15ull;
  extra = (extra ^ (extra >> 30)) * 0xBF58476D1CE4E5B9ull;
  extra = (extra ^ (extra >> 27)) * 0x94D049BB133111EBull;
  v ^= extra ^ (extra >> 31);
  return v == 0 ? 1 : v;
}

// Held across fork() so that no other thread can be half-way through an update when the child's
// copy is taken; the child then forgets the parent's value and draws its own on first use.
void beforeFork() { gMu.lock(); }
void afterForkParent() { gMu.unlock(); }
void afterForkChild() {
  gCookie = 0;
  gMu.unlock();
}

}  // namespace

uint64_t processCookie() {
  static std::once_flag atfork;
  std::call_once(atfork, [] { pthread_atfork(beforeFork, afterForkParent, afterForkChild); });
  std::lock_guard<std::mutex> lock(gMu);
  if (gCookie == 0 || gOwner != getpid()) {
    gCookie = draw();
    gOwner = getpid();
  }
  return gCookie;
}

}  // namespace arfuse
