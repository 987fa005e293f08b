// The bridge from a machine description (src/topo: probed or recorded) to what the plan needs.
// Pure: `arfuse plan --topology FILE` and the CPU tests explain decisions on machines we do not
// have (8 x H200 NVSwitch, RTX PRO 6000 behind PCIe switches, consumer cards without P2P, ...).
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "plan/plan.h"
#include "topo/topology.h"

namespace arfuse {

// Fabric for ranks placed on `devices` (CUDA ordinals of `t`; a repeated ordinal is a virtual rank).
// `ncclAvailable`: whether an NCCL communicator could exist (false for virtual ranks regardless).
// Fails (arfuseInvalidArgument) when a device is not in the topology.
Status fabricFromTopology(const topo::Topology& t, const std::vector<int>& devices, bool ncclAvailable, Fabric* out);

// One-shot's built-in limit (peer bytes, message x (n - 1)) when every pair of the group's distinct
// GPUs is joined by NVLink. Two-shot pays a second barrier (~3.2 µs more than one-shot at one token
// on 4 x H200) to read 2(n-1)/n instead of n-1 messages, so one-shot wins until its extra reads cost
// that barrier: at ~320 GB/s of peer reads per GPU, ~2 MB of peer bytes at n = 4 (measured: one-shot
// faster at 0.7 and 1.4 MB, two-shot at 2.8 MB; docs/perf.md "4 x H200") and about the same at n = 8.
// Over PCIe the barrier is slower and reads are ~7x slower, so the general default (512 KiB) stays.
constexpr long long kOneShotMaxBytesNvlink = 2ll << 20;
// All ranks on one GPU (virtual ranks): one-shot while its peer reads stay under this.
constexpr long long kOneShotMaxBytesOneGpu = 4ll << 20;

// True when the group has at least two distinct GPUs and every ordered pair of them has a known,
// non-zero NVLink count in `t`.
bool allPairsNvlink(const topo::Topology& t, const std::vector<int>& devices);

// The built-in limits that depend on the fabric, applied to a policy that holds built-in defaults
// (the caller skips this under a calibration or an explicit ARFUSE_ONESHOT_MAX_BYTES). Returns
// whether it changed anything.
bool applyFabricDefaults(const topo::Topology& t, const std::vector<int>& devices, PlanPolicy* policy);

}  // namespace arfuse
