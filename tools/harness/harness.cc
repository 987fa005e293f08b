// The harness World: its ranks and buffers, and the one-call cases (run: every path and dtype
// against the fp64 reference; runEpilogue: the epilogue variants). Multi-call cases are in
// sequences.cc, graph timing in timing.cc.
#include "harness/harness.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <sstream>

#include "harness/epilogue.h"
#include "harness/numeric.h"
#include "harness/world_detail.h"

namespace arfuse {
namespace harness {

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

bool World::admits(size_t bytes, std::string* error) const {
  if (!ok()) {
    *error = error_;
    return false;
  }
  if (bytes > capacityBytes_) {
    *error = "harness: case larger than the world's buffers";
    return false;
  }
  return true;
}

bool World::queryPlan(arfuseOp_t op, const CaseSpec& spec, arfusePlan_t* plan, CaseResult* res) const {
  if (arfuseCommQueryPlan(comms_[0], op, spec.tokens, spec.hidden, spec.dtype, plan) != arfuseSuccess) {
    res->error = arfuseCommGetLastError(comms_[0]);
    return false;
  }
  res->algo = arfuseAlgoName(plan->algo);
  return true;
}

// Rank by rank, on its stream: the inputs into x[0], res[0] and weight, NaN (0xFF in every dtype)
// into norm[0] and res[1]; an epilogue variant's *scaleIn too, and its quant_out (norm[1]) and
// scale_out (scale[0], whose padding the call must zero) poisoned. Each rank is waited for before
// the next: the host buffers are pageable.
bool World::uploadCall(const CallInputs& in, size_t bytes, const EpilogueInputs* epi, std::string* error) {
  const std::vector<HostTensor>& xs = in.xs;
  const HostTensor &resid = in.resid, &weight = in.weight;
  const float scaleIn = epi ? epi->scaleIn : 0.f;
  const size_t qBytes = epi ? epi->qBytes : 0, sBytes = epi ? epi->sBytes : 0;
  for (int r = 0; r < nranks(); ++r) {
    RankBuffers& b = *bufs_[r];
    cudaStream_t s = static_cast<cudaStream_t>(streams_[r]);
    B_CUDA(cudaSetDevice(devices_[r]));
    B_CUDA(cudaMemcpyAsync(b.x[0], xs[r].bytes.data(), bytes, cudaMemcpyHostToDevice, s));
    B_CUDA(cudaMemcpyAsync(b.res[0], resid.bytes.data(), bytes, cudaMemcpyHostToDevice, s));
    B_CUDA(cudaMemcpyAsync(b.weight, weight.bytes.data(), weight.bytes.size(), cudaMemcpyHostToDevice, s));
    if (epi) B_CUDA(cudaMemcpyAsync(b.scaleIn, &scaleIn, sizeof scaleIn, cudaMemcpyHostToDevice, s));
    B_CUDA(cudaMemsetAsync(b.norm[0], 0xFF, bytes, s));
    B_CUDA(cudaMemsetAsync(b.res[1], 0xFF, bytes, s));
    if (epi) {
      B_CUDA(cudaMemsetAsync(b.norm[1], 0xFF, qBytes ? qBytes : 16, s));
      B_CUDA(cudaMemsetAsync(b.scale[0], 0x5A, sBytes ? sBytes : 16, s));
    }
    B_CUDA(cudaStreamSynchronize(s));
  }
  return true;
}

bool World::groupCall(const std::function<arfuseResult_t(int r)>& call, std::string* error) {
  arfuseGroupStart();
  for (int r = 0; r < nranks(); ++r)
    if (call(r) != arfuseSuccess) {
      arfuseGroupEnd();
      *error = arfuseCommGetLastError(comms_[r]);
      return false;
    }
  if (arfuseGroupEnd() != arfuseSuccess) {
    *error = arfuseGetLastError();
    return false;
  }
  return true;
}

bool World::waitForRank(int r, std::string* error) {
  B_CUDA(cudaSetDevice(devices_[r]));
  B_CUDA(cudaStreamSynchronize(static_cast<cudaStream_t>(streams_[r])));
  return true;
}

bool World::noAsyncError(int r, std::string* error) {
  arfuseResult_t async = arfuseSuccess;
  arfuseCommGetAsyncError(comms_[r], &async);
  if (async == arfuseSuccess) return true;
  *error = arfuseCommGetLastError(comms_[r]);
  return false;
}

CaseResult World::run(const CaseSpec& spec) {
  CaseResult res;
  const int n = nranks();
  const size_t count = static_cast<size_t>(spec.tokens) * spec.hidden;
  const size_t bytes = count * numeric::elemSize(spec.dtype);
  if (!admits(bytes, &res.error)) return res;
  if (spec.epilogue != kEpilogueNone && spec.op == arfuseOpAllReduceAddRmsNorm) return runEpilogue(spec);
  arfusePlan_t plan;
  if (!queryPlan(spec.op, spec, &plan, &res)) return res;

  const CallInputs in(spec, n, count);
  const std::vector<HostTensor>& xs = in.xs;
  const HostTensor &resid = in.resid, &weight = in.weight;
  const bool fused = spec.op == arfuseOpAllReduceAddRmsNorm;
  if (!uploadCall(in, bytes, nullptr, &res.error)) return res;

  auto collective = [&](int r) {
    RankBuffers& b = *bufs_[r];
    void* normOut = spec.inPlace ? b.x[0] : b.norm[0];
    void* resOut = spec.inPlace ? b.res[0] : b.res[1];
    return fused ? arfuseAllReduceAddRmsNorm(b.x[0], b.res[0], b.weight, spec.eps, normOut, resOut, spec.tokens,
                                             spec.hidden, spec.dtype, comms_[r], streams_[r])
                 : arfuseAllReduce(b.x[0], normOut, spec.tokens, spec.hidden, spec.dtype, comms_[r], streams_[r]);
  };
  if (spec.direct && n == 1 && fused) {  // arfuseAddRmsNorm: no communicator; its error is the thread's
    const int r = 0;
    RankBuffers& b = *bufs_[r];
    void* normOut = spec.inPlace ? b.x[0] : b.norm[0];
    void* resOut = spec.inPlace ? b.res[0] : b.res[1];
    H_CUDA(cudaSetDevice(devices_[r]));  // before the group opens: its failure leaves none open
    arfuseGroupStart();
    if (arfuseAddRmsNorm(b.x[0], b.res[0], b.weight, spec.eps, normOut, resOut, spec.tokens, spec.hidden, spec.dtype,
                         streams_[r]) != arfuseSuccess) {
      arfuseGroupEnd();
      res.error = arfuseGetLastError();
      return res;
    }
    if (arfuseGroupEnd() != arfuseSuccess) {
      res.error = arfuseGetLastError();
      return res;
    }
  } else if (!groupCall(collective, &res.error)) {
    return res;
  }
  std::vector<HostTensor> outNorm(n, HostTensor(spec.dtype, count)), outRes(n, HostTensor(spec.dtype, count));
  for (int r = 0; r < n; ++r) {
    RankBuffers& b = *bufs_[r];
    if (!waitForRank(r, &res.error) || !noAsyncError(r, &res.error)) return res;
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
CaseResult World::runEpilogue(const CaseSpec& spec) {  // run() admitted the case
  CaseResult res;
  const int n = nranks();
  const size_t count = static_cast<size_t>(spec.tokens) * spec.hidden;
  const size_t bytes = count * numeric::elemSize(spec.dtype);
  const EpilogueForm form = epilogueForm(spec.epilogue);
  const size_t qBytes = quantOutBytes(form.quant, spec.tokens, spec.hidden);
  const size_t sBytes = scaleOutBytes(form.quant, form.layout, spec.tokens, spec.hidden);
  if (!ensureEpilogueBuffers(&res.error)) return res;
  arfusePlan_t plan;
  if (!queryPlan(arfuseOpAllReduceAddRmsNorm, spec, &plan, &res)) return res;

  const CallInputs in(spec, n, count);
  const float scaleIn = epilogueScaleIn(form.quant);
  const EpilogueInputs epi{scaleIn, qBytes, sBytes};

  EpilogueCase c;
  c.dtype = spec.dtype;
  c.tokens = spec.tokens;
  c.hidden = spec.hidden;
  c.eps = spec.eps;
  c.scaleIn = scaleIn;
  for (const HostTensor& x : in.xs) c.x.push_back(x.bytes.data());
  c.residualIn = form.residualIn ? in.resid.bytes.data() : nullptr;
  c.weight = in.weight.bytes.data();
  c.exactSum = plan.algo != arfuseAlgoNccl;

  std::vector<EpilogueOutputs> withNorm;
  for (int pass = 0; pass < (form.normOut ? 1 : 2); ++pass) {
    EpilogueForm f = form;
    f.normOut = form.normOut || pass == 0;  // the first pass always writes norm_out
    if (!uploadCall(in, bytes, &epi, &res.error)) return res;
    auto epilogueCall = [&](int r) {
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
      return arfuseAllReduceEpilogue(b.x[0], b.weight, spec.eps, &e, spec.tokens, spec.hidden, spec.dtype, comms_[r],
                                     streams_[r]);
    };
    if (!groupCall(epilogueCall, &res.error)) return res;
    std::vector<EpilogueOutputs> out(n);
    for (int r = 0; r < n; ++r) {
      RankBuffers& b = *bufs_[r];
      if (!waitForRank(r, &res.error) || !noAsyncError(r, &res.error)) return res;
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

}  // namespace harness
}  // namespace arfuse
