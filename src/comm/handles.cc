#include "comm/handles.h"

#include <mutex>
#include <unordered_set>
#include <vector>

namespace arfuse {
namespace {

struct Handles {
  std::mutex mu;
  std::unordered_set<const void*> live;
  std::vector<const void*> retired;  // kept reachable: retired on purpose, not leaked
};

Handles& handles() {
  static Handles* h = new Handles;  // never destroyed: handles may be checked from exit handlers
  return *h;
}

}  // namespace

void handleRegister(const void* h) {
  Handles& r = handles();
  std::lock_guard<std::mutex> lock(r.mu);
  r.live.insert(h);
}

bool handleIsLive(const void* h) {
  Handles& r = handles();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.live.count(h) != 0;
}

void handleRetire(const void* h) {
  Handles& r = handles();
  std::lock_guard<std::mutex> lock(r.mu);
  if (r.live.erase(h) != 0) r.retired.push_back(h);
}

size_t handleRetiredCount() {
  Handles& r = handles();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.retired.size();
}

}  // namespace arfuse
