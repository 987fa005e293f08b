// The parts of `arfuse bench` that run on a GPU and are shared between bench.cc (in process) and
// bench_run_procs.cc (--procs N).
#pragma once

#include <string>
#include <vector>

#include "bench_args.h"
#include "bench_json.h"

namespace arfuse {
namespace cli {

// "# PROXY: ..." for virtual ranks (processes = false) or processes sharing one GPU.
std::string proxyLine(int nranks, bool processes);
// The collective table (rows already carry their ratios); `header` is its first line.
void printCollectiveTable(const std::vector<Row>& rows, bool epilogueColumn, const std::string& header);

// --procs N, the launcher: starts the ranks, merges their results into *rows and says in *env how it
// ran. Returns an exit code (kExitOk also when some rows failed: they say why).
int benchProcs(const BenchArgs& a, std::vector<Row>* rows, BenchEnv* env);
// --procs N --proc-rank R --proc-dir D: one rank.
int benchProcChild(const BenchArgs& a);

}  // namespace cli
}  // namespace arfuse
