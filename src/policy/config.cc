#include "policy/config.h"

#include <algorithm>
#include <atomic>
#include <cstddef>

#include "algos/registry.h"
#include "common/log.h"
#include "common/params.h"

namespace arfuse {

namespace {

// ARFUSE_ALGO as an arfuseAlgo_t ("auto" counts as set: 0); -1 when unset or no path's name, which
// is reported once per process and ignored, as the parameter registry does with any invalid value.
int envAlgo() {
  const std::string name = paramAlgoName();
  if (name.empty()) return -1;
  const int a = parseAlgoName(name);
  static std::atomic<bool> warned{false};
  if (a < 0 && !warned.exchange(true))
    ARFUSE_LOG(kLogWarn, LogContext{}, "", "ARFUSE_ALGO=%s: expected %s; ignored", name.c_str(),
               algoNamesText().c_str());
  return a;
}

}  // namespace

size_t workspaceMessageBytes(const Limits& limits) {
  size_t largest = 0;
  for (int d = 0; d < arfuseNumDataTypes; ++d) {
    if (!(limits.dtypeMask & ARFUSE_DTYPE_BIT(d))) continue;
    const arfuseDataType_t dt = arfuseDataType_t(d);
    const size_t hidden = static_cast<size_t>(std::min(limits.maxHidden, maxSupportedHidden(dt)));
    largest = std::max(largest, static_cast<size_t>(limits.maxTokens) * hidden * dtypeSize(dt));
  }
  return largest;
}

Status resolveConfig(const arfuseConfig_t* config, int nranks, ResolvedConfig* out) {
  arfuseConfig_t defaults = ARFUSE_CONFIG_INITIALIZER;
  const arfuseConfig_t& c = config ? *config : defaults;
  auto bad = [](const std::string& m) { return ARFUSE_FAIL(arfuseInvalidArgument, "config: %s", m.c_str()); };
  if (c.magic != ARFUSE_CONFIG_MAGIC)
    return bad("magic is wrong (uninitialised struct?): start from ARFUSE_CONFIG_INITIALIZER or arfuseConfigInit");
  if (c.size < offsetof(arfuseConfig_t, maxBlocks) + sizeof(int) || c.size > sizeof(arfuseConfig_t))
    return bad(strprintf("size=%zu is not a known arfuseConfig_t size (%zu): start from ARFUSE_CONFIG_INITIALIZER",
                         c.size, sizeof(arfuseConfig_t)));
  if (c.version / 100 != ARFUSE_VERSION_CODE / 100)
    return bad(strprintf("version=%u was compiled against an incompatible arfuse (library %d)", c.version,
                         ARFUSE_VERSION_CODE));

  ResolvedConfig r;
  if (c.maxTokens != -1 && c.maxTokens < 1) return bad(strprintf("maxTokens=%d: must be >= 1 or -1", c.maxTokens));
  r.limits.maxTokens = c.maxTokens == -1 ? 2048 : c.maxTokens;
  if (c.maxHidden != -1 && (c.maxHidden < 8 || c.maxHidden % 8))
    return bad(strprintf("maxHidden=%d: must be a positive multiple of 8, or -1", c.maxHidden));
  r.limits.maxHidden = c.maxHidden == -1 ? 16384 : c.maxHidden;
  if (c.dtypeMask == 0 || (c.dtypeMask & ~ARFUSE_DTYPE_ALL))
    return bad(
        strprintf("dtypeMask=0x%x: must be a non-empty combination of ARFUSE_DTYPE_BIT(arfuseBfloat16 / "
                  "arfuseFloat16 / arfuseFloat32)",
                  c.dtypeMask));
  r.limits.dtypeMask = c.dtypeMask;
  int largest = 0;
  for (int d = 0; d < arfuseNumDataTypes; ++d)
    if (c.dtypeMask & ARFUSE_DTYPE_BIT(d)) {
      const int m = maxSupportedHidden(arfuseDataType_t(d));
      if (largest == 0 || m < largest) largest = m;
    }
  if (r.limits.maxHidden > largest)
    return bad(strprintf("maxHidden=%d: the largest hidden size supported for the enabled dtypes is %d",
                         r.limits.maxHidden, largest));

  if (c.algo != -1) {
    if (c.algo != arfuseAlgoAuto && (c.algo < 0 || c.algo >= kAlgoIds || !findAlgo(arfuseAlgo_t(c.algo))))
      return bad(strprintf("algo=%d: use -1 or an arfuseAlgo_t", c.algo));
    r.policy.forcedAlgo = c.algo;
    r.policy.forcedBy = "config";
  } else if (const int a = envAlgo(); a >= 0) {
    r.policy.forcedAlgo = a;
    r.policy.forcedBy = "ARFUSE_ALGO";
  }
  if (r.policy.forcedAlgo == arfuseAlgoLocal && nranks > 1)
    return bad(strprintf("algo=local is only valid for 1 rank (this group has %d)", nranks));
  r.policy.oneShotMaxBytes = paramOneShotMaxBytes();
  r.policy.hostOneShotMaxBytes = paramHostOneShotMaxBytes();
  r.policy.hostStagedMaxBytes = paramHostStagedMaxBytes();

  if (c.timeoutMs != -1 && c.timeoutMs < 1) return bad(strprintf("timeoutMs=%d: must be >= 1 or -1", c.timeoutMs));
  r.timeoutMs = c.timeoutMs == -1 ? paramTimeoutMs() : c.timeoutMs;
  if (c.maxBlocks != -1 && (c.maxBlocks < 1 || c.maxBlocks > 128))
    return bad(strprintf("maxBlocks=%d: must be 1..128 or -1", c.maxBlocks));
  r.maxBlocks = c.maxBlocks != -1 ? c.maxBlocks : paramMaxBlocks();
  // Fields added later are read only when the caller's struct has them.
  const int det = c.size >= offsetof(arfuseConfig_t, deterministic) + sizeof(int) ? c.deterministic : -1;
  if (det < -1 || det > 1) return bad(strprintf("deterministic=%d: must be 0, 1 or -1", det));
  if (c.size >= offsetof(arfuseConfig_t, reserved) + sizeof(int) && c.reserved != 0)
    return bad(strprintf("reserved=%d: must be 0 (start from ARFUSE_CONFIG_INITIALIZER)", c.reserved));
  r.policy.deterministic = det == -1 ? paramDeterministic() : det == 1;
  r.policy.maxChunks = paramMaxChunks();
  r.policy.splitVecs = paramExpSplitVecs();
  r.policy.splitShared = paramExpSplitShared();
  r.policy.rowPush = paramRowPush();
  r.policy.wideTwo = paramWideTwo();
  r.policy.llTwoPhase = paramLlTwoPhase();
  r.policy.llTwoPhaseMaxBytes = paramLlTwoPhaseMaxBytes();
  r.messageBytes = workspaceMessageBytes(r.limits);
  *out = r;
  return Status();
}

Status checkRankArgs(int nranks, int rank) {
  if (nranks < 1 || nranks > ARFUSE_MAX_RANKS)
    return ARFUSE_FAIL(arfuseInvalidArgument,
                       "nranks=%d: must be 1..%d (ARFUSE_MAX_RANKS); larger tensor-parallel groups are not supported",
                       nranks, ARFUSE_MAX_RANKS);
  if (rank < 0 || rank >= nranks)
    return ARFUSE_FAIL(arfuseInvalidArgument,
                       "rank=%d: must be 0..%d for nranks=%d (each process passes its own, distinct rank)", rank,
                       nranks - 1, nranks);
  return Status();
}

}  // namespace arfuse
