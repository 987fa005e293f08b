// arfuse triage: finds the root cause of a crashed or hung multi-GPU inference server from its logs.
// Pure C++17, no CUDA. See docs/triage.md for the output format, the JSON schema and the catalogue.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace arfuse {
namespace triage {

// args excludes the program name and the word "triage": e.g. {"a.log", "b.log.gz", "--json"}.
// Returns the process exit code: 0 root cause found, 1 only echoes / insufficient evidence, 2 usage error.
int runCli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace triage
}  // namespace arfuse
