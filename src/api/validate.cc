#include "api/validate.h"

#include <cmath>
#include <cstring>

#include "diag/log.h"

namespace arfuse {

std::string checkBuffers(const std::vector<BufferArg>& buffers, const std::vector<AliasRule>& allowed) {
  for (const BufferArg& b : buffers) {
    if (b.ptr == nullptr) return strprintf("%s is NULL: pass a device pointer", b.name);
    if (reinterpret_cast<uintptr_t>(b.ptr) % 16 != 0)
      return strprintf("%s=%p is not 16-byte aligned: arfuse moves 16-byte vectors; allocate with cudaMalloc or "
                       "offset by a multiple of 16 bytes",
                       b.name, b.ptr);
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
      for (const AliasRule& r : allowed) allowedText += strprintf("%s%s == %s", allowedText.empty() ? "" : ", ", r.a, r.b);
      return strprintf("%s=%p and %s=%p overlap; the only aliasing allowed is %s (exactly equal pointers)", x.name,
                       x.ptr, y.name, y.ptr, allowedText.empty() ? "none" : allowedText.c_str());
    }
  }
  return "";
}

std::string checkEps(float eps) {
  if (!std::isfinite(eps) || eps <= 0.f) return strprintf("eps=%g: must be finite and > 0 (typically 1e-5 or 1e-6)", eps);
  return "";
}

}  // namespace arfuse
