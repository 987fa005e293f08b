#include "harness/harness.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <sstream>

#include "harness/epilogue.h"
#include "harness/numeric.h"

namespace arfuse {
namespace harness {
namespace {

constexpr int kSlots = 8;

// Counter-based random numbers: element i of a fill depends only on (stream, i), so fills can run
// in parallel and still be reproducible.
inline uint64_t mix(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(mix(seed)) {}
  uint64_t nextStream() { return s = mix(s); }
};

// A host tensor in the dtype's bit layout.
struct HostTensor {
  arfuseDataType_t dtype;
  size_t n;
  std::vector<uint8_t> bytes;
  HostTensor(arfuseDataType_t d, size_t count) : dtype(d), n(count), bytes(count * numeric::elemSize(d)) {}
  float at(size_t i) const { return numeric::load(bytes.data(), i, dtype); }
  void set(size_t i, float f) { numeric::store(bytes.data(), i, f, dtype); }
  void fill(Rng& rng, float lo, float hi) {
    const uint64_t stream = rng.nextStream();
#pragma omp parallel for schedule(static)
    for (long long i = 0; i < static_cast<long long>(n); ++i) {
      const float u = static_cast<float>((mix(stream ^ (static_cast<uint64_t>(i) * 0xD1B54A32D192ED03ull)) >> 40) *
                                         (1.0 / 16777216.0));
      set(i, lo + (hi - lo) * u);
    }
  }
};

std::string cudaText(const char* what, cudaError_t e) { return std::string(what) + ": " + cudaGetErrorString(e); }

#define H_CUDA(call)                   \
  do {                                 \
    cudaError_t e_ = (call);           \
    if (e_ != cudaSuccess) {           \
      cudaGetLastError();              \
      res.error = cudaText(#call, e_); \
      return res;                      \
    }                                  \
  } while (0)

#define T_CUDA(call)                 \
  do {                               \
    cudaError_t e_ = (call);         \
    if (e_ != cudaSuccess) {         \
      cudaGetLastError();            \
      t.error = cudaText(#call, e_); \
      return t;                      \
    }                                \
  } while (0)

double relErr(const std::vector<double>& ref, const HostTensor& got) {
  double num = 0, den = 0;
  long long nans = 0;
#pragma omp parallel for reduction(+ : num, den, nans) schedule(static)
  for (long long i = 0; i < static_cast<long long>(ref.size()); ++i) {
    const double g = got.at(i);
    if (std::isnan(g)) {
      ++nans;
      continue;
    }
    num += (g - ref[i]) * (g - ref[i]);
    den += ref[i] * ref[i];
  }
  if (nans) return INFINITY;
  return std::sqrt(num / std::max(den, 1e-300));
}

bool anyNan(const HostTensor& t) {
  long long nans = 0;
#pragma omp parallel for reduction(+ : nans) schedule(static)
  for (long long i = 0; i < static_cast<long long>(t.n); ++i) nans += std::isnan(t.at(i)) ? 1 : 0;
  return nans != 0;
}

// fp64 RMSNorm of each row of `res` (given as doubles) times weight.
std::vector<double> normRef(const std::vector<double>& res, const HostTensor& w, int tokens, int hidden, double eps) {
  std::vector<double> out(res.size());
#pragma omp parallel for schedule(static)
  for (int t = 0; t < tokens; ++t) {
    const double* r = &res[static_cast<size_t>(t) * hidden];
    double sq = 0;
    for (int h = 0; h < hidden; ++h) sq += r[h] * r[h];
    const double inv = 1.0 / std::sqrt(sq / hidden + eps);
    for (int h = 0; h < hidden; ++h) out[static_cast<size_t>(t) * hidden + h] = r[h] * inv * w.at(h);
  }
  return out;
}

}  // namespace

struct World::RankBuffers {
  void* x[kSlots] = {};
  void* norm[kSlots] = {};
  void* res[2] = {};
  void* weight = nullptr;
  void* scale[kSlots] = {};  // epilogue scale_out, allocated on first use
  void* scaleIn = nullptr;   // epilogue *scaleIn (one float)
};

size_t l2Bytes(int device) {
  int v = 0;
  if (cudaDeviceGetAttribute(&v, cudaDevAttrL2CacheSize, device) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return static_cast<size_t>(v);
}

int deviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

std::string deviceName(int device) {
  cudaDeviceProp p;
  if (cudaGetDeviceProperties(&p, device) != cudaSuccess) {
    cudaGetLastError();
    return "unknown";
  }
  std::ostringstream os;
  os << p.name << " (sm_" << p.major << p.minor << ")";
  return os.str();
}

World::World(const std::vector<int>& devices, int maxTokens, int maxHidden, int algo, int timeoutMs)
    : devices_(devices), comms_(devices.size()), streams_(devices.size()), bufs_(devices.size()) {
  arfuseConfig_t cfg = ARFUSE_CONFIG_INITIALIZER;
  cfg.maxTokens = maxTokens;
  cfg.maxHidden = maxHidden;
  cfg.algo = algo;
  cfg.timeoutMs = timeoutMs;
  status_ = arfuseCommInitAll(comms_.data(), nranks(), devices_.data(), &cfg);
  if (status_ != arfuseSuccess) {
    error_ = arfuseGetLastError();
    comms_.clear();
    return;
  }
  capacityBytes_ = static_cast<size_t>(maxTokens) * maxHidden * 4;
  maxTokens_ = maxTokens;
  maxHidden_ = maxHidden;
  for (int r = 0; r < nranks(); ++r) {
    cudaSetDevice(devices_[r]);
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    streams_[r] = s;
    RankBuffers* b = new RankBuffers();
    bufs_[r] = b;
    bool ok = true;
    for (int k = 0; k < kSlots; ++k) {
      ok &= cudaMalloc(&b->x[k], capacityBytes_) == cudaSuccess;
      ok &= cudaMalloc(&b->norm[k], capacityBytes_) == cudaSuccess;
    }
    ok &= cudaMalloc(&b->res[0], capacityBytes_) == cudaSuccess;
    ok &= cudaMalloc(&b->res[1], capacityBytes_) == cudaSuccess;
    ok &= cudaMalloc(&b->weight, static_cast<size_t>(maxHidden) * 4) == cudaSuccess;
    if (!ok) {
      status_ = arfuseCudaError;
      error_ = "harness: cudaMalloc of test buffers failed";
      cudaGetLastError();
      return;
    }
  }
}

World::~World() {
  for (int r = 0; r < static_cast<int>(bufs_.size()); ++r) {
    if (streams_[r]) {
      cudaSetDevice(devices_[r]);
      cudaStreamSynchronize(static_cast<cudaStream_t>(streams_[r]));
    }
  }
  for (arfuseComm_t c : comms_)
    if (c) arfuseCommDestroy(c);
  for (int r = 0; r < static_cast<int>(bufs_.size()); ++r) {
    cudaSetDevice(devices_[r]);
    if (RankBuffers* b = bufs_[r]) {
      for (int k = 0; k < kSlots; ++k) {
        cudaFree(b->x[k]);
        cudaFree(b->norm[k]);
      }
      cudaFree(b->res[0]);
      cudaFree(b->res[1]);
      cudaFree(b->weight);
      for (void* p : b->scale)
        if (p) cudaFree(p);
      if (b->scaleIn) cudaFree(b->scaleIn);
      delete b;
    }
    if (streams_[r]) cudaStreamDestroy(static_cast<cudaStream_t>(streams_[r]));
  }
}

CaseResult World::run(const CaseSpec& spec) {
  CaseResult res;
  if (!ok()) {
    res.error = error_;
    return res;
  }
  if (spec.epilogue != kEpilogueNone && spec.op == arfuseOpAllReduceAddRmsNorm) return runEpilogue(spec);
  const int n = nranks();
  const size_t count = static_cast<size_t>(spec.tokens) * spec.hidden;
  const size_t bytes = count * numeric::elemSize(spec.dtype);
  if (bytes > capacityBytes_) {
    res.error = "harness: case larger than the world's buffers";
    return res;
  }
  arfusePlan_t plan;
  if (arfuseCommQueryPlan(comms_[0], spec.op, spec.tokens, spec.hidden, spec.dtype, &plan) != arfuseSuccess) {
    res.error = arfuseCommGetLastError(comms_[0]);
    return res;
  }
  res.algo = arfuseAlgoName(plan.algo);

  Rng rng(spec.seed);
  std::vector<HostTensor> xs(n, HostTensor(spec.dtype, count));
  for (HostTensor& x : xs) x.fill(rng, -1.f, 1.f);
  HostTensor resid(spec.dtype, count), weight(spec.dtype, spec.hidden);
  resid.fill(rng, -1.f, 1.f);
  weight.fill(rng, 0.5f, 1.5f);
  const bool fused = spec.op == arfuseOpAllReduceAddRmsNorm;

  for (int r = 0; r < n; ++r) {
    RankBuffers& b = *bufs_[r];
    cudaStream_t s = static_cast<cudaStream_t>(streams_[r]);
    H_CUDA(cudaSetDevice(devices_[r]));
    H_CUDA(cudaMemcpyAsync(b.x[0], xs[r].bytes.data(), bytes, cudaMemcpyHostToDevice, s));
    H_CUDA(cudaMemcpyAsync(b.res[0], resid.bytes.data(), bytes, cudaMemcpyHostToDevice, s));
    H_CUDA(cudaMemcpyAsync(b.weight, weight.bytes.data(), weight.bytes.size(), cudaMemcpyHostToDevice, s));
    H_CUDA(cudaMemsetAsync(b.norm[0], 0xFF, bytes, s));  // NaN in every dtype
    H_CUDA(cudaMemsetAsync(b.res[1], 0xFF, bytes, s));
    H_CUDA(cudaStreamSynchronize(s));  // host buffers are pageable
  }
  arfuseGroupStart();
  for (int r = 0; r < n; ++r) {
    RankBuffers& b = *bufs_[r];
    void* normOut = spec.inPlace ? b.x[0] : b.norm[0];
    void* resOut = spec.inPlace ? b.res[0] : b.res[1];
    if (spec.direct && n == 1 && fused) {
      H_CUDA(cudaSetDevice(devices_[r]));
      if (arfuseAddRmsNorm(b.x[0], b.res[0], b.weight, spec.eps, normOut, resOut, spec.tokens, spec.hidden, spec.dtype,
                           streams_[r]) != arfuseSuccess) {
        arfuseGroupEnd();
        res.error = arfuseGetLastError();
        return res;
      }
      continue;
    }
    arfuseResult_t st =
        fused ? arfuseAllReduceAddRmsNorm(b.x[0], b.res[0], b.weight, spec.eps, normOut, resOut, spec.tokens,
                                          spec.hidden, spec.dtype, comms_[r], streams_[r])
              : arfuseAllReduce(b.x[0], normOut, spec.tokens, spec.hidden, spec.dtype, comms_[r], streams_[r]);
    if (st != arfuseSuccess) {
      arfuseGroupEnd();
      res.error = arfuseCommGetLastError(comms_[r]);
      return res;
    }
  }
  if (arfuseGroupEnd() != arfuseSuccess) {
    res.error = arfuseGetLastError();
    return res;
  }
  std::vector<HostTensor> outNorm(n, HostTensor(spec.dtype, count)), outRes(n, HostTensor(spec.dtype, count));
  for (int r = 0; r < n; ++r) {
    RankBuffers& b = *bufs_[r];
    H_CUDA(cudaSetDevice(devices_[r]));
    H_CUDA(cudaStreamSynchronize(static_cast<cudaStream_t>(streams_[r])));
    arfuseResult_t async = arfuseSuccess;
    arfuseCommGetAsyncError(comms_[r], &async);
    if (async != arfuseSuccess) {
      res.error = arfuseCommGetLastError(comms_[r]);
      return res;
    }
    H_CUDA(cudaMemcpy(outNorm[r].bytes.data(), spec.inPlace ? b.x[0] : b.norm[0], bytes, cudaMemcpyDeviceToHost));
    if (fused)
      H_CUDA(cudaMemcpy(outRes[r].bytes.data(), spec.inPlace ? b.res[0] : b.res[1], bytes, cudaMemcpyDeviceToHost));
  }

  // fp64 reference: s = sum_r x_r; residual_out = residual + s; norm of the residual rounded to the dtype.
  std::vector<double> sum(count, 0.0);
#pragma omp parallel for schedule(static)
  for (long long i = 0; i < static_cast<long long>(count); ++i)
    for (int r = 0; r < n; ++r) sum[i] += xs[r].at(i);
  res.allWritten = true;
  res.identical = true;
  for (int r = 1; r < n; ++r) {
    res.identical &= outNorm[r].bytes == outNorm[0].bytes;
    if (fused) res.identical &= outRes[r].bytes == outRes[0].bytes;
  }
  for (int r = 0; r < n; ++r) res.allWritten &= !anyNan(outNorm[r]) && (!fused || !anyNan(outRes[r]));
  if (!fused) {
    res.errNorm = relErr(sum, outNorm[0]);
  } else {
    std::vector<double> residRef(count), rounded(count);
    for (size_t i = 0; i < count; ++i) {
      residRef[i] = resid.at(i) + sum[i];
      rounded[i] = outRes[0].at(i);
    }
    res.errResidual = relErr(residRef, outRes[0]);
    // The norm is defined on the rounded residual; check that rounding stayed within tolerance above.
    res.errNorm = relErr(normRef(rounded, weight, spec.tokens, spec.hidden, spec.eps), outNorm[0]);
  }
  const double tol = numeric::tolerance(spec.dtype);
  // NCCL reduces in the dtype (rounding at every hop): allow for n roundings there.
  const double sumTol = plan.algo == arfuseAlgoNccl ? tol * n : tol;
  res.ok = res.identical && res.allWritten && res.errNorm <= sumTol && res.errResidual <= sumTol;
  if (!res.ok) {
    std::ostringstream os;
    os << "check failed:" << (res.identical ? "" : " outputs differ across ranks;")
       << (res.allWritten ? "" : " unwritten (poisoned) elements;") << " errNorm=" << res.errNorm
       << " errResidual=" << res.errResidual << " tol=" << sumTol;
    res.error = os.str();
  }
  return res;
}

bool World::ensureEpilogueBuffers(std::string* error) {
  if (scaleCapacity_) return true;
  // The largest scale tensor: NVFP4 swizzled (padded to 128 rows x 4 columns), or a float per token.
  const int cols = (maxHidden_ + 15) / 16;
  const size_t cap = std::max(scaleOutBytes(arfuseQuantNvfp4, arfuseScaleSwizzled128x4, maxTokens_, cols * 16),
                              scaleOutBytes(arfuseQuantFp8PerToken, 0, maxTokens_, maxHidden_));
  for (int r = 0; r < nranks(); ++r) {
    RankBuffers& b = *bufs_[r];
    cudaSetDevice(devices_[r]);
    bool ok = cudaMalloc(&b.scaleIn, 16) == cudaSuccess;
    for (int k = 0; k < kSlots; ++k) ok = ok && cudaMalloc(&b.scale[k], cap) == cudaSuccess;
    if (!ok) {
      cudaGetLastError();
      *error = "harness: cudaMalloc of the epilogue's scale buffers failed";
      return false;
    }
  }
  scaleCapacity_ = cap;
  return true;
}

// The epilogue variants: inputs in x[0], res[0], weight; residual_out res[1] (res[0] in place),
// norm_out norm[0], quant_out norm[1], scale_out scale[0]. Checked by checkEpilogue; a variant
// that does not write norm_out runs first with norm_out (so the quantised bytes can be checked
// against the reference applied to it), then as asked, and must write the same bytes.
CaseResult World::runEpilogue(const CaseSpec& spec) {
  CaseResult res;
  const int n = nranks();
  const size_t count = static_cast<size_t>(spec.tokens) * spec.hidden;
  const size_t bytes = count * numeric::elemSize(spec.dtype);
  const EpilogueForm form = epilogueForm(spec.epilogue);
  const size_t qBytes = quantOutBytes(form.quant, spec.tokens, spec.hidden);
  const size_t sBytes = scaleOutBytes(form.quant, form.layout, spec.tokens, spec.hidden);
  if (bytes > capacityBytes_) {
    res.error = "harness: case larger than the world's buffers";
    return res;
  }
  if (!ensureEpilogueBuffers(&res.error)) return res;
  arfusePlan_t plan;
  if (arfuseCommQueryPlan(comms_[0], arfuseOpAllReduceAddRmsNorm, spec.tokens, spec.hidden, spec.dtype, &plan) !=
      arfuseSuccess) {
    res.error = arfuseCommGetLastError(comms_[0]);
    return res;
  }
  res.algo = arfuseAlgoName(plan.algo);

  Rng rng(spec.seed);
  std::vector<HostTensor> xs(n, HostTensor(spec.dtype, count));
  for (HostTensor& x : xs) x.fill(rng, -1.f, 1.f);
  HostTensor resid(spec.dtype, count), weight(spec.dtype, spec.hidden);
  resid.fill(rng, -1.f, 1.f);
  weight.fill(rng, 0.5f, 1.5f);
  const float scaleIn = epilogueScaleIn(form.quant);

  EpilogueCase c;
  c.dtype = spec.dtype;
  c.tokens = spec.tokens;
  c.hidden = spec.hidden;
  c.eps = spec.eps;
  c.scaleIn = scaleIn;
  for (const HostTensor& x : xs) c.x.push_back(x.bytes.data());
  c.residualIn = form.residualIn ? resid.bytes.data() : nullptr;
  c.weight = weight.bytes.data();
  c.exactSum = plan.algo != arfuseAlgoNccl;

  std::vector<EpilogueOutputs> withNorm;
  for (int pass = 0; pass < (form.normOut ? 1 : 2); ++pass) {
    EpilogueForm f = form;
    f.normOut = form.normOut || pass == 0;  // the first pass always writes norm_out
    for (int r = 0; r < n; ++r) {
      RankBuffers& b = *bufs_[r];
      cudaStream_t s = static_cast<cudaStream_t>(streams_[r]);
      H_CUDA(cudaSetDevice(devices_[r]));
      H_CUDA(cudaMemcpyAsync(b.x[0], xs[r].bytes.data(), bytes, cudaMemcpyHostToDevice, s));
      H_CUDA(cudaMemcpyAsync(b.res[0], resid.bytes.data(), bytes, cudaMemcpyHostToDevice, s));
      H_CUDA(cudaMemcpyAsync(b.weight, weight.bytes.data(), weight.bytes.size(), cudaMemcpyHostToDevice, s));
      H_CUDA(cudaMemcpyAsync(b.scaleIn, &scaleIn, sizeof scaleIn, cudaMemcpyHostToDevice, s));
      H_CUDA(cudaMemsetAsync(b.norm[0], 0xFF, bytes, s));  // NaN in every dtype
      H_CUDA(cudaMemsetAsync(b.res[1], 0xFF, bytes, s));
      H_CUDA(cudaMemsetAsync(b.norm[1], 0xFF, qBytes ? qBytes : 16, s));
      H_CUDA(cudaMemsetAsync(b.scale[0], 0x5A, sBytes ? sBytes : 16, s));  // the padding must be zeroed
      H_CUDA(cudaStreamSynchronize(s));                                    // host buffers are pageable
    }
    arfuseGroupStart();
    for (int r = 0; r < n; ++r) {
      RankBuffers& b = *bufs_[r];
      arfuseEpilogue_t e = ARFUSE_EPILOGUE_INITIALIZER;
      e.residualIn = f.residualIn ? b.res[0] : nullptr;
      e.residualOut = f.residualOut ? (spec.inPlace ? b.res[0] : b.res[1]) : nullptr;
      e.normOut = f.normOut ? b.norm[0] : nullptr;
      e.weightPlusOne = f.plusOne ? 1 : 0;
      e.quant = f.quant;
      e.quantOut = f.quant != arfuseQuantNone ? b.norm[1] : nullptr;
      e.scaleOut = sBytes ? b.scale[0] : nullptr;
      e.scaleIn = static_cast<const float*>(b.scaleIn);
      e.scaleLayout = f.layout;
      if (arfuseAllReduceEpilogue(b.x[0], b.weight, spec.eps, &e, spec.tokens, spec.hidden, spec.dtype, comms_[r],
                                  streams_[r]) != arfuseSuccess) {
        arfuseGroupEnd();
        res.error = arfuseCommGetLastError(comms_[r]);
        return res;
      }
    }
    if (arfuseGroupEnd() != arfuseSuccess) {
      res.error = arfuseGetLastError();
      return res;
    }
    std::vector<EpilogueOutputs> out(n);
    for (int r = 0; r < n; ++r) {
      RankBuffers& b = *bufs_[r];
      H_CUDA(cudaSetDevice(devices_[r]));
      H_CUDA(cudaStreamSynchronize(static_cast<cudaStream_t>(streams_[r])));
      arfuseResult_t async = arfuseSuccess;
      arfuseCommGetAsyncError(comms_[r], &async);
      if (async != arfuseSuccess) {
        res.error = arfuseCommGetLastError(comms_[r]);
        return res;
      }
      EpilogueOutputs& o = out[r];
      if (f.residualOut) {
        o.residual.resize(bytes);
        H_CUDA(cudaMemcpy(o.residual.data(), spec.inPlace ? b.res[0] : b.res[1], bytes, cudaMemcpyDeviceToHost));
      }
      if (f.normOut) {
        o.norm.resize(bytes);
        H_CUDA(cudaMemcpy(o.norm.data(), b.norm[0], bytes, cudaMemcpyDeviceToHost));
      }
      o.quant.resize(qBytes);
      if (qBytes) H_CUDA(cudaMemcpy(o.quant.data(), b.norm[1], qBytes, cudaMemcpyDeviceToHost));
      o.scale.resize(sBytes);
      if (sBytes) H_CUDA(cudaMemcpy(o.scale.data(), b.scale[0], sBytes, cudaMemcpyDeviceToHost));
    }
    c.form = f;
    const EpilogueCheck k = checkEpilogue(c, out);
    res.identical = k.identical;
    if (pass == 0) {
      res.errNorm = k.errNorm;
      res.errResidual = k.errResidual;
      withNorm = out;
    }
    if (!k.ok) {
      res.error = k.error + (pass == 1 ? " (without norm_out)" : "");
      return res;
    }
    if (pass == 1) {
      const std::string d = sameQuantisedOutputs(out, withNorm);
      if (!d.empty()) {
        res.error = "epilogue check failed: " + d;
        return res;
      }
    }
  }
  res.allWritten = true;  // poisoned outputs would have failed the exact checks above
  res.ok = true;
  return res;
}

// Captures what `enqueue` issues on every rank's stream into one graph per rank. Every capture is
// ended before anything else happens (an unsafe call while any capture of this thread is open
// would invalidate it), and ended on every path, so a failure never leaves a stream capturing.
bool World::captureGraphs(const std::function<bool()>& enqueue, std::vector<cudaGraphExec_t>* execs,
                          std::string* error) {
  const int n = nranks();
  int begun = 0;
  for (; begun < n; ++begun) {
    cudaSetDevice(devices_[begun]);
    cudaError_t e =
        cudaStreamBeginCapture(static_cast<cudaStream_t>(streams_[begun]), cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess) {
      *error = cudaText("cudaStreamBeginCapture", e);
      break;
    }
  }
  const bool enqueued = begun == n && enqueue();
  std::vector<cudaGraph_t> graphs(n, nullptr);
  bool ok = enqueued;
  for (int r = 0; r < begun; ++r) {
    cudaSetDevice(devices_[r]);
    cudaError_t e = cudaStreamEndCapture(static_cast<cudaStream_t>(streams_[r]), &graphs[r]);
    if (e != cudaSuccess && ok) {
      *error = cudaText("cudaStreamEndCapture", e);
      ok = false;
    }
  }
  cudaGetLastError();
  for (int r = 0; r < n && ok; ++r) {
    cudaSetDevice(devices_[r]);
    cudaError_t e = cudaGraphInstantiate(&(*execs)[r], graphs[r], 0);
    if (e != cudaSuccess) {
      *error = cudaText("cudaGraphInstantiate", e);
      ok = false;
    }
  }
  for (cudaGraph_t g : graphs)
    if (g) cudaGraphDestroy(g);
  if (!ok) {
    for (cudaGraphExec_t& x : *execs)
      if (x) cudaGraphExecDestroy(x), x = nullptr;
    if (error->empty()) *error = "capture failed while enqueuing";
  }
  return ok;
}

CaseResult World::runBackToBack(const CaseSpec& spec, int calls) { return chained(spec, calls, 1, false); }
CaseResult World::runGraph(const CaseSpec& spec, int calls, int replays) { return chained(spec, calls, replays, true); }

CaseResult World::chained(const CaseSpec& spec, int calls, int replays, bool graph) {
  CaseResult res;
  if (!ok()) {
    res.error = error_;
    return res;
  }
  const int n = nranks();
  const size_t count = static_cast<size_t>(spec.tokens) * spec.hidden;
  const size_t bytes = count * numeric::elemSize(spec.dtype);
  if (bytes > capacityBytes_ || calls < 1) {
    res.error = "harness: bad chained case";
    return res;
  }
  arfusePlan_t plan;
  if (arfuseCommQueryPlan(comms_[0], arfuseOpAllReduceAddRmsNorm, spec.tokens, spec.hidden, spec.dtype, &plan) !=
      arfuseSuccess) {
    res.error = arfuseCommGetLastError(comms_[0]);
    return res;
  }
  res.algo = arfuseAlgoName(plan.algo);
  // Slot use of call i: x[i % 8], norm_out[i % 8], residual res[i % 2] -> res[(i+1) % 2] (or res[0] in place).
  auto enqueue = [&](int r, int i) {
    RankBuffers& b = *bufs_[r];
    void* rin = spec.inPlace ? b.res[0] : b.res[i % 2];
    void* rout = spec.inPlace ? b.res[0] : b.res[(i + 1) % 2];
    return arfuseAllReduceAddRmsNorm(b.x[i % kSlots], rin, b.weight, spec.eps, b.norm[i % kSlots], rout, spec.tokens,
                                     spec.hidden, spec.dtype, comms_[r], streams_[r]);
  };
  auto enqueueAll = [&]() -> bool {
    for (int i = 0; i < calls; ++i) {
      arfuseGroupStart();
      for (int r = 0; r < n; ++r)
        if (enqueue(r, i) != arfuseSuccess) {
          arfuseGroupEnd();
          res.error = arfuseCommGetLastError(comms_[r]);
          return false;
        }
      if (arfuseGroupEnd() != arfuseSuccess) {
        res.error = arfuseGetLastError();
        return false;
      }
    }
    return true;
  };

  std::vector<cudaGraphExec_t> execs(n, nullptr);
  if (graph) {
    std::string err;
    if (!captureGraphs([&] { return enqueueAll(); }, &execs, &err)) {
      if (res.error.empty()) res.error = err;
      return res;
    }
  }

  Rng rng(spec.seed);
  HostTensor weight(spec.dtype, spec.hidden);
  weight.fill(rng, 0.5f, 1.5f);
  res.ok = true;
  res.identical = true;
  res.allWritten = true;
  for (int rep = 0; rep < replays && res.ok; ++rep) {
    std::vector<std::vector<HostTensor>> xs(n, std::vector<HostTensor>(kSlots, HostTensor(spec.dtype, count)));
    for (auto& perRank : xs)
      for (HostTensor& x : perRank) x.fill(rng, -1.f, 1.f);
    HostTensor resid0(spec.dtype, count);
    resid0.fill(rng, -1.f, 1.f);
    for (int r = 0; r < n; ++r) {
      RankBuffers& b = *bufs_[r];
      H_CUDA(cudaSetDevice(devices_[r]));
      for (int k = 0; k < kSlots; ++k) {
        H_CUDA(cudaMemcpy(b.x[k], xs[r][k].bytes.data(), bytes, cudaMemcpyHostToDevice));
        H_CUDA(cudaMemset(b.norm[k], 0xFF, bytes));
      }
      H_CUDA(cudaMemcpy(b.res[0], resid0.bytes.data(), bytes, cudaMemcpyHostToDevice));
      H_CUDA(cudaMemset(b.res[1], 0xFF, bytes));
      H_CUDA(cudaMemcpy(b.weight, weight.bytes.data(), weight.bytes.size(), cudaMemcpyHostToDevice));
      H_CUDA(cudaDeviceSynchronize());
    }
    if (graph) {
      for (int r = 0; r < n; ++r) {
        H_CUDA(cudaSetDevice(devices_[r]));
        H_CUDA(cudaGraphLaunch(execs[r], static_cast<cudaStream_t>(streams_[r])));
      }
    } else if (!enqueueAll()) {
      res.ok = false;
      return res;
    }
    const int last = calls - 1;
    const void* finalRes = nullptr;
    std::vector<HostTensor> gotRes(n, HostTensor(spec.dtype, count)), gotNorm(n, HostTensor(spec.dtype, count));
    for (int r = 0; r < n; ++r) {
      RankBuffers& b = *bufs_[r];
      H_CUDA(cudaSetDevice(devices_[r]));
      H_CUDA(cudaStreamSynchronize(static_cast<cudaStream_t>(streams_[r])));
      arfuseResult_t async = arfuseSuccess;
      arfuseCommGetAsyncError(comms_[r], &async);
      if (async != arfuseSuccess) {
        res.ok = false;
        res.error = arfuseCommGetLastError(comms_[r]);
        return res;
      }
      finalRes = spec.inPlace ? b.res[0] : b.res[calls % 2];
      H_CUDA(cudaMemcpy(gotRes[r].bytes.data(), finalRes, bytes, cudaMemcpyDeviceToHost));
      H_CUDA(cudaMemcpy(gotNorm[r].bytes.data(), b.norm[last % kSlots], bytes, cudaMemcpyDeviceToHost));
    }
    // Emulate the kernels exactly: fp32 sum in rank order, + residual, rounded once per call.
    std::vector<std::vector<float>> slotSum(kSlots, std::vector<float>(count, 0.f));
    for (int k = 0; k < kSlots; ++k)
#pragma omp parallel for schedule(static)
      for (long long e = 0; e < static_cast<long long>(count); ++e)
        for (int r = 0; r < n; ++r) slotSum[k][e] += xs[r][k].at(e);
    // NCCL delivers the sum already rounded to the dtype (exactly so for 2 ranks; other rank counts
    // round in an order of NCCL's choosing, hence the wider tolerance below).
    if (plan.algo == arfuseAlgoNccl)
      for (auto& v : slotSum)
        for (float& f : v) f = numeric::round(f, spec.dtype);
    std::vector<float> chain(count);
    for (size_t e = 0; e < count; ++e) chain[e] = resid0.at(e);
    for (int i = 0; i < calls; ++i) {
      const std::vector<float>& s = slotSum[i % kSlots];
#pragma omp parallel for schedule(static)
      for (long long e = 0; e < static_cast<long long>(count); ++e)
        chain[e] = numeric::round(s[e] + chain[e], spec.dtype);
    }
    std::vector<double> chainD(chain.begin(), chain.end()), rounded(count);
    for (size_t e = 0; e < count; ++e) rounded[e] = gotRes[0].at(e);
    for (int r = 1; r < n; ++r)
      res.identical &= gotRes[r].bytes == gotRes[0].bytes && gotNorm[r].bytes == gotNorm[0].bytes;
    for (int r = 0; r < n; ++r) res.allWritten &= !anyNan(gotRes[r]) && !anyNan(gotNorm[r]);
    res.errResidual = std::max(res.errResidual, relErr(chainD, gotRes[0]));
    res.errNorm =
        std::max(res.errNorm, relErr(normRef(rounded, weight, spec.tokens, spec.hidden, spec.eps), gotNorm[0]));
    const double tol = numeric::tolerance(spec.dtype);
    // NCCL rounds at every hop, so its chain drifts from the emulation; arfuse paths match it exactly.
    const double resTol = plan.algo == arfuseAlgoNccl ? (n == 2 ? 1e-6 : tol * n) : 1e-6;
    res.ok = res.identical && res.allWritten && res.errResidual <= resTol && res.errNorm <= tol;
    if (!res.ok) {
      std::ostringstream os;
      os << "replay " << rep << " check failed:" << (res.identical ? "" : " outputs differ across ranks;")
         << (res.allWritten ? "" : " unwritten elements;") << " errResidual=" << res.errResidual << " (tol " << resTol
         << ") errNorm=" << res.errNorm << " (tol " << tol << ")";
      res.error = os.str();
    }
  }
  for (int r = 0; r < n; ++r)
    if (execs[r]) cudaGraphExecDestroy(execs[r]);
  return res;
}

CaseResult World::runSequence(const CaseSpec& spec, const std::vector<int>& tokens) {
  CaseResult res;
  if (!ok()) {
    res.error = error_;
    return res;
  }
  const int n = nranks();
  const int calls = static_cast<int>(tokens.size());
  if (calls > kSlots / 2) {
    res.error = "harness: at most 4 calls in a sequence";
    return res;
  }
  // Call i: x = x[i], residual_in = res[0] (shared, read only), norm_out = norm[i], residual_out = x[4 + i].
  Rng rng(spec.seed);
  HostTensor weight(spec.dtype, spec.hidden);
  weight.fill(rng, 0.5f, 1.5f);
  int maxTokens = 0;
  for (int t : tokens) maxTokens = std::max(maxTokens, t);
  const size_t maxCount = static_cast<size_t>(maxTokens) * spec.hidden;
  const size_t esize = numeric::elemSize(spec.dtype);
  if (maxCount * esize > capacityBytes_) {
    res.error = "harness: case larger than the world's buffers";
    return res;
  }
  HostTensor resid(spec.dtype, maxCount);
  resid.fill(rng, -1.f, 1.f);
  std::vector<std::vector<HostTensor>> xs(calls);
  for (int i = 0; i < calls; ++i) {
    for (int r = 0; r < n; ++r) {
      xs[i].emplace_back(spec.dtype, static_cast<size_t>(tokens[i]) * spec.hidden);
      xs[i].back().fill(rng, -1.f, 1.f);
    }
  }
  for (int r = 0; r < n; ++r) {
    RankBuffers& b = *bufs_[r];
    H_CUDA(cudaSetDevice(devices_[r]));
    for (int i = 0; i < calls; ++i) {
      H_CUDA(cudaMemcpy(b.x[i], xs[i][r].bytes.data(), xs[i][r].bytes.size(), cudaMemcpyHostToDevice));
      H_CUDA(cudaMemset(b.norm[i], 0xFF, maxCount * esize));
      H_CUDA(cudaMemset(b.x[4 + i], 0xFF, maxCount * esize));
    }
    H_CUDA(cudaMemcpy(b.res[0], resid.bytes.data(), resid.bytes.size(), cudaMemcpyHostToDevice));
    H_CUDA(cudaMemcpy(b.weight, weight.bytes.data(), weight.bytes.size(), cudaMemcpyHostToDevice));
    H_CUDA(cudaDeviceSynchronize());
  }
  for (int i = 0; i < calls; ++i) {
    arfuseGroupStart();
    for (int r = 0; r < n; ++r) {
      RankBuffers& b = *bufs_[r];
      if (arfuseAllReduceAddRmsNorm(b.x[i], b.res[0], b.weight, spec.eps, b.norm[i], b.x[4 + i], tokens[i], spec.hidden,
                                    spec.dtype, comms_[r], streams_[r]) != arfuseSuccess) {
        arfuseGroupEnd();
        res.error = arfuseCommGetLastError(comms_[r]);
        return res;
      }
    }
    if (arfuseGroupEnd() != arfuseSuccess) {
      res.error = arfuseGetLastError();
      return res;
    }
  }
  res.ok = res.identical = res.allWritten = true;
  std::vector<std::vector<HostTensor>> gotN(calls), gotR(calls);
  for (int r = 0; r < n; ++r) {
    H_CUDA(cudaSetDevice(devices_[r]));
    H_CUDA(cudaStreamSynchronize(static_cast<cudaStream_t>(streams_[r])));
    arfuseResult_t async = arfuseSuccess;
    arfuseCommGetAsyncError(comms_[r], &async);
    if (async != arfuseSuccess) {
      res.ok = false;
      res.error = arfuseCommGetLastError(comms_[r]);
      return res;
    }
  }
  for (int i = 0; i < calls; ++i) {
    const size_t count = static_cast<size_t>(tokens[i]) * spec.hidden;
    for (int r = 0; r < n; ++r) {
      gotN[i].emplace_back(spec.dtype, count);
      gotR[i].emplace_back(spec.dtype, count);
      H_CUDA(cudaSetDevice(devices_[r]));
      H_CUDA(cudaMemcpy(gotN[i][r].bytes.data(), bufs_[r]->norm[i], count * esize, cudaMemcpyDeviceToHost));
      H_CUDA(cudaMemcpy(gotR[i][r].bytes.data(), bufs_[r]->x[4 + i], count * esize, cudaMemcpyDeviceToHost));
      res.identical &= gotN[i][r].bytes == gotN[i][0].bytes && gotR[i][r].bytes == gotR[i][0].bytes;
      res.allWritten &= !anyNan(gotN[i][r]) && !anyNan(gotR[i][r]);
    }
    std::vector<double> ref(count), rounded(count);
#pragma omp parallel for schedule(static)
    for (long long e = 0; e < static_cast<long long>(count); ++e) {
      double s = resid.at(e);
      for (int r = 0; r < n; ++r) s += xs[i][r].at(e);
      ref[e] = s;
      rounded[e] = gotR[i][0].at(e);
    }
    res.errResidual = std::max(res.errResidual, relErr(ref, gotR[i][0]));
    res.errNorm = std::max(res.errNorm, relErr(normRef(rounded, weight, tokens[i], spec.hidden, spec.eps), gotN[i][0]));
  }
  const double tol = numeric::tolerance(spec.dtype);
  res.ok = res.identical && res.allWritten && res.errResidual <= tol && res.errNorm <= tol;
  if (!res.ok) {
    std::ostringstream os;
    os << "sequence check failed:" << (res.identical ? "" : " outputs differ across ranks;")
       << (res.allWritten ? "" : " unwritten elements;") << " errResidual=" << res.errResidual
       << " errNorm=" << res.errNorm << " (tol " << tol << ")";
    res.error = os.str();
  }
  return res;
}

Timing World::timeGraph(const CaseSpec& spec, int callsPerGraph, int iters, int warmup) {
  Timing t;
  if (!ok()) {
    t.error = error_;
    return t;
  }
  const int n = nranks();
  const size_t count = static_cast<size_t>(spec.tokens) * spec.hidden;
  const size_t bytes = count * numeric::elemSize(spec.dtype);
  if (bytes > capacityBytes_) {
    t.error = "harness: case larger than the world's buffers";
    return t;
  }
  Rng rng(spec.seed);
  HostTensor x(spec.dtype, count), w(spec.dtype, spec.hidden);
  w.fill(rng, 0.5f, 1.5f);
  for (int r = 0; r < n; ++r) {
    RankBuffers& b = *bufs_[r];
    T_CUDA(cudaSetDevice(devices_[r]));
    for (int k = 0; k < kSlots; ++k) {
      x.fill(rng, -1.f, 1.f);
      T_CUDA(cudaMemcpy(b.x[k], x.bytes.data(), bytes, cudaMemcpyHostToDevice));
    }
    x.fill(rng, -1.f, 1.f);
    T_CUDA(cudaMemcpy(b.res[0], x.bytes.data(), bytes, cudaMemcpyHostToDevice));
    T_CUDA(cudaMemcpy(b.weight, w.bytes.data(), w.bytes.size(), cudaMemcpyHostToDevice));
    T_CUDA(cudaDeviceSynchronize());
  }
  if (callsPerGraph < 2) {
    t.error = "harness: timeGraph needs at least 2 calls per graph";
    return t;
  }
  const bool fused = spec.op == arfuseOpAllReduceAddRmsNorm;
  const bool viaEpilogue = fused && spec.epilogue != kEpilogueNone;
  const EpilogueForm form = epilogueForm(spec.epilogue);
  if (viaEpilogue) {
    if (!ensureEpilogueBuffers(&t.error)) return t;
    const float scaleIn = epilogueScaleIn(form.quant);
    for (int r = 0; r < n; ++r) {
      T_CUDA(cudaSetDevice(devices_[r]));
      T_CUDA(cudaMemcpy(bufs_[r]->scaleIn, &scaleIn, sizeof scaleIn, cudaMemcpyHostToDevice));
    }
  }
  // Events recorded *inside* each rank's graph, after its first call: that call absorbs the skew
  // between the host's graph launches on different ranks, so only steady-state calls are timed.
  std::vector<cudaEvent_t> startEv(n, nullptr), endEv(n, nullptr);
  for (int r = 0; r < n; ++r) {
    T_CUDA(cudaSetDevice(devices_[r]));
    T_CUDA(cudaEventCreate(&startEv[r]));
    T_CUDA(cudaEventCreate(&endEv[r]));
  }
  std::vector<cudaGraphExec_t> execs(n, nullptr);
  std::string enqueueError;
  auto enqueue = [&] {
    for (int i = 0; i < callsPerGraph && enqueueError.empty(); ++i) {
      if (i == 1)
        for (int r = 0; r < n; ++r)
          cudaEventRecordWithFlags(startEv[r], static_cast<cudaStream_t>(streams_[r]), cudaEventRecordExternal);
      arfuseGroupStart();
      for (int r = 0; r < n && enqueueError.empty(); ++r) {
        RankBuffers& b = *bufs_[r];
        // Residual updated in place and chained; x rotates over 8 slots; norm_out is separate.
        arfuseResult_t st;
        if (viaEpilogue) {
          // The variant's call: quant_out takes norm_out's slot (the quantised variants write no norm).
          arfuseEpilogue_t e = ARFUSE_EPILOGUE_INITIALIZER;
          e.residualIn = form.residualIn ? b.res[0] : nullptr;
          e.residualOut = form.residualOut ? b.res[0] : nullptr;
          e.normOut = form.normOut ? b.norm[i % kSlots] : nullptr;
          e.weightPlusOne = form.plusOne ? 1 : 0;
          e.quant = form.quant;
          e.quantOut = form.quant != arfuseQuantNone ? b.norm[i % kSlots] : nullptr;
          e.scaleOut = scaleOutBytes(form.quant, form.layout, spec.tokens, spec.hidden) ? b.scale[i % kSlots] : nullptr;
          e.scaleIn = static_cast<const float*>(b.scaleIn);
          e.scaleLayout = form.layout;
          st = arfuseAllReduceEpilogue(b.x[i % kSlots], b.weight, spec.eps, &e, spec.tokens, spec.hidden, spec.dtype,
                                       comms_[r], streams_[r]);
        } else if (fused) {
          st = arfuseAllReduceAddRmsNorm(b.x[i % kSlots], b.res[0], b.weight, spec.eps, b.norm[i % kSlots], b.res[0],
                                         spec.tokens, spec.hidden, spec.dtype, comms_[r], streams_[r]);
        } else {
          st = arfuseAllReduce(b.x[i % kSlots], b.norm[i % kSlots], spec.tokens, spec.hidden, spec.dtype, comms_[r],
                               streams_[r]);
        }
        if (st != arfuseSuccess) enqueueError = arfuseCommGetLastError(comms_[r]);
      }
      if (arfuseGroupEnd() != arfuseSuccess && enqueueError.empty()) enqueueError = arfuseGetLastError();
    }
    for (int r = 0; r < n; ++r)
      cudaEventRecordWithFlags(endEv[r], static_cast<cudaStream_t>(streams_[r]), cudaEventRecordExternal);
    return enqueueError.empty();
  };
  std::string captureError;
  if (!captureGraphs(enqueue, &execs, &captureError)) {
    t.error = enqueueError.empty() ? captureError : enqueueError;
    return t;
  }
  // One replay per rank per iteration, then wait for all: the host never runs ahead of the GPUs, so
  // a full launch queue can never make one rank wait on the host feeding another.
  std::vector<double> ms;
  for (int it = 0; it < warmup + iters; ++it) {
    for (int r = 0; r < n; ++r) {
      T_CUDA(cudaSetDevice(devices_[r]));
      T_CUDA(cudaGraphLaunch(execs[r], static_cast<cudaStream_t>(streams_[r])));
    }
    double worst = 0;
    for (int r = 0; r < n; ++r) {
      T_CUDA(cudaSetDevice(devices_[r]));
      T_CUDA(cudaStreamSynchronize(static_cast<cudaStream_t>(streams_[r])));
      float m = 0;
      T_CUDA(cudaEventElapsedTime(&m, startEv[r], endEv[r]));
      worst = std::max(worst, static_cast<double>(m));
    }
    if (it >= warmup) ms.push_back(worst);
  }
  for (int r = 0; r < n; ++r) {
    arfuseResult_t async = arfuseSuccess;
    arfuseCommGetAsyncError(comms_[r], &async);
    if (async != arfuseSuccess) {
      t.error = arfuseCommGetLastError(comms_[r]);
      return t;
    }
  }
  for (int r = 0; r < n; ++r) {
    cudaEventDestroy(startEv[r]);
    cudaEventDestroy(endEv[r]);
    cudaGraphExecDestroy(execs[r]);
  }
  std::sort(ms.begin(), ms.end());
  const double scale = 1000.0 / (callsPerGraph - 1);
  t.ok = true;
  t.iters = iters;
  // x and norm_out rotate over kSlots slots; the residual is chained in place (one buffer).
  t.sets = std::min(kSlots, callsPerGraph);
  t.footprintBytes = static_cast<size_t>(t.sets) * 2 * bytes + bytes;
  t.minUs = ms.front() * scale;
  t.maxUs = ms.back() * scale;
  t.medianUs = ms[ms.size() / 2] * scale;
  return t;
}

}  // namespace harness
}  // namespace arfuse
