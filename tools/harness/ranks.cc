#include "harness/ranks.h"

#include <cuda.h>
#include <cuda_runtime.h>
#include <cxxabi.h>
#include <nccl.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "harness/numeric.h"

namespace arfuse {
namespace harness {
namespace {

constexpr int kSlots = 8;

#define R_CUDA(call, out)                                                            \
  do {                                                                               \
    cudaError_t e_ = (call);                                                         \
    if (e_ != cudaSuccess) {                                                         \
      cudaGetLastError();                                                            \
      if ((out).empty()) (out) = std::string(#call) + ": " + cudaGetErrorString(e_); \
    }                                                                                \
  } while (0)

uint64_t mix(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Element i of stream `s`, uniform in [lo, hi), rounded to the dtype: a pure function, so every
// process computes the same value for every rank.
float value(uint64_t s, size_t i, float lo, float hi, arfuseDataType_t d) {
  const float u =
      static_cast<float>((mix(s ^ (static_cast<uint64_t>(i) * 0xD1B54A32D192ED03ull)) >> 40) * (1.0 / 16777216.0));
  float v = lo + (hi - lo) * u;
  if (v == 0.f) v = 0.5f * hi;  // never zero
  return numeric::round(v, d);
}
uint64_t streamOf(uint64_t seed, uint64_t what, uint64_t rank, uint64_t slot) {
  return mix(mix(mix(seed) ^ what) ^ (rank * 131 + slot));
}
constexpr uint64_t kX = 1, kResidual = 2, kWeight = 3;

std::vector<uint8_t> fill(uint64_t stream, size_t n, float lo, float hi, arfuseDataType_t d) {
  std::vector<uint8_t> b(n * numeric::elemSize(d));
#pragma omp parallel for schedule(static)
  for (long long i = 0; i < static_cast<long long>(n); ++i) numeric::store(b.data(), i, value(stream, i, lo, hi, d), d);
  return b;
}

ncclDataType_t ncclType(arfuseDataType_t d) {
  return d == arfuseFloat32 ? ncclFloat32 : d == arfuseFloat16 ? ncclFloat16 : ncclBfloat16;
}

std::string ncclText(const char* what, ncclResult_t r, void* comm) {
  std::string s = std::string(what) + ": " + ncclGetErrorString(r);
  const char* last = comm ? ncclGetLastError(static_cast<ncclComm_t>(comm)) : ncclGetLastError(nullptr);
  if (last && *last) s += " (" + std::string(last) + ")";
  return s;
}

template <class F>
F driverFunction(const char* name) {
  for (unsigned version : {12030u, 12040u, 12080u, 13000u}) {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion(name, &p, version, cudaEnableDefault, &q) == cudaSuccess &&
        q == cudaDriverEntryPointSuccess && p)
      return reinterpret_cast<F>(p);
    cudaGetLastError();
  }
  return nullptr;
}

void collectKernelNames(cudaGraph_t g, std::vector<std::string>* out, std::string* error, int depth) {
  using GetParams = CUresult (*)(CUgraphNode, CUDA_KERNEL_NODE_PARAMS*);
  using FuncName = CUresult (*)(const char**, CUfunction);
  using KernelName = CUresult (*)(const char**, CUkernel);
  static const GetParams getParams = driverFunction<GetParams>("cuGraphKernelNodeGetParams");
  static const FuncName funcName = driverFunction<FuncName>("cuFuncGetName");
  static const KernelName kernelName = driverFunction<KernelName>("cuKernelGetName");
  if (!getParams || !funcName) {
    *error = "the driver offers no cuGraphKernelNodeGetParams / cuFuncGetName (CUDA 12.3+ driver needed)";
    return;
  }
  size_t n = 0;
  if (cudaGraphGetNodes(g, nullptr, &n) != cudaSuccess) {
    cudaGetLastError();
    *error = "cudaGraphGetNodes failed";
    return;
  }
  std::vector<cudaGraphNode_t> nodes(n);
  if (n && cudaGraphGetNodes(g, nodes.data(), &n) != cudaSuccess) {
    cudaGetLastError();
    *error = "cudaGraphGetNodes failed";
    return;
  }
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type;
    if (cudaGraphNodeGetType(node, &type) != cudaSuccess) continue;
    if (type == cudaGraphNodeTypeGraph && depth < 4) {
      cudaGraph_t child = nullptr;
      if (cudaGraphChildGraphNodeGetGraph(node, &child) == cudaSuccess)
        collectKernelNames(child, out, error, depth + 1);
      continue;
    }
    if (type != cudaGraphNodeTypeKernel) continue;
    CUDA_KERNEL_NODE_PARAMS p;
    std::memset(&p, 0, sizeof p);
    const char* name = nullptr;
    if (getParams(reinterpret_cast<CUgraphNode>(node), &p) == CUDA_SUCCESS) {
      if (p.func) funcName(&name, p.func);
      if (!name && p.kern && kernelName) kernelName(&name, p.kern);
    }
    if (!name) {
      out->push_back("?");
      continue;
    }
    int status = -1;
    char* readable = abi::__cxa_demangle(name, nullptr, nullptr, &status);
    out->push_back(status == 0 && readable ? readable : name);
    std::free(readable);
  }
}

}  // namespace

uint64_t fnv1a(const void* p, size_t n, uint64_t h) {
  const unsigned char* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

std::vector<std::string> graphKernelNames(void* graph, std::string* error) {
  std::vector<std::string> names;
  error->clear();
  collectKernelNames(static_cast<cudaGraph_t>(graph), &names, error, 0);
  return names;
}

struct RankGroup::Local {
  int rank = 0, device = 0;
  cudaStream_t stream = nullptr;
  void* x[kSlots] = {};
  void* norm[kSlots] = {};
  void* res = nullptr;
  void* weight = nullptr;
  void* sum = nullptr;       // baselines: ncclAllReduce's output
  void* symmBase = nullptr;  // kNcclSymm: x slots and sum, one ncclMemAlloc region
  void* window = nullptr;    // ncclWindow_t
};

RankGroup::RankGroup(const GroupSpec& spec) : spec_(spec) {
  const int nlocal = static_cast<int>(spec.ranks.size());
  if (nlocal < 1 || spec.devices.size() != spec.ranks.size()) {
    fail("harness: RankGroup needs one device per local rank");
    return;
  }
  const bool multiProcess = !spec.uniqueId.empty();
  capacity_ = static_cast<size_t>(spec.maxTokens) * spec.maxHidden * 4;
  if (spec.backend == Backend::kArfuse) {
    arfuseConfig_t cfg = ARFUSE_CONFIG_INITIALIZER;
    cfg.maxTokens = spec.maxTokens;
    cfg.maxHidden = spec.maxHidden;
    cfg.algo = spec.algo;
    cfg.timeoutMs = spec.timeoutMs;
    comms_.assign(nlocal, nullptr);
    arfuseResult_t st;
    if (multiProcess) {
      arfuseUniqueId id;
      if (spec.uniqueId.size() != sizeof id.internal) {
        fail("harness: the arfuse unique id has the wrong size");
        return;
      }
      std::memcpy(id.internal, spec.uniqueId.data(), sizeof id.internal);
      st = arfuseCommInitRank(&comms_[0], spec.nranks, id, spec.ranks[0], spec.devices[0], &cfg);
    } else {
      st = arfuseCommInitAll(comms_.data(), nlocal, spec.devices.data(), &cfg);
    }
    if (st != arfuseSuccess) {
      comms_.clear();
      {
        fail(arfuseGetLastError());
        return;
      }
    }
  } else {
    int version = 0;
    ncclGetVersion(&version);
    if (spec.backend == Backend::kNcclSymm && version < 22700) {
      fail("NCCL " + std::to_string(version) + " has no symmetric kernels (NCCL 2.27 or newer registers windows)");
      return;
    }
    ncclComms_.assign(nlocal, nullptr);
    ncclResult_t r;
    if (multiProcess) {
      ncclUniqueId id;
      if (spec.uniqueId.size() != sizeof id.internal) {
        fail("harness: the NCCL unique id has the wrong size");
        return;
      }
      std::memcpy(id.internal, spec.uniqueId.data(), sizeof id.internal);
      cudaSetDevice(spec.devices[0]);
      r = ncclCommInitRank(reinterpret_cast<ncclComm_t*>(&ncclComms_[0]), spec.nranks, id, spec.ranks[0]);
    } else {
      r = ncclCommInitAll(reinterpret_cast<ncclComm_t*>(ncclComms_.data()), nlocal, spec.devices.data());
    }
    if (r != ncclSuccess) {
      ncclComms_.clear();
      {
        fail(ncclText(multiProcess ? "ncclCommInitRank" : "ncclCommInitAll", r, nullptr));
        return;
      }
    }
  }
  for (int l = 0; l < nlocal && ok(); ++l) {
    Local* b = new Local();
    locals_.push_back(b);
    b->rank = spec.ranks[l];
    b->device = spec.devices[l];
    std::string e;
    R_CUDA(cudaSetDevice(b->device), e);
    R_CUDA(cudaStreamCreateWithFlags(&b->stream, cudaStreamNonBlocking), e);
    for (int k = 0; k < kSlots && e.empty(); ++k) R_CUDA(cudaMalloc(&b->norm[k], capacity_), e);
    if (e.empty()) R_CUDA(cudaMalloc(&b->res, capacity_), e);
    if (e.empty()) R_CUDA(cudaMalloc(&b->weight, static_cast<size_t>(spec.maxHidden) * 4), e);
    if (spec.backend == Backend::kNcclSymm && e.empty()) {
      const ncclResult_t r = ncclMemAlloc(&b->symmBase, (kSlots + 1) * capacity_);
      if (r != ncclSuccess) e = ncclText("ncclMemAlloc", r, ncclComms_[l]);
      for (int k = 0; k < kSlots && e.empty(); ++k) b->x[k] = static_cast<char*>(b->symmBase) + k * capacity_;
      if (e.empty()) b->sum = static_cast<char*>(b->symmBase) + kSlots * capacity_;
    } else if (e.empty()) {
      for (int k = 0; k < kSlots && e.empty(); ++k) R_CUDA(cudaMalloc(&b->x[k], capacity_), e);
      if (spec.backend == Backend::kNccl && e.empty()) R_CUDA(cudaMalloc(&b->sum, capacity_), e);
    }
    if (!e.empty()) fail(e);
  }
  if (spec.backend == Backend::kNcclSymm && ok()) {
#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= 22700
    // Collective over the group: every rank registers the same size, so offsets match across ranks.
    ncclResult_t r = ncclGroupStart();
    for (int l = 0; l < nlocal && r == ncclSuccess; ++l) {
      cudaSetDevice(locals_[l]->device);
      r = ncclCommWindowRegister(static_cast<ncclComm_t>(ncclComms_[l]), locals_[l]->symmBase, (kSlots + 1) * capacity_,
                                 reinterpret_cast<ncclWindow_t*>(&locals_[l]->window), NCCL_WIN_COLL_SYMMETRIC);
    }
    const ncclResult_t g = ncclGroupEnd();
    if (r == ncclSuccess) r = g;
    if (r != ncclSuccess) fail(ncclText("ncclCommWindowRegister(NCCL_WIN_COLL_SYMMETRIC)", r, ncclComms_[0]));
#else
    fail("built against an NCCL without ncclCommWindowRegister (NCCL 2.27+ needed for symmetric kernels)");
#endif
  }
}

RankGroup::~RankGroup() {
  for (Local* b : locals_) {
    cudaSetDevice(b->device);
    if (b->stream) cudaStreamSynchronize(b->stream);
  }
#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= 22700
  if (!ncclComms_.empty()) {
    ncclGroupStart();
    for (size_t l = 0; l < locals_.size() && l < ncclComms_.size(); ++l)
      if (locals_[l]->window)
        ncclCommWindowDeregister(static_cast<ncclComm_t>(ncclComms_[l]), static_cast<ncclWindow_t>(locals_[l]->window));
    ncclGroupEnd();
  }
#endif
  for (Local* b : locals_) {
    cudaSetDevice(b->device);
    for (int k = 0; k < kSlots; ++k) {
      if (b->norm[k]) cudaFree(b->norm[k]);
      if (!b->symmBase && b->x[k]) cudaFree(b->x[k]);
    }
    if (b->symmBase)
      ncclMemFree(b->symmBase);
    else if (b->sum)
      cudaFree(b->sum);
    if (b->res) cudaFree(b->res);
    if (b->weight) cudaFree(b->weight);
    if (b->stream) cudaStreamDestroy(b->stream);
    delete b;
  }
  for (void* c : ncclComms_)
    if (c) ncclCommDestroy(static_cast<ncclComm_t>(c));
  for (arfuseComm_t c : comms_)
    if (c) arfuseCommDestroy(c);
}

// Call `call` of a sequence on every local rank: x rotates over the slots, the residual is
// chained in place, norm_out rotates with x. Baselines: all-reduce into `sum` (NCCL's group ends
// before the norms are enqueued, so that each norm follows its all-reduce on the stream).
bool RankGroup::enqueue(const CaseSpec& c, int call, std::string* error) {
  const int k = call % kSlots;
  const bool fused = c.op == arfuseOpAllReduceAddRmsNorm;
  const size_t count = static_cast<size_t>(c.tokens) * c.hidden;
  if (spec_.backend == Backend::kArfuse) {
    // A group only where one thread drives several ranks: a process of one rank calls directly,
    // which the hierarchical path (groups that span hosts) requires.
    const bool grouped = locals_.size() > 1;
    if (grouped) arfuseGroupStart();
    for (size_t l = 0; l < locals_.size() && error->empty(); ++l) {
      Local& b = *locals_[l];
      const arfuseResult_t st =
          fused ? arfuseAllReduceAddRmsNorm(b.x[k], b.res, b.weight, c.eps, b.norm[k], b.res, c.tokens, c.hidden,
                                            c.dtype, comms_[l], b.stream)
                : arfuseAllReduce(b.x[k], b.norm[k], c.tokens, c.hidden, c.dtype, comms_[l], b.stream);
      if (st != arfuseSuccess) *error = arfuseCommGetLastError(comms_[l]);
    }
    if (grouped && arfuseGroupEnd() != arfuseSuccess && error->empty()) *error = arfuseGetLastError();
    return error->empty();
  }
  ncclResult_t r = ncclGroupStart();
  for (size_t l = 0; l < locals_.size() && r == ncclSuccess; ++l) {
    cudaSetDevice(locals_[l]->device);
    r = ncclAllReduce(locals_[l]->x[k], locals_[l]->sum, count, ncclType(c.dtype), ncclSum,
                      static_cast<ncclComm_t>(ncclComms_[l]), locals_[l]->stream);
  }
  const ncclResult_t g = ncclGroupEnd();
  if (r == ncclSuccess) r = g;
  if (r != ncclSuccess) {
    *error = ncclText("ncclAllReduce", r, ncclComms_[0]);
    return false;
  }
  for (size_t l = 0; fused && l < locals_.size(); ++l) {
    Local& b = *locals_[l];
    cudaSetDevice(b.device);
    if (arfuseAddRmsNorm(b.sum, b.res, b.weight, c.eps, b.norm[k], b.res, c.tokens, c.hidden, c.dtype, b.stream) !=
        arfuseSuccess) {
      *error = arfuseGetLastError();
      return false;
    }
  }
  return true;
}

RankCheck RankGroup::check(const CaseSpec& c) {
  RankCheck out;
  if (!ok()) return out.error = error_, out;
  const size_t n = static_cast<size_t>(c.tokens) * c.hidden, es = numeric::elemSize(c.dtype), bytes = n * es;
  if (bytes > capacity_) return out.error = "harness: case larger than the group's buffers", out;
  const bool fused = c.op == arfuseOpAllReduceAddRmsNorm;
  out.algo = spec_.backend == Backend::kNccl ? "nccl" : spec_.backend == Backend::kNcclSymm ? "nccl-symm" : "";
  if (spec_.backend == Backend::kArfuse) {
    arfusePlan_t plan;
    if (arfuseCommQueryPlan(comms_[0], c.op, c.tokens, c.hidden, c.dtype, &plan) != arfuseSuccess)
      return out.error = arfuseCommGetLastError(comms_[0]), out;
    out.algo = arfuseAlgoName(plan.algo);
  }
  // The sum of every rank's x in fp64 (each rank's x as the dtype rounds it).
  std::vector<double> sum(n, 0.0);
  for (int g = 0; g < spec_.nranks; ++g) {
    const uint64_t s = streamOf(c.seed, kX, g, 0);
#pragma omp parallel for schedule(static)
    for (long long i = 0; i < static_cast<long long>(n); ++i) sum[i] += value(s, i, -1.f, 1.f, c.dtype);
  }
  const uint64_t sRes = streamOf(c.seed, kResidual, 0, 0), sW = streamOf(c.seed, kWeight, 0, 0);
  const std::vector<uint8_t> resH = fill(sRes, n, -1.f, 1.f, c.dtype), wH = fill(sW, c.hidden, 0.5f, 1.5f, c.dtype);
  std::string e;
  for (Local* b : locals_) {
    const std::vector<uint8_t> xH = fill(streamOf(c.seed, kX, b->rank, 0), n, -1.f, 1.f, c.dtype);
    R_CUDA(cudaSetDevice(b->device), e);
    R_CUDA(cudaMemcpy(b->x[0], xH.data(), bytes, cudaMemcpyHostToDevice), e);
    R_CUDA(cudaMemcpy(b->res, resH.data(), bytes, cudaMemcpyHostToDevice), e);
    R_CUDA(cudaMemcpy(b->weight, wH.data(), c.hidden * es, cudaMemcpyHostToDevice), e);
    R_CUDA(cudaMemset(b->norm[0], 0xFF, bytes), e);  // poison: NaN in every dtype
    R_CUDA(cudaMemset(b->norm[1], 0xFF, bytes), e);
    if (b->sum) R_CUDA(cudaMemset(b->sum, 0xFF, bytes), e);
    R_CUDA(cudaDeviceSynchronize(), e);  // cudaMemset runs on the legacy stream
  }
  if (!e.empty()) return out.error = e, out;
  // One call per local rank: residual_out into norm[1] (never in place here, so poison shows).
  const int nlocal = static_cast<int>(locals_.size());
  if (spec_.backend == Backend::kArfuse) {
    const bool grouped = nlocal > 1;  // as in enqueue()
    if (grouped) arfuseGroupStart();
    for (int l = 0; l < nlocal && e.empty(); ++l) {
      Local& b = *locals_[l];
      const arfuseResult_t st =
          fused ? arfuseAllReduceAddRmsNorm(b.x[0], b.res, b.weight, c.eps, b.norm[0], b.norm[1], c.tokens, c.hidden,
                                            c.dtype, comms_[l], b.stream)
                : arfuseAllReduce(b.x[0], b.norm[1], c.tokens, c.hidden, c.dtype, comms_[l], b.stream);
      if (st != arfuseSuccess) e = arfuseCommGetLastError(comms_[l]);
    }
    if (grouped && arfuseGroupEnd() != arfuseSuccess && e.empty()) e = arfuseGetLastError();
  } else {
    ncclResult_t r = ncclGroupStart();
    for (int l = 0; l < nlocal && r == ncclSuccess; ++l) {
      cudaSetDevice(locals_[l]->device);
      r = ncclAllReduce(locals_[l]->x[0], locals_[l]->sum, n, ncclType(c.dtype), ncclSum,
                        static_cast<ncclComm_t>(ncclComms_[l]), locals_[l]->stream);
    }
    const ncclResult_t g = ncclGroupEnd();
    if (r == ncclSuccess) r = g;
    if (r != ncclSuccess) e = ncclText("ncclAllReduce", r, ncclComms_[0]);
    for (int l = 0; l < nlocal && e.empty(); ++l) {
      Local& b = *locals_[l];
      cudaSetDevice(b.device);
      const arfuseResult_t st =
          fused ? arfuseAddRmsNorm(b.sum, b.res, b.weight, c.eps, b.norm[0], b.norm[1], c.tokens, c.hidden, c.dtype,
                                   b.stream)
                : (cudaMemcpyAsync(b.norm[1], b.sum, bytes, cudaMemcpyDeviceToDevice, b.stream) == cudaSuccess
                       ? arfuseSuccess
                       : arfuseCudaError);
      if (st != arfuseSuccess) e = arfuseGetLastError();
    }
  }
  for (Local* b : locals_) {
    cudaSetDevice(b->device);
    R_CUDA(cudaStreamSynchronize(b->stream), e);
  }
  for (int l = 0; l < static_cast<int>(comms_.size()) && e.empty(); ++l) {
    arfuseResult_t async = arfuseSuccess;
    arfuseCommGetAsyncError(comms_[l], &async);
    if (async != arfuseSuccess) e = arfuseCommGetLastError(comms_[l]);
  }
  if (!e.empty()) return out.error = e, out;
  // fp64 reference: residual_out = sum (+ residual); norm_out = rmsnorm(round(residual_out)) * w.
  std::vector<double> refR(n), refN(fused ? n : 0);
  for (int t = 0; t < c.tokens; ++t) {
    double sq = 0;
    for (int h = 0; h < c.hidden; ++h) {
      const size_t j = static_cast<size_t>(t) * c.hidden + h;
      refR[j] = sum[j] + (fused ? numeric::load(resH.data(), j, c.dtype) : 0.0);
      const double r = numeric::round(static_cast<float>(refR[j]), c.dtype);
      sq += r * r;
    }
    if (!fused) continue;
    const double inv = 1.0 / std::sqrt(sq / c.hidden + c.eps);
    for (int h = 0; h < c.hidden; ++h) {
      const size_t j = static_cast<size_t>(t) * c.hidden + h;
      refN[j] = numeric::round(static_cast<float>(refR[j]), c.dtype) * inv * numeric::load(wH.data(), h, c.dtype);
    }
  }
  auto relErr = [&](const std::vector<double>& ref, const std::vector<uint8_t>& got) -> double {
    double num = 0, den = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      const double g = numeric::load(got.data(), i, c.dtype);
      if (std::isnan(g)) return INFINITY;
      num += (g - ref[i]) * (g - ref[i]);
      den += ref[i] * ref[i];
    }
    return std::sqrt(num / std::max(den, 1e-300));
  };
  out.identical = true;
  for (int l = 0; l < nlocal; ++l) {
    Local& b = *locals_[l];
    std::vector<uint8_t> gotR(bytes), gotN(fused ? bytes : 0);
    cudaSetDevice(b.device);
    R_CUDA(cudaMemcpy(gotR.data(), b.norm[1], bytes, cudaMemcpyDeviceToHost), e);
    if (fused) R_CUDA(cudaMemcpy(gotN.data(), b.norm[0], bytes, cudaMemcpyDeviceToHost), e);
    if (!e.empty()) return out.error = e, out;
    uint64_t h = fnv1a(gotR.data(), gotR.size());
    if (fused) h = fnv1a(gotN.data(), gotN.size(), h);
    if (l == 0) {
      out.hash = h;
      out.errResidual = relErr(refR, gotR);
      out.errNorm = fused ? relErr(refN, gotN) : 0;
    } else if (h != out.hash) {
      out.identical = false;
    }
  }
  const double tol = numeric::tolerance(c.dtype);
  out.ok = out.errResidual <= tol && out.errNorm <= tol && out.identical;
  if (!out.ok) {
    std::ostringstream os;
    os << "check failed against fp64:" << (out.identical ? "" : " outputs differ across local ranks;")
       << " errResidual=" << out.errResidual << " errNorm=" << out.errNorm << " (tol " << tol << ")";
    out.error = os.str();
  }
  return out;
}

bool RankGroup::time(const CaseSpec& c, int calls, int iters, int warmup, std::vector<double>* ms, Timing* info) {
  ms->clear();
  std::string& e = info->error;
  if (!ok()) return e = error_, false;
  if (calls < 2) return e = "harness: timing needs at least 2 calls per graph", false;
  const size_t n = static_cast<size_t>(c.tokens) * c.hidden, bytes = n * numeric::elemSize(c.dtype);
  if (bytes > capacity_) return e = "harness: case larger than the group's buffers", false;
  for (Local* b : locals_) {
    R_CUDA(cudaSetDevice(b->device), e);
    for (int k = 0; k < kSlots && e.empty(); ++k) {
      const std::vector<uint8_t> xH = fill(streamOf(c.seed + 7, kX, b->rank, k), n, -1.f, 1.f, c.dtype);
      R_CUDA(cudaMemcpy(b->x[k], xH.data(), bytes, cudaMemcpyHostToDevice), e);
    }
    const std::vector<uint8_t> resH = fill(streamOf(c.seed + 7, kResidual, 0, 0), n, -1.f, 1.f, c.dtype);
    const std::vector<uint8_t> wH = fill(streamOf(c.seed + 7, kWeight, 0, 0), c.hidden, 0.5f, 1.5f, c.dtype);
    R_CUDA(cudaMemcpy(b->res, resH.data(), bytes, cudaMemcpyHostToDevice), e);
    R_CUDA(cudaMemcpy(b->weight, wH.data(), wH.size(), cudaMemcpyHostToDevice), e);
    R_CUDA(cudaDeviceSynchronize(), e);
  }
  if (!e.empty()) return false;
  const int nlocal = static_cast<int>(locals_.size());
  std::vector<cudaEvent_t> start(nlocal, nullptr), end(nlocal, nullptr);
  std::vector<cudaGraph_t> graphs(nlocal, nullptr);
  std::vector<cudaGraphExec_t> execs(nlocal, nullptr);
  struct Cleanup {
    std::vector<cudaEvent_t>&s, &e;
    std::vector<cudaGraph_t>& g;
    std::vector<cudaGraphExec_t>& x;
    ~Cleanup() {
      for (auto v : s)
        if (v) cudaEventDestroy(v);
      for (auto v : e)
        if (v) cudaEventDestroy(v);
      for (auto v : g)
        if (v) cudaGraphDestroy(v);
      for (auto v : x)
        if (v) cudaGraphExecDestroy(v);
    }
  } cleanup{start, end, graphs, execs};
  for (int l = 0; l < nlocal; ++l) {
    R_CUDA(cudaSetDevice(locals_[l]->device), e);
    R_CUDA(cudaEventCreate(&start[l]), e);
    R_CUDA(cudaEventCreate(&end[l]), e);
  }
  int begun = 0;
  for (; begun < nlocal && e.empty(); ++begun) {
    cudaSetDevice(locals_[begun]->device);
    R_CUDA(cudaStreamBeginCapture(locals_[begun]->stream, cudaStreamCaptureModeThreadLocal), e);
    if (!e.empty()) break;
  }
  std::string enq;
  for (int i = 0; i < calls && e.empty() && enq.empty(); ++i) {
    // After the first call, which absorbs the skew between the ranks' graph launches.
    if (i == 1)
      for (int l = 0; l < nlocal; ++l) cudaEventRecordWithFlags(start[l], locals_[l]->stream, cudaEventRecordExternal);
    enqueue(c, i, &enq);
  }
  for (int l = 0; l < nlocal; ++l) cudaEventRecordWithFlags(end[l], locals_[l]->stream, cudaEventRecordExternal);
  for (int l = 0; l < begun; ++l) {
    cudaSetDevice(locals_[l]->device);
    cudaError_t r = cudaStreamEndCapture(locals_[l]->stream, &graphs[l]);
    if (r != cudaSuccess && e.empty()) e = std::string("cudaStreamEndCapture: ") + cudaGetErrorString(r);
  }
  cudaGetLastError();
  if (!enq.empty()) return e = enq, false;
  if (!e.empty()) return false;
  std::string why;
  kernels_ = graphKernelNames(graphs[0], &why);
  if (!why.empty()) kernels_ = {"(kernel names unknown: " + why + ")"};
  for (int l = 0; l < nlocal && e.empty(); ++l) {
    cudaSetDevice(locals_[l]->device);
    R_CUDA(cudaGraphInstantiate(&execs[l], graphs[l], 0), e);
  }
  for (int it = 0; it < warmup + iters && e.empty(); ++it) {
    for (int l = 0; l < nlocal && e.empty(); ++l) {
      cudaSetDevice(locals_[l]->device);
      R_CUDA(cudaGraphLaunch(execs[l], locals_[l]->stream), e);
    }
    double worst = 0;
    for (int l = 0; l < nlocal && e.empty(); ++l) {
      cudaSetDevice(locals_[l]->device);
      R_CUDA(cudaStreamSynchronize(locals_[l]->stream), e);
      float m = 0;
      R_CUDA(cudaEventElapsedTime(&m, start[l], end[l]), e);
      worst = std::max(worst, static_cast<double>(m));
    }
    if (it >= warmup) ms->push_back(worst);
  }
  for (size_t l = 0; l < comms_.size() && e.empty(); ++l) {
    arfuseResult_t async = arfuseSuccess;
    arfuseCommGetAsyncError(comms_[l], &async);
    if (async != arfuseSuccess) e = arfuseCommGetLastError(comms_[l]);
  }
  info->sets = std::min(kSlots, calls);
  info->footprintBytes = static_cast<size_t>(info->sets) * 2 * bytes + bytes + (locals_[0]->sum ? bytes : 0);
  return e.empty();
}

}  // namespace harness
}  // namespace arfuse
