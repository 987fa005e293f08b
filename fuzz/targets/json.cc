// Fuzz target: the JSON readers of untrusted files. `arfuse plan --topology FILE` and `arfuse doctor
// --topology FILE` read topologies; every communicator's init reads ARFUSE_CALIBRATION_FILE. The same
// bytes go through the syntax layer (topo/json.h) and both strict readers on top of it; any crash,
// sanitizer report, or a run over the per-input time limit is a finding. Properties checked beyond
// "no crash": an accepted document writes back and reads back to the same value.
#include "topo/json.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "plan/calibration.h"
#include "topo/topology.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > arfuse::topo::json::kMaxFileBytes) return 0;  // readFile refuses these before parsing
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  arfuse::topo::json::Value v;
  (void)arfuse::topo::json::parse(text, &v);

  arfuse::topo::Topology t;
  if (arfuse::topo::fromJson(text, &t).ok()) {
    arfuse::topo::Topology back;
    if (!arfuse::topo::fromJson(arfuse::topo::toJson(t), &back).ok() || !(back == t)) std::abort();
  }
  arfuse::Calibration c;
  if (arfuse::calibrationFromJson(text, &c).ok()) {
    arfuse::Calibration back;
    if (!arfuse::calibrationFromJson(arfuse::calibrationToJson(c), &back).ok()) std::abort();
  }
  return 0;
}
