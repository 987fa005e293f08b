#include "api/validate.h"

#include <cmath>
#include <cstring>

#include "common/log.h"
#include "quant/formats.h"

namespace arfuse {

Status checkBuffers(const std::vector<BufferArg>& buffers, const std::vector<AliasRule>& allowed) {
  for (const BufferArg& b : buffers) {
    if (b.ptr == nullptr) return ARFUSE_FAIL(arfuseInvalidArgument, "%s is NULL: pass a device pointer", b.name);
    const uintptr_t a = reinterpret_cast<uintptr_t>(b.ptr);
    if (b.align == 16 && a % 16 != 0)
      return ARFUSE_FAIL(arfuseInvalidArgument,
                         "%s=%p is not 16-byte aligned: arfuse moves 16-byte vectors; allocate with cudaMalloc or "
                         "offset by a multiple of 16 bytes",
                         b.name, b.ptr);
    if (b.align > 1 && a % b.align != 0)
      return ARFUSE_FAIL(arfuseInvalidArgument, "%s=%p is not %zu-byte aligned", b.name, b.ptr, b.align);
    // Checked before any end address is computed: ptr + bytes must not wrap around to a small address
    // that would make the overlap test below pass.
    if (b.bytes > UINTPTR_MAX - a)
      return ARFUSE_FAIL(arfuseInvalidArgument,
                         "%s=%p with %zu bytes runs past the end of the address space: not a real buffer", b.name,
                         b.ptr, b.bytes);
  }
  for (size_t i = 0; i < buffers.size(); ++i) {
    for (size_t j = i + 1; j < buffers.size(); ++j) {
      const BufferArg& x = buffers[i];
      const BufferArg& y = buffers[j];
      const uintptr_t xa = reinterpret_cast<uintptr_t>(x.ptr), ya = reinterpret_cast<uintptr_t>(y.ptr);
      const bool overlap = xa < ya + y.bytes && ya < xa + x.bytes;
      if (!overlap) continue;
      bool ok = false;
      if (xa == ya && x.bytes == y.bytes) {
        for (const AliasRule& r : allowed)
          if ((!std::strcmp(r.a, x.name) && !std::strcmp(r.b, y.name)) ||
              (!std::strcmp(r.a, y.name) && !std::strcmp(r.b, x.name)))
            ok = true;
      }
      if (ok) continue;
      std::string allowedText;
      for (const AliasRule& r : allowed)
        allowedText += strprintf("%s%s == %s", allowedText.empty() ? "" : ", ", r.a, r.b);
      return ARFUSE_FAIL(arfuseInvalidArgument,
                         "%s=%p and %s=%p overlap; the only aliasing allowed is %s (exactly equal pointers)", x.name,
                         x.ptr, y.name, y.ptr, allowedText.empty() ? "none" : allowedText.c_str());
    }
  }
  return Status();
}

size_t nvfp4ScaleBytes(int layout, int tokens, int hidden) { return quant::sfBytes(layout, tokens, hidden / 16); }

Status checkEpilogue(const arfuseEpilogue_t* e, int tokens, int hidden, size_t elemBytes, EpiArgs* out,
                     std::vector<BufferArg>* bufs, std::vector<AliasRule>* aliases) {
  if (!e)
    return ARFUSE_FAIL(arfuseInvalidArgument,
                       "epilogue is NULL: pass an arfuseEpilogue_t started from ARFUSE_EPILOGUE_INITIALIZER");
  if (e->magic != ARFUSE_EPILOGUE_MAGIC || e->size < sizeof(arfuseEpilogue_t))
    return ARFUSE_FAIL(arfuseInvalidArgument,
                       "epilogue: magic=0x%x size=%zu: start from ARFUSE_EPILOGUE_INITIALIZER (magic 0x%x, size %zu)",
                       e->magic, e->size, ARFUSE_EPILOGUE_MAGIC, sizeof(arfuseEpilogue_t));
  if (e->quant < 0 || e->quant >= arfuseNumQuants)
    return ARFUSE_FAIL(arfuseInvalidArgument,
                       "epilogue.quant=%d: use arfuseQuantNone, arfuseQuantFp8Static, arfuseQuantFp8PerToken or "
                       "arfuseQuantNvfp4",
                       e->quant);
  if (e->weightPlusOne != 0 && e->weightPlusOne != 1)
    return ARFUSE_FAIL(arfuseInvalidArgument, "epilogue.weightPlusOne=%d: must be 0 (w) or 1 (1 + w)",
                       e->weightPlusOne);
  if (!e->residualOut && !e->normOut && e->quant == arfuseQuantNone)
    return ARFUSE_FAIL(arfuseInvalidArgument,
                       "epilogue: no output requested: set residualOut, normOut and/or a quant mode with quantOut");
  const size_t bytes = static_cast<size_t>(tokens) * hidden * elemBytes;
  *out = EpiArgs{};
  out->enabled = 1;
  out->weightPlusOne = e->weightPlusOne;
  out->quant = e->quant;
  out->firstLayer = e->residualIn == nullptr;
  out->writeResidual = e->residualOut != nullptr;
  out->writeNorm = e->normOut != nullptr;
  out->tokens = tokens;
  if (e->residualIn) bufs->push_back({"epilogue.residualIn", e->residualIn, bytes});
  if (e->residualOut) bufs->push_back({"epilogue.residualOut", e->residualOut, bytes});
  if (e->normOut) bufs->push_back({"epilogue.normOut", e->normOut, bytes});
  aliases->push_back({"epilogue.residualOut", "epilogue.residualIn"});
  aliases->push_back({"epilogue.normOut", "x"});
  // Scales are buffers like the others: the same overlap and pointer-kind checks (checkBuffers,
  // checkPointers), with their own sizes and alignments.
  auto scalePtr = [&](const char* name, const void* p, size_t bytes, size_t align) -> Status {
    if (!p) return ARFUSE_FAIL(arfuseInvalidArgument, "%s is NULL: this quant mode needs it (device memory)", name);
    if (reinterpret_cast<uintptr_t>(p) % align)
      return ARFUSE_FAIL(arfuseInvalidArgument, "%s=%p is not %zu-byte aligned", name, p, align);
    bufs->push_back({name, p, bytes, align});
    return Status();
  };
  switch (e->quant) {
    case arfuseQuantNone:
      break;
    case arfuseQuantFp8Static:
      ARFUSE_CHECK(scalePtr("epilogue.scaleIn", e->scaleIn, 4, 4));
      bufs->push_back({"epilogue.quantOut", e->quantOut, static_cast<size_t>(tokens) * hidden});
      break;
    case arfuseQuantFp8PerToken:
      ARFUSE_CHECK(scalePtr("epilogue.scaleOut", e->scaleOut, static_cast<size_t>(tokens) * 4, 4));
      bufs->push_back({"epilogue.quantOut", e->quantOut, static_cast<size_t>(tokens) * hidden});
      break;
    case arfuseQuantNvfp4:
      if (hidden % 16)
        return ARFUSE_FAIL(arfuseInvalidArgument,
                           "hidden=%d: NVFP4 quantises blocks of 16 elements; hidden must be a multiple of 16", hidden);
      if (e->scaleLayout != arfuseScaleLinear && e->scaleLayout != arfuseScaleSwizzled128x4)
        return ARFUSE_FAIL(arfuseInvalidArgument,
                           "epilogue.scaleLayout=%d: use arfuseScaleLinear or arfuseScaleSwizzled128x4",
                           e->scaleLayout);
      ARFUSE_CHECK(scalePtr("epilogue.scaleIn", e->scaleIn, 4, 4));
      if (!e->scaleOut)
        return ARFUSE_FAIL(arfuseInvalidArgument, "epilogue.scaleOut is NULL: NVFP4 writes its block scales there");
      bufs->push_back({"epilogue.scaleOut", e->scaleOut, nvfp4ScaleBytes(e->scaleLayout, tokens, hidden), 1});
      bufs->push_back({"epilogue.quantOut", e->quantOut, static_cast<size_t>(tokens) * hidden / 2});
      out->scaleLayout = e->scaleLayout;
      break;
  }
  out->quantOut = static_cast<unsigned char*>(e->quantOut);
  out->scaleOut = e->scaleOut;
  out->scaleIn = e->scaleIn;
  return Status();
}

Status checkEnumArg(const char* name, int raw, int count, const char* use) {
  if (raw >= 0 && raw < count) return Status();
  return ARFUSE_FAIL(arfuseInvalidArgument, "%s=%d: unknown; use %s", name, raw, use);
}
Status checkDtypeArg(int raw) {
  return checkEnumArg("dtype", raw, arfuseNumDataTypes, "arfuseBfloat16, arfuseFloat16 or arfuseFloat32");
}
Status checkOpArg(int raw) { return checkEnumArg("op", raw, 2, "arfuseOpAllReduce or arfuseOpAllReduceAddRmsNorm"); }

Status checkEps(float eps) {
  if (!std::isfinite(eps) || eps <= 0.f)
    return ARFUSE_FAIL(arfuseInvalidArgument, "eps=%g: must be finite and > 0 (typically 1e-5 or 1e-6)", eps);
  return Status();
}

}  // namespace arfuse
