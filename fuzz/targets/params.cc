// Fuzz target: what arfuse reads from ARFUSE_* environment variables, which are whatever the process
// was started with. The input is "NAME\0VALUE": NAME picks a variable (any text; names that are not
// arfuse's are matched against the list, as the "did you mean" check does), VALUE is parsed by that
// variable's parser, and the bootstrap's interface and address grammars (ARFUSE_BOOTSTRAP_IFNAME,
// ARFUSE_BOOTSTRAP_ADDR) and ARFUSE_DEBUG_FILE's pattern get the same value. Checked beyond "no
// crash": a value a parser accepts parses again to the same number, and every log line that quotes
// the value stays one line.
#include "common/params.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "bootstrap/socket.h"
#include "common/log.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string in(reinterpret_cast<const char*>(data), size);
  const size_t nul = in.find('\0');
  const std::string name = nul == std::string::npos ? std::string() : in.substr(0, nul);
  const std::string value = nul == std::string::npos ? in : in.substr(nul + 1);
  const auto& specs = arfuse::paramSpecs();
  const arfuse::ParamSpec* spec = &specs[(name.empty() ? 0 : static_cast<unsigned char>(name[0])) % specs.size()];
  for (const arfuse::ParamSpec& s : specs)
    if (name == s.name) spec = &s;
  long long n = 0, again = 0;
  if (arfuse::parseParamValue(*spec, value, &n).empty()) {
    if (!arfuse::parseParamValue(*spec, value, &again).empty() || again != n) std::abort();
  }
  const std::string line = arfuse::formatLogLine(arfuse::kLogWarn, arfuse::LogContext{}, "", __FILE__, __LINE__,
                                                 std::string(spec->name) + "=" + value + " ignored");
  if (line.find('\n') != std::string::npos || line.find('\x1b') != std::string::npos) std::abort();
  arfuse::bootstrap::detail::interfaceSelected(value, name);
  arfuse::bootstrap::detail::usesUnixSocket(value, name);
  arfuse::bootstrap::detail::SockAddr addr;
  if (value.size() < 256) arfuse::bootstrap::detail::resolveListenAddress(value, "", 0, &addr);
  arfuse::expandDebugPath(value, 1234, name);
  return 0;
}
