// A host-raised abort, carried to the device within the stream (issue 37 item 8b).
//
// Kernels learn of a group's abort from their own device abort word (DeviceState::abort) when the
// group has peer access: a failing kernel writes it on every peer. An abort raised on the host --
// by a host function inside the stream (ARFUSE_CHECK_REPLICAS's comparison), which may make no CUDA
// call -- set only the host-mapped word, so a CUDA-graph replay kept computing valid-looking outputs
// until the host's next API call copied the abort down. This one-thread kernel, enqueued right after
// such a host function, copies it down inside the stream: when the host-mapped word is set it sets
// the device abort word of each target (this rank's, and with peer access every peer's), so the
// kernels that follow -- this replay's and every later one's -- are refused at entry or end their
// waits. It reads one word of host memory per call: the cost of the opt-in check, not of every call.
#pragma once

#include <cuda_runtime.h>
#include <stdint.h>

namespace arfuse {

constexpr int kMaxAbortTargets = 16;  // == kMaxRanks (diag/device_records.h)

struct AbortTargets {
  uint32_t* words[kMaxAbortTargets];  // device abort words (DeviceState::abort) of this rank and its peers
  int count = 0;
};

// Returns CUDA's answer to the launch (a step of the caller's chain of runtime calls). `hostAbort`: the device view of
// GroupShared::abort.
cudaError_t launchHostAbortToDevice(const int* hostAbort, const AbortTargets& targets, cudaStream_t stream);

}  // namespace arfuse
