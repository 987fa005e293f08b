// Single-GPU residual add + RMSNorm (nranks == 1, and the epilogue of the NCCL path).
//
// One block per row, grid-stride over rows; each thread keeps its vectors of the row in registers
// (epilogue.cuh), so each element of x and residual_in is read once and residual_out and norm_out
// are written once: 4 x tokens x hidden x sizeof(T) bytes, the floor for this operation.
// In place: norm_out may equal x and residual_out may equal residual_in; every vector is read and
// then written by the same thread.
#pragma once

#include "kernels/epilogue.cuh"

namespace arfuse {

// kVecs = 4 when a row fits 4 vectors per thread (the plan's bandwidth geometry): half the
// registers of kVecs = 8, so twice the resident warps to keep loads in flight.
template <typename T, int kVecs, bool kExt = false>
__global__ void __launch_bounds__(kMaxThreads) addRmsNormKernel(LocalArgs a) {
  constexpr int E = Vec<T>::kElems;
  const int nvec = a.hidden / E;
  const uint4* x = reinterpret_cast<const uint4*>(a.x);  // [tokens, nvec]
  for (int row = blockIdx.x; row < a.tokens; row += gridDim.x) {
    const size_t rowOffset = static_cast<size_t>(row) * nvec;
    auto sum = [&](int v, float* acc) { Vec<T>::toFloat(x[rowOffset + v], acc); };
    addRmsNormRow<T, true, kVecs, kExt>(sum, reinterpret_cast<const uint4*>(a.residualIn) + rowOffset,
                           reinterpret_cast<const uint4*>(a.weight), reinterpret_cast<uint4*>(a.normOut) + rowOffset,
                           reinterpret_cast<uint4*>(a.residualOut) + rowOffset, nvec, a.hidden, a.eps,
                           kExt ? &a.ext : nullptr, row);
  }
}

}  // namespace arfuse
