// The epilogue variants `arfuse bench --epilogue` times, and what checks them. Pure C++ (no CUDA),
// so the bench's argument parser and the CPU tests use it too.
//
// An epilogue variant is one arfuseEpilogue_t configuration: which inputs the call reads, which
// outputs it writes, and the quantised format. `none` is arfuseAllReduceAddRmsNorm / arfuseAddRmsNorm
// (no epilogue struct); every other variant goes through arfuseAllReduceEpilogue. The quantised
// variants write residual_out + quant_out (+ scales) and NOT norm_out: the serving configuration in
// which the next GEMM reads only the quantised tensor.
//
// checkEpilogue is the correctness check of one call's outputs (every rank): the CPU reference of the
// quantised formats (src/quant/reference.h) applied to the kernel's own norm_out, the norm against
// fp64, the residual against the exact fp32 rank-order sum, everything bitwise across ranks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "arfuse/arfuse.h"

namespace arfuse {
namespace harness {

enum EpilogueKind {
  kEpilogueNone = 0,       // arfuseAllReduceAddRmsNorm: residual_in, residual_out, norm_out
  kEpiloguePlain,          // the same work through arfuseAllReduceEpilogue
  kEpilogueFirst,          // no residual_in (first layer): residual_out = the sum; norm_out
  kEpiloguePlusOne,        // (1 + w) weights; residual_in, residual_out, norm_out
  kEpilogueFp8,            // FP8 E4M3, static scale from a device float; residual_out + quant_out
  kEpilogueFp8Token,       // FP8 E4M3, per-token scales; residual_out + quant_out + float[tokens]
  kEpilogueNvfp4,          // NVFP4, linear block scales; residual_out + quant_out + scales
  kEpilogueNvfp4Swizzled,  // NVFP4, 128x4 swizzled block scales (padding written as zero)
  kNumEpilogues
};

// "none", "plain", "first", "plusone", "fp8", "fp8-token", "nvfp4", "nvfp4-swizzled".
const char* epilogueName(int kind);
// The valid names for an error message: "none, plain, first, plusone, fp8, fp8-token, nvfp4 or nvfp4-swizzled".
std::string epilogueNameList();
// false when `name` is not one of them.
bool parseEpilogue(const std::string& name, int* kind);

// What a variant reads and writes (arfuseEpilogue_t fields; kind none: arfuseAllReduceAddRmsNorm).
struct EpilogueForm {
  bool viaEpilogue = false;  // arfuseAllReduceEpilogue (false: the plain entry points)
  bool residualIn = true;
  bool residualOut = true;
  bool normOut = true;
  bool plusOne = false;
  int quant = arfuseQuantNone;
  int layout = arfuseScaleLinear;
  bool nvfp4() const { return quant == arfuseQuantNvfp4; }
};
EpilogueForm epilogueForm(int kind);

// The scale the bench gives the quantised variants (*scaleIn): FP8 static scale 8 / 448 and NVFP4
// global scale 448 * 6 / 8, i.e. sized for |norm| <= 8 (the harness's inputs stay well inside).
float epilogueScaleIn(int quant);

// Bytes one call reads and writes (each tensor once), per rank, for `tokens` x `hidden` of
// `esize`-byte elements.
struct EpilogueBytes {
  size_t x = 0, residualIn = 0, weight = 0, residualOut = 0, normOut = 0;
  size_t quant = 0;     // FP8: 1 byte per element; NVFP4: 1/2
  size_t scaleOut = 0;  // FP8 per token: 4 per row; NVFP4: quant::sfBytes (swizzled: padding included)
  size_t scaleIn = 0;   // FP8 static / NVFP4: the fp32 read from device memory
  size_t total() const { return x + residualIn + weight + residualOut + normOut + quant + scaleOut + scaleIn; }
};
EpilogueBytes epilogueBytes(int kind, int tokens, int hidden, size_t esize);
// Bytes of quant_out / scale_out buffers (0 when the variant has none).
size_t quantOutBytes(int quant, int tokens, int hidden);
size_t scaleOutBytes(int quant, int layout, int tokens, int hidden);

// The quantised tensor the kernels must write for these normalised values (`norm`: [tokens][hidden],
// already rounded to the model dtype and widened): the CPU reference of the format, whole tensor
// (NVFP4 swizzled padding zeroed). q: quantOutBytes, sf: scaleOutBytes (may be empty for FP8 static).
// false if the reference refuses the shape (NVFP4 with hidden % 16 != 0).
bool referenceQuant(int quant, int layout, float scaleIn, const float* norm, int tokens, int hidden,
                    std::vector<uint8_t>* q, std::vector<uint8_t>* sf);

// One call's inputs (host copies, dtype bit layout) and every rank's outputs.
struct EpilogueCase {
  arfuseDataType_t dtype = arfuseBfloat16;
  int tokens = 0, hidden = 0;
  float eps = 1e-6f;
  EpilogueForm form;
  float scaleIn = 0;
  std::vector<const uint8_t*> x;        // per rank, [tokens][hidden]
  const uint8_t* residualIn = nullptr;  // [tokens][hidden], or null (form.residualIn false)
  const uint8_t* weight = nullptr;      // [hidden]
  bool exactSum = true;                 // the sum is fp32 in rank order (arfuse's paths); false: NCCL's, in its order
};
struct EpilogueOutputs {  // one rank; empty vectors = not written
  std::vector<uint8_t> residual, norm, quant, scale;
};
struct EpilogueCheck {
  bool ok = false;
  bool identical = false;                 // every output bitwise equal across ranks
  double errResidual = 0;                 // exact sum: elements differing from it; NCCL: ||r - ref|| / ||ref|| vs fp64
  double errNorm = 0;                     // ||norm - fp64|| / ||fp64|| (on the kernel's residual_out)
  size_t wrongQuant = 0, wrongScale = 0;  // bytes differing from referenceQuant of the kernel's norm_out
  std::string error;                      // why not ok
};
// Checks what the outputs hold. The norm and the quantised bytes are checked only when norm_out was
// written (the quantised bytes are defined on it); compare a run without norm_out with one that has it
// (sameQuantisedOutputs) to check that configuration.
EpilogueCheck checkEpilogue(const EpilogueCase& c, const std::vector<EpilogueOutputs>& out);
// "" when `a` and `b` (every rank) hold the same residual, quant and scale bytes where both wrote
// them; else what differs.
std::string sameQuantisedOutputs(const std::vector<EpilogueOutputs>& a, const std::vector<EpilogueOutputs>& b);

}  // namespace harness
}  // namespace arfuse
