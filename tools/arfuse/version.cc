// `arfuse version`: the library's build line, the NCCL loaded at run time and the visible devices.
#include <nccl.h>

#include <cstdio>
#include <string>
#include <vector>

#include "arfuse/arfuse.h"
#include "args.h"
#include "cli.h"
#include "harness/harness.h"

namespace arfuse {
namespace cli {

bool builtWithCuda() { return true; }

int version(const std::vector<std::string>& args) {
  const int rc =
      helpOnly("version", args,
               "usage: arfuse version\n"
               "  The library's build line (version, CUDA, NCCL, architectures), the NCCL loaded at run time and\n"
               "  the visible devices. No options; `arfuse --version` is the same.\n"
               "  Exit status: 0 printed (also without a GPU: the devices line then says why), 2 usage error.\n");
  if (rc >= 0) return rc;
  std::printf("%s\n", arfuseGetBuildInfo());
  int nccl = 0;
  if (ncclGetVersion(&nccl) == ncclSuccess)  // the library loaded at run time, which may differ from the header
    std::printf("nccl at run time: %d.%d.%d\n", nccl / 10000, (nccl / 100) % 100, nccl % 100);
  const int n = harness::deviceCount();
  if (n == 0) std::printf("devices: none visible (%s)\n", noDeviceReason().c_str());
  for (int d = 0; d < n; ++d) std::printf("device %d: %s\n", d, harness::deviceName(d).c_str());
  return kExitOk;
}

}  // namespace cli
}  // namespace arfuse
