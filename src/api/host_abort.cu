// The kernel of api/host_abort.h: one thread, one host-mapped load; only when the group has aborted
// does it store, volatile, 1 into each target's device abort word and fence, as raiseError does for
// the device words (device/protocol.cuh). A healthy group's call costs the load and nothing else.
#include "api/host_abort.h"

namespace arfuse {
namespace {

__global__ void hostAbortToDeviceKernel(const int* hostAbort, AbortTargets t) {
  if (*reinterpret_cast<const volatile int*>(hostAbort) == 0) return;
  for (int i = 0; i < t.count; ++i) *reinterpret_cast<volatile uint32_t*>(t.words[i]) = 1u;
  __threadfence_system();
}

}  // namespace

cudaError_t launchHostAbortToDevice(const int* hostAbort, const AbortTargets& targets, cudaStream_t stream) {
  if (!hostAbort || targets.count <= 0) return cudaSuccess;
  hostAbortToDeviceKernel<<<1, 1, 0, stream>>>(hostAbort, targets);
  return cudaGetLastError();
}

}  // namespace arfuse
