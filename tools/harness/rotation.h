// How many input sets a timed graph rotates through, so that the L2 cache does not serve a
// bandwidth-bound call from the previous call's bytes (targets.md: input sets larger than L2 rotate
// between calls). Pure; CPU-tested.
#pragma once

#include <cstddef>

namespace arfuse {
namespace harness {

// Sets whose bytes together are at least twice the L2: after one pass over them, what the first set
// left in L2 has been evicted by the others (L2 is not a perfect LRU, hence the factor two).
constexpr int kL2Factor = 2;
// The graph holds `callsPerGraph` calls and call i uses set i % sets, so more sets than calls buy
// nothing; and the sets must fit in memory next to everything else.
constexpr size_t kMaxRotationBytes = size_t(4) << 30;

// setBytes: what one call reads and writes (its inputs and outputs); l2Bytes: the device's L2
// (cudaDevAttrL2CacheSize; 0 when unknown: then 8 sets, the historical default).
inline int rotationSets(size_t setBytes, size_t l2Bytes, int callsPerGraph) {
  if (setBytes == 0 || callsPerGraph < 1) return 1;
  size_t want = l2Bytes ? (kL2Factor * l2Bytes + setBytes - 1) / setBytes : 8;
  if (want < 1) want = 1;
  if (want > static_cast<size_t>(callsPerGraph)) want = static_cast<size_t>(callsPerGraph);
  const size_t fit = kMaxRotationBytes / setBytes;
  if (want > fit) want = fit ? fit : 1;
  return static_cast<int>(want);
}

// True when `sets` sets of `setBytes` keep a call's bytes out of L2 by the rule above; a row that
// is not (small messages: the graph has too few calls to cover twice the L2) says so in its JSON.
inline bool rotationBeatsL2(int sets, size_t setBytes, size_t l2Bytes) {
  return l2Bytes && static_cast<size_t>(sets) * setBytes >= kL2Factor * l2Bytes;
}

}  // namespace harness
}  // namespace arfuse
