// Pure argument checks shared by every entry point (no CUDA): CPU-tested.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace arfuse {

struct BufferArg {
  const char* name;
  const void* ptr;
  size_t bytes;
};

// Allowed exact aliases, as pairs of argument names (e.g. {"norm_out", "x"}).
struct AliasRule {
  const char* a;
  const char* b;
};

// Returns "" when every buffer is non-null, 16-byte aligned, and no two overlap except the allowed
// exact aliases; else a message naming the argument(s) and the fix.
std::string checkBuffers(const std::vector<BufferArg>& buffers, const std::vector<AliasRule>& allowed);

// "" if eps is finite and > 0.
std::string checkEps(float eps);

}  // namespace arfuse
