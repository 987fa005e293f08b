// Pure argument checks shared by every entry point (no CUDA): CPU-tested.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "arfuse/arfuse.h"
#include "device/args.h"

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

// Checks an arfuseEpilogue_t for a call of (tokens, hidden) elements of elemBytes each: version
// fields, the quant mode and its pointers, the NVFP4 shape rule, at least one output. On success
// fills *out (kernel options) and appends the buffers (with their sizes) and allowed aliases that
// checkBuffers must then see; scale pointers only need 4-byte alignment and are checked here.
std::string checkEpilogue(const arfuseEpilogue_t* e, int tokens, int hidden, size_t elemBytes, EpiArgs* out,
                          std::vector<BufferArg>* bufs, std::vector<AliasRule>* aliases);
// Bytes of the NVFP4 block scales of a [tokens, hidden] output in a layout (arfuseScaleLayout_t).
size_t nvfp4ScaleBytes(int layout, int tokens, int hidden);

}  // namespace arfuse
