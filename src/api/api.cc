// The C ABI: argument checks, error capture (one canonical line per failure), and dispatch to the
// planned path. Nothing is launched and nothing the caller owns is written unless every check passed.
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "algos/hierarchical/plan.h"
#include "api/enqueue.h"
#include "api/replica_check.h"
#include "api/streams.h"
#include "api/validate.h"
#include "arfuse/arfuse.h"
#include "bootstrap/bootstrap.h"
#include "comm/comm.h"
#include "comm/multihost.h"
#include "common/no_device.h"
#include "common/params.h"
#include "diag/dump.h"

#ifndef ARFUSE_BUILD_ARCHS
#define ARFUSE_BUILD_ARCHS "unknown"
#endif

namespace arfuse {
namespace {
thread_local std::string tLastError;
}  // namespace

arfuseResult_t fail(arfuseComm* comm, arfuseResult_t code, const char* file, int line, const std::string& msg,
                    const std::string& fields) {
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

namespace {

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

arfuseResult_t fromBootstrap(bootstrap::Result r) {
  switch (r) {
    case bootstrap::Result::kInvalidArgument:
      return arfuseInvalidArgument;
    case bootstrap::Result::kMismatch:
      return arfuseMismatch;
    case bootstrap::Result::kTimeout:
      return arfusePeerTimeout;
    default:
      return arfuseSystemError;
  }
}

// Init waits are bounded by the config's timeout, and never less than 30 s (processes start at
// different speeds).
int initTimeoutMs(const arfuseConfig_t* config) {
  int t = paramTimeoutMs();
  if (config && config->timeoutMs > 0) t = config->timeoutMs;
  return std::max(30000, t);
}

// The identity of the stream a call will run on (api/streams.h). A created stream's flags are read
// only outside capture: a captured stream cannot meet the legacy stream anyway, and no query is
// made that capture might reject.
StreamIdentity identityOf(cudaStream_t stream, int device) {
  const uintptr_t h = reinterpret_cast<uintptr_t>(stream);
  int flags = -1;
  if (h != 0 && h != kLegacyHandle && h != kPerThreadHandle) {
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    unsigned f = 0;
    cudaError_t e = cudaStreamIsCapturing(stream, &cs);
    if (e == cudaSuccess && cs == cudaStreamCaptureStatusNone && (e = cudaStreamGetFlags(stream, &f)) == cudaSuccess)
      flags = static_cast<int>(f);
    if (e != cudaSuccess) cudaGetLastError();  // an invalid handle: the launch will say so
  }
  return resolveStream(h, device, hostThreadKey(), flags);
}

// Ranks of one group sharing a GPU whose streams are one stream (or serialise through the legacy
// default stream) deadlock: each call waits for a peer call queued behind it. "" or the refusal.
std::string checkSharedStream(Group& g, const arfuseComm* comm, cudaStream_t stream, arfuseAlgo_t algo) {
  if (g.lastStream.empty() || !g.fabric.virtualRanks || algo == arfuseAlgoLocal) return "";
  const StreamIdentity mine = identityOf(stream, comm->device);
  std::lock_guard<std::mutex> lock(g.streamMu);
  for (int q = 0; q < g.nranks; ++q) {
    if (q == comm->rank || g.ranks[q].device != comm->device) continue;
    const std::string why = streamConflict(mine, g.lastStream[q]);
    if (!why.empty())
      return strprintf(
          "rank %d and rank %d of this group share device %d and stream %p, in effect (%s): a call "
          "waits for its peers' calls, which would queue behind it on that stream forever. Give every "
          "rank its own stream, created with cudaStreamNonBlocking",
          comm->rank, q, comm->device, static_cast<void*>(stream), why.c_str());
  }
  g.lastStream[comm->rank] = mine;
  return "";
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
#define CHECK_ENUM(handle, func, check)                \
  do {                                                 \
    const std::string m_ = (check);                    \
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
  const arfuseEpilogue_t* epi =
      nullptr;  // arfuseAllReduceEpilogue: what to write (residualIn/normOut/residualOut above unused)
};

// A group that spans hosts: its intra-host group's waits name local ranks; this maps them.
std::string intraHostRanksText(const MultiHost& mh) {
  std::string t = strprintf("local ranks of host %s:", mh.layout.labels[mh.hostIndex].c_str());
  const std::vector<int>& rs = mh.layout.ranksOf[mh.hostIndex];
  for (size_t q = 0; q < rs.size(); ++q) t += strprintf(" %zu = global rank %d", q, rs[q]);
  return t;
}

// The hierarchical call's three steps from the checked call (pc->ka filled as for one-shot):
// the reduce-scatter kernel, the all-reduce of this local index's fp32 slice across hosts, and the
// gather + epilogue kernel with plan's geometry (algos/hierarchical/kernel.cuh).
void planHierarchical(const MultiHost& mh, const Plan& plan, PlannedCall* pc) {
  HierArgs& h = pc->hier;
  h.k = pc->ka;
  h.count = static_cast<long long>(pc->ka.tokens) * pc->ka.hidden;
  h.sliceElems = hierarchicalSliceElems(h.count, mh.layout.localRanks);
  for (int q = 0; q < mh.layout.localRanks; ++q) {
    h.in[q] = mh.peerIn[q];
    h.slices[q] = mh.peerSlices[q];
  }
  pc->scatter.dtype = pc->dtype;
  pc->scatter.kind = pc->launch.kind;
  hierarchicalScatterGeometry(mh.fabric, h.sliceElems, pc->dtype, &pc->scatter.blocks, &pc->scatter.threads);
  pc->scatter.pdl = plan.pdl;
  pc->launch.pdl = false;  // follows NCCL's kernel, which does not trigger dependents
  pc->nccl = mh.cross;
  pc->sendBuf = mh.slices;
  pc->recvBuf = mh.slices;
  pc->count = static_cast<size_t>(h.sliceElems);
}

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
    if (g.multiHost) msg += "; " + intraHostRanksText(*g.multiHost);
    // The line describes the call that failed on the device; `refused` names the call refused now.
    return fail(comm, async, __FILE__, __LINE__, msg,
                asyncFields.empty() ? fields : asyncFields + " refused=" + std::string(func + 6));
  }

  PlanRequest req{c.op, c.tokens, c.hidden, c.dtype, c.epi != nullptr};
  MultiHost* mh = g.multiHost.get();
  Plan plan =
      mh ? makeMultiHostPlan(mh->fabric, g.limits, mh->policy, req) : makePlan(g.fabric, g.limits, g.policy, req);
  if (plan.status != arfuseSuccess)
    return fail(comm, plan.status, __FILE__, __LINE__, std::string(func) + ": " + plan.reason, fields);

  const size_t bytes = static_cast<size_t>(c.tokens) * c.hidden * dtypeSize(c.dtype);
  std::vector<BufferArg> bufs;
  std::vector<AliasRule> aliases;
  EpiArgs ext{};
  if (c.epi) {
    bufs = {{"x", c.x, bytes}, {"weight", c.weight, c.hidden * dtypeSize(c.dtype)}};
    msg = checkEpilogue(c.epi, c.tokens, c.hidden, dtypeSize(c.dtype), &ext, &bufs, &aliases);
    if (msg.empty()) msg = checkEps(c.eps);
    if (!msg.empty())
      return fail(comm, arfuseInvalidArgument, __FILE__, __LINE__, std::string(func) + ": " + msg, fields);
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
    if (!msg.empty())
      return fail(comm, arfuseInvalidArgument, __FILE__, __LINE__, std::string(func) + ": " + msg, fields);
  }
  msg = checkBuffers(bufs, aliases);
  if (!msg.empty())
    return fail(comm, arfuseInvalidArgument, __FILE__, __LINE__, std::string(func) + ": " + msg, fields);
  msg = checkPointers(bufs, comm->device);
  if (!msg.empty())
    return fail(comm, arfuseInvalidArgument, __FILE__, __LINE__, std::string(func) + ": " + msg, fields);

  msg = checkSharedStream(g, comm, stream, plan.algo);
  if (!msg.empty()) return fail(comm, arfuseInvalidUsage, __FILE__, __LINE__, std::string(func) + ": " + msg, fields);

  const bool fused = c.op == arfuseOpAllReduceAddRmsNorm;
  const bool extended = c.epi != nullptr;
  const void* residualIn = extended ? c.epi->residualIn : c.residualIn;
  void* normOut = extended ? c.epi->normOut : c.normOut;
  void* residualOut = extended ? c.epi->residualOut : c.residualOut;
  PlannedCall pc;
  pc.comm = comm;
  pc.device = comm->device;
  pc.stream = stream;
  pc.algo = plan.algo;
  pc.dtype = c.dtype;
  pc.fused = fused;
  pc.extended = extended;
  pc.twoShotVariant = plan.twoShotVariant;
  pc.launch = launchOf(plan, c.dtype, extended ? kKindExtended : fused ? kKindFused : kKindAllReduce);
  pc.fields =
      fields + strprintf(" bytes=%zu dtype=%s path=%s", bytes, arfuseDataTypeName(c.dtype), arfuseAlgoName(plan.algo));
  if (fused && replicaCheckEnabled()) {
    pc.check = true;
    pc.checkShape = ReplicaShape{c.tokens, c.hidden, c.dtype, residualIn != nullptr};
    pc.checkResidual = residualIn;
    pc.checkWeight = c.weight;
  }
  switch (plan.algo) {
    case arfuseAlgoLocal:
      if (!fused && c.residualOut != c.x) {
        pc.copySrc = c.x;
        pc.copyDst = c.residualOut;
        pc.copyBytes = bytes;
      }
      pc.la = LocalArgs{c.x,   residualIn,      c.weight, normOut, residualOut, c.tokens, c.hidden,
                        c.eps, 1.0f / c.hidden, 1,        0,       {},          ext};
      break;
    case arfuseAlgoNccl:
      if (mh) pc.nccl = mh->world;  // across hosts: the communicator over every rank
      pc.sendBuf = c.x;
      pc.count = static_cast<size_t>(c.tokens) * c.hidden;
      if (!fused && !g.policy.deterministic) {
        pc.recvBuf = c.residualOut;
        break;
      }
      // Reduce (or, deterministic, gather every rank's input) into the NCCL path's own buffer (never a
      // caller buffer that is also an input, nor the staging peers read), then the epilogue. One
      // buffer serves every call: each all-reduce is queued behind the previous call's epilogue on
      // the rank's stream, in groups too (api/group_schedule.h).
      pc.recvBuf = mh ? mh->ncclSum : g.ranks[comm->rank].ncclSum;
      pc.gather = g.policy.deterministic;
      pc.la = LocalArgs{pc.recvBuf, residualIn,      c.weight, normOut, residualOut, c.tokens, c.hidden,
                        c.eps,      1.0f / c.hidden, 1,        0,       {},          ext};
      if (pc.gather) {
        pc.la.sources = mh ? mh->nranks : g.nranks;
        pc.la.sourceStride = pc.count;
      }
      if (!fused) {  // deterministic plain all-reduce: out = the rank-order sum of the gathered inputs
        pc.la.residualOut = c.residualOut;
        pc.launch.blocks = std::max(
            1, std::min(4 * g.fabric.smCount, static_cast<int>((pc.count / dtypeVecElems(c.dtype) + 255) / 256)));
        pc.launch.threads = 256;
      }
      break;
    case arfuseAlgoOneShot:
    case arfuseAlgoTwoShot:
    case arfuseAlgoLowLatency:
    case arfuseAlgoHostStaged:
    case arfuseAlgoHierarchical: {
      KernelArgs& ka = pc.ka;
      ka.peers = g.peers;
      ka.host = g.host;
      ka.stagingRegionBytes = g.ws.stagingRegionBytes;
      ka.hostRegionBytes = g.ws.hostRegionBytes;
      ka.state = &g.ranks[comm->rank].control->state;
      ka.shared = g.sharedDev;
      // Waits poll this rank's device abort word when peers can write it, else the host-mapped one.
      ka.abortPoll = g.fabric.p2p ? &ka.state->abort : reinterpret_cast<const uint32_t*>(&g.sharedDev->abort);
      ka.peerAbort = g.fabric.p2p ? 1 : 0;
      ka.timeoutNs = g.timeoutNs;
      ka.flight = g.flight ? 1 : 0;
      ka.pollSleepNs = static_cast<uint32_t>(paramPollSleepNs());
      ka.desc = makeCallDesc(c.op, c.dtype, plan.algo, plan.twoShotVariant ? 1 : 0, c.tokens, c.hidden);
      ka.tiling = Tiling{plan.geo.chunks, plan.geo.chunkVecs, plan.geo.slots, c.hidden / dtypeVecElems(c.dtype)};
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
      ka.invHidden = 1.0f / c.hidden;
      ka.ext = ext;
      if (plan.algo == arfuseAlgoHierarchical) planHierarchical(*mh, plan, &pc);
      break;
    }
    default:
      FAIL_F(comm, arfuseInternalError, pc.fields, "plan returned algo %d", int(plan.algo));
  }
  DeviceScope scope(comm->device);
  return enqueueCall(pc);
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
                                               const arfuseConfig_t* config, arfuseAllGatherFn_t allGather, void* ctx) {
  if (!allGather)
    return fail(nullptr, arfuseInvalidArgument, __FILE__, __LINE__,
                "arfuseCommInitRankWithAllGather: allGather is NULL: pass the framework's all-gather callback");
  const std::string bad = checkRankArgs(nranks, rank);
  if (!bad.empty())
    return fail(nullptr, arfuseInvalidArgument, __FILE__, __LINE__, "arfuseCommInitRankWithAllGather: " + bad);
  Exchange exchange = [&](const void* mine, size_t bytes, std::vector<uint8_t>* all, std::string* message) {
    const bootstrap::Result r =
        bootstrap::allGatherViaCallback(allGather, ctx, rank, nranks, mine, bytes, all, message);
    return r == bootstrap::Result::kOk ? arfuseSuccess : fromBootstrap(r);
  };
  std::string msg;
  MultiProcessOptions options;
  options.reusable = true;  // a framework's all-gather may be called again (groups that span hosts)
  const arfuseResult_t st = createRankMultiProcess(nranks, rank, device, config, exchange, comm, &msg, options);
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

#define COMM_GETTER(fn, type, expr)                                           \
  arfuseResult_t fn(arfuseComm_t comm, type* out) {                           \
    arfuseResult_t st = arfuseSuccess;                                        \
    arfuseComm* c = liveComm(comm, #fn, &st);                                 \
    if (!c) return st;                                                        \
    if (!out) FAIL(c, arfuseInvalidArgument, #fn ": output pointer is NULL"); \
    *out = (expr);                                                            \
    return arfuseSuccess;                                                     \
  }
COMM_GETTER(arfuseCommRank, int, c->group->multiHost ? c->globalRank : c->rank)
COMM_GETTER(arfuseCommCount, int, c->group->multiHost ? c->group->multiHost->nranks : c->group->nranks)
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
  if (g.flight) refreshFlight(g, c->rank);  // the kernels stamp device memory; the dump reads the host mirror
  DumpInput in;
  in.rank = c->rank;
  in.device = c->device;
  in.nranks = g.nranks;
  in.arch = c->arch;
  in.timeoutNs = g.timeoutNs;
  in.shared = g.shared;
  in.lastError = c->lastError;
  std::string err;
  if (!writeDump(formatDump(in), path, &err)) FAIL(c, arfuseSystemError, "arfuseCommDumpState: %s", err.c_str());
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
  const PlanRequest req{op, tokens, hidden, dtype};
  const MultiHost* mh = c->group->multiHost.get();
  Plan p = mh ? makeMultiHostPlan(mh->fabric, c->group->limits, mh->policy, req)
              : makePlan(c->group->fabric, c->group->limits, c->group->policy, req);
  if (p.status != arfuseSuccess) return fail(c, p.status, __FILE__, __LINE__, "arfuseCommQueryPlan: " + p.reason);
  out->algo = p.algo;
  out->blocks = p.blocks;
  out->threads = p.threads;
  snprintf(out->reason, sizeof out->reason, "%s", p.reason.c_str());
  return arfuseSuccess;
}

arfuseResult_t arfuseGroupStart(void) { return groupStart(); }

arfuseResult_t arfuseGroupEnd(void) { return groupEnd(); }

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
                                       int tokens, int hidden, arfuseDataType_t dtype, arfuseComm_t comm,
                                       void* stream) {
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
  if (p.status != arfuseSuccess)
    return fail(nullptr, p.status, __FILE__, __LINE__, std::string(func) + ": " + p.reason);
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
                strprintf("%s: no usable current CUDA device: %s", func,
                          noDevice ? noDeviceMessage(e, cudaGetErrorString(e)).c_str() : cudaGetErrorString(e)));
  }
  msg = checkPointers(bufs, device);
  if (!msg.empty()) return fail(nullptr, arfuseInvalidArgument, __FILE__, __LINE__, std::string(func) + ": " + msg);
  Plan plan;
  localGeometry(tokens, hidden, dtype, sms, false, &plan.blocks, &plan.threads, &plan.geo);
  int major = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  plan.pdl = major >= 9 && paramPdl();
  LocalArgs la{x, residual_in, weight, norm_out, residual_out, tokens, hidden, eps, 1.0f / hidden, 1, 0, {}, {}};
  return launchLocalKernel(nullptr, launchOf(plan, dtype, kKindFused), la, static_cast<cudaStream_t>(stream));
}

}  // extern "C"
