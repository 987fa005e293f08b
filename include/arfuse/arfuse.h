/*
 * arfuse — fused tensor-parallel all-reduce + residual add + RMSNorm, on every NVIDIA fabric.
 *
 * This header is the manual. It is C99: every type is plain C and every function returns an
 * arfuseResult_t; nothing throws across this boundary.
 *
 * ---------------------------------------------------------------------------------------------
 * Model
 * ---------------------------------------------------------------------------------------------
 * A communicator (arfuseComm_t) is one rank of a tensor-parallel group. arfuseCommInitAll creates
 * all N ranks of a group inside one process, one per entry of a device list. A device may appear
 * more than once: those ranks are "virtual ranks" sharing one GPU, which exercises every protocol on
 * a single-GPU machine (their timings are not performance figures).
 *
 * Every collective call is made once per rank, with the same (op, tokens, hidden, dtype) on every
 * rank, in the same order. Calls are asynchronous on the given stream and never synchronise the
 * host. All protocol state (epochs, buffer parity, flags) lives on the device and is advanced by the
 * kernels themselves, so a sequence of calls may be captured into a CUDA graph once and replayed any
 * number of times with new data in the same buffers; no host work is needed per replay.
 *
 * The caller's input is copied into a workspace buffer allocated at init ("copy-in"): no user
 * buffer is ever registered or shared with peers, so any pointer from any allocator works, in or out
 * of graph capture.
 *
 * Numerics: which property holds depends on the path (arfuseCommQueryPlan names it).
 * - Every arfuse path (low-latency, one-shot, two-shot, host-staged, local) accumulates the sum in
 *   fp32 in fixed rank order (rank 0 first) and rounds once to the output dtype, so every rank
 *   produces bitwise-identical outputs. The fused operation is defined as
 *     residual_out = round( float(residual_in) + sum_r float(x_r) )
 *     norm_out     = round( float(residual_out) * rsqrt(mean(float(residual_out)^2) + eps) * float(weight) )
 *   i.e. the norm is taken of the rounded residual, exactly as an unfused engine that stores the
 *   residual in the model dtype does. mean(...) is one fixed summation tree over the row (groups of
 *   128 bytes, then a fixed tree over the groups), so a row's outputs are the same bits whatever the
 *   arfuse path, the launch geometry and the number of tokens in the call: they depend only on that
 *   row's inputs and the world size (batch invariance).
 * - The NCCL path sums with ncclAllReduce in the call's dtype, in NCCL's order (its ring or tree,
 *   which NCCL may pick differently by size and rank count), rounding at every step; arfuse's
 *   epilogue then adds the residual and rounds again. Its results may differ from the arfuse paths'
 *   in the last bits, and are bitwise equal across ranks only as far as NCCL's sum is. With
 *   arfuseConfig_t.deterministic = 1 (or ARFUSE_DETERMINISTIC=1) it all-gathers the inputs instead
 *   and sums them like every arfuse path (the same bits), moving (n - 1) x the message instead of
 *   NCCL's 2 (n - 1) / n.
 * Replicas: residual_in and weight must be bitwise equal on every rank (they are replicas in tensor
 * parallelism). Paths that split a call across ranks (two-shot, host-staged two-shot) take rank q's
 * residual_in for the part rank q reduces, so replicas that differ give outputs that are neither
 * rank's answer, with no error. ARFUSE_CHECK_REPLICAS=1 (docs/environment.md) checks it on every
 * fused call of an in-process group, eagerly and in CUDA-graph replays alike: the first differing
 * rank and element abort the group with arfuseMismatch (reported like a kernel-recorded error:
 * arfuseCommGetAsyncError and every later call; a call already past its waits, and any NCCL-path
 * call, still completes). It copies both tensors to the host and runs a host callback per call: a
 * debugging aid, not for production. Multi-process groups are not checked (one WARN line).
 *
 * Failures: a failed device-side wait (a peer timed out, a divergent call, two streams at once)
 * aborts the whole group, and the abort is sticky. The call that failed writes NaN into every output
 * element whose inputs did not all arrive (elements whose inputs did arrive keep their correct
 * value; every norm of an affected row is NaN). Every later call of every rank then fails fast: an
 * eager call is refused by the host with the recorded error code and writes nothing; a call already
 * on the device (a CUDA-graph replay, or queued before the host saw the abort) sends nothing, writes
 * NaN into all its outputs and records itself as refused in the flight recorder. Recover by
 * destroying every communicator of the group and creating a new group.
 *
 * Threading: the ranks of one group may be driven from one host thread (a loop over ranks) or from
 * one thread per rank. A communicator must not be used by two host threads at once. When one thread
 * drives several ranks and the chosen path is NCCL, wrap the loop in arfuseGroupStart/arfuseGroupEnd
 * (as with NCCL itself; see there for the order of calls inside a group); for the other paths the
 * group calls change nothing unless an NCCL-path call precedes them on the same stream.
 *
 * Streams: ranks of one in-process group that share a GPU (virtual ranks) need streams that are
 * really distinct and do not serialise: not one stream, not the per-thread default stream from one
 * host thread (cudaStreamPerThread is a different stream in each thread, so from two threads it is
 * fine), not 0 and cudaStreamLegacy (both name the device's one legacy stream), and not the legacy
 * stream for one rank with a blocking stream (created without cudaStreamNonBlocking, or the
 * per-thread stream) for another: the legacy stream and blocking streams wait for each other. Each
 * call would wait for a peer call queued behind it; the call that would deadlock is refused with
 * arfuseInvalidUsage naming both ranks (the peer's call already launched then times out).
 *
 * Errors: every function checks its arguments before anything is launched; a failure returns a code,
 * prints one canonical line on stderr ("arfuse ERROR rank=.. dev=.. code=.. file:line message"), and
 * stores the text, retrievable with arfuseCommGetLastError (or arfuseGetLastError when no valid
 * communicator was involved). Nothing the caller owns is written when a call fails its checks.
 */
#ifndef ARFUSE_ARFUSE_H_
#define ARFUSE_ARFUSE_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define ARFUSE_API
#else
#define ARFUSE_API __attribute__((visibility("default")))
#endif

#define ARFUSE_VERSION_MAJOR 0
#define ARFUSE_VERSION_MINOR 1
#define ARFUSE_VERSION_PATCH 0
#define ARFUSE_VERSION_CODE (ARFUSE_VERSION_MAJOR * 10000 + ARFUSE_VERSION_MINOR * 100 + ARFUSE_VERSION_PATCH)

/* Largest group supported. */
#define ARFUSE_MAX_RANKS 16

/* ------------------------------------------------------------------------------------------- */
/* Result codes                                                                                  */
/* ------------------------------------------------------------------------------------------- */
typedef enum {
  arfuseSuccess = 0,
  arfuseInvalidArgument = 1, /* an argument is wrong; the message names it and says what is allowed */
  arfuseInvalidUsage = 2,    /* the call is not allowed in this state (destroyed handle, wrong order) */
  arfuseUnsupported = 3,     /* valid request this build/machine cannot serve; the message says why */
  arfuseCudaError = 4,       /* a CUDA runtime call failed; the message names the call and the error */
  arfuseNcclError = 5,       /* an NCCL call failed */
  arfuseSystemError = 6,     /* host allocation or OS failure */
  arfuseInternalError = 7,   /* a bug in arfuse: please report with the log line */
  arfusePeerTimeout = 8,     /* a device-side wait for a peer exceeded the timeout; the group is aborted */
  arfuseNoDevice = 9,        /* no CUDA device is visible */
  arfuseMismatch = 10,       /* ranks made different calls (op, dtype, tokens, hidden or path); the group is
                                aborted and the message names both ranks and both calls */
  arfuseNumResults = 11
} arfuseResult_t;

typedef enum { arfuseBfloat16 = 0, arfuseFloat16 = 1, arfuseFloat32 = 2, arfuseNumDataTypes = 3 } arfuseDataType_t;

/* Dtype set bits for arfuseConfig_t.dtypeMask. */
#define ARFUSE_DTYPE_BIT(dt) (1u << (unsigned)(dt))
#define ARFUSE_DTYPE_ALL \
  (ARFUSE_DTYPE_BIT(arfuseBfloat16) | ARFUSE_DTYPE_BIT(arfuseFloat16) | ARFUSE_DTYPE_BIT(arfuseFloat32))

typedef enum {
  arfuseAlgoAuto = 0,         /* the plan picks (see arfuseCommQueryPlan) */
  arfuseAlgoOneShot = 1,      /* every rank pulls every peer's rows; one barrier */
  arfuseAlgoTwoShot = 2,      /* reduce-scatter by column slices, then gather; two barriers */
  arfuseAlgoNccl = 3,         /* ncclAllReduce + arfuse's fused add+RMSNorm kernel (distinct devices only) */
  arfuseAlgoLocal = 4,        /* nranks == 1: no communication (reported by plans; may be forced only at nranks 1) */
  arfuseAlgoLowLatency = 5,   /* small messages: each rank pushes its rows into every peer's buffer with the
                                 readiness flag inside every 8-byte word; no separate barrier, one one-way trip */
  arfuseAlgoHostStaged = 6,   /* no peer access needed: ranks exchange through pinned host memory mapped into every
                                 GPU (one-shot for small messages, two-shot beyond; the plan's reason says which) */
  arfuseAlgoHierarchical = 7, /* groups that span hosts: intra-host reduce-scatter (fp32, local-rank order), NCCL
                                 all-reduce of each 1/L slice across hosts (fp32), intra-host all-gather fused
                                 with residual add + RMSNorm (docs/multihost.md) */
  arfuseNumAlgos = 8
} arfuseAlgo_t;

typedef enum { arfuseOpAllReduce = 0, arfuseOpAllReduceAddRmsNorm = 1 } arfuseOp_t;

/* ------------------------------------------------------------------------------------------- */
/* Configuration                                                                                 */
/* ------------------------------------------------------------------------------------------- */
#define ARFUSE_CONFIG_MAGIC 0xAF05C0F1u

/* Versioned configuration. Always start from ARFUSE_CONFIG_INITIALIZER (or arfuseConfigInit) so
 * that fields added in later versions get their defaults. A field left at its default may be
 * overridden by the environment (ARFUSE_ALGO, ARFUSE_TIMEOUT_MS, ...); a field set explicitly wins
 * over the environment. Precedence: config struct > environment > default. */
typedef struct {
  size_t size;            /* sizeof(arfuseConfig_t) of the caller; set by the initializer */
  unsigned int magic;     /* ARFUSE_CONFIG_MAGIC */
  unsigned int version;   /* ARFUSE_VERSION_CODE the caller was compiled against */
  int maxTokens;          /* largest token count of any call; sizes the workspace. Default 2048 (-1 = default) */
  int maxHidden;          /* largest hidden size of any call; default 16384 (-1 = default) */
  unsigned int dtypeMask; /* dtypes that will be used (ARFUSE_DTYPE_BIT); sizes the workspace. Default all */
  int algo;               /* arfuseAlgo_t to force, or -1 = default (environment ARFUSE_ALGO, else auto) */
  int timeoutMs;          /* device-side wait bound in ms; -1 = default (ARFUSE_TIMEOUT_MS, else 10000) */
  int maxBlocks;          /* cap on blocks per rank per call; -1 = default (derived from the device) */
  int deterministic;      /* 1: batch-invariant outputs on every path (see "Numerics" below); 0: off;
                             -1 = default (ARFUSE_DETERMINISTIC, else 0). Must be equal on every rank. */
  int reserved;           /* 0; keeps the struct free of padding (it is compared and copied as bytes) */
} arfuseConfig_t;

#define ARFUSE_CONFIG_INITIALIZER \
  { sizeof(arfuseConfig_t), ARFUSE_CONFIG_MAGIC, ARFUSE_VERSION_CODE, -1, -1, ARFUSE_DTYPE_ALL, -1, -1, -1, -1, 0 }

/* Fills *config with ARFUSE_CONFIG_INITIALIZER. */
ARFUSE_API arfuseResult_t arfuseConfigInit(arfuseConfig_t* config);

/* ------------------------------------------------------------------------------------------- */
/* Library                                                                                       */
/* ------------------------------------------------------------------------------------------- */
ARFUSE_API const char* arfuseGetErrorString(arfuseResult_t result); /* never NULL */
ARFUSE_API const char* arfuseGetErrorName(arfuseResult_t result);   /* "arfuseInvalidArgument", never NULL */
ARFUSE_API arfuseResult_t arfuseGetVersion(int* version);           /* ARFUSE_VERSION_CODE of the library */
ARFUSE_API const char* arfuseGetBuildInfo(void);          /* "arfuse 0.1.0 cuda 13.0 nccl 2.28.9 archs 80;86;..." */
ARFUSE_API const char* arfuseAlgoName(arfuseAlgo_t algo); /* "oneshot", ...; "unknown" if out of range */
ARFUSE_API const char* arfuseDataTypeName(arfuseDataType_t dtype); /* "bf16", "fp16", "fp32" */
/* The last error text set on this host thread by a call that had no valid communicator. */
ARFUSE_API const char* arfuseGetLastError(void);

/* ------------------------------------------------------------------------------------------- */
/* Communicators                                                                                 */
/* ------------------------------------------------------------------------------------------- */
typedef struct arfuseComm* arfuseComm_t;

/* Creates nranks communicators, rank i on device devices[i], all in this process.
 * - comms: array of nranks handles, written only on success.
 * - nranks: 1..ARFUSE_MAX_RANKS.
 * - devices: CUDA device ordinals; may repeat (virtual ranks). Distinct devices must have peer
 *   access to each other for the one-shot / two-shot paths; otherwise those paths are disabled with
 *   a WARN line and the plan uses NCCL.
 * - config: may be NULL for defaults.
 * Allocates per rank a workspace of 2 x maxTokens x maxHidden x (largest size among the dtypes
 * enabled in dtypeMask) bytes - so enable only the dtypes you use: bf16 alone halves it against fp32 -
 * a low-latency buffer of 2 parities x nranks x 2 x min(64 KiB, that message size), and small flag
 * arrays. Blocks the calling thread until every rank is ready. The current CUDA
 * device of the calling thread is restored before returning.
 * Errors: arfuseInvalidArgument (names the argument), arfuseNoDevice, arfuseCudaError, arfuseNcclError. */
ARFUSE_API arfuseResult_t arfuseCommInitAll(arfuseComm_t* comms, int nranks, const int* devices,
                                            const arfuseConfig_t* config);

/* ---- Multi-process communicators (one process per rank, or several per GPU) -----------------
 * Rank 0 calls arfuseGetUniqueId and ships the bytes to every other process by any means (file,
 * environment, the launcher, a framework broadcast); then every rank calls arfuseCommInitRank with
 * the same id and nranks, its own rank and its own device. The id carries a secret: a process that
 * holds it can join the group, so ship it privately. Rank 0 listens on an abstract AF_UNIX socket
 * that admits only its own user (and ARFUSE_BOOTSTRAP_UIDS), or on TCP at ARFUSE_BOOTSTRAP_ADDR /
 * ARFUSE_BOOTSTRAP_IFNAME (docs/bootstrap.md, "Trust model"); every wait is bounded by the config's
 * timeoutMs (at least 30 s for init). 1 <= nranks <= ARFUSE_MAX_RANKS and 0 <= rank < nranks are
 * checked before anything else (arfuseInvalidArgument).
 * Initialisation is collective and all-or-nothing: if any rank fails a check (bad device, different
 * config, out of memory), every rank returns the same error naming the rank and the reason; no rank
 * hangs. Peer memory is shared through CUDA IPC when every pair of GPUs has peer access (or ranks
 * share a GPU); otherwise the group uses the host-staged path through POSIX shared memory mapped
 * into every GPU. Shared-memory segments are unlinked as soon as every rank has mapped them, so
 * nothing is left behind when a process dies after init (segments of an init whose every process
 * was killed are listed and removed by `arfuse doctor --clean`). Ranks on one GPU in different processes time-slice:
 * correct, but slow (use generous timeouts).
 * Groups that span hosts (docs/multihost.md): ranks are grouped by host (host name + boot_id); every
 * host must hold the same number of ranks L (else every rank fails with arfuseUnsupported naming each
 * host and its count). Within a host the ranks share memory as above; across hosts everything goes
 * through NCCL: one communicator over every rank (the nccl path) and one per local index (the
 * hierarchical path, arfuseAlgoHierarchical). arfuseCommInitRank then needs the TCP rendezvous
 * (ARFUSE_BOOTSTRAP_ADDR / ARFUSE_BOOTSTRAP_IFNAME); arfuseCommInitRankWithAllGather needs nothing
 * more. arfuseCommRank / arfuseCommCount report the rank and size of the whole group. Every NCCL
 * operation arfuse enqueues across hosts in an eager call is bounded by the timeout from its start on
 * the GPU: past it the rank aborts its NCCL communicators and the group (sticky, as above; the
 * operation's outputs are NaN) and reports arfusePeerTimeout naming the operation and every rank it
 * waited with, by host and local rank. Operations captured into a CUDA graph are not bounded that way
 * (docs/multihost.md "Safety"). Errors also: arfuseNcclError (an NCCL communicator could not be
 * created). */
#define ARFUSE_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[ARFUSE_UNIQUE_ID_BYTES];
} arfuseUniqueId;

/* Rank 0 only: starts the rendezvous listener and fills *uniqueId (opaque bytes). The listener lives
 * until rank 0's arfuseCommInitRank uses it, or at most the init timeout (max(30 s, ARFUSE_TIMEOUT_MS)). */
ARFUSE_API arfuseResult_t arfuseGetUniqueId(arfuseUniqueId* uniqueId);

/* Creates this process's rank of an nranks group. Blocks until every rank has joined (bounded).
 * Errors: arfuseInvalidArgument (names the argument), arfuseNoDevice, arfuseMismatch (ranks disagree
 * on nranks or config; the message names both values), arfusePeerTimeout (a rank never joined: the
 * message names it and the address), arfuseCudaError, arfuseSystemError. */
ARFUSE_API arfuseResult_t arfuseCommInitRank(arfuseComm_t* comm, int nranks, arfuseUniqueId uniqueId, int rank,
                                             int device, const arfuseConfig_t* config);

/* A framework's all-gather: gathers `bytes` bytes from every rank into `all` (nranks * bytes),
 * rank r's contribution at offset r * bytes. Returns 0 on success, anything else on failure. It is
 * called a few times during init, the same number of times on every rank. */
typedef int (*arfuseAllGatherFn_t)(void* ctx, const void* mine, void* all, size_t bytes);

/* As arfuseCommInitRank, but the handle bytes travel through the caller's all-gather (e.g.
 * torch.distributed over its process group) instead of arfuse's own rendezvous. What the callback
 * returns is checked (rank order, sizes) before it is trusted. */
ARFUSE_API arfuseResult_t arfuseCommInitRankWithAllGather(arfuseComm_t* comm, int nranks, int rank, int device,
                                                          const arfuseConfig_t* config, arfuseAllGatherFn_t allGather,
                                                          void* ctx);

/* Frees everything the communicator owns. Waits for this rank's outstanding work on the device.
 * Destroy every rank of a group (any order); the shared state is freed with the last one.
 * After destroy the handle is invalid: any call with it returns arfuseInvalidUsage. */
ARFUSE_API arfuseResult_t arfuseCommDestroy(arfuseComm_t comm);

ARFUSE_API arfuseResult_t arfuseCommRank(arfuseComm_t comm, int* rank);
ARFUSE_API arfuseResult_t arfuseCommCount(arfuseComm_t comm, int* nranks);
ARFUSE_API arfuseResult_t arfuseCommDevice(arfuseComm_t comm, int* device);
/* 1 when several ranks of this group share a GPU (virtual ranks). */
ARFUSE_API arfuseResult_t arfuseCommIsVirtual(arfuseComm_t comm, int* isVirtual);
/* The last error text of this communicator ("" if none). Valid until the next failing call. */
ARFUSE_API const char* arfuseCommGetLastError(arfuseComm_t comm);
/* Reports an error raised asynchronously by a kernel (arfusePeerTimeout) on this communicator's
 * group: *asyncError is arfuseSuccess when none. Non-blocking; reads host-mapped memory only.
 * Once an asynchronous error is recorded, every collective call on the group fails fast with it. */
ARFUSE_API arfuseResult_t arfuseCommGetAsyncError(arfuseComm_t comm, arfuseResult_t* asyncError);

/* Writes this rank's state for post-mortems: the flight recorder (the last 64 calls this rank's
 * kernels made, stamped by the kernels themselves, so CUDA-graph replays are included: call, op,
 * dtype, tokens x hidden, path, start/end in ns, "pending" while running) and the group's error
 * record, in the format `arfuse triage` reads ("arfuse-flight-recorder v1 ..."). `path`: NULL or
 * "-" for stderr, else a file appended to (%p -> process id, %h -> host name). Non-blocking: reads
 * host-mapped memory only, so it works while the GPU is wedged. Set ARFUSE_DUMP_ON_SIGNAL=1 to get
 * the same for every communicator on SIGUSR1. Errors: arfuseInvalidUsage (handle), arfuseSystemError
 * (the file cannot be written). */
ARFUSE_API arfuseResult_t arfuseCommDumpState(arfuseComm_t comm, const char* path);

/* ------------------------------------------------------------------------------------------- */
/* Plans                                                                                         */
/* ------------------------------------------------------------------------------------------- */
typedef struct {
  arfuseAlgo_t algo; /* what a call with these arguments will run */
  int blocks;        /* grid size per rank */
  int threads;       /* block size */
  char reason[256];  /* one line: why, e.g. "lowlatency: 14336 B <= 65536 B: rows pushed with readiness in every word,
                        ..." */
} arfusePlan_t;

/* Answers "what will this call do and why" without launching anything. The same decision code
 * runs inside every collective call. Errors: as the call itself would return for these arguments
 * (e.g. arfuseUnsupported naming the hidden-size limit). */
ARFUSE_API arfuseResult_t arfuseCommQueryPlan(arfuseComm_t comm, arfuseOp_t op, int tokens, int hidden,
                                              arfuseDataType_t dtype, arfusePlan_t* plan);

/* ------------------------------------------------------------------------------------------- */
/* Collectives (enqueue on `stream`; graph-capturable; no host synchronisation)                  */
/* ------------------------------------------------------------------------------------------- */

/* Starts / ends a group of calls made from one thread for several ranks (needed only when the NCCL
 * path is used that way). Groups nest; deferred work is issued at the outermost arfuseGroupEnd.
 * Order: every stream runs its calls in the order they were made, whatever their paths. An
 * NCCL-path call, and every later call on the same stream, is held until arfuseGroupEnd, which
 * issues them as successive NCCL groups: the w-th NCCL all-reduce of every stream in the w-th
 * ncclGroupStart/End, and what a stream does between two all-reduces (an epilogue, arfuse-path
 * calls) between those NCCL groups. So a call may read an earlier call's outputs, NCCL path or not.
 * Calls on a stream with nothing held launch at once, as outside a group.
 * Limits: one host thread's group holds at most 4096 deferred calls (all ranks together); the call
 * past it fails with arfuseInvalidUsage and nothing of it is held. After a communicator's call is
 * held, its later calls in the group must use the same stream (else arfuseInvalidUsage): an event
 * recorded between calls of a group does not order held work. NCCL calls of your own made inside
 * an arfuse group are launched when arfuseGroupEnd begins, before every held arfuse call. Do not
 * open an arfuse group inside an NCCL group of your own (ncclGroupStart): NCCL would then hold the
 * all-reduces past arfuseGroupEnd, after the epilogues that need them.
 * Errors: arfuseInvalidUsage (End without Start), arfuseNcclError, and the first error of a held
 * call (later held calls are then not issued). */
ARFUSE_API arfuseResult_t arfuseGroupStart(void);
ARFUSE_API arfuseResult_t arfuseGroupEnd(void);

/* out[t][h] = sum over ranks of in[t][h], for a [tokens, hidden] row-major tensor on this rank's
 * device. `out` may equal `in` (in place); partial overlap is an error. hidden must be a multiple
 * of 8 elements and pointers 16-byte aligned. */
ARFUSE_API arfuseResult_t arfuseAllReduce(const void* in, void* out, int tokens, int hidden, arfuseDataType_t dtype,
                                          arfuseComm_t comm, void* stream /* cudaStream_t */);

/* Fused: s = all-reduce(x); residual_out = residual_in + s; norm_out = rmsnorm(residual_out) * weight.
 * Shapes: x, residual_in, norm_out, residual_out are [tokens, hidden]; weight is [hidden]; all of
 * `dtype`, on this rank's device, 16-byte aligned, hidden a multiple of 8.
 * residual_in and weight must hold bitwise-equal values on every rank (see "Replicas" above).
 * Aliasing: residual_out may equal residual_in; norm_out may equal x. No other overlap is allowed
 * (error arfuseInvalidArgument naming both arguments). eps must be finite and > 0. */
ARFUSE_API arfuseResult_t arfuseAllReduceAddRmsNorm(const void* x, const void* residual_in, const void* weight,
                                                    float eps, void* norm_out, void* residual_out, int tokens,
                                                    int hidden, arfuseDataType_t dtype, arfuseComm_t comm,
                                                    void* stream /* cudaStream_t */);

/* ---- Extended epilogue: optional outputs, Gemma weights, first layer, FP8 / NVFP4 ---------------- */
typedef enum {
  arfuseQuantNone = 0,
  arfuseQuantFp8Static = 1, /* FP8 E4M3, q = e4m3(n * (1 / s)), s = *scaleIn (fp32, device memory: graph-safe) */
  arfuseQuantFp8PerToken =
      2,                /* FP8 E4M3 with a scale per row: s = max(absmax(n) / 448, tiny) -> scaleOut[row] (fp32) */
  arfuseQuantNvfp4 = 3, /* NVFP4: E2M1 in blocks of 16 elements, an E4M3 scale per block (scaleOut), global fp32
                           scale g = *scaleIn (device memory); see docs/quantization.md for the formulas */
  arfuseNumQuants = 4
} arfuseQuant_t;

typedef enum {
  arfuseScaleLinear = 0, /* NVFP4 block scales as [tokens][hidden / 16] */
  arfuseScaleSwizzled128x4 =
      1 /* the 128x4 tiles Blackwell block-scaled GEMMs read: [ceil(tokens/128)][ceil(hidden/64)][32][4][4]
           (padding entries are written as zero: a GEMM reads them) */
} arfuseScaleLayout_t;

#define ARFUSE_EPILOGUE_MAGIC 0xAF0E9100u
/* What the fused call writes. Start from ARFUSE_EPILOGUE_INITIALIZER. n below is the normalised
 * value rounded to the call's dtype (what an unfused engine would store as norm_out). */
typedef struct {
  size_t size;            /* sizeof(arfuseEpilogue_t) of the caller */
  unsigned int magic;     /* ARFUSE_EPILOGUE_MAGIC */
  const void* residualIn; /* [tokens, hidden] dtype, or NULL: first layer (residual_out = the sum) */
  void* residualOut;      /* [tokens, hidden] dtype, or NULL: not written. May equal residualIn */
  void* normOut;          /* [tokens, hidden] dtype, or NULL: not written. May equal x */
  int weightPlusOne;      /* 0: n = r * rsqrt(..) * w; 1: * (1 + w) (Gemma, Qwen3.5 style) */
  int quant;              /* arfuseQuant_t */
  void* quantOut; /* FP8: [tokens, hidden] bytes; NVFP4: [tokens, hidden / 2] bytes (element 2i in the low nibble) */
  void* scaleOut; /* FP8 per token: float[tokens]; NVFP4: the E4M3 block scales in scaleLayout */
  const float* scaleIn; /* FP8 static: the scale; NVFP4: the global scale; device memory */
  int scaleLayout;      /* arfuseScaleLayout_t (NVFP4) */
} arfuseEpilogue_t;

#define ARFUSE_EPILOGUE_INITIALIZER \
  { sizeof(arfuseEpilogue_t), ARFUSE_EPILOGUE_MAGIC, NULL, NULL, NULL, 0, arfuseQuantNone, NULL, NULL, NULL, 0 }

/* The fused all-reduce with the extended epilogue: s = all-reduce(x); r = round([residualIn +] s);
 * n = round(r * rsqrt(mean(r^2) + eps) * w'); writes what `epilogue` asks for. One entry point for
 * every epilogue variant (new ones extend the struct, not the ABI). Every path supports it; the plan
 * is the same as arfuseAllReduceAddRmsNorm's. NVFP4 needs hidden % 16 == 0. Outputs are bitwise equal
 * across ranks; quantised values are bit-exact against the CPU reference of the format (the hardware
 * conversion is used where the architecture has it, with the same rounding).
 * Errors: arfuseInvalidArgument naming the field (no output requested, a missing pointer, an unknown
 * quant or layout, hidden not a multiple of 16 for NVFP4, overlapping outputs). */
ARFUSE_API arfuseResult_t arfuseAllReduceEpilogue(const void* x, const void* weight, float eps,
                                                  const arfuseEpilogue_t* epilogue, int tokens, int hidden,
                                                  arfuseDataType_t dtype, arfuseComm_t comm, void* stream);

/* Single GPU (no communicator): residual_out = residual_in + x; norm_out = rmsnorm(residual_out) * weight.
 * Same shapes, aliasing and numerics as arfuseAllReduceAddRmsNorm with one rank. Runs on the
 * current CUDA device; pointers must belong to it (or be accessible from it). */
ARFUSE_API arfuseResult_t arfuseAddRmsNorm(const void* x, const void* residual_in, const void* weight, float eps,
                                           void* norm_out, void* residual_out, int tokens, int hidden,
                                           arfuseDataType_t dtype, void* stream /* cudaStream_t */);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ARFUSE_ARFUSE_H_ */
