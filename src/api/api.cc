// The C ABI: argument checks, error capture (one canonical line per failure), and dispatch to the
// planned path. Nothing is launched and nothing the caller owns is written unless every check passed.
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "api/validate.h"
#include "bootstrap/bootstrap.h"
#include "diag/dump.h"
#include "arfuse/arfuse.h"
#include "comm/comm.h"
#include "common/params.h"
#include "kernels/launch.h"

#ifndef ARFUSE_BUILD_ARCHS
#define ARFUSE_BUILD_ARCHS "unknown"
#endif

namespace arfuse {
namespace {

thread_local std::string tLastError;

// Records an error: the communicator's (or this thread's) last-error text and one ERROR line.
arfuseResult_t fail(arfuseComm* comm, arfuseResult_t code, const char* file, int line, const std::string& msg,
                    const std::string& fields = "") {
  LogContext ctx = comm ? comm->logContext() : LogContext{};
  std::string f = strprintf("code=%s", arfuseGetErrorName(code));
  if (!fields.empty()) f += " " + fields;
  const std::string text = strprintf("%s: %s", arfuseGetErrorName(code), msg.c_str());
  if (comm)
    comm->lastError = text;
  else
    tLastError = text;
  logLine(kLogError, ctx, f, file, line, msg);
  return code;
}
#define FAIL(comm, code, ...) return fail(comm, code, __FILE__, __LINE__, strprintf(__VA_ARGS__))
#define FAIL_F(comm, code, fields, ...) return fail(comm, code, __FILE__, __LINE__, strprintf(__VA_ARGS__), fields)

// Restores the caller's current device on scope exit.
struct DeviceScope {
  int saved = -1;
  explicit DeviceScope(int device) {
    cudaGetDevice(&saved);
    if (saved != device) cudaSetDevice(device);
  }
  ~DeviceScope() {
    int now = -1;
    cudaGetDevice(&now);
    if (saved >= 0 && now != saved) cudaSetDevice(saved);
  }
};

// Looks up a handle without dereferencing it unless it is live.
arfuseComm* liveComm(arfuseComm_t comm, const char* func, arfuseResult_t* st) {
  if (comm == nullptr) {
    *st = fail(nullptr, arfuseInvalidArgument, __FILE__, __LINE__,
               strprintf("%s: comm is NULL: pass a communicator from arfuseCommInitAll", func));
    return nullptr;
  }
  if (!commIsLive(comm)) {
    *st = fail(nullptr, arfuseInvalidUsage, __FILE__, __LINE__,
               strprintf("%s: comm=%p is not a live arfuse communicator (destroyed, or not from arfuseCommInitAll)",
                         func, static_cast<void*>(comm)));
    return nullptr;
  }
  return comm;
}

// "" when ptr is device (or managed) memory usable on `device`.
std::string checkDevicePointer(const char* name, const void* ptr, int device) {
  cudaPointerAttributes attr;
  cudaError_t e = cudaPointerGetAttributes(&attr, ptr);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return strprintf("%s=%p: not memory CUDA knows (%s); pass device memory of device %d", name, ptr,
                     cudaGetErrorString(e), device);
  }
  if (attr.type == cudaMemoryTypeManaged) return "";
  if (attr.type != cudaMemoryTypeDevice)
    return strprintf("%s=%p: %s memory, not device memory; pass device memory of device %d", name, ptr,
                     attr.type == cudaMemoryTypeHost ? "host" : "unregistered host", device);
  if (attr.device != device)
    return strprintf("%s=%p: memory of device %d, but this rank runs on device %d", name, ptr, attr.device, device);
  return "";
}

std::string checkPointers(const std::vector<BufferArg>& bufs, int device) {
  if (!paramCheckPointers()) return "";
  for (const BufferArg& b : bufs) {
    std::string m = checkDevicePointer(b.name, b.ptr, device);
    if (!m.empty()) return m;
  }
  return "";
}

ncclDataType_t ncclType(arfuseDataType_t d) {
  return d == arfuseBfloat16 ? ncclBfloat16 : d == arfuseFloat16 ? ncclFloat16 : ncclFloat32;
}

// Work deferred to the outermost arfuseGroupEnd: the epilogue of an NCCL-path call must follow the
// all-reduce that NCCL only launches at ncclGroupEnd.
struct Deferred {
  arfuseComm* comm;
  arfuseDataType_t dtype;
  LocalArgs args;
  int blocks, threads;
  cudaStream_t stream;
};
thread_local int tGroupDepth = 0;
thread_local std::vector<Deferred> tDeferred;

arfuseResult_t launchLocal(arfuseComm* comm, arfuseDataType_t dtype, const LocalArgs& la, int blocks, int threads,
                           cudaStream_t stream) {
  const int e = launchAddRmsNorm(dtype, la, blocks, threads, stream, la.ext.enabled != 0);
  if (e != cudaSuccess)
    FAIL(comm, arfuseCudaError, "launch of add+rmsnorm (%d x %d threads) failed: %s", blocks, threads,
         cudaGetErrorString(cudaError_t(e)));
  return arfuseSuccess;
}

arfuseResult_t fromBootstrap(bootstrap::Result r) {
  switch (r) {
    case bootstrap::Result::kInvalidArgument: return arfuseInvalidArgument;
    case bootstrap::Result::kMismatch: return arfuseMismatch;
    case bootstrap::Result::kTimeout: return arfusePeerTimeout;
    default: return arfuseSystemError;
  }
}

// Init waits are bounded by the config's timeout, and never less than 30 s (processes start at
// different speeds).
int initTimeoutMs(const arfuseConfig_t* config) {
  int t = paramTimeoutMs();
  if (config && config->timeoutMs > 0) t = config->timeoutMs;
  return std::max(30000, t);
}

// The rendezvous's transport and admission, from ARFUSE_BOOTSTRAP_* (docs/bootstrap.md).
bootstrap::Options bootstrapOptions(int timeoutMs) {
  bootstrap::Options o;
  o.address = paramBootstrapAddr();
  o.ifname = paramBootstrapIfname();
  o.port = paramBootstrapPort();
  o.timeoutMs = timeoutMs;
  for (unsigned u : paramBootstrapUids()) o.allowedUids.push_back(u);
  return o;
}

// A bad enum argument (api/validate.h rawEnum), reported before any enum-typed copy of it exists:
// against the communicator when it is live (its last error), else this thread's.
arfuseResult_t badEnum(arfuseComm_t handle, const char* func, const std::string& msg) {
  arfuseComm* c = handle && commIsLive(handle) ? handle : nullptr;
  return fail(c, arfuseInvalidArgument, __FILE__, __LINE__, std::string(func) + ": " + msg,
              strprintf("op=%s", func + 6));
}
#define CHECK_ENUM(handle, func, check) \
  do {                                  \
    const std::string m_ = (check);     \
    if (!m_.empty()) return badEnum(handle, func, m_); \
  } while (0)

struct CallArgs {
  arfuseOp_t op;
  const void* x;
  const void* residualIn;
  const void* weight;
  float eps;
  void* normOut;
  void* residualOut;  // AllReduce: out
  int tokens, hidden;
  arfuseDataType_t dtype;
  const arfuseEpilogue_t* epi = nullptr;  // arfuseAllReduceEpilogue: what to write (residualIn/normOut/residualOut above unused)
};

arfuseResult_t collective(arfuseComm_t handle, const CallArgs& c, cudaStream_t stream, const char* func) {
  arfuseResult_t st = arfuseSuccess;
  arfuseComm* comm = liveComm(handle, func, &st);
  if (!comm) return st;
  Group& g = *comm->group;
  const std::string fields = strprintf("op=%s", func + 6);  // drop the "arfuse" prefix

  std::string msg;
  std::string asyncFields;
  bool firstReport = true;
  const arfuseResult_t async = groupAsyncError(g, comm->rank, &msg, &asyncFields, &firstReport);
  if (async != arfuseSuccess) {
    if (!firstReport) {  // already printed once for this rank (by an earlier call or the watchdog)
      comm->lastError = strprintf("%s: %s", arfuseGetErrorName(async), msg.c_str());
      return async;
    }
    // The line describes the call that failed on the device; `refused` names the call refused now.
    return fail(comm, async, __FILE__, __LINE__, msg,
                asyncFields.empty() ? fields : asyncFields + " refused=" + std::string(func + 6));
  }

  PlanRequest req{c.op, c.tokens, c.hidden, c.dtype};
  Plan plan = makePlan(g.fabric, g.limits, g.policy, req);
  if (plan.status != arfuseSuccess) return fail(comm, plan.status, __FILE__, __LINE__, std::string(func) + ": " + plan.reason, fields);

  const size_t bytes = static_cast<size_t>(c.tokens) * c.hidden * dtypeSize(c.dtype);
  std::vector<BufferArg> bufs;
  std::vector<AliasRule> aliases;
  EpiArgs ext{};
  if (c.epi) {
    bufs = {{"x", c.x, bytes}, {"weight", c.weight, c.hidden * dtypeSize(c.dtype)}};
    msg = checkEpilogue(c.epi, c.tokens, c.hidden, dtypeSize(c.dtype), &ext, &bufs, &aliases);
    if (msg.empty()) msg = checkEps(c.eps);
    if (!msg.empty()) return fail(comm, arfuseInvalidArgument, __FILE__, __LINE__, std::string(func) + ": " + msg, fields);
  } else if (c.op == arfuseOpAllReduce) {
    bufs = {{"in", c.x, bytes}, {"out", c.residualOut, bytes}};
    aliases = {{"out", "in"}};
  } else {
    bufs = {{"x", c.x, bytes},
            {"residual_in", c.residualIn, bytes},
            {"weight", c.weight, c.hidden * dtypeSize(c.dtype)},
            {"norm_out", c.normOut, bytes},
            {"residual_out", c.residualOut, bytes}};
    aliases = {{"residual_out", "residual_in"}, {"norm_out", "x"}};
    msg = checkEps(c.eps);
    if (!msg.empty()) return fail(comm, arfuseInvalidArgument, __FILE__, __LINE__, std::string(func) + ": " + msg, fields);
  }
  msg = checkBuffers(bufs, aliases);
  if (!msg.empty()) return fail(comm, arfuseInvalidArgument, __FILE__, __LINE__, std::string(func) + ": " + msg, fields);
  msg = checkPointers(bufs, comm->device);
  if (!msg.empty()) return fail(comm, arfuseInvalidArgument, __FILE__, __LINE__, std::string(func) + ": " + msg, fields);

  // Ranks of one group sharing a GPU and a stream deadlock (each call waits for a peer call queued
  // behind it): refuse before launching. (cudaStreamPerThread is a different stream per thread.)
  if (g.lastStream && plan.algo != arfuseAlgoLocal && stream != cudaStreamPerThread) {
    for (int q = 0; q < g.nranks; ++q) {
      if (q == comm->rank || g.ranks[q].device != comm->device) continue;
      if (g.lastStream[q].load(std::memory_order_relaxed) == static_cast<void*>(stream))
        return fail(comm, arfuseInvalidUsage, __FILE__, __LINE__,
                    strprintf("%s: rank %d and rank %d of this group share device %d and stream %p: a call waits for "
                              "its peers' calls, which would queue behind it on that stream forever. Give every rank "
                              "its own stream",
                              func, comm->rank, q, comm->device, static_cast<void*>(stream)),
                    fields);
    }
    g.lastStream[comm->rank].store(static_cast<void*>(stream), std::memory_order_relaxed);
  }
  DeviceScope scope(comm->device);
  const bool fused = c.op == arfuseOpAllReduceAddRmsNorm;
  const bool extended = c.epi != nullptr;
  const void* residualIn = extended ? c.epi->residualIn : c.residualIn;
  void* normOut = extended ? c.epi->normOut : c.normOut;
  void* residualOut = extended ? c.epi->residualOut : c.residualOut;
  const std::string callFields = fields + strprintf(" bytes=%zu dtype=%s path=%s", bytes, arfuseDataTypeName(c.dtype),
                                                    arfuseAlgoName(plan.algo));
  switch (plan.algo) {
    case arfuseAlgoLocal: {
      if (!fused) {
        if (c.residualOut != c.x) {
          cudaError_t e = cudaMemcpyAsync(c.residualOut, c.x, bytes, cudaMemcpyDeviceToDevice, stream);
          if (e != cudaSuccess) FAIL_F(comm, arfuseCudaError, callFields, "cudaMemcpyAsync: %s", cudaGetErrorString(e));
        }
        return arfuseSuccess;
      }
      LocalArgs la{c.x, residualIn, c.weight, normOut, residualOut, c.tokens, c.hidden, c.eps, ext};
      return launchLocal(comm, c.dtype, la, plan.blocks, plan.threads, stream);
    }
    case arfuseAlgoOneShot:
    case arfuseAlgoTwoShot:
    case arfuseAlgoLowLatency:
    case arfuseAlgoHostStaged: {
      KernelArgs ka{};
      ka.peers = g.peers;
      ka.host = g.host;
      ka.hostSlotBytes = g.hostSlotBytes;
      ka.state = g.ranks[comm->rank].state;
      ka.shared = g.sharedDev;
      ka.stagingBytes = g.stagingBytes;
      ka.llSourceBytes = g.llSourceBytes;
      ka.timeoutNs = g.timeoutNs;
      ka.flight = g.flight ? 1 : 0;
      ka.desc = makeCallDesc(c.op, c.dtype, plan.algo, plan.twoShotVariant ? 1 : 0, c.tokens, c.hidden);
      ka.rank = comm->rank;
      ka.nranks = g.nranks;
      ka.x = c.x;
      ka.residualIn = residualIn;
      ka.weight = c.weight;
      ka.normOut = normOut;
      ka.residualOut = residualOut;
      ka.tokens = c.tokens;
      ka.hidden = c.hidden;
      ka.eps = c.eps;
      ka.ext = ext;
      int e = 0;
      switch (plan.algo) {
        case arfuseAlgoOneShot: e = launchOneShot(c.dtype, fused, ka, plan.blocks, plan.threads, stream, extended); break;
        case arfuseAlgoTwoShot: e = launchTwoShot(c.dtype, fused, ka, plan.blocks, plan.threads, stream, extended); break;
        case arfuseAlgoLowLatency:
          e = launchLowLatency(c.dtype, fused, ka, plan.blocks, plan.threads, stream, extended);
          break;
        default:
          e = launchHostStaged(c.dtype, fused, plan.twoShotVariant, ka, plan.blocks, plan.threads, stream, extended);
      }
      if (e != cudaSuccess)
        FAIL_F(comm, arfuseCudaError, callFields, "kernel launch (%d x %d threads) failed: %s", plan.blocks,
               plan.threads, cudaGetErrorString(cudaError_t(e)));
      return arfuseSuccess;
    }
    case arfuseAlgoNccl: {
      ncclComm_t nc = g.ranks[comm->rank].nccl;
      const size_t count = static_cast<size_t>(c.tokens) * c.hidden;
      if (!fused) {
        ncclResult_t nr = ncclAllReduce(c.x, c.residualOut, count, ncclType(c.dtype), ncclSum, nc, stream);
        if (nr != ncclSuccess) FAIL_F(comm, arfuseNcclError, callFields, "ncclAllReduce: %s", ncclGetErrorString(nr));
        return arfuseSuccess;
      }
      // Reduce into our workspace (never into a caller buffer that is also an input), then the epilogue.
      void* sum = g.ranks[comm->rank].staging;
      ncclResult_t nr = ncclAllReduce(c.x, sum, count, ncclType(c.dtype), ncclSum, nc, stream);
      if (nr != ncclSuccess) FAIL_F(comm, arfuseNcclError, callFields, "ncclAllReduce: %s", ncclGetErrorString(nr));
      LocalArgs la{sum, residualIn, c.weight, normOut, residualOut, c.tokens, c.hidden, c.eps, ext};
      if (tGroupDepth > 0) {
        tDeferred.push_back({comm, c.dtype, la, plan.blocks, plan.threads, stream});
        return arfuseSuccess;
      }
      return launchLocal(comm, c.dtype, la, plan.blocks, plan.threads, stream);
    }
    default:
      FAIL_F(comm, arfuseInternalError, callFields, "plan returned algo %d", int(plan.algo));
  }
}

}  // namespace
}  // namespace arfuse

using namespace arfuse;

extern "C" {

arfuseResult_t arfuseConfigInit(arfuseConfig_t* config) {
  if (!config) FAIL(nullptr, arfuseInvalidArgument, "arfuseConfigInit: config is NULL");
  arfuseConfig_t init = ARFUSE_CONFIG_INITIALIZER;
  *config = init;
  return arfuseSuccess;
}

arfuseResult_t arfuseGetVersion(int* version) {
  if (!version) FAIL(nullptr, arfuseInvalidArgument, "arfuseGetVersion: version is NULL");
  *version = ARFUSE_VERSION_CODE;
  return arfuseSuccess;
}

const char* arfuseGetBuildInfo(void) {
  static const std::string info =
      strprintf("arfuse %d.%d.%d cuda %d.%d nccl %d.%d.%d archs %s", ARFUSE_VERSION_MAJOR, ARFUSE_VERSION_MINOR,
                ARFUSE_VERSION_PATCH, CUDART_VERSION / 1000, (CUDART_VERSION % 1000) / 10, NCCL_MAJOR, NCCL_MINOR,
                NCCL_PATCH, ARFUSE_BUILD_ARCHS);
  return info.c_str();
}

const char* arfuseGetLastError(void) { return tLastError.c_str(); }

arfuseResult_t arfuseCommInitAll(arfuseComm_t* comms, int nranks, const int* devices, const arfuseConfig_t* config) {
  std::string msg;
  arfuseResult_t st = createGroup(nranks, devices, config, comms, &msg);
  if (st != arfuseSuccess) return fail(nullptr, st, __FILE__, __LINE__, "arfuseCommInitAll: " + msg);
  return arfuseSuccess;
}

arfuseResult_t arfuseGetUniqueId(arfuseUniqueId* uniqueId) {
  static_assert(sizeof(arfuseUniqueId) == bootstrap::kUniqueIdBytes, "unique id size");
  if (!uniqueId)
    return fail(nullptr, arfuseInvalidArgument, __FILE__, __LINE__,
                "arfuseGetUniqueId: uniqueId is NULL: pass the address of an arfuseUniqueId");
  // The listener lives at most one init timeout unless rank 0 takes it.
  const bootstrap::Options options = bootstrapOptions(initTimeoutMs(nullptr));
  bootstrap::UniqueId id;
  std::string err;
  const bootstrap::Result r = bootstrap::makeUniqueId(options, &id, &err);
  if (r != bootstrap::Result::kOk)
    return fail(nullptr, fromBootstrap(r), __FILE__, __LINE__,
                "arfuseGetUniqueId: " + err + " (ARFUSE_BOOTSTRAP_ADDR=" + options.address +
                    " ARFUSE_BOOTSTRAP_IFNAME=" + options.ifname + ")");
  std::memcpy(uniqueId->internal, id.bytes, sizeof id.bytes);
  return arfuseSuccess;
}

arfuseResult_t arfuseCommInitRank(arfuseComm_t* comm, int nranks, arfuseUniqueId uniqueId, int rank, int device,
                                  const arfuseConfig_t* config) {
  bootstrap::UniqueId id;
  std::memcpy(id.bytes, uniqueId.internal, sizeof id.bytes);
  const std::string bad = checkRankArgs(nranks, rank);
  if (!bad.empty()) {
    if (rank == 0) bootstrap::closeListener(id);  // this process's rank 0 gives up: no listener left behind
    return fail(nullptr, arfuseInvalidArgument, __FILE__, __LINE__, "arfuseCommInitRank: " + bad);
  }
  const int timeoutMs = initTimeoutMs(config);
  Exchange exchange = [&](const void* mine, size_t bytes, std::vector<uint8_t>* all, std::string* message) {
    const bootstrap::Options options = bootstrapOptions(timeoutMs);
    const bootstrap::Result r = bootstrap::allGather(id, rank, nranks, mine, bytes, all, options, message);
    return r == bootstrap::Result::kOk ? arfuseSuccess : fromBootstrap(r);
  };
  std::string msg;
  const arfuseResult_t st = createRankMultiProcess(nranks, rank, device, config, exchange, comm, &msg);
  if (st != arfuseSuccess)
    return fail(nullptr, st, __FILE__, __LINE__, strprintf("arfuseCommInitRank (rank %d of %d): ", rank, nranks) + msg);
  return arfuseSuccess;
}

arfuseResult_t arfuseCommInitRankWithAllGather(arfuseComm_t* comm, int nranks, int rank, int device,
                                               const arfuseConfig_t* config, arfuseAllGatherFn_t allGather,
                                               void* ctx) {
  if (!allGather)
    return fail(nullptr, arfuseInvalidArgument, __FILE__, __LINE__,
                "arfuseCommInitRankWithAllGather: allGather is NULL: pass the framework's all-gather callback");
  const std::string bad = checkRankArgs(nranks, rank);
  if (!bad.empty())
    return fail(nullptr, arfuseInvalidArgument, __FILE__, __LINE__, "arfuseCommInitRankWithAllGather: " + bad);
  Exchange exchange = [&](const void* mine, size_t bytes, std::vector<uint8_t>* all, std::string* message) {
    const bootstrap::Result r = bootstrap::allGatherViaCallback(allGather, ctx, rank, nranks, mine, bytes, all, message);
    return r == bootstrap::Result::kOk ? arfuseSuccess : fromBootstrap(r);
  };
  std::string msg;
  const arfuseResult_t st = createRankMultiProcess(nranks, rank, device, config, exchange, comm, &msg);
  if (st != arfuseSuccess)
    return fail(nullptr, st, __FILE__, __LINE__,
                strprintf("arfuseCommInitRankWithAllGather (rank %d of %d): ", rank, nranks) + msg);
  return arfuseSuccess;
}

arfuseResult_t arfuseCommDestroy(arfuseComm_t comm) {
  arfuseResult_t st = arfuseSuccess;
  if (!liveComm(comm, "arfuseCommDestroy", &st)) return st;
  std::string msg;
  st = destroyComm(comm, &msg);
  if (st != arfuseSuccess) return fail(nullptr, st, __FILE__, __LINE__, "arfuseCommDestroy: " + msg);
  return arfuseSuccess;
}

#define COMM_GETTER(fn, type, expr)                                        \
  arfuseResult_t fn(arfuseComm_t comm, type* out) {                        \
    arfuseResult_t st = arfuseSuccess;                                     \
    arfuseComm* c = liveComm(comm, #fn, &st);                              \
    if (!c) return st;                                                     \
    if (!out) FAIL(c, arfuseInvalidArgument, #fn ": output pointer is NULL"); \
    *out = (expr);                                                         \
    return arfuseSuccess;                                                  \
  }
COMM_GETTER(arfuseCommRank, int, c->rank)
COMM_GETTER(arfuseCommCount, int, c->group->nranks)
COMM_GETTER(arfuseCommDevice, int, c->device)
COMM_GETTER(arfuseCommIsVirtual, int, c->group->fabric.virtualRanks ? 1 : 0)

const char* arfuseCommGetLastError(arfuseComm_t comm) {
  if (!comm || !commIsLive(comm)) return tLastError.c_str();
  return comm->lastError.c_str();
}

arfuseResult_t arfuseCommGetAsyncError(arfuseComm_t comm, arfuseResult_t* asyncError) {
  arfuseResult_t st = arfuseSuccess;
  arfuseComm* c = liveComm(comm, "arfuseCommGetAsyncError", &st);
  if (!c) return st;
  if (!asyncError) FAIL(c, arfuseInvalidArgument, "arfuseCommGetAsyncError: asyncError is NULL");
  std::string msg;
  *asyncError = groupAsyncError(*c->group, c->rank, &msg);
  if (*asyncError != arfuseSuccess) c->lastError = std::string(arfuseGetErrorName(*asyncError)) + ": " + msg;
  return arfuseSuccess;
}

arfuseResult_t arfuseCommDumpState(arfuseComm_t comm, const char* path) {
  arfuseResult_t st = arfuseSuccess;
  arfuseComm* c = liveComm(comm, "arfuseCommDumpState", &st);
  if (!c) return st;
  const Group& g = *c->group;
  DumpInput in;
  in.rank = c->rank;
  in.device = c->device;
  in.nranks = g.nranks;
  in.arch = c->arch;
  in.timeoutNs = g.timeoutNs;
  in.shared = g.shared;
  in.lastError = c->lastError;
  std::string err;
  if (!writeDump(formatDump(in), path, &err))
    FAIL(c, arfuseSystemError, "arfuseCommDumpState: %s", err.c_str());
  return arfuseSuccess;
}

arfuseResult_t arfuseCommQueryPlan(arfuseComm_t comm, arfuseOp_t op, int tokens, int hidden, arfuseDataType_t dtype,
                                   arfusePlan_t* out) {
  arfuseResult_t st = arfuseSuccess;
  arfuseComm* c = liveComm(comm, "arfuseCommQueryPlan", &st);
  if (!c) return st;
  if (!out) FAIL(c, arfuseInvalidArgument, "arfuseCommQueryPlan: plan is NULL");
  CHECK_ENUM(comm, "arfuseCommQueryPlan", checkOpArg(rawEnum(op)));
  CHECK_ENUM(comm, "arfuseCommQueryPlan", checkDtypeArg(rawEnum(dtype)));
  Plan p = makePlan(c->group->fabric, c->group->limits, c->group->policy, PlanRequest{op, tokens, hidden, dtype});
  if (p.status != arfuseSuccess) return fail(c, p.status, __FILE__, __LINE__, "arfuseCommQueryPlan: " + p.reason);
  out->algo = p.algo;
  out->blocks = p.blocks;
  out->threads = p.threads;
  snprintf(out->reason, sizeof out->reason, "%s", p.reason.c_str());
  return arfuseSuccess;
}

arfuseResult_t arfuseGroupStart(void) {
  ++tGroupDepth;
  ncclResult_t nr = ncclGroupStart();
  if (nr != ncclSuccess) {
    --tGroupDepth;
    FAIL(nullptr, arfuseNcclError, "arfuseGroupStart: ncclGroupStart: %s", ncclGetErrorString(nr));
  }
  return arfuseSuccess;
}

arfuseResult_t arfuseGroupEnd(void) {
  if (tGroupDepth == 0) FAIL(nullptr, arfuseInvalidUsage, "arfuseGroupEnd without a matching arfuseGroupStart");
  ncclResult_t nr = ncclGroupEnd();
  if (--tGroupDepth > 0) return nr == ncclSuccess ? arfuseSuccess : arfuseNcclError;
  std::vector<Deferred> work;
  work.swap(tDeferred);
  if (nr != ncclSuccess) FAIL(nullptr, arfuseNcclError, "arfuseGroupEnd: ncclGroupEnd: %s", ncclGetErrorString(nr));
  arfuseResult_t first = arfuseSuccess;
  for (const Deferred& d : work) {
    if (!commIsLive(d.comm)) continue;
    DeviceScope scope(d.comm->device);
    arfuseResult_t st = launchLocal(d.comm, d.dtype, d.args, d.blocks, d.threads, d.stream);
    if (first == arfuseSuccess) first = st;
  }
  return first;
}

arfuseResult_t arfuseAllReduce(const void* in, void* out, int tokens, int hidden, arfuseDataType_t dtype,
                               arfuseComm_t comm, void* stream) {
  CHECK_ENUM(comm, "arfuseAllReduce", checkDtypeArg(rawEnum(dtype)));
  CallArgs c{arfuseOpAllReduce, in, nullptr, nullptr, 0.f, nullptr, out, tokens, hidden, dtype};
  return collective(comm, c, static_cast<cudaStream_t>(stream), "arfuseAllReduce");
}

arfuseResult_t arfuseAllReduceAddRmsNorm(const void* x, const void* residual_in, const void* weight, float eps,
                                         void* norm_out, void* residual_out, int tokens, int hidden,
                                         arfuseDataType_t dtype, arfuseComm_t comm, void* stream) {
  CHECK_ENUM(comm, "arfuseAllReduceAddRmsNorm", checkDtypeArg(rawEnum(dtype)));
  CallArgs c{arfuseOpAllReduceAddRmsNorm, x, residual_in, weight, eps, norm_out, residual_out, tokens, hidden, dtype};
  return collective(comm, c, static_cast<cudaStream_t>(stream), "arfuseAllReduceAddRmsNorm");
}

arfuseResult_t arfuseAllReduceEpilogue(const void* x, const void* weight, float eps, const arfuseEpilogue_t* epilogue,
                                       int tokens, int hidden, arfuseDataType_t dtype, arfuseComm_t comm, void* stream) {
  CHECK_ENUM(comm, "arfuseAllReduceEpilogue", checkDtypeArg(rawEnum(dtype)));
  CallArgs c{arfuseOpAllReduceAddRmsNorm, x, nullptr, weight, eps, nullptr, nullptr, tokens, hidden, dtype, nullptr};
  if (!epilogue)
    return fail(nullptr, arfuseInvalidArgument, __FILE__, __LINE__,
                "arfuseAllReduceEpilogue: epilogue is NULL: pass an arfuseEpilogue_t started from "
                "ARFUSE_EPILOGUE_INITIALIZER");
  c.epi = epilogue;
  return collective(comm, c, static_cast<cudaStream_t>(stream), "arfuseAllReduceEpilogue");
}

arfuseResult_t arfuseAddRmsNorm(const void* x, const void* residual_in, const void* weight, float eps, void* norm_out,
                                void* residual_out, int tokens, int hidden, arfuseDataType_t dtype, void* stream) {
  const char* func = "arfuseAddRmsNorm";
  CHECK_ENUM(nullptr, func, checkDtypeArg(rawEnum(dtype)));
  Limits limits;
  limits.maxTokens = 1 << 30;
  limits.maxHidden = 1 << 30;
  Plan p = validateShape(limits, PlanRequest{arfuseOpAllReduceAddRmsNorm, tokens, hidden, dtype});
  if (p.status != arfuseSuccess) return fail(nullptr, p.status, __FILE__, __LINE__, std::string(func) + ": " + p.reason);
  std::string msg = checkEps(eps);
  if (!msg.empty()) return fail(nullptr, arfuseInvalidArgument, __FILE__, __LINE__, std::string(func) + ": " + msg);
  const size_t bytes = static_cast<size_t>(tokens) * hidden * dtypeSize(dtype);
  std::vector<BufferArg> bufs = {{"x", x, bytes},
                                 {"residual_in", residual_in, bytes},
                                 {"weight", weight, hidden * dtypeSize(dtype)},
                                 {"norm_out", norm_out, bytes},
                                 {"residual_out", residual_out, bytes}};
  msg = checkBuffers(bufs, {{"residual_out", "residual_in"}, {"norm_out", "x"}});
  if (!msg.empty()) return fail(nullptr, arfuseInvalidArgument, __FILE__, __LINE__, std::string(func) + ": " + msg);
  int device = 0, sms = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (e != cudaSuccess) {
    cudaGetLastError();
    const bool noDevice = e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver;  // as arfuseCommInitAll
    return fail(nullptr, noDevice ? arfuseNoDevice : arfuseCudaError, __FILE__, __LINE__,
                strprintf("%s: no usable current CUDA device: %s", func, cudaGetErrorString(e)));
  }
  msg = checkPointers(bufs, device);
  if (!msg.empty()) return fail(nullptr, arfuseInvalidArgument, __FILE__, __LINE__, std::string(func) + ": " + msg);
  int blocks = 0, threads = 0;
  localGeometry(tokens, hidden, dtype, sms, &blocks, &threads);
  LocalArgs la{x, residual_in, weight, norm_out, residual_out, tokens, hidden, eps};
  return launchLocal(nullptr, dtype, la, blocks, threads, static_cast<cudaStream_t>(stream));
}

}  // extern "C"
