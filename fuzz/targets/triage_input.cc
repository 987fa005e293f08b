// Fuzz target: `arfuse triage`'s input layer, the part that touches untrusted bytes first: content
// sniffing (plain, gzip, xz, zstd), the decoders with their memory limits, the tar reader (ustar,
// GNU long names, pax), binary detection and the line splitter (its windows, '\r', CRLF, escape
// removal). The input is written to an in-memory file and read through InputSet exactly as a path
// on the command line is. Checked beyond "no crash": a segment never exceeds the window, and the
// splitter never stalls (each call consumes input or ends).
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "input.h"

namespace {

int memFile() {
  static const int fd = memfd_create("arfuse-fuzz-triage", MFD_CLOEXEC);
  return fd;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const int fd = memFile();
  if (fd < 0 || ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != static_cast<ssize_t>(size)) return 0;
  arfuse::triage::InputSet inputs;
  if (!inputs.add("/proc/self/fd/" + std::to_string(fd)).ok()) return 0;
  arfuse::triage::LogInput in;
  while (inputs.next(&in)) {
    std::string_view seg;
    bool same = false;
    uint64_t segments = 0;
    // A compression bomb decodes for as long as it is large, which is not a finding: stop at 64 MiB.
    while (in.reader->bytes() < (uint64_t{64} << 20) && in.reader->next(&seg, &same)) {
      if (seg.size() > arfuse::triage::LineReader::kWindow) std::abort();
      // Every segment consumes at least one byte (the last line of a stream may be empty).
      if (++segments > in.reader->bytes() + 1) std::abort();
    }
  }
  return 0;
}
