#include "transport/ipc.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "base/status.h"
#include "policy/resolve.h"
#include "transport/hostmem.h"
#include "transport/nccl.h"
#include "transport/p2p.h"

namespace arfuse {

namespace mp {

// Posts this rank's blob for `phase` and waits (bounded) for every rank's.
Status segmentExchange(InitArea* ia, int phase, int rank, int nranks, const void* mine, size_t bytes, int timeoutMs,
                       std::vector<uint8_t>* all) {
  std::memcpy(ia->slots[phase][rank], mine, bytes);
  ia->phase[rank].store(static_cast<uint32_t>(phase), std::memory_order_release);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutMs);
  for (int spins = 0;; ++spins) {
    std::string missing;
    for (int s = 0; s < nranks; ++s)
      if (ia->phase[s].load(std::memory_order_acquire) < static_cast<uint32_t>(phase))
        missing += (missing.empty() ? "" : ",") + std::to_string(s);
    if (missing.empty()) break;
    if (std::chrono::steady_clock::now() > deadline)
      return ARFUSE_FAIL(arfusePeerTimeout,
                         "init phase %c: rank(s) %s did not arrive within %d ms (did they fail or die? see their logs)",
                         'A' + phase, missing.c_str(), timeoutMs);
    if (spins > 1000) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  all->resize(static_cast<size_t>(nranks) * bytes);
  for (int s = 0; s < nranks; ++s) std::memcpy(all->data() + s * bytes, ia->slots[phase][s], bytes);
  return Status();
}

}  // namespace mp

namespace {

using namespace mp;  // NOLINT: this file is the protocol's other half

// The plan limits a rank posts in its Wire, and the PlanPolicy member each stands for: one list for
// both directions (connect posts them, agreeOnPolicy reads every rank's back).
struct WireLimit {
  int64_t Wire::*wire;
  long long PlanPolicy::*policy;
};
constexpr WireLimit kWireLimits[] = {
    {&Wire::oneShotMax, &PlanPolicy::oneShotMaxBytes},       {&Wire::hostOneShotMax, &PlanPolicy::hostOneShotMaxBytes},
    {&Wire::hostStagedMax, &PlanPolicy::hostStagedMaxBytes}, {&Wire::lowLatencyMax, &PlanPolicy::lowLatencyMaxBytes},
    {&Wire::ncclAbove, &PlanPolicy::ncclAboveBytes},         {&Wire::llTwoPhaseMax, &PlanPolicy::llTwoPhaseMaxBytes},
};

// Every rank resolved the plan limits itself (its ARFUSE_CALIBRATION_FILE, the GPUs it sees): they
// must be equal on every rank, since each rank plans its calls alone. If any rank differs, every
// rank falls back to the configured limits (config > environment > built-in, already checked equal
// at phase A) and says why; the decision is taken from the same bytes everywhere.
void agreeOnPolicy(const std::vector<Wire>& ws, const PlanPolicy& configured, const LogContext& ctx,
                   PlanPolicy* policy) {
  auto limitsOf = [&](const Wire& w) {
    PlanPolicy p = configured;
    for (const WireLimit& l : kWireLimits) p.*l.policy = w.*l.wire;
    return p;
  };
  const PlanPolicy first = limitsOf(ws[0]);
  for (size_t s = 1; s < ws.size(); ++s) {
    const PlanPolicy other = limitsOf(ws[s]);
    if (sameLimits(first, other)) continue;
    ARFUSE_LOG(kLogWarn, ctx, "",
               "ranks resolved different plan limits (rank 0: %s; rank %zu: %s): every rank uses the configured "
               "ones (%s); give every rank the same ARFUSE_CALIBRATION_FILE and the same visible GPUs",
               limitsText(first).c_str(), s, limitsText(other).c_str(), limitsText(configured).c_str());
    *policy = configured;
    return;
  }
}

// This rank's buffers and their IPC handles (phase B's post); the group area registered with CUDA.
Status localBuffers(Group* g, int rank, int device, ShmSegment* seg, Wire* w) {
  ARFUSE_CHECK(mapSharedGroupArea(g, seg));
  ARFUSE_CHECK(allocateRank(g, rank, device));
  return exportIpcHandles(g->ranks[rank], w);
}

// Multi-process groups: this process holds one rank; its peers' buffers are CUDA IPC views, the
// group area and the host area POSIX shared memory. Every step posts this rank's result into the
// group segment and takes every rank's, so that all ranks decide from the same bytes.
class IpcTransport : public Transport {
 public:
  explicit IpcTransport(IpcWhere w) : w_(std::move(w)), h_(*w_.hellos) {}

  // Phase B's post, part 1; a failure is posted by connect(), not returned, so the others learn it.
  Status allocate(Group* g) override {
    localB_ = localBuffers(g, w_.rank, w_.device, w_.seg, &mine_);
    return Status();
  }

  // Phases B (handles, reach, NCCL id, resolved limits) and C (every peer's buffers mapped).
  Status connect(Group* g) override {
    const int nranks = g->nranks, rank = w_.rank;
    Fabric& f = g->fabric;
    localReach(nranks, rank, w_.device, w_.count, h_, &mine_);
    if (rank == 0 && g->ncclPlanned && localB_.ok()) {
      const ncclResult_t nr = ncclGetUniqueId(&mine_.ncclId);
      if (nr != ncclSuccess) localB_ = ARFUSE_FAIL(arfuseNcclError, "ncclGetUniqueId: %s", ncclGetErrorString(nr));
    }
    for (const WireLimit& l : kWireLimits) mine_.*l.wire = g->policy.*l.policy;
    mine_.status = localB_.code();
    setText(mine_.text, localB_.message());
    std::vector<uint8_t> all;
    ARFUSE_CHECK(segmentExchange(w_.ia, 1, rank, nranks, &mine_, sizeof mine_, w_.timeoutMs, &all));
    ARFUSE_CHECK(postedFailure<Wire>(all, nranks));
    ws_.resize(nranks);
    std::memcpy(ws_.data(), all.data(), all.size());
    agreeOnPolicy(ws_, w_.configured, w_.ctx, &g->policy);
    f.p2p = true;
    for (int s = 0; s < nranks && f.p2p; ++s)
      for (int t = 0; t < nranks; ++t)
        if (!ws_[s].reach[t]) {
          f.p2p = false;
          f.p2pDetail = ws_[s].reachWhy[0] ? ws_[s].reachWhy : strprintf("rank %d cannot reach rank %d", s, t);
          break;
        }
    Report sc{};
    std::string whyC;
    if (f.p2p) {
      const Status mapped = mapPeers(g, rank, h_, ws_);
      sc.status = mapped.code();
      whyC = mapped.message();
    }
    setText(sc.text, whyC);
    ARFUSE_CHECK(segmentExchange(w_.ia, 2, rank, nranks, &sc, sizeof sc, w_.timeoutMs, &all));
    ARFUSE_CHECK(postedFailure<Report>(all, nranks));
    return Status();
  }

  // Phases D, E.
  Status prove(Group* g) override { return proveIpcPeers(g, w_.ia, w_.rank, h_, w_.timeoutMs); }

  // Phase F.
  Status nccl(Group* g) override { return initNccl(g, w_.ia, w_.rank, ws_[0].ncclId, w_.timeoutMs, w_.ctx); }

  // Phase G; then every rank has mapped both segments and rank 0 removes their names.
  Status hostArea(Group* g, bool needed) override {
    Report sh{};
    std::string whyH;
    if (needed) {
      const Status mapped = mapSharedHostArea(g, w_.rank, h_, w_.reservedHost, w_.hostName, w_.timeoutMs);
      sh.status = mapped.code();
      whyH = mapped.message();
    }
    setText(sh.text, whyH);
    std::vector<uint8_t> all;
    ARFUSE_CHECK(segmentExchange(w_.ia, 6, w_.rank, g->nranks, &sh, sizeof sh, w_.timeoutMs, &all));
    ARFUSE_CHECK(postedFailure<Report>(all, g->nranks));
    if (w_.rank == 0) {
      shmUnlink(w_.groupName);
      shmUnlink(w_.hostName);
    }
    return Status();
  }

 private:
  IpcWhere w_;
  const std::vector<Hello>& h_;
  Wire mine_{};
  Status localB_;  // this rank's buffers (allocate), posted with phase B
  std::vector<Wire> ws_;
};

}  // namespace

std::unique_ptr<Transport> makeIpcTransport(const IpcWhere& where) {
  return std::unique_ptr<Transport>(new IpcTransport(where));
}

}  // namespace arfuse
