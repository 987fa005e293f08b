// Pure argument checks shared by every entry point (no CUDA): CPU-tested.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "arfuse/arfuse.h"
#include "base/status.h"
#include "common/enum_arg.h"
#include "device/args.h"

namespace arfuse {

struct BufferArg {
  const char* name;
  const void* ptr;
  size_t bytes;
  size_t align = 16;  // scale pointers need less (4 bytes for fp32 scales, 1 for E4M3 block scales)
};

// Allowed exact aliases, as pairs of argument names (e.g. {"norm_out", "x"}).
struct AliasRule {
  const char* a;
  const char* b;
};

// Each check is ok, or fails with arfuseInvalidArgument and a message naming the argument(s) and the
// fix (without the entry point's name: the caller prefixes it, ARFUSE_CHECK_PREFIXED).

// Ok when every buffer is non-null, aligned (BufferArg::align), does not run past the end of the
// address space, and no two overlap except the allowed exact aliases.
Status checkBuffers(const std::vector<BufferArg>& buffers, const std::vector<AliasRule>& allowed);

// Enum arguments: read with rawEnum (common/enum_arg.h), then range-checked here.
// Ok when 0 <= raw < count, else "NAME=raw: unknown; use ...".
Status checkEnumArg(const char* name, int raw, int count, const char* use);
Status checkDtypeArg(int raw);
Status checkOpArg(int raw);

// Ok if eps is finite and > 0.
Status checkEps(float eps);

// Checks an arfuseEpilogue_t for a call of (tokens, hidden) elements of elemBytes each: version
// fields, the quant mode and its pointers, the NVFP4 shape rule, at least one output. On success
// fills *out (kernel options) and appends the buffers (with their sizes) and allowed aliases that
// checkBuffers must then see, the scale pointers included (so that they get the same overlap and
// pointer-kind checks as the data).
Status checkEpilogue(const arfuseEpilogue_t* e, int tokens, int hidden, size_t elemBytes, EpiArgs* out,
                     std::vector<BufferArg>* bufs, std::vector<AliasRule>* aliases);
// Bytes of the NVFP4 block scales of a [tokens, hidden] output in a layout (arfuseScaleLayout_t).
size_t nvfp4ScaleBytes(int layout, int tokens, int hidden);

}  // namespace arfuse
