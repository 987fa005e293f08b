// The guard after every NCCL operation across hosts (comm/multihost_watch.h): a one-block kernel
// that, when the group has aborted (the host-mapped abort word, GroupShared::abort), fills the
// operation's output with NaN (bytes 0xFF: a NaN in bf16, fp16 and fp32 alike), so that an NCCL
// operation ended by ncclCommAbort -- whose output is whatever NCCL had summed so far -- never
// feeds valid-looking numbers to the epilogue or the caller. Nothing is written while the group
// is healthy. Capturable: inside a CUDA graph it checks the abort at every replay.
#pragma once

#include <cuda_runtime.h>
#include <stddef.h>

namespace arfuse {

// Returns CUDA's answer to the launch (one step of the caller's chain of runtime calls, whose
// Status names the operation). `abortWord`: the device view of GroupShared::abort.
// `finished` (operations captured into a CUDA graph): a device counter it adds 1 to at every run.
cudaError_t launchNcclGuard(const int* abortWord, void* buf, size_t bytes, cudaStream_t stream,
                            unsigned long long* finished = nullptr);
// The stamp before a captured operation (diag/nccl_watch.h CapturedNcclWatch): counters[0] += 1,
// counters[2] = slot, in device memory, at every replay.
cudaError_t launchNcclStamp(unsigned long long* counters, unsigned long long slot, cudaStream_t stream);

}  // namespace arfuse
