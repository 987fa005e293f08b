// The harness World's multi-call cases: graphs captured on every rank's stream, chained calls
// (back to back or graph-replayed) against an exact emulation of the residual chain, and a sequence
// of shapes from call to call.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <sstream>

#include "harness/epilogue.h"
#include "harness/harness.h"
#include "harness/numeric.h"
#include "harness/world_detail.h"

namespace arfuse {
namespace harness {

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
  if (!queryPlan(arfuseOpAllReduceAddRmsNorm, spec, &plan, &res)) return res;
  // Slot use of call i: x[i % 8], norm_out[i % 8], residual res[i % 2] -> res[(i+1) % 2] (or res[0] in place).
  auto enqueue = [&](int r, int i) {
    RankBuffers& b = *bufs_[r];
    void* rin = spec.inPlace ? b.res[0] : b.res[i % 2];
    void* rout = spec.inPlace ? b.res[0] : b.res[(i + 1) % 2];
    return arfuseAllReduceAddRmsNorm(b.x[i % kSlots], rin, b.weight, spec.eps, b.norm[i % kSlots], rout, spec.tokens,
                                     spec.hidden, spec.dtype, comms_[r], streams_[r]);
  };
  auto enqueueAll = [&]() -> bool {
    for (int i = 0; i < calls; ++i)
      if (!groupCall([&](int r) { return enqueue(r, i); }, &res.error)) return false;
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
      if (!waitForRank(r, &res.error)) return res;
      if (!noAsyncError(r, &res.error)) {
        res.ok = false;
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
    auto call = [&](int r) {
      RankBuffers& b = *bufs_[r];
      return arfuseAllReduceAddRmsNorm(b.x[i], b.res[0], b.weight, spec.eps, b.norm[i], b.x[4 + i], tokens[i],
                                       spec.hidden, spec.dtype, comms_[r], streams_[r]);
    };
    if (!groupCall(call, &res.error)) return res;
  }
  res.ok = res.identical = res.allWritten = true;
  std::vector<std::vector<HostTensor>> gotN(calls), gotR(calls);
  for (int r = 0; r < n; ++r) {
    if (!waitForRank(r, &res.error)) return res;
    if (!noAsyncError(r, &res.error)) {
      res.ok = false;
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

}  // namespace harness
}  // namespace arfuse
