// `arfuse doctor`'s two renderings of a report and its checks: the text a person reads and the
// JSON (--json) a tool parses. The checks themselves are in doctor_checks.cc.
#include <sstream>
#include <string>

#include "base/printable.h"
#include "doctor_checks.h"
#include "topo/json.h"

namespace arfuse {
namespace cli {
namespace checkup {
namespace {

std::string pad(const std::string& s, size_t w) { return s.size() >= w ? s : s + std::string(w - s.size(), ' '); }

void jsonStr(std::string* o, const std::string& s) { topo::json::appendString(o, s); }

}  // namespace

std::string renderText(const Report& r, const std::vector<Check>& checks) {
  const Environment& e = r.env;
  std::ostringstream o;
  o << "arfuse doctor\n\nEnvironment\n";
  o << "  " << pad("build", 12) << e.buildInfo << "\n";
  o << "  " << pad("driver", 12) << (e.driverVersion.empty() ? "?" : e.driverVersion)
    << (e.cudaDriverVersion ? " (supports CUDA " + cudaVersionText(e.cudaDriverVersion) + ")" : " (no driver answered)")
    << "\n";
  o << "  " << pad("runtime", 12) << "CUDA " << cudaVersionText(e.cudaRuntimeVersion) << "\n";
  o << "  " << pad("NCCL", 12) << (e.ncclRuntime.empty() ? "?" : e.ncclRuntime) << " at run time\n";
  o << "  " << pad("NVML", 12)
    << (e.nvmlLoaded ? (e.nvmlVersion.empty() ? "loaded" : e.nvmlVersion) : "unavailable: " + e.nvmlError) << "\n";
  o << "  " << pad("GPUs", 12)
    << (e.deviceCount ? std::to_string(e.deviceCount) + " visible"
                      : "NONE VISIBLE" + (e.deviceError.empty() ? std::string() : ": " + e.deviceError))
    << "\n";
  for (const Param& p : e.params)
    o << "  " << pad(p.name, 31) << pad(p.value.empty() ? "(empty)" : printable(p.value), 12) << "(" << p.source << ")"
      << (p.error.empty() ? "" : "  WARNING: " + printable(p.error)) << "\n";
  for (const auto& kv : e.otherEnv) o << "  " << pad(kv.first, 31) << printable(kv.second) << "\n";

  if (r.haveTopology) {
    o << "\nTopology (" << r.topologySource << ")\n";
    std::istringstream d(topo::describe(r.topology));
    std::string line;
    while (std::getline(d, line)) o << (line.empty() ? "" : "  ") << line << "\n";
    for (const std::string& n : r.probeNotes) o << "  probe: " << n << "\n";
  } else if (e.deviceCount == 0) {
    o << "\nTopology: none (no GPU is visible)\n";
  }

  if (r.selftestRan) {
    o << "\nSelf-test (" << r.devices.size() << " ranks"
      << (r.virtualRanks ? ", VIRTUAL on GPU 0: correctness only" : ", one per GPU") << "; hidden " << r.hidden << " "
      << r.dtype << ")\n";
    for (const PathResult& p : r.selftest) {
      o << "  " << pad(p.algo, 12);
      if (!p.eligible)
        o << "not eligible: " << p.why << "\n";
      else
        o << (p.failed ? "FAIL" : "PASS") << "  " << p.passed << "/" << (p.passed + p.failed) << " cases"
          << (p.failed ? ": " + p.why : "") << "\n";
    }
    o << "\nPlan per size (auto; " << r.devices.size() << (r.virtualRanks ? " virtual" : "") << " ranks, hidden "
      << r.hidden << " " << r.dtype << ")\n";
    if (!r.planError.empty()) {
      o << "  " << r.planError << "\n";
    } else {
      o << "  " << pad("tokens", 8) << pad("bytes", 11) << pad("algo", 12) << "reason\n";
      for (const PlanRow& p : r.plan)
        o << "  " << pad(std::to_string(p.tokens), 8) << pad(std::to_string(p.bytes), 11)
          << pad(p.ok ? p.algo : "-", 12) << p.reason << "\n";
    }
  } else if (!r.selftestSkipped.empty()) {
    o << "\nSelf-test and plan table: skipped (" << r.selftestSkipped << ")\n";
  }

  o << "\nChecks\n";
  int counts[3] = {0, 0, 0};
  for (const Check& c : checks) {
    ++counts[static_cast<int>(c.status)];
    // A check's message may quote what any local user can name (a /dev/shm segment): one line each.
    o << "  " << pad(statusName(c.status), 6) << pad(c.name, 13) << printable(c.message) << "\n";
    if (!c.fix.empty()) o << "  " << std::string(19, ' ') << "fix: " << printable(c.fix) << "\n";
  }
  o << "\nSummary: " << counts[2] << " FAIL, " << counts[1] << " WARN, " << counts[0] << " OK -> exit "
    << exitCode(checks) << "\n";
  return o.str();
}

std::string renderJson(const Report& r, const std::vector<Check>& checks) {
  const Environment& e = r.env;
  std::string o = "{\n  \"schema\": \"arfuse-doctor/1\",\n  \"exit\": " + std::to_string(exitCode(checks)) + ",\n";
  o += "  \"environment\": {\"build\": ";
  jsonStr(&o, e.buildInfo);
  o += ", \"driver\": ";
  jsonStr(&o, e.driverVersion);
  o += ", \"cuda_driver\": ";
  jsonStr(&o, e.cudaDriverVersion ? cudaVersionText(e.cudaDriverVersion) : "");
  o += ", \"cuda_runtime\": ";
  jsonStr(&o, cudaVersionText(e.cudaRuntimeVersion));
  o += ", \"nccl_runtime\": ";
  jsonStr(&o, e.ncclRuntime);
  o += ", \"nvml\": {\"loaded\": " + std::string(e.nvmlLoaded ? "true" : "false") + ", \"version\": ";
  jsonStr(&o, e.nvmlVersion);
  o += ", \"error\": ";
  jsonStr(&o, e.nvmlError);
  o += "}, \"devices\": " + std::to_string(e.deviceCount) + ", \"device_error\": ";
  jsonStr(&o, e.deviceError);
  o += ",\n    \"params\": [";
  for (size_t i = 0; i < e.params.size(); ++i) {
    const Param& p = e.params[i];
    o += i ? ",\n      {\"name\": " : "\n      {\"name\": ";
    jsonStr(&o, p.name);
    o += ", \"value\": ";
    jsonStr(&o, p.value);
    o += ", \"source\": ";
    jsonStr(&o, p.source);
    o += ", \"error\": ";
    jsonStr(&o, p.error);
    o += "}";
  }
  o += "],\n    \"env\": {";
  for (size_t i = 0; i < e.otherEnv.size(); ++i) {
    if (i) o += ", ";
    jsonStr(&o, e.otherEnv[i].first);
    o += ": ";
    jsonStr(&o, e.otherEnv[i].second);
  }
  o += "}},\n  \"topology_source\": ";
  jsonStr(&o, r.haveTopology ? r.topologySource : "");
  o += ",\n  \"topology\": ";
  if (r.haveTopology) {
    std::string t = topo::toJson(r.topology);
    while (!t.empty() && t.back() == '\n') t.pop_back();
    std::string indented;
    for (char c : t) {
      indented += c;
      if (c == '\n') indented += "  ";
    }
    o += indented;
  } else {
    o += "null";
  }
  o += ",\n  \"probe_notes\": [";
  for (size_t i = 0; i < r.probeNotes.size(); ++i) {
    if (i) o += ", ";
    jsonStr(&o, r.probeNotes[i]);
  }
  o += "],\n  \"group\": {\"devices\": [";
  for (size_t i = 0; i < r.devices.size(); ++i) o += (i ? ", " : "") + std::to_string(r.devices[i]);
  o += "], \"virtual_ranks\": " + std::string(r.virtualRanks ? "true" : "false") +
       ", \"hidden\": " + std::to_string(r.hidden) + ", \"dtype\": ";
  jsonStr(&o, r.dtype);
  o += "},\n  \"selftest\": ";
  if (!r.selftestRan) {
    o += "null";
  } else {
    o += "[";
    for (size_t i = 0; i < r.selftest.size(); ++i) {
      const PathResult& p = r.selftest[i];
      o += i ? ",\n    {\"algo\": " : "\n    {\"algo\": ";
      jsonStr(&o, p.algo);
      o += ", \"eligible\": " + std::string(p.eligible ? "true" : "false") +
           ", \"passed\": " + std::to_string(p.passed) + ", \"failed\": " + std::to_string(p.failed) + ", \"why\": ";
      jsonStr(&o, p.why);
      o += "}";
    }
    o += "]";
  }
  o += ",\n  \"selftest_skipped\": ";
  jsonStr(&o, r.selftestSkipped);
  o += ",\n  \"plan\": [";
  for (size_t i = 0; i < r.plan.size(); ++i) {
    const PlanRow& p = r.plan[i];
    o += i ? ",\n    {\"tokens\": " : "\n    {\"tokens\": ";
    o += std::to_string(p.tokens) + ", \"bytes\": " + std::to_string(p.bytes) +
         ", \"ok\": " + (p.ok ? "true" : "false") + ", \"algo\": ";
    jsonStr(&o, p.algo);
    o += ", \"reason\": ";
    jsonStr(&o, p.reason);
    o += "}";
  }
  o += "],\n  \"plan_error\": ";
  jsonStr(&o, r.planError);
  o += ",\n  \"calibration\": {\"file\": ";
  jsonStr(&o, r.calibrationFile);
  o += ", \"applies\": " + std::string(r.calibrationApplies ? "true" : "false") + ", \"why\": ";
  jsonStr(&o, r.calibrationWhy);
  o += "},\n  \"checks\": [";
  for (size_t i = 0; i < checks.size(); ++i) {
    const Check& c = checks[i];
    o += i ? ",\n    {\"name\": " : "\n    {\"name\": ";
    jsonStr(&o, c.name);
    o += ", \"status\": ";
    jsonStr(&o, statusName(c.status));
    o += ", \"message\": ";
    jsonStr(&o, c.message);
    o += ", \"fix\": ";
    jsonStr(&o, c.fix);
    o += "}";
  }
  o += "\n  ]\n}\n";
  return o;
}

}  // namespace checkup
}  // namespace cli
}  // namespace arfuse
