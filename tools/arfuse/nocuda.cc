// The subcommands that need the GPU library, in a build configured without CUDA (no nvcc; top-level
// CMakeLists.txt, ARFUSE_CUDA): each says what this build is and how to get the full one, and exits
// 3 ("cannot run here"), as selftest does on a machine without a GPU. triage, plan and env are the
// same code as in the full build.
#include <cstdio>
#include <string>
#include <vector>

#include "arfuse/arfuse.h"
#include "args.h"
#include "cli.h"

namespace arfuse {
namespace cli {
namespace {

int notBuilt(const char* command) {
  std::printf(
      "arfuse %s: this arfuse was built without CUDA (no nvcc when it was configured), so it has no GPU code.\n"
      "  It has `arfuse triage`, `arfuse plan` and `arfuse env`. For %s, configure a fresh build folder with\n"
      "  the CUDA toolkit's nvcc on PATH (e.g. export PATH=/usr/local/cuda/bin:$PATH) and NCCL (scripts/setup.sh).\n",
      command, command);
  return kExitNoDevice;
}

}  // namespace

bool builtWithCuda() { return false; }

int selftest(const std::vector<std::string>&) { return notBuilt("selftest"); }
int bench(const std::vector<std::string>&) { return notBuilt("bench"); }
int doctor(const std::vector<std::string>&) { return notBuilt("doctor"); }

int version(const std::vector<std::string>& args) {
  const int rc = helpOnly("version", args,
                          "usage: arfuse version\n"
                          "  This arfuse's version and that it was built without CUDA. No options.\n"
                          "  Exit status: 0 printed, 2 usage error.\n");
  if (rc >= 0) return rc;
  std::printf("arfuse %d.%d.%d (built without CUDA: triage, plan and env only)\n", ARFUSE_VERSION_MAJOR,
              ARFUSE_VERSION_MINOR, ARFUSE_VERSION_PATCH);
  return kExitOk;
}

}  // namespace cli
}  // namespace arfuse
