// `arfuse bench --procs N`: one process per rank, the way serving engines run. The launcher starts
// N copies of itself (`arfuse bench <the same arguments> --proc-rank R --proc-dir D`); each takes
// one rank through every job in the same order: a job is one path (auto, lowlatency, ...) or
// baseline (nccl: arfuse's NCCL path; nccl-symm: NCCL on a registered symmetric window), with a
// fresh communicator from a unique id rank 0 publishes in D. Per job and token count each rank checks
// its outputs against fp64 (it regenerates every rank's inputs), hashes them, times its CUDA graph
// and appends one JSON line to D/rank<R>.jsonl. The launcher merges the lines: the per-replay
// maximum over ranks, then the median (the slowest rank decides the step), as in process.
//
// Everything here is pure and CPU-tested; the processes themselves are in bench_run_procs.cc.
#pragma once

#include <string>
#include <vector>

#include "bench_args.h"
#include "bench_json.h"

namespace arfuse {
namespace cli {

// The jobs of a run, in the order every rank takes them: arfuse's paths first, the NCCL baselines
// last (an NCCL init that hangs costs only the rows after it).
std::vector<int> procsJobs(const BenchArgs& a);

// What rank R is started with: the launcher's own arguments plus the internal flags.
std::vector<std::string> procsChildArgs(const BenchArgs& a, int rank, const std::string& dir);

// One rank's result for one (job, token count).
struct RankRow {
  int job = 0;
  int tokens = 0;
  long long bytes = 0;
  std::string algo;   // e.g. "auto:oneshot", "nccl-symm"
  std::string role;   // "arfuse" or "baseline"
  std::string error;  // "n/a: ..." for a forced path that does not carry the size
  int wrong = 0;
  std::string hash;        // of this rank's outputs, hex
  std::vector<double> ms;  // per timed replay, calls 2..N of the graph
  std::vector<std::string> kernels;
  int sets = 0;
  long long footprintBytes = 0;
};

std::string rankRowJson(const RankRow& r);  // one line, no newline
// Parses a rank's JSON lines; a line cut short by a killed process ends the list (no error).
bool parseRankRows(const std::string& text, std::vector<RankRow>* rows, std::string* error);

// The merged rows, one per (job, token count) in job order: an error names the rank that reported
// it (or that left no line: `rankExit[r]` says how it ended); outputs that differ between ranks are
// wrong; the timing is the per-replay maximum over ranks, per call (calls - 1 timed per replay).
std::vector<Row> mergeRankRows(const std::vector<std::vector<RankRow>>& perRank,
                               const std::vector<std::string>& rankExit, const std::vector<int>& jobs,
                               const std::vector<int>& tokens, long long bytesPerToken, int callsPerGraph);

std::string hexEncode(const std::string& bytes);
bool hexDecode(const std::string& hex, std::string* bytes);

}  // namespace cli
}  // namespace arfuse
