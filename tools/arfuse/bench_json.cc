#include "bench_json.h"

#include <sstream>

#include "arfuse/arfuse.h"
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

std::string benchJson(const BenchArgs& a, const BenchEnv& env, const std::vector<Row>& rows,
                      const NcclSweep* sweep) {
  std::ostringstream os;
  os << "{\n  \"schema\": \"arfuse-bench/3\",\n";
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
  os << "  \"calls_per_graph\": " << (a.verifyPass ? 2 * a.layers : a.callsPerGraph) << ",\n  \"iters\": " << a.iters
     << ",\n";
  if (!a.model.empty()) os << "  \"model\": \"" << a.model << "\",\n";
  if (a.layers) os << "  \"layers\": " << a.layers << ",\n";
  os << "  \"verify_pass\": " << (a.verifyPass ? "true" : "false") << ",\n";
  os << "  \"epilogues\": [";
  for (size_t i = 0; i < a.epilogues.size(); ++i) os << (i ? ", " : "") << "\"" << harness::epilogueName(a.epilogues[i]) << "\"";
  os << "],\n";
  os << "  \"warmup\": " << a.warmup << ",\n";
  if (env.copyPeakGBps > 0) os << "  \"copy_peak_GBps\": " << env.copyPeakGBps << ",\n  \"copy_reference\": \"sm-copy-kernel\",\n";
  if (sweep) os << sweepJsonMembers(*sweep);
  os << "  \"results\": [";
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    os << (i ? ",\n" : "\n") << "    {\"tokens\": " << r.tokens << ", \"bytes\": " << r.bytes << ", \"algo\": \""
       << jsonEscape(r.algo) << "\", \"role\": \"" << r.role << "\", \"epilogue\": \"" << jsonEscape(r.epilogue) << "\"";
    if (r.t.ok) {
      os << ", \"median_us\": " << r.t.medianUs << ", \"min_us\": " << r.t.minUs << ", \"max_us\": " << r.t.maxUs
         << ", \"algbw_GBps\": " << r.algbw << ", \"busbw_GBps\": " << r.busbw;
      if (r.ratio > 0) os << ", \"ratio\": " << r.ratio;
      if (r.passMs > 0) os << ", \"pass_ms\": " << r.passMs;
    } else {
      os << ", \"error\": \"" << jsonEscape(r.error) << "\"";
    }
    os << ", \"wrong\": " << r.wrong << "}";
  }
  os << "\n  ]\n}\n";
  return os.str();
}

}  // namespace cli
}  // namespace arfuse
