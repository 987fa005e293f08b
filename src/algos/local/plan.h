// The single-GPU add+RMSNorm kernel's geometry (algos/local/kernel.cuh): the local path's, the NCCL
// path's epilogue's (algos/nccl) and arfuseAddRmsNorm's. Pure, CPU-tested.
#pragma once

#include <string>

#include "algos/registry.h"

namespace arfuse {

// Geometry of the single-GPU add+RMSNorm kernel (also the NCCL path's epilogue): blocks, threads
// and the vectors-per-thread instantiation.
void localGeometry(int tokens, int hidden, arfuseDataType_t dtype, int smCount, bool extended, int* blocks,
                   int* threads, Geometry* geo);

namespace planning {
// The single-GPU add+RMSNorm kernel's geometry (the local path, and the NCCL path's epilogue).
// Always fits (Verdict::fitted).
Verdict localGeometry(const PlanContext& c);
}  // namespace planning

}  // namespace arfuse
