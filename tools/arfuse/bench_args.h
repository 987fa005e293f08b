// Argument parsing of `arfuse bench` (pure; CPU-tested).
#pragma once

#include <string>
#include <vector>

#include "arfuse/arfuse.h"

namespace arfuse {
namespace cli {

struct BenchArgs {
  std::string op = "fused";  // fused | allreduce | addrmsnorm
  std::vector<int> tokens = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048};
  int hidden = 7168;
  arfuseDataType_t dtype = arfuseBfloat16;
  int iters = 50;
  int warmup = 10;
  int callsPerGraph = 20;
  bool check = true;
  bool graph = true;
  std::string jsonPath;
  int ranks = 0;           // 0: all GPUs, or 2 virtual ranks on one GPU
  std::vector<int> algos;  // empty: all available
  bool help = false;
  std::string commandLine;
};

// Returns false with *error naming the argument.
bool parseBenchArgs(const std::vector<std::string>& args, BenchArgs* out, std::string* error);
const char* benchUsage();

}  // namespace cli
}  // namespace arfuse
