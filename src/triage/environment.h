// The versions and GPUs a log states (NCCL's "NCCL version 2.25.1+cuda12.4", "cudaDriverVersion 12080",
// nvidia-smi's "Driver Version: 535.104.05 ... CUDA Version: 12.2", torch's "2.5.1+cu124", GPU names and
// compute capabilities), and what they imply: an NCCL older than the first one with kernels for the GPU's
// architecture, an NCCL build made with a CUDA older than the architecture needs, a driver older than the
// CUDA the libraries were built with. Some failures print no error at all (an NCCL INFO line saying its
// kernels need more shared memory than the device has): these facts are what explains them.
#pragma once

#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace arfuse {
namespace triage {

struct EnvFacts {
  std::string nccl, ncclCuda;          // "2.25.1", "12.4" (the +cuda suffix: the CUDA the build was made with)
  int driverCuda = 0;                  // NCCL's cudaDriverVersion (12080: the driver supports CUDA 12.8)
  std::string driverVersion, smiCuda;  // nvidia-smi's header
  std::string torch;                   // "2.5.1+cu124"
  std::vector<std::string> gpus;       // distinct GPU names (at most 8 kept)
  std::set<int> archs;                 // SM numbers the log states or its GPU names imply (90, 120, ...)

  // Reads the facts a message states (cheap; called only on lines holding one of the env literals).
  void note(std::string_view body);
  bool empty() const {
    return nccl.empty() && !driverCuda && driverVersion.empty() && torch.empty() && gpus.empty() && archs.empty();
  }
};

// The literals that announce a fact (scanned with the catalogue's, in the same pass).
const std::vector<std::string>& envLiterals();

// What the facts imply, one sentence each (empty when nothing is known or nothing is wrong).
std::vector<std::string> environmentNotes(const EnvFacts& f);
// The facts themselves, one "name: value" line each, for the report.
std::vector<std::string> environmentFacts(const EnvFacts& f);

// SM number of a GPU by its marketing name ("NVIDIA GeForce RTX 5090" -> 120, "Tesla T4" -> 75), 0 if unknown.
int archOfGpuName(std::string_view name);

}  // namespace triage
}  // namespace arfuse
