#include "api/replicas.h"

#include <atomic>
#include <cmath>
#include <cstring>

#include "common/log.h"
#include "plan/plan.h"

namespace arfuse {
namespace {

float halfToFloat(uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  float v;
  if (exp == 0)
    v = std::ldexp(static_cast<float>(man), -24);
  else if (exp == 31)
    v = man ? NAN : INFINITY;
  else
    v = std::ldexp(static_cast<float>(man | 0x400), exp - 25);
  return sign ? -v : v;
}

// "0x3f80 (1)": the element's bits and value.
std::string element(const unsigned char* p, arfuseDataType_t dt) {
  if (dt == arfuseFloat32) {
    uint32_t u;
    float f;
    std::memcpy(&u, p, 4);
    std::memcpy(&f, p, 4);
    return strprintf("0x%08x (%.9g)", u, f);
  }
  uint16_t u;
  std::memcpy(&u, p, 2);
  float f;
  if (dt == arfuseBfloat16) {
    const uint32_t w = static_cast<uint32_t>(u) << 16;
    std::memcpy(&f, &w, 4);
  } else {
    f = halfToFloat(u);
  }
  return strprintf("0x%04x (%.6g)", u, f);
}

// Index of the first differing element of two byte ranges of `elem`-byte elements, or -1.
long long firstDifference(const unsigned char* a, const unsigned char* b, size_t bytes, size_t elem) {
  if (std::memcmp(a, b, bytes) == 0) return -1;
  for (size_t i = 0; i < bytes; ++i)
    if (a[i] != b[i]) return static_cast<long long>(i / elem);
  return -1;
}

const char* kContract =
    "residual_in and weight must be bitwise equal on every rank (include/arfuse/arfuse.h): find where the "
    "ranks' copies diverge (a rank-local update, a non-deterministic op before this call, a weight loaded "
    "differently); destroy and recreate the communicators";

}  // namespace

size_t ReplicaShape::residualBytes() const {
  return hasResidual ? static_cast<size_t>(tokens) * hidden * dtypeSize(dtype) : 0;
}
size_t ReplicaShape::weightBytes() const { return static_cast<size_t>(hidden) * dtypeSize(dtype); }

std::string compareReplicas(const std::vector<ReplicaShape>& shapes, const std::vector<const unsigned char*>& data,
                            uint64_t check, int* differing) {
  const unsigned long long n = check;
  if (differing) *differing = -1;
  for (size_t q = 1; q < shapes.size(); ++q) {
    const ReplicaShape& a = shapes[0];
    const ReplicaShape& b = shapes[q];
    if (!(a.tokens == b.tokens && a.hidden == b.hidden && a.dtype == b.dtype)) return "";  // divergent call:
    // the kernels' descriptor exchange names it with both calls (arfuseMismatch).
    if (differing) *differing = static_cast<int>(q);
    if (a.hasResidual != b.hasResidual)
      return strprintf("ARFUSE_CHECK_REPLICAS: checked call %llu: rank %d passed %s residual_in and rank 0 %s; %s", n,
                       static_cast<int>(q), b.hasResidual ? "a" : "no", a.hasResidual ? "did" : "did not", kContract);
    const size_t elem = dtypeSize(a.dtype);
    const size_t rb = a.residualBytes();
    long long e = firstDifference(data[0], data[q], rb, elem);
    const char* what = "residual_in";
    const unsigned char* base0 = data[0];
    const unsigned char* baseq = data[q];
    if (e < 0) {
      e = firstDifference(data[0] + rb, data[q] + rb, a.weightBytes(), elem);
      what = "weight";
      base0 += rb;
      baseq += rb;
    }
    if (e < 0) {
      if (differing) *differing = -1;
      continue;
    }
    const std::string where = std::string(what) == "weight"
                                  ? strprintf("element %lld", e)
                                  : strprintf("element %lld (token %lld, column %lld)", e, e / a.hidden, e % a.hidden);
    return strprintf(
        "ARFUSE_CHECK_REPLICAS: %s differs between rank 0 and rank %d at %s of checked call %llu "
        "(%s tokens=%d hidden=%d): rank 0 has %s, rank %d has %s; %s",
        what, static_cast<int>(q), where.c_str(), n, arfuseDataTypeName(a.dtype), a.tokens, a.hidden,
        element(base0 + e * elem, a.dtype).c_str(), static_cast<int>(q), element(baseq + e * elem, a.dtype).c_str(),
        kContract);
  }
  return "";
}

ReplicaGather::ReplicaGather(int nranks)
    : nranks_(nranks), count_(nranks, 0), shapes_(nranks), data_(nranks, nullptr) {}

bool ReplicaGather::arrive(int rank, const ReplicaShape& shape, const unsigned char* data, std::string* message,
                           uint64_t* check) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t n = ++count_[rank];
  if (n != current_) {
    // A new set. An unfinished older one means a rank skipped checked calls; the kernels report
    // that rank (timeout or divergent call), so the older set is dropped rather than compared.
    current_ = n;
    arrived_ = 0;
  }
  shapes_[rank] = shape;
  data_[rank] = data;
  if (++arrived_ < nranks_) return false;
  arrived_ = 0;
  current_ = 0;
  *check = n;
  *message = compareReplicas(shapes_, data_, n);
  return true;
}

bool arriveShared(ReplicaArea* area, int nranks, size_t slotBytes, int rank, uint64_t n, const ReplicaShape& shape,
                  std::string* message, int* differing) {
  area->tokens[rank] = shape.tokens;
  area->hidden[rank] = shape.hidden;
  area->dtype[rank] = static_cast<int32_t>(shape.dtype);
  area->residual[rank] = shape.hasResidual ? 1 : 0;
  // Sequentially consistent, not release / acquire: this is a store followed by loads of the other
  // ranks' words (Dekker's pattern). Under release / acquire two ranks arriving at once may each
  // miss the other's store (x86 reorders a store after a later load), so that neither sees the set
  // complete and it is compared by nobody: a check silently skipped (1 in ~50 runs of
  // Replicas.ProcessesMeet... under load). One total order over these stores and loads means the
  // rank whose store comes last in it sees every arrival.
  area->arrived[rank].store(n, std::memory_order_seq_cst);
  for (int q = 0; q < nranks; ++q)
    if (area->arrived[q].load(std::memory_order_seq_cst) < n) return false;  // the last to arrive compares
  // Exactly one rank takes set n (several may see it complete at once).
  uint64_t c = area->compared.load(std::memory_order_acquire);
  do {
    if (c >= n) return false;
  } while (!area->compared.compare_exchange_weak(c, n, std::memory_order_acq_rel));
  std::vector<ReplicaShape> shapes(nranks);
  std::vector<const unsigned char*> data(nranks);
  for (int q = 0; q < nranks; ++q) {
    shapes[q].tokens = area->tokens[q];
    shapes[q].hidden = area->hidden[q];
    shapes[q].dtype = static_cast<arfuseDataType_t>(area->dtype[q]);
    shapes[q].hasResidual = area->residual[q] != 0;
    data[q] = replicaSlot(area, q, slotBytes);
  }
  *message = compareReplicas(shapes, data, n, differing);
  return true;
}

}  // namespace arfuse
