#include "diag/records.h"

#include <atomic>
#include <cstddef>
#include <mutex>
#include <set>
#include <tuple>

#include "arfuse/arfuse.h"
#include "common/log.h"

namespace arfuse {

namespace {

// The names of the ops and of the error records' codes (and the result each code reports), one
// entry per known value, found by findEntry; a value not in its table is named "unknown".
struct OpEntry {
  int value;  // arfuseOp_t
  const char* name;
};
constexpr OpEntry kOps[] = {
    {arfuseOpAllReduce, "AllReduce"},
    {arfuseOpAllReduceAddRmsNorm, "AllReduceAddRmsNorm"},
};

struct RecordCodeEntry {
  int value;         // ErrorRecord::code, kErr*
  const char* name;  // the dump's code= word
  int result;        // the arfuseResult_t a call reports
};
constexpr RecordCodeEntry kRecordCodes[] = {
    {kErrPeerTimeout, "peer_timeout", arfusePeerTimeout},      {kErrMismatch, "mismatch", arfuseMismatch},
    {kErrConcurrent, "concurrent", arfuseInvalidUsage},        {kErrNcclTimeout, "nccl_timeout", arfusePeerTimeout},
    {kErrReplicaMismatch, "replica_mismatch", arfuseMismatch},
};

template <class E, size_t N>
const E* findEntry(const E (&table)[N], int value) {
  for (const E& e : table)
    if (e.value == value) return &e;
  return nullptr;
}

}  // namespace

const char* callOpName(int op) {
  const OpEntry* e = findEntry(kOps, op);
  return e ? e->name : "unknown";
}

long long callDescBytes(CallDesc d) {
  const int dt = descDtype(d);
  const long long size = dt == arfuseFloat32 ? 4 : (dt == arfuseBfloat16 || dt == arfuseFloat16) ? 2 : 0;
  return static_cast<long long>(descTokens(d)) * descHidden(d) * size;
}

const char* callDescPath(CallDesc d) { return arfuseAlgoName(static_cast<arfuseAlgo_t>(descAlgo(d))); }

const char* callDescVariant(CallDesc d) {
  if (descAlgo(d) == arfuseAlgoHierarchical)  // its two kernels (algos/hierarchical/kernel.cuh)
    return descVariant(d) == 0 ? "scatter" : descVariant(d) == 1 ? "gather" : "unknown";
  if (descAlgo(d) != arfuseAlgoHostStaged) return "";
  return descVariant(d) == 0 ? "oneshot" : descVariant(d) == 1 ? "twoshot" : "unknown";
}

std::string describeCallDesc(CallDesc d, bool withPath) {
  std::string s = strprintf("%s %s tokens=%d hidden=%d (%lld B", callOpName(descOp(d)),
                            arfuseDataTypeName(static_cast<arfuseDataType_t>(descDtype(d))), descTokens(d),
                            descHidden(d), callDescBytes(d));
  if (withPath) {
    s += ", path ";
    s += callDescPath(d);
    const std::string v = callDescVariant(d);
    if (!v.empty())
      s += v == "oneshot"   ? " one-shot"
           : v == "twoshot" ? " two-shot"
           : v == "scatter" ? " phase 1 (intra-host reduce-scatter)"
           : v == "gather"  ? " phase 2 (intra-host gather + epilogue)"
                            : " variant unknown";
  }
  return s + ")";
}

const char* recordCodeName(int code) {
  const RecordCodeEntry* e = findEntry(kRecordCodes, code);
  return e ? e->name : "unknown";
}

int resultForRecordCode(int code) {
  const RecordCodeEntry* e = findEntry(kRecordCodes, code);
  return e ? e->result : arfuseInternalError;
}

std::string describeErrorRecord(const ErrorRecord& e, int who, uint64_t timeoutNs,
                                const std::function<std::string(int)>& rankName) {
  const unsigned long long call = e.call;
  auto name = [&](int r) { return rankName ? rankName(r) : strprintf("rank %d", r); };
  switch (e.code) {
    case kErrPeerTimeout: {
      std::string s = strprintf("%s waited %.3f s for %s at call %llu (block %d, phase %d)", name(who).c_str(),
                                static_cast<double>(timeoutNs) / 1e9, name(e.peer).c_str(), call, e.block, e.phase);
      if (!callDescEmpty(e.mine)) s += " in " + describeCallDesc(e.mine, true);
      return s + "; the group is aborted";
    }
    case kErrMismatch: {
      // The path is named only when it is what differs: the shapes are what users get wrong.
      const bool pathDiffers = descAlgo(e.mine) != descAlgo(e.theirs) || descVariant(e.mine) != descVariant(e.theirs);
      return strprintf("divergent call at call %llu: %s made %s, %s made %s", call, name(who).c_str(),
                       describeCallDesc(e.mine, pathDiffers).c_str(), name(e.peer).c_str(),
                       describeCallDesc(e.theirs, pathDiffers).c_str());
    }
    case kErrConcurrent:
      return strprintf(
          "two calls of rank %d ran at the same time (call %llu): a communicator must be used from one "
          "stream at a time",
          who, call);
    case kErrNcclTimeout: {
      std::string s = strprintf(
          "%s waited %.3f s in its NCCL operation %llu across hosts (communicator %s, timeout %.3f s)",
          name(who).c_str(), e.waitedMs / 1e3, call,
          e.block < 0 ? "world" : strprintf("local index %d", e.block).c_str(), static_cast<double>(timeoutNs) / 1e9);
      if (!callDescEmpty(e.mine)) s += " in " + describeCallDesc(e.mine, false) + " on path " + callDescPath(e.mine);
      return s + "; its NCCL communicators and the group are aborted";
    }
    case kErrReplicaMismatch:
      return strprintf(
          "ARFUSE_CHECK_REPLICAS: %s's residual_in or weight differs from rank 0's at checked call %llu (%s's ERROR "
          "line names the tensor and the element); the group is aborted",
          name(e.peer).c_str(), call, name(who).c_str());
    default:
      return strprintf("rank %d recorded error code %d at call %llu (peer %d, block %d, phase %d)", who, e.code, call,
                       e.peer, e.block, e.phase);
  }
}

std::string nextStepFor(int code) {
  switch (code) {
    case kErrPeerTimeout:
      return "the rank waited for is behind or skipped a call: check that every rank makes the same calls in the "
             "same order, and run `arfuse triage` on every rank's log and flight-recorder dump; destroy and recreate "
             "the communicators";
    case kErrMismatch:
      return "make every rank issue the same calls with the same shapes in the same order (a rank-local batch size "
             "or a data-dependent branch is typical); destroy and recreate the communicators";
    case kErrConcurrent:
      return "issue every call of a communicator on one stream, or order the streams with events; destroy and "
             "recreate the communicators";
    case kErrReplicaMismatch:
      return "give every rank the same residual stream and weights (arfuse.h requires them bitwise equal): a rank "
             "that loaded other weights or skipped an update is typical; destroy and recreate the communicators";
    case kErrNcclTimeout:
      return "a rank on another host that shares the communicator died, hung or skipped a call: read the logs of "
             "the ranks that did not report this timeout, check the network between the hosts (NCCL_DEBUG=WARN); "
             "destroy and recreate the communicators on every rank";
    default:
      return "report it with this line and `arfuse doctor` output";
  }
}

std::string errorRecordFields(const ErrorRecord& e) {
  std::string s =
      strprintf("code=%s call=%llu", arfuseGetErrorName(static_cast<arfuseResult_t>(resultForRecordCode(e.code))),
                static_cast<unsigned long long>(e.call));
  if (!callDescEmpty(e.mine))
    s += strprintf(" op=%s bytes=%lld dtype=%s path=%s", callOpName(descOp(e.mine)), callDescBytes(e.mine),
                   arfuseDataTypeName(static_cast<arfuseDataType_t>(descDtype(e.mine))), callDescPath(e.mine));
  if (e.peer >= 0) s += strprintf(" peer=%d", e.peer);
  if (e.code == kErrPeerTimeout) s += strprintf(" block=%d phase=%d", e.block, e.phase);
  if (e.code == kErrNcclTimeout) s += strprintf(" nccl_comm=%d waited_ms=%d", e.block, e.waitedMs);
  return s;
}

namespace {
std::mutex gClaimsMu;
std::set<std::tuple<const GroupShared*, int, uint64_t, int>> gClaims;
}  // namespace

bool claimErrorReport(const GroupShared* s, int rank, const ErrorRecord& e) {
  std::lock_guard<std::mutex> lock(gClaimsMu);
  return gClaims.emplace(s, rank, e.call, e.code).second;
}

void forgetErrorReports(const GroupShared* s) {
  std::lock_guard<std::mutex> lock(gClaimsMu);
  for (auto it = gClaims.begin(); it != gClaims.end();) it = std::get<0>(*it) == s ? gClaims.erase(it) : std::next(it);
}

namespace {
// Every field but `valid`, between the volatile record in host-mapped memory and a plain copy.
template <typename To, typename From>
void copyRecordFields(To& to, const From& from) {
  to.code = from.code;
  to.peer = from.peer;
  to.block = from.block;
  to.phase = from.phase;
  to.waitedMs = from.waitedMs;
  to.call = from.call;
  to.mine.w0 = from.mine.w0;
  to.mine.w1 = from.mine.w1;
  to.theirs.w0 = from.theirs.w0;
  to.theirs.w1 = from.theirs.w1;
}
}  // namespace

bool readErrorRecord(const GroupShared& s, int rank, ErrorRecord* out) {
  if (rank < 0 || rank >= kMaxRanks) return false;
  const volatile ErrorRecord& v = s.records[rank];
  if (!v.valid) return false;
  // The kernel fills the record before it sets `valid`.
  std::atomic_thread_fence(std::memory_order_acquire);
  ErrorRecord e;
  e.valid = v.valid;
  copyRecordFields(e, v);
  *out = e;
  return true;
}

void readFlightRing(const GroupShared& s, int rank, FlightRing* out) {
  if (rank < 0 || rank >= kMaxRanks) {
    *out = FlightRing{};
    return;
  }
  const volatile FlightRing& ring = s.flight[rank];
  for (int i = 0; i < kFlightEntries; ++i) {
    const volatile FlightEntry& v = ring.entries[i];
    FlightEntry& f = out->entries[i];
    // `call` is written last at entry: read it before and after the fields; an entry whose call
    // changed meanwhile is being rewritten and is left out (call 0).
    const uint64_t before = v.call;
    std::atomic_thread_fence(std::memory_order_acquire);
    f.desc.w0 = v.desc.w0;
    f.desc.w1 = v.desc.w1;
    f.startNs = v.startNs;
    f.endNs = v.endNs;
    f.status = v.status;
    std::atomic_thread_fence(std::memory_order_acquire);
    f.call = v.call == before ? before : 0;
  }
}

void writeHostErrorRecord(GroupShared* s, int rank, const ErrorRecord& rec) {
  if (!s || rank < 0 || rank >= kMaxRanks) return;
  volatile ErrorRecord& r = s->records[rank];
  ErrorRecord fields = rec;
  fields.theirs = CallDesc{0, 0};  // the host records no peer descriptor
  copyRecordFields(r, fields);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  r.valid = 1;
  ErrorRecord mine = rec;
  mine.valid = 1;
  claimErrorReport(s, rank, mine);
}

bool readAbort(const GroupShared& s) { return static_cast<const volatile int&>(s.abort) != 0; }

}  // namespace arfuse
