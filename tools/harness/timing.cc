// Timing by CUDA events around CUDA-graph replays (targets.md: ungraphed timing mis-ranks small
// kernels). Each iteration replays one graph of many calls per rank; the iteration's time is the
// slowest rank's; we report the median, min and max over iterations, per call.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "harness/copy_kernel.h"
#include "harness/epilogue.h"
#include "harness/harness.h"
#include "harness/numeric.h"
#include "harness/rotation.h"
#include "harness/world_detail.h"

namespace arfuse {
namespace harness {
namespace {

Timing summarise(std::vector<double> perIterMs, int callsPerGraph) {
  Timing t;
  std::sort(perIterMs.begin(), perIterMs.end());
  const double scale = 1000.0 / callsPerGraph;
  t.ok = true;
  t.iters = static_cast<int>(perIterMs.size());
  t.minUs = perIterMs.front() * scale;
  t.maxUs = perIterMs.back() * scale;
  t.medianUs = perIterMs[perIterMs.size() / 2] * scale;
  return t;
}

void fillRandom(std::vector<uint8_t>& bytes, arfuseDataType_t dtype, uint64_t seed, float lo, float hi) {
  const size_t n = bytes.size() / numeric::elemSize(dtype);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < n; ++i) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    numeric::store(bytes.data(), i, lo + (hi - lo) * static_cast<float>((s >> 40) * (1.0 / 16777216.0)), dtype);
  }
}

}  // namespace

Timing timeSingleGpu(int device, const CaseSpec& spec, size_t copyBytes, int callsPerGraph, int iters, int warmup) {
  Timing t;
  T_CUDA(cudaSetDevice(device));
  const size_t count = static_cast<size_t>(spec.tokens) * spec.hidden;
  const size_t bytes = count * numeric::elemSize(spec.dtype);
  const size_t wbytes = spec.hidden * numeric::elemSize(spec.dtype);
  // An epilogue variant runs arfuseAllReduceEpilogue on a one-rank communicator (the local path).
  const bool viaEpilogue = !copyBytes && spec.epilogue != kEpilogueNone;
  const EpilogueForm form = epilogueForm(spec.epilogue);
  const size_t qBytes = quantOutBytes(form.quant, spec.tokens, spec.hidden);
  const size_t sBytes = scaleOutBytes(form.quant, form.layout, spec.tokens, spec.hidden);
  // One set = every buffer one call reads or writes except the weight (shared, as in a model).
  const size_t setBytes = copyBytes ? 2 * copyBytes : 3 * bytes + (viaEpilogue ? qBytes + sBytes : 0);
  const int sets = rotationSets(setBytes, l2Bytes(device), callsPerGraph);
  struct Set {
    void *x = nullptr, *res = nullptr, *norm = nullptr, *src = nullptr, *dst = nullptr, *qout = nullptr,
         *sout = nullptr;
  };
  std::vector<Set> set(sets);
  void *w = nullptr, *sin = nullptr;
  arfuseComm_t comm = nullptr;
  cudaStream_t s = nullptr;
  // Frees everything on every return path (errors included).
  struct Guard {
    arfuseComm_t* c;
    std::vector<Set>* sets;
    void** w;
    void** sin;
    cudaStream_t* s;
    ~Guard() {
      for (Set& k : *sets)
        for (void* p : {k.x, k.res, k.norm, k.src, k.dst, k.qout, k.sout})
          if (p) cudaFree(p);
      if (*w) cudaFree(*w);
      if (*sin) cudaFree(*sin);
      if (*s) cudaStreamDestroy(*s);
      if (*c) arfuseCommDestroy(*c);
    }
  } guard{&comm, &set, &w, &sin, &s};
  if (viaEpilogue) {
    arfuseConfig_t cfg = ARFUSE_CONFIG_INITIALIZER;
    cfg.maxTokens = spec.tokens;
    cfg.maxHidden = spec.hidden;
    if (arfuseCommInitAll(&comm, 1, &device, &cfg) != arfuseSuccess) {
      comm = nullptr;
      t.error = arfuseGetLastError();
      return t;
    }
    T_CUDA(cudaSetDevice(device));
  }
  T_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  if (copyBytes) {
    for (Set& k : set) {
      T_CUDA(cudaMalloc(&k.src, copyBytes));
      T_CUDA(cudaMalloc(&k.dst, copyBytes));
      T_CUDA(cudaMemset(k.src, 0x3c, copyBytes));
    }
  } else {
    T_CUDA(cudaMalloc(&w, wbytes));
    std::vector<uint8_t> h(bytes), hw(wbytes);
    fillRandom(hw, spec.dtype, spec.seed + 2, 0.5f, 1.5f);
    T_CUDA(cudaMemcpy(w, hw.data(), wbytes, cudaMemcpyHostToDevice));
    for (int i = 0; i < sets; ++i) {
      Set& k = set[i];
      T_CUDA(cudaMalloc(&k.x, bytes));
      T_CUDA(cudaMalloc(&k.res, bytes));
      T_CUDA(cudaMalloc(&k.norm, bytes));
      fillRandom(h, spec.dtype, spec.seed + 10 * i, -1.f, 1.f);  // fresh inputs per set
      T_CUDA(cudaMemcpy(k.x, h.data(), bytes, cudaMemcpyHostToDevice));
      fillRandom(h, spec.dtype, spec.seed + 10 * i + 1, -1.f, 1.f);
      T_CUDA(cudaMemcpy(k.res, h.data(), bytes, cudaMemcpyHostToDevice));
      if (viaEpilogue) {
        T_CUDA(cudaMalloc(&k.qout, qBytes ? qBytes : 16));
        T_CUDA(cudaMalloc(&k.sout, sBytes ? sBytes : 16));
      }
    }
    if (viaEpilogue) {
      const float scaleIn = epilogueScaleIn(form.quant);
      T_CUDA(cudaMalloc(&sin, sizeof(float)));
      T_CUDA(cudaMemcpy(sin, &scaleIn, sizeof scaleIn, cudaMemcpyHostToDevice));
    }
  }
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  T_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < callsPerGraph; ++i) {
    const Set& k = set[i % sets];
    if (copyBytes) {
      launchCopy(k.dst, k.src, copyBytes, s);
    } else if (viaEpilogue) {
      // Residual in place, as below; norm_out only where the variant writes it.
      arfuseEpilogue_t e = ARFUSE_EPILOGUE_INITIALIZER;
      e.residualIn = form.residualIn ? k.res : nullptr;
      e.residualOut = form.residualOut ? k.res : nullptr;
      e.normOut = form.normOut ? k.norm : nullptr;
      e.weightPlusOne = form.plusOne ? 1 : 0;
      e.quant = form.quant;
      e.quantOut = qBytes ? k.qout : nullptr;
      e.scaleOut = sBytes ? k.sout : nullptr;
      e.scaleIn = static_cast<const float*>(sin);
      e.scaleLayout = form.layout;
      if (arfuseAllReduceEpilogue(k.x, w, spec.eps, &e, spec.tokens, spec.hidden, spec.dtype, comm, s) !=
          arfuseSuccess) {
        cudaStreamEndCapture(s, &graph);
        t.error = arfuseCommGetLastError(comm);
        return t;
      }
    } else if (arfuseAddRmsNorm(k.x, k.res, w, spec.eps, k.norm, k.res, spec.tokens, spec.hidden, spec.dtype, s) !=
               arfuseSuccess) {
      cudaStreamEndCapture(s, &graph);
      t.error = arfuseGetLastError();
      return t;
    }
  }
  T_CUDA(cudaStreamEndCapture(s, &graph));
  T_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  std::vector<cudaEvent_t> ev(2 * (warmup + iters));
  for (cudaEvent_t& e : ev) T_CUDA(cudaEventCreate(&e));
  for (int it = 0; it < warmup + iters; ++it) {
    T_CUDA(cudaEventRecord(ev[2 * it], s));
    T_CUDA(cudaGraphLaunch(exec, s));
    T_CUDA(cudaEventRecord(ev[2 * it + 1], s));
  }
  T_CUDA(cudaStreamSynchronize(s));
  std::vector<double> ms;
  for (int it = warmup; it < warmup + iters; ++it) {
    float m = 0;
    T_CUDA(cudaEventElapsedTime(&m, ev[2 * it], ev[2 * it + 1]));
    ms.push_back(m);
  }
  for (cudaEvent_t e : ev) cudaEventDestroy(e);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  t = summarise(ms, callsPerGraph);
  t.sets = sets;
  t.footprintBytes = sets * setBytes;
  return t;
}

Timing World::timeGraph(const CaseSpec& spec, int callsPerGraph, int iters, int warmup) {
  Timing t;
  const int n = nranks();
  const size_t count = static_cast<size_t>(spec.tokens) * spec.hidden;
  const size_t bytes = count * numeric::elemSize(spec.dtype);
  if (!admits(bytes, &t.error)) return t;
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
  for (int r = 0; r < n; ++r)
    if (!noAsyncError(r, &t.error)) return t;
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
