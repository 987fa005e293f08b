// The C ABI: argument checks, error capture (one canonical line per failure), and dispatch to the
// planned path. Nothing is launched and nothing the caller owns is written unless every check passed.
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "algos/registry.h"
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
#include "policy/config.h"

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

arfuseResult_t fail(arfuseComm* comm, const Status& st, const std::string& fields) {
  return fail(comm, st.code(), st.file(), st.line(), st.message(), fields);
}

namespace {

// Looks up a handle without dereferencing it unless it is live.
Status liveComm(arfuseComm_t comm, const char* func, arfuseComm** out) {
  *out = nullptr;
  if (comm == nullptr)
    return ARFUSE_FAIL(arfuseInvalidArgument, "%s: comm is NULL: pass a communicator from arfuseCommInitAll", func);
  if (!commIsLive(comm))
    return ARFUSE_FAIL(arfuseInvalidUsage,
                       "%s: comm=%p is not a live arfuse communicator (destroyed, or not from arfuseCommInitAll)", func,
                       static_cast<void*>(comm));
  *out = comm;
  return Status();
}

// Fails unless ptr is device (or managed) memory usable on `device`.
Status checkDevicePointer(const char* func, const char* name, const void* ptr, int device) {
  cudaPointerAttributes attr;
  cudaError_t e = cudaPointerGetAttributes(&attr, ptr);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return ARFUSE_FAIL(arfuseInvalidArgument, "%s: %s=%p: not memory CUDA knows (%s); pass device memory of device %d",
                       func, name, ptr, cudaGetErrorString(e), device);
  }
  if (attr.type == cudaMemoryTypeManaged) return Status();
  if (attr.type != cudaMemoryTypeDevice)
    return ARFUSE_FAIL(arfuseInvalidArgument,
                       "%s: %s=%p: %s memory, not device memory; pass device memory of device %d", func, name, ptr,
                       attr.type == cudaMemoryTypeHost ? "host" : "unregistered host", device);
  if (attr.device != device)
    return ARFUSE_FAIL(arfuseInvalidArgument, "%s: %s=%p: memory of device %d, but this rank runs on device %d", func,
                       name, ptr, attr.device, device);
  return Status();
}

Status checkPointers(const char* func, const std::vector<BufferArg>& bufs, int device) {
  if (!paramCheckPointers()) return Status();
  for (const BufferArg& b : bufs) ARFUSE_CHECK(checkDevicePointer(func, b.name, b.ptr, device));
  return Status();
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
// default stream) deadlock: each call waits for a peer call queued behind it. Refused before launch.
Status checkSharedStream(Group& g, const arfuseComm* comm, cudaStream_t stream, const char* func) {
  if (!groupChecksStreams(g)) return Status();  // (never a one-rank group: its rank shares its GPU with none)
  const StreamIdentity mine = identityOf(stream, comm->device);
  StreamCheck* check = groupApiState<StreamCheck>(g, &Group::streamCheck, [&g] {
    std::vector<int> devices(groupRanks(g));
    for (int q = 0; q < groupRanks(g); ++q) devices[q] = groupRankDevice(g, q);
    return std::make_shared<StreamCheck>(devices);
  });
  ARFUSE_CHECK_PREFIXED(std::string(func) + ": ", check->record(comm->rank, mine));
  return Status();
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
arfuseResult_t badEnum(arfuseComm_t handle, const char* func, const Status& st) {
  arfuseComm* c = handle && commIsLive(handle) ? handle : nullptr;
  return fail(c, st, strprintf("op=%s", func + 6));
}
#define CHECK_ENUM(handle, func, check)                                                                            \
  do {                                                                                                             \
    ::arfuse::Status s_ = (check);                                                                                 \
    if (!s_.ok()) return badEnum(handle, func, s_.prefixed(std::string(func) + ": ").through(__FILE__, __LINE__)); \
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

// The buffers of a call: non-null, aligned, no overlap but the documented aliases, device memory
// of this rank's GPU; the extended epilogue's outputs into *ext.
Status checkCallBuffers(const CallArgs& c, const char* func, int device, EpiArgs* ext) {
  const std::string prefix = std::string(func) + ": ";
  const size_t bytes = static_cast<size_t>(c.tokens) * c.hidden * dtypeSize(c.dtype);
  std::vector<BufferArg> bufs;
  std::vector<AliasRule> aliases;
  if (c.epi) {
    bufs = {{"x", c.x, bytes}, {"weight", c.weight, c.hidden * dtypeSize(c.dtype)}};
    ARFUSE_CHECK_PREFIXED(prefix, checkEpilogue(c.epi, c.tokens, c.hidden, dtypeSize(c.dtype), ext, &bufs, &aliases));
    ARFUSE_CHECK_PREFIXED(prefix, checkEps(c.eps));
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
    ARFUSE_CHECK_PREFIXED(prefix, checkEps(c.eps));
  }
  ARFUSE_CHECK_PREFIXED(prefix, checkBuffers(bufs, aliases));
  return checkPointers(func, bufs, device);
}

// The call as its path prepares it: the extended epilogue's outputs in place of the plain ones.
Call callOf(const CallArgs& c, const EpiArgs& ext) {
  const bool extended = c.epi != nullptr;
  return Call{c.op,
              c.dtype,
              c.tokens,
              c.hidden,
              c.eps,
              c.x,
              extended ? c.epi->residualIn : c.residualIn,
              c.weight,
              extended ? c.epi->normOut : c.normOut,
              extended ? c.epi->residualOut : c.residualOut,
              c.op == arfuseOpAllReduceAddRmsNorm,
              extended,
              ext};
}

// The launch of a plan's kernel: its instantiation and geometry, on `stream`.
AlgoLaunch launchOf(const Plan& plan, const Call& c, cudaStream_t stream) {
  AlgoLaunch a;
  a.l.dtype = c.dtype;
  a.l.kind = c.extended ? kKindExtended : c.fused ? kKindFused : kKindAllReduce;
  a.l.vecs = plan.geo.vecs;
  a.l.blocks = plan.blocks;
  a.l.threads = plan.threads;
  a.l.chunks = plan.geo.chunks;
  a.l.pdl = plan.pdl;
  a.l.rowPush = plan.geo.rowPush;
  a.variant = plan.variant;
  a.stream = stream;
  return a;
}

// The planned path's prepare step over `launch` (its arguments, from the call).
Status preparePath(const Group* g, int rank, const Plan& plan, const Call& call, AlgoLaunch* launch) {
  const AlgoEntry* entry = findAlgo(plan.algo);
  if (!entry || !entry->issue.prepare || !entry->issue.launch)
    return ARFUSE_FAIL(arfuseInternalError, "plan returned algo %d, which this library cannot issue", int(plan.algo));
  return entry->issue.prepare(PrepareContext{g, rank, plan, call}, launch);
}

// Plans and checks a call and prepares everything needed to issue it (its path's arguments through
// the path's entry). pc->fields is set once the call is planned (the canonical line then names its
// bytes, dtype and path).
Status planCall(arfuseComm* comm, const CallArgs& c, cudaStream_t stream, const char* func, const std::string& fields,
                PlannedCall* pc) {
  Group& g = *comm->group;
  PlanRequest req{c.op, c.tokens, c.hidden, c.dtype, c.epi != nullptr};
  Plan plan = planOn(g, req);
  if (plan.status != arfuseSuccess) return ARFUSE_FAIL(plan.status, "%s: %s", func, plan.reason.c_str());
  EpiArgs ext{};
  ARFUSE_CHECK(checkCallBuffers(c, func, comm->device, &ext));
  ARFUSE_CHECK(checkSharedStream(g, comm, stream, func));

  const Call call = callOf(c, ext);
  const size_t bytes = static_cast<size_t>(c.tokens) * c.hidden * dtypeSize(c.dtype);
  pc->comm = comm;
  pc->device = comm->device;
  pc->algo = plan.algo;
  pc->fields =
      fields + strprintf(" bytes=%zu dtype=%s path=%s", bytes, arfuseDataTypeName(c.dtype), arfuseAlgoName(plan.algo));
  if (call.fused && replicaCheckEnabled()) {
    pc->check = true;
    pc->checkShape = ReplicaShape{c.tokens, c.hidden, c.dtype, call.residualIn != nullptr};
    pc->checkResidual = call.residualIn;
    pc->checkWeight = c.weight;
  }
  pc->launch = launchOf(plan, call, stream);
  return preparePath(&g, comm->rank, plan, call, &pc->launch);
}

arfuseResult_t collective(arfuseComm_t handle, const CallArgs& c, cudaStream_t stream, const char* func) {
  arfuseComm* comm = nullptr;
  if (const Status st = liveComm(handle, func, &comm); !st.ok()) return fail(nullptr, st);
  Group& g = *comm->group;
  const std::string fields = strprintf("op=%s", func + 6);  // drop the "arfuse" prefix

  std::string asyncFields;
  bool firstReport = true;
  if (const Status async = groupAsyncError(g, comm->rank, &asyncFields, &firstReport); !async.ok()) {
    std::string msg = async.message();
    if (!firstReport) {  // already printed once for this rank (by an earlier call or the watchdog)
      comm->lastError = strprintf("%s: %s", arfuseGetErrorName(async.code()), msg.c_str());
      return async.code();
    }
    // The line describes the call that failed on the device; `refused` names the call refused now.
    return fail(comm, async.code(), __FILE__, __LINE__, msg,
                asyncFields.empty() ? fields : asyncFields + " refused=" + std::string(func + 6));
  }

  PlannedCall pc;
  if (const Status st = planCall(comm, c, stream, func, fields, &pc); !st.ok())
    return fail(comm, st, pc.fields.empty() ? fields : pc.fields);
  DeviceScope scope(comm->device);
  return enqueueCall(pc);
}

// The single-GPU kernel on the current device: checked, then launched.
Status addRmsNorm(const void* x, const void* residual_in, const void* weight, float eps, void* norm_out,
                  void* residual_out, int tokens, int hidden, arfuseDataType_t dtype, cudaStream_t stream) {
  const char* func = "arfuseAddRmsNorm";
  const std::string prefix = std::string(func) + ": ";
  Limits limits;
  limits.maxTokens = 1 << 30;
  limits.maxHidden = 1 << 30;
  Plan p = validateShape(limits, PlanRequest{arfuseOpAllReduceAddRmsNorm, tokens, hidden, dtype});
  if (p.status != arfuseSuccess) return ARFUSE_FAIL(p.status, "%s: %s", func, p.reason.c_str());
  ARFUSE_CHECK_PREFIXED(prefix, checkEps(eps));
  const size_t bytes = static_cast<size_t>(tokens) * hidden * dtypeSize(dtype);
  std::vector<BufferArg> bufs = {{"x", x, bytes},
                                 {"residual_in", residual_in, bytes},
                                 {"weight", weight, hidden * dtypeSize(dtype)},
                                 {"norm_out", norm_out, bytes},
                                 {"residual_out", residual_out, bytes}};
  ARFUSE_CHECK_PREFIXED(prefix, checkBuffers(bufs, {{"residual_out", "residual_in"}, {"norm_out", "x"}}));
  int device = 0, sms = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (e != cudaSuccess) {
    cudaGetLastError();
    const bool noDevice = e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver;  // as arfuseCommInitAll
    return ARFUSE_FAIL(noDevice ? arfuseNoDevice : arfuseCudaError, "%s: no usable current CUDA device: %s", func,
                       noDevice ? noDeviceMessage(e, cudaGetErrorString(e)).c_str() : cudaGetErrorString(e));
  }
  ARFUSE_CHECK(checkPointers(func, bufs, device));
  // The plan of a one-rank group on this device: the local path, whose prepare needs no group.
  Fabric f;
  f.smCount = sms;
  int major = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  f.pdl = major >= 9 && paramPdl();
  const Plan plan = makePlan(f, limits, PlanPolicy{}, PlanRequest{arfuseOpAllReduceAddRmsNorm, tokens, hidden, dtype});
  if (plan.status != arfuseSuccess) return ARFUSE_FAIL(plan.status, "%s: %s", func, plan.reason.c_str());
  CallArgs c{arfuseOpAllReduceAddRmsNorm, x, residual_in, weight, eps, norm_out, residual_out, tokens, hidden, dtype};
  const Call call = callOf(c, EpiArgs{});
  AlgoLaunch launch = launchOf(plan, call, stream);
  ARFUSE_CHECK(preparePath(nullptr, 0, plan, call, &launch));
  return findAlgo(plan.algo)->issue.launch(launch);
}

}  // namespace
}  // namespace arfuse

using namespace arfuse;

extern "C" {

arfuseResult_t arfuseConfigInit(arfuseConfig_t* config) {
  if (!config) return fail(nullptr, ARFUSE_FAIL(arfuseInvalidArgument, "arfuseConfigInit: config is NULL"));
  arfuseConfig_t init = ARFUSE_CONFIG_INITIALIZER;
  *config = init;
  return arfuseSuccess;
}

arfuseResult_t arfuseGetVersion(int* version) {
  if (!version) return fail(nullptr, ARFUSE_FAIL(arfuseInvalidArgument, "arfuseGetVersion: version is NULL"));
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
  const Status st = createGroup(nranks, devices, config, comms);
  if (!st.ok()) return fail(nullptr, ARFUSE_FAIL(st.code(), "arfuseCommInitAll: %s", st.message().c_str()));
  return arfuseSuccess;
}

arfuseResult_t arfuseGetUniqueId(arfuseUniqueId* uniqueId) {
  static_assert(sizeof(arfuseUniqueId) == bootstrap::kUniqueIdBytes, "unique id size");
  if (!uniqueId)
    return fail(nullptr, ARFUSE_FAIL(arfuseInvalidArgument,
                                     "arfuseGetUniqueId: uniqueId is NULL: pass the address of an arfuseUniqueId"));
  // The listener lives at most one init timeout unless rank 0 takes it.
  const bootstrap::Options options = bootstrapOptions(initTimeoutMs(nullptr));
  bootstrap::UniqueId id;
  const Status made = bootstrap::makeUniqueId(options, &id);
  if (!made.ok())
    return fail(nullptr,
                ARFUSE_FAIL(made.code(), "arfuseGetUniqueId: %s (ARFUSE_BOOTSTRAP_ADDR=%s ARFUSE_BOOTSTRAP_IFNAME=%s)",
                            made.message().c_str(), options.address.c_str(), options.ifname.c_str()));
  std::memcpy(uniqueId->internal, id.bytes, sizeof id.bytes);
  return arfuseSuccess;
}

arfuseResult_t arfuseCommInitRank(arfuseComm_t* comm, int nranks, arfuseUniqueId uniqueId, int rank, int device,
                                  const arfuseConfig_t* config) {
  bootstrap::UniqueId id;
  std::memcpy(id.bytes, uniqueId.internal, sizeof id.bytes);
  if (Status bad = checkRankArgs(nranks, rank); !bad.ok()) {
    if (rank == 0) bootstrap::closeListener(id);  // this process's rank 0 gives up: no listener left behind
    return fail(nullptr, bad.prefixed("arfuseCommInitRank: ").through(__FILE__, __LINE__));
  }
  const int timeoutMs = initTimeoutMs(config);
  Exchange exchange = [&](const void* mine, size_t bytes, std::vector<uint8_t>* all) {
    const bootstrap::Options options = bootstrapOptions(timeoutMs);
    return bootstrap::allGather(id, rank, nranks, mine, bytes, all, options);
  };
  const Status st = createRankMultiProcess(nranks, rank, device, config, exchange, comm);
  if (!st.ok())
    return fail(nullptr,
                ARFUSE_FAIL(st.code(), "arfuseCommInitRank (rank %d of %d): %s", rank, nranks, st.message().c_str()));
  return arfuseSuccess;
}

arfuseResult_t arfuseCommInitRankWithAllGather(arfuseComm_t* comm, int nranks, int rank, int device,
                                               const arfuseConfig_t* config, arfuseAllGatherFn_t allGather, void* ctx) {
  if (!allGather)
    return fail(nullptr, ARFUSE_FAIL(arfuseInvalidArgument,
                                     "arfuseCommInitRankWithAllGather: allGather is NULL: pass "
                                     "the framework's all-gather callback"));
  if (Status bad = checkRankArgs(nranks, rank); !bad.ok())
    return fail(nullptr, bad.prefixed("arfuseCommInitRankWithAllGather: ").through(__FILE__, __LINE__));
  Exchange exchange = [&](const void* mine, size_t bytes, std::vector<uint8_t>* all) {
    return bootstrap::allGatherViaCallback(allGather, ctx, rank, nranks, mine, bytes, all);
  };
  MultiProcessOptions reusable;
  reusable.reusable = true;  // a framework's all-gather may be called again (groups that span hosts)
  const Status st = createRankMultiProcess(nranks, rank, device, config, exchange, comm, reusable);
  if (!st.ok())
    return fail(nullptr, ARFUSE_FAIL(st.code(), "arfuseCommInitRankWithAllGather (rank %d of %d): %s", rank, nranks,
                                     st.message().c_str()));
  return arfuseSuccess;
}

arfuseResult_t arfuseCommDestroy(arfuseComm_t comm) {
  arfuseComm* c = nullptr;
  if (const Status live = liveComm(comm, "arfuseCommDestroy", &c); !live.ok()) return fail(nullptr, live);
  const Status st = destroyComm(c);
  if (!st.ok()) return fail(nullptr, ARFUSE_FAIL(st.code(), "arfuseCommDestroy: %s", st.message().c_str()));
  return arfuseSuccess;
}

#define COMM_GETTER(fn, type, expr)                                                               \
  arfuseResult_t fn(arfuseComm_t comm, type* out) {                                               \
    arfuseComm* c = nullptr;                                                                      \
    if (const Status live = liveComm(comm, #fn, &c); !live.ok()) return fail(nullptr, live);      \
    if (!out) return fail(c, ARFUSE_FAIL(arfuseInvalidArgument, #fn ": output pointer is NULL")); \
    *out = (expr);                                                                                \
    return arfuseSuccess;                                                                         \
  }
COMM_GETTER(arfuseCommRank, int, c->globalRank >= 0 ? c->globalRank : c->rank)
COMM_GETTER(arfuseCommCount, int, groupMultiHost(*c->group) ? multiHostRanks(*c->group) : groupRanks(*c->group))
COMM_GETTER(arfuseCommDevice, int, c->device)
COMM_GETTER(arfuseCommIsVirtual, int, groupHasVirtualRanks(*c->group) ? 1 : 0)

const char* arfuseCommGetLastError(arfuseComm_t comm) {
  if (!comm || !commIsLive(comm)) return tLastError.c_str();
  return comm->lastError.c_str();
}

arfuseResult_t arfuseCommGetAsyncError(arfuseComm_t comm, arfuseResult_t* asyncError) {
  arfuseComm* c = nullptr;
  if (const Status live = liveComm(comm, "arfuseCommGetAsyncError", &c); !live.ok()) return fail(nullptr, live);
  if (!asyncError) return fail(c, ARFUSE_FAIL(arfuseInvalidArgument, "arfuseCommGetAsyncError: asyncError is NULL"));
  const Status async = groupAsyncError(*c->group, c->rank);
  *asyncError = async.code();
  if (!async.ok()) c->lastError = std::string(arfuseGetErrorName(*asyncError)) + ": " + async.message();
  return arfuseSuccess;
}

arfuseResult_t arfuseCommDumpState(arfuseComm_t comm, const char* path) {
  arfuseComm* c = nullptr;
  if (const Status live = liveComm(comm, "arfuseCommDumpState", &c); !live.ok()) return fail(nullptr, live);
  const Group& g = *c->group;
  if (groupFlightRecorder(g))
    refreshFlight(g, c->rank);  // the kernels stamp device memory; the dump reads the host mirror
  DumpInput in;
  in.rank = c->rank;
  in.device = c->device;
  in.nranks = groupRanks(g);
  in.arch = c->arch;
  in.timeoutNs = groupTimeoutNs(g);
  in.shared = groupSharedArea(g);
  in.lastError = c->lastError;
  std::string text = formatDump(in);
  for (const std::string& line : multiHostWatchLines(g))  // a group that spans hosts: its NCCL operations
    text += strprintf("arfuse-dump-note rank=%d nccl_watch: %s\n", c->logContext().rank, line.c_str());
  if (Status written = writeDump(text, path); !written.ok())
    return fail(c, written.prefixed("arfuseCommDumpState: ").through(__FILE__, __LINE__));
  return arfuseSuccess;
}

arfuseResult_t arfuseCommQueryPlan(arfuseComm_t comm, arfuseOp_t op, int tokens, int hidden, arfuseDataType_t dtype,
                                   arfusePlan_t* out) {
  arfuseComm* c = nullptr;
  if (const Status live = liveComm(comm, "arfuseCommQueryPlan", &c); !live.ok()) return fail(nullptr, live);
  if (!out) return fail(c, ARFUSE_FAIL(arfuseInvalidArgument, "arfuseCommQueryPlan: plan is NULL"));
  CHECK_ENUM(comm, "arfuseCommQueryPlan", checkOpArg(rawEnum(op)));
  CHECK_ENUM(comm, "arfuseCommQueryPlan", checkDtypeArg(rawEnum(dtype)));
  Plan p = planOn(*c->group, PlanRequest{op, tokens, hidden, dtype});
  if (p.status != arfuseSuccess) return fail(c, ARFUSE_FAIL(p.status, "arfuseCommQueryPlan: %s", p.reason.c_str()));
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
    return fail(nullptr, ARFUSE_FAIL(arfuseInvalidArgument,
                                     "arfuseAllReduceEpilogue: epilogue is NULL: pass an arfuseEpilogue_t started from "
                                     "ARFUSE_EPILOGUE_INITIALIZER"));
  c.epi = epilogue;
  return collective(comm, c, static_cast<cudaStream_t>(stream), "arfuseAllReduceEpilogue");
}

arfuseResult_t arfuseAddRmsNorm(const void* x, const void* residual_in, const void* weight, float eps, void* norm_out,
                                void* residual_out, int tokens, int hidden, arfuseDataType_t dtype, void* stream) {
  CHECK_ENUM(nullptr, "arfuseAddRmsNorm", checkDtypeArg(rawEnum(dtype)));
  const Status st = addRmsNorm(x, residual_in, weight, eps, norm_out, residual_out, tokens, hidden, dtype,
                               static_cast<cudaStream_t>(stream));
  return st.ok() ? arfuseSuccess : fail(nullptr, st);
}

}  // extern "C"
