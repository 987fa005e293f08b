// The topology model: what a machine's GPUs are and how each ordered pair of them is connected.
//
// It is a plain value on purpose. The probe (NVML loaded at run time, CUDA attributes, measured peer
// loads and stores) fills it in on a real machine; the CPU tests read it from JSON files recorded on,
// or written for, machines we do not have. Everything downstream (islands, the P2P verdict, the
// fabric fingerprint, the plan) is a pure function of this value, so a decision taken on an 8-GPU
// PCIe box can be replayed and tested on a laptop.
//
// Reported facts (what the driver says) and measured facts (what a peer load or store actually did)
// are kept apart: "P2P reported" is not "P2P working", and a measurement that was not taken is
// absent (std::nullopt), never a default that looks like a result.
//
// No CUDA, no NVML, no globals here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace arfuse {
namespace topo {

// The closest PCIe element two GPUs share. The levels mirror NVML's nvmlGpuTopologyLevel_t one to
// one so the probe maps them without judgement; the comment gives the `nvidia-smi topo -m` label.
enum class PcieLink {
  kSameBoard,    // INTERNAL: two GPUs on one board (PIX)
  kSameSwitch,   // SINGLE: below one PCIe switch (PIX)
  kMultiSwitch,  // MULTIPLE: several switches, no host bridge crossed (PXB)
  kHostBridge,   // HOSTBRIDGE: through one CPU host bridge (PHB)
  kSameSocket,   // NODE: between host bridges of one NUMA node / socket (NODE)
  kCrossSocket,  // SYSTEM: over the inter-socket link (SYS)
  kUnknown,      // not reported (NVML absent) or not recognised
};

// P2P capability as NVML reports it (nvmlGpuP2PStatus_t). Advisory: CUDA's canAccessPeer is what
// decides whether peer mappings are attempted, and only a measured load/store proves they work.
enum class P2pStatus {
  kOk,
  kChipsetNotSupported,
  kGpuNotSupported,
  kTopologyNotSupported,
  kDisabledByRegkey,
  kNotSupported,
  kUnknown,
};

// What a probe measured between one GPU and pinned host memory: the costs of the host-staged path,
// which exchanges through host memory mapped into every GPU. Every field optional.
struct HostMeasured {
  std::optional<double> readGBps;         // a kernel reading pinned host memory, GB/s (1e9 B/s)
  std::optional<double> writeGBps;        // a kernel writing pinned host memory, GB/s
  std::optional<double> flagRoundTripUs;  // ping-pong between two blocks through a flag pair in pinned host memory, us

  bool any() const { return readGBps || writeGBps || flagRoundTripUs; }
};

struct Gpu {
  int index = 0;         // CUDA device ordinal in the recording process; equals the position in gpus
  std::string name;      // "NVIDIA H200"
  std::string uuid;      // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
  std::string pciBusId;  // "00000000:18:00.0"
  int ccMajor = 0;       // compute capability, e.g. 9.0 or 12.0
  int ccMinor = 0;
  int smCount = 0;
  std::optional<int> numaNode;  // absent when the platform does not say
  int64_t memoryBytes = 0;      // total device memory as CUDA reports it
  // The PCIe link the GPU can train to (NVML's max generation and width for the device in this
  // slot); absent without NVML. Used only to judge what a measured peer bandwidth should reach.
  std::optional<int> pcieGen;
  std::optional<int> pcieWidth;
  HostMeasured host;
};

// What a probe measured for one ordered pair (from -> to). Every field is optional: a probe that
// could not run a step leaves it absent.
struct Measured {
  std::optional<bool> peerLoad;         // device `from` loaded from `to`'s memory and got the right bytes
  std::optional<bool> peerStore;        // device `from` stored into `to`'s memory and `to` saw them
  std::optional<double> readGBps;       // `from` pulling from `to`, GB/s (1e9 B/s), all pairs active at once
  std::optional<double> writeGBps;      // `from` pushing into `to`, GB/s, all pairs active at once
  std::optional<double> flagLatencyUs;  // one-way flag latency `from` -> `to` (half a ping-pong round trip), us
  std::optional<double> soloReadGBps;   // `from` pulling from `to` with no other transfer running, GB/s

  bool any() const { return peerLoad || peerStore || readGBps || writeGBps || flagLatencyUs || soloReadGBps; }
};

// One ordered pair. Links may be asymmetric (a switch can behave differently in each direction, and
// canAccessPeer is queried per direction), so (i, j) and (j, i) are both stored.
struct Link {
  int from = 0;
  int to = 0;
  bool canAccessPeer = false;  // cudaDeviceCanAccessPeer(from, to)
  P2pStatus p2pRead = P2pStatus::kUnknown;
  P2pStatus p2pWrite = P2pStatus::kUnknown;
  P2pStatus p2pAtomics = P2pStatus::kUnknown;
  std::optional<int> nvlinks;  // active NVLinks between the two; absent when NVML was not available
  PcieLink pcie = PcieLink::kUnknown;
  Measured measured;
};

struct Topology {
  std::string source;  // "probe", "recorded", "handwritten"
  std::optional<std::string> hostname;
  std::optional<std::string> driverVersion;       // "570.124.06"
  std::optional<std::string> cudaRuntimeVersion;  // "12.8"
  std::optional<std::string> ncclVersion;         // "2.26.2"; absent when NCCL was not loaded
  std::optional<std::string> nvmlVersion;         // "12.575.57.08"; absent when NVML was not loaded
  std::vector<std::string> notes;
  std::vector<Gpu> gpus;
  // Every ordered pair (i, j), i != j, exactly once, sorted by (from, to); see validate().
  std::vector<Link> links;

  int size() const { return static_cast<int>(gpus.size()); }
  // The link from -> to; from != to, both in range (checked by validate(), asserted here).
  const Link& link(int from, int to) const;
  Link& link(int from, int to);
};

bool operator==(const HostMeasured& a, const HostMeasured& b);
bool operator==(const Gpu& a, const Gpu& b);
bool operator==(const Measured& a, const Measured& b);
bool operator==(const Link& a, const Link& b);
bool operator==(const Topology& a, const Topology& b);
inline bool operator!=(const Topology& a, const Topology& b) { return !(a == b); }

// Names used in JSON ("same_switch", "disabled_by_regkey").
const char* pcieLinkName(PcieLink v);
const char* p2pStatusName(P2pStatus v);
std::optional<PcieLink> parsePcieLink(std::string_view s);
std::optional<P2pStatus> parseP2pStatus(std::string_view s);
// The `nvidia-smi topo -m` label of a pair: "NV18" when NVLinks exist, else PIX/PXB/PHB/NODE/SYS, "?".
std::string linkLabel(const Link& link);

// Builds an n-GPU topology with every ordered pair present and default (unknown, no P2P) links, so
// a caller (the probe, a test) only fills in what it knows.
Topology makeTopology(int n);

// Structural check: GPU indices are 0..n-1 in order, UUIDs are unique and non-empty, links hold
// every ordered pair exactly once in (from, to) order, counts and measurements are in range.
// Returns "" when valid, otherwise one sentence naming the first problem.
std::string validate(const Topology& t);

// ---- JSON ("schema": "arfuse-topology/1"; docs/topology.md lists every field) ----------------

// Deterministic: the same value always gives the same bytes (fixed key order, shortest round-trip
// number form, "\n" line ends), so recorded files diff cleanly and fingerprints of files are stable.
std::string toJson(const Topology& t);
// Strict: unknown keys, missing required fields, wrong types, duplicate keys, a wrong schema string
// and anything after the closing brace are errors: arfuseInvalidArgument with one line naming the
// field path and the line:column ("gpus[2].sm_count at 14:35: expected an integer").
Status fromJson(std::string_view text, Topology* out);
// Reads a file (json::readFile's errors as they are); fromJson's errors are prefixed with the path.
Status readJsonFile(const std::string& path, Topology* out);

// ---- derived facts (pure) --------------------------------------------------------------------

struct IslandOptions {
  // A pair whose better measured direction is below this is treated as not peer-capable: a PCIe
  // P2P link that the platform silently routes through system memory lands far below any real
  // link (Gen4 x16 peer traffic reaches ~20 GB/s, NVLink hundreds), so this is a wrong-path
  // detector, not a speed preference.
  double minUsableGBps = 5.0;
  // A pair whose peer read, measured alone, reaches less than this fraction of what its link allows
  // (linkNominalGBps) is treated as routed through system memory: an order of magnitude below the
  // link is not a slow link, it is the wrong path.
  double minFractionOfLink = 0.1;
};

// What the link from -> to should carry one way, in GB/s, as a lower bound for judging measurements
// (never for choosing paths): NVLink counts 20 GB/s per link (the slowest generation), PCIe the
// per-lane rate of the lower generation of the two GPUs times the narrower width. Absent when the
// link is not known well enough (no NVLink count, no PCIe generation / width).
std::optional<double> linkNominalGBps(const Topology& t, int from, int to);

// Why a pair cannot be used for direct peer access, or "" when it can (as far as we know): needs
// canAccessPeer both ways and no failed measurement / collapsed bandwidth in either direction.
std::string pairProblem(const Topology& t, int a, int b, const IslandOptions& opt = {});

// Islands: groups of GPUs whose links among themselves are faster than the links between groups.
// Pairs are ranked by link class (NVLink < PCIe switch < host bridge / same socket < cross socket <
// unknown); among the usable pairs, the worst class present separates the islands and the better
// ones join them; a group with a pair that cannot do P2P is split further. Examples: NVSwitch -> one
// island; two PCIe switches or two sockets -> 4 + 4; no P2P -> singletons. Each island is sorted,
// islands are ordered by their first GPU.
std::vector<std::vector<int>> islands(const Topology& t, const IslandOptions& opt = {});
// The same, restricted to `devices` (GPU indices; duplicates ignored, out-of-range ones dropped).
std::vector<std::vector<int>> islands(const Topology& t, const std::vector<int>& devices,
                                      const IslandOptions& opt = {});

// A fact about the machine, not an error channel: "no peer access" is a valid answer that the plan
// reads (Fabric::p2p, p2pDetail: a path declined, host staging chosen) and doctor prints, with its
// reason either way; nothing fails because of it, so it stays a record rather than a Status.
struct P2pVerdict {
  bool ok = false;      // every pair can do direct peer access, as far as we know
  bool proven = false;  // ...and every ordered pair had a successful measured peer load and store
  std::string reason;   // one line; on failure names the first failing pair
};
// Whether every pair of `devices` (CUDA ordinals; the same ordinal twice means virtual ranks on one
// GPU, which is trivially fine) can use direct peer access.
P2pVerdict p2pAll(const Topology& t, const std::vector<int>& devices, const IslandOptions& opt = {});

// Stable identity of the fabric, for keying calibration files: FNV-1a 64 over the GPU UUIDs in
// index order and each link's reported facts plus its measured load/store verdicts. Bandwidth and
// latency numbers are left out because they vary between runs of the same machine.
std::string fabricFingerprint(const Topology& t);  // "fab1-0123456789abcdef"
// The text that is hashed, for explaining why two fingerprints differ.
std::string fabricFingerprintInput(const Topology& t);

// The GPUs `devices` (CUDA ordinals of t; duplicates ignored) as a topology of their own, in the given
// order, renumbered 0..k-1, links carried over. Machine-level facts are kept.
Topology subTopology(const Topology& t, const std::vector<int>& devices);
// The key a calibration file is matched on: the fabric fingerprint of the group's distinct GPUs,
// ordered by UUID (so renumbering by CUDA_VISIBLE_DEVICES or a different rank order does not change
// it), with measured facts left out, so that a process which only reads the reported facts (NVML,
// CUDA; no kernels) computes the same key as the `arfuse doctor --calibrate` run that wrote the file.
std::string calibrationFingerprint(const Topology& t, const std::vector<int>& devices);

// Pull (peer loads) or push (peer stores): a measured property of the fabric. Some PCIe switches
// collapse under concurrent peer writes (2.6 GB/s) while reads stay near 52 GB/s; others favour writes.
enum class Access { kUnknown, kPull, kPush, kEither };
const char* accessName(Access a);
struct AccessHint {
  Access access = Access::kUnknown;
  std::string reason;
};
// Per ordered pair, from its measured read and write bandwidth. Within `margin` (ratio) of each
// other the choice does not matter (kEither); unknown when either number is absent.
AccessHint accessHint(const Link& link, double margin = 1.25);
// For a group: the direction whose slowest pair is fastest (a collective is as slow as its slowest
// link). Unknown unless every ordered pair among `devices` has both numbers.
AccessHint groupAccessHint(const Topology& t, const std::vector<int>& devices, double margin = 1.25);

// Human-readable summary: machine facts, one line per GPU, the link matrix in `nvidia-smi topo -m`
// labels, the P2P matrix (ok / no / FAIL = advertised but a measured load or store failed), the
// measured bandwidth matrices when present, the islands and a legend.
std::string describe(const Topology& t);

}  // namespace topo
}  // namespace arfuse
