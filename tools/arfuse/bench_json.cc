#include "bench_json.h"

#include <sstream>

#include "arfuse/arfuse.h"
#include "harness/rotation.h"
#include "nccl_sweep.h"
#include "topo/json.h"

namespace arfuse {
namespace cli {

// The body of a JSON string literal (without its quotes), escaped by the project's one JSON writer.
std::string jsonEscape(const std::string& s) {
  std::string o;
  topo::json::appendString(&o, s);
  return o.substr(1, o.size() - 2);
}

bool isProxy(const BenchEnv& env) { return env.virtualRanks || env.sharedGpu; }

std::string proxyReason(const BenchEnv& env) {
  if (env.sharedGpu)
    return std::to_string(env.procs) +
           " processes share one GPU (time-sliced): a proxy for correctness and the "
           "kernels' own cost, not a performance figure";
  if (env.virtualRanks)
    return std::to_string(env.nranks) +
           " virtual ranks on one GPU: a proxy for the kernels' own cost (no fabric "
           "between them), not a performance figure";
  return "";
}

void ratiosToBestBaseline(std::vector<Row>* rows) {
  for (Row& r : *rows) {
    r.ratio = 0;
    r.ratioTo.clear();
    if (!r.t.ok) continue;
    const Row* best = nullptr;
    for (const Row& b : *rows) {
      if (b.role != "baseline" || b.tokens != r.tokens || !b.t.ok || b.wrong || !b.error.empty()) continue;
      if (b.epilogue != "none" && b.epilogue != r.epilogue) continue;
      if (!best || b.t.medianUs < best->t.medianUs) best = &b;
    }
    if (best && best->t.medianUs > 0) {
      r.ratio = r.t.medianUs / best->t.medianUs;
      r.ratioTo = best->algo;
    }
  }
}

void classifyNcclKernels(Row* row) {
  row->symmetric = -1;
  std::string nccl;
  bool sym = false, any = false;
  for (const std::string& k : row->kernels) {  // demangled, or mangled (_Z..nccl...) where demangling failed
    if (k.find("nccl") == std::string::npos) continue;
    any = true;
    if (k.find("ncclSym") != std::string::npos) sym = true;
    if (nccl.empty()) nccl = k;
  }
  if (!any) {
    if (!row->kernels.empty()) row->note = "no NCCL kernel found in the captured graph (" + row->kernels[0] + ")";
    return;
  }
  row->symmetric = sym ? 1 : 0;
  if (!sym)
    row->note = "NCCL did not run its symmetric kernels on the registered window: the graph ran " + nccl +
                " (NCCL_DEBUG=INFO says why; they need NCCL 2.27+, one NVLink domain and cuMem)";
}

std::string benchJson(const BenchArgs& a, const BenchEnv& env, const std::vector<Row>& rows, const NcclSweep* sweep) {
  std::ostringstream os;
  os << "{\n  \"schema\": \"arfuse-bench/4\",\n";
  os << "  \"arfuse\": \"" << jsonEscape(env.arfuse) << "\",\n";
  os << "  \"date\": \"" << env.date << "\",\n";
  os << "  \"command\": \"" << jsonEscape(a.commandLine) << "\",\n";
  os << "  \"gpu\": \"" << jsonEscape(env.gpu) << "\",\n";
  os << "  \"driver\": \"" << jsonEscape(env.driver) << "\",\n";
  os << "  \"cuda_runtime\": " << env.cudaRuntime << ",\n";
  os << "  \"nccl\": " << env.nccl << ",\n";
  os << "  \"nccl_env\": " << envJson(env.ncclEnv) << ",\n";
  os << "  \"op\": \"" << a.op << "\",\n  \"dtype\": \"" << arfuseDataTypeName(a.dtype) << "\",\n";
  os << "  \"hidden\": " << a.hidden << ",\n  \"ranks\": " << env.nranks << ",\n";
  os << "  \"virtual_ranks\": " << (env.virtualRanks ? "true" : "false") << ",\n";
  os << "  \"mode\": \"" << env.mode << "\",\n  \"procs\": " << env.procs << ",\n";
  if (!a.machine.empty()) os << "  \"machine\": \"" << jsonEscape(a.machine) << "\",\n";
  os << "  \"l2_bytes\": " << env.l2Bytes << ",\n";
  os << "  \"proxy\": " << (isProxy(env) ? "true" : "false") << ",\n";
  if (isProxy(env)) os << "  \"proxy_reason\": \"" << jsonEscape(proxyReason(env)) << "\",\n";
  os << "  \"ratio_baseline\": \"the fastest correct baseline row at each size (nccl, nccl-symm)\",\n";
  os << "  \"calls_per_graph\": " << (a.verifyPass ? 2 * a.layers : a.callsPerGraph) << ",\n  \"iters\": " << a.iters
     << ",\n";
  if (!a.model.empty()) os << "  \"model\": \"" << a.model << "\",\n";
  if (a.layers) os << "  \"layers\": " << a.layers << ",\n";
  os << "  \"verify_pass\": " << (a.verifyPass ? "true" : "false") << ",\n";
  os << "  \"epilogues\": [";
  for (size_t i = 0; i < a.epilogues.size(); ++i)
    os << (i ? ", " : "") << "\"" << harness::epilogueName(a.epilogues[i]) << "\"";
  os << "],\n";
  os << "  \"warmup\": " << a.warmup << ",\n";
  if (env.copyPeakGBps > 0)
    os << "  \"copy_peak_GBps\": " << env.copyPeakGBps << ",\n  \"copy_reference\": \"sm-copy-kernel\",\n";
  if (sweep) os << sweepJsonMembers(*sweep);
  os << "  \"results\": [";
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    os << (i ? ",\n" : "\n") << "    {\"tokens\": " << r.tokens << ", \"bytes\": " << r.bytes << ", \"algo\": \""
       << jsonEscape(r.algo) << "\", \"role\": \"" << r.role << "\", \"epilogue\": \"" << jsonEscape(r.epilogue)
       << "\"";
    if (r.t.ok) {
      os << ", \"median_us\": " << r.t.medianUs << ", \"min_us\": " << r.t.minUs << ", \"max_us\": " << r.t.maxUs
         << ", \"algbw_GBps\": " << r.algbw << ", \"busbw_GBps\": " << r.busbw;
      if (r.ratio > 0) os << ", \"ratio\": " << r.ratio;
      if (r.ratio > 0 && !r.ratioTo.empty()) os << ", \"ratio_to\": \"" << jsonEscape(r.ratioTo) << "\"";
      if (r.passMs > 0) os << ", \"pass_ms\": " << r.passMs;
    } else {
      os << ", \"error\": \"" << jsonEscape(r.error) << "\"";
    }
    if (r.role != "copy" && r.role != "addrmsnorm") os << ", \"proxy\": " << (isProxy(env) ? "true" : "false");
    if (r.sets > 0) {
      const bool beats = harness::rotationBeatsL2(1, static_cast<size_t>(r.footprintBytes), env.l2Bytes);
      os << ", \"rotation\": {\"sets\": " << r.sets << ", \"bytes\": " << r.footprintBytes
         << ", \"exceeds_2x_l2\": " << (beats ? "true" : "false") << "}";
    }
    if (!r.kernels.empty()) {
      os << ", \"nccl_kernels\": [";
      for (size_t k = 0; k < r.kernels.size(); ++k) os << (k ? ", " : "") << "\"" << jsonEscape(r.kernels[k]) << "\"";
      os << "]";
    }
    if (r.symmetric >= 0) os << ", \"symmetric\": " << (r.symmetric ? "true" : "false");
    if (r.planBlocks > 0)
      os << ", \"plan\": {\"blocks\": " << r.planBlocks << ", \"threads\": " << r.planThreads << ", \"reason\": \""
         << jsonEscape(r.planReason) << "\"}";
    if (!r.note.empty()) os << ", \"note\": \"" << jsonEscape(r.note) << "\"";
    os << ", \"wrong\": " << r.wrong << "}";
  }
  os << "\n  ]\n}\n";
  return os.str();
}

}  // namespace cli
}  // namespace arfuse
