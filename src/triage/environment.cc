#include "environment.h"

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace arfuse {
namespace triage {

namespace {

// The first NCCL release with kernels for each architecture, and the CUDA its build needs for them, read
// from NCCL's makefiles/common.mk per release tag (compute_80 from 2.7.3, compute_90 from 2.15.1 with CUDA
// 11.8, compute_100 / compute_120 from 2.25.1 with CUDA 12.8). sm_86 / sm_89 run the sm_80 kernels. sm_120
// has kernels since 2.25.1, but 2.25.1 sizes their shared memory for data-centre parts and logs
// "ncclMaxSharedMem N exceeds device/fn maxSharedMem M" (src/enqueue.cc); 2.26.2 sizes it for sm_120.
struct ArchRow {
  int smLo, smHi;
  const char* family;
  const char* firstNccl;
  const char* buildCuda;
};
const ArchRow kArchs[] = {
    {70, 79, "Volta / Turing", "2.3.5", "9.0"},
    {80, 89, "Ampere / Ada", "2.7.3", "11.0"},
    {90, 99, "Hopper", "2.15.1", "11.8"},
    {100, 119, "Blackwell (B100 / B200 / GB200)", "2.25.1", "12.8"},
    {120, 129, "Blackwell (RTX 50, RTX PRO)", "2.26.2", "12.8"},
};

const ArchRow* archRow(int sm) {
  for (const auto& r : kArchs)
    if (sm >= r.smLo && sm <= r.smHi) return &r;
  return nullptr;
}

// "2.25.1" < "2.26.2" (numeric, component by component; missing components are 0).
int compareVersions(std::string_view a, std::string_view b) {
  size_t i = 0, j = 0;
  while (i < a.size() || j < b.size()) {
    long x = 0, y = 0;
    while (i < a.size() && std::isdigit(static_cast<unsigned char>(a[i]))) x = x * 10 + (a[i++] - '0');
    while (j < b.size() && std::isdigit(static_cast<unsigned char>(b[j]))) y = y * 10 + (b[j++] - '0');
    if (x != y) return x < y ? -1 : 1;
    if (i < a.size()) ++i;
    if (j < b.size()) ++j;
  }
  return 0;
}

// Digits and dots at `p` ("2.25.1"), at most 16 characters.
std::string versionAt(std::string_view s, size_t p) {
  size_t e = p;
  while (e < s.size() && e - p < 16 && (std::isdigit(static_cast<unsigned char>(s[e])) || s[e] == '.')) ++e;
  while (e > p && s[e - 1] == '.') --e;
  return std::string(s.substr(p, e - p));
}

size_t skipSpaces(std::string_view s, size_t p) {
  while (p < s.size() && (s[p] == ' ' || s[p] == ':' || s[p] == '=' || s[p] == '\t')) ++p;
  return p;
}

// "12.8" from a cudaDriverVersion of 12080.
std::string cudaOfInt(int v) { return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10); }

// "12.4" from "cu124" / "cuda12.4" / "12.4".
std::string cudaOfTag(std::string_view t) {
  if (t.empty()) return "";
  if (t.find('.') != std::string_view::npos) return std::string(t);
  if (t.size() == 3) return std::string(t.substr(0, 2)) + "." + std::string(t.substr(2));  // 124 -> 12.4
  if (t.size() == 2) return std::string(t.substr(0, 1)) + "." + std::string(t.substr(1));  // 92 -> 9.2
  return std::string(t);
}

bool tokenStarts(std::string_view tok, const char* p) { return tok.substr(0, std::strlen(p)) == p; }

}  // namespace

const std::vector<std::string>& envLiterals() {
  static const std::vector<std::string> v = {
      "NCCL version", "cudaDriverVersion", "Driver Version", "CUDA Version",   "compute capability",
      "cudaArch ",    "CUDA capability",   "NVIDIA ",        "Tesla ",         "GeForce ",
      "torch==",      "PyTorch:",          "torch version",  "PyTorch version"};
  return v;
}

int archOfGpuName(std::string_view name) {
  std::vector<std::string_view> toks;
  for (size_t i = 0; i < name.size();) {
    while (i < name.size() && (name[i] == ' ' || name[i] == '-' || name[i] == '_')) ++i;
    size_t e = i;
    while (e < name.size() && name[e] != ' ' && name[e] != '-' && name[e] != '_') ++e;
    if (e > i) toks.push_back(name.substr(i, e - i));
    i = e;
  }
  bool rtx = false, pro = false;
  for (size_t k = 0; k < toks.size(); ++k) {
    const std::string_view t = toks[k];
    if (t == "Blackwell") return 120;  // "RTX PRO 6000 Blackwell" (the data-centre parts are named B200)
    if (t == "Ada") return 89;         // "RTX 6000 Ada Generation"
    if (tokenStarts(t, "GB10")) return 121;
    if (tokenStarts(t, "GB2") || tokenStarts(t, "GB3") || tokenStarts(t, "B100") || tokenStarts(t, "B200") ||
        tokenStarts(t, "B300"))
      return 100;
    if (tokenStarts(t, "GH200") || tokenStarts(t, "H100") || tokenStarts(t, "H200") || tokenStarts(t, "H800") ||
        t == "H20")
      return 90;
    if (tokenStarts(t, "A100") || tokenStarts(t, "A800") || tokenStarts(t, "A30")) return 80;
    if (tokenStarts(t, "L40") || t == "L4" || t == "L20") return 89;
    if (tokenStarts(t, "A10") || tokenStarts(t, "A40") || tokenStarts(t, "A16") || t == "A2" ||
        tokenStarts(t, "A6000") || tokenStarts(t, "A5000") || tokenStarts(t, "A4000"))
      return 86;
    if (t == "T4") return 75;
    if (tokenStarts(t, "V100")) return 70;
    if (tokenStarts(t, "P100")) return 60;
    if (t == "RTX") rtx = true;
    if (t == "PRO") pro = true;
    if (rtx && !pro && t.size() == 4 && std::isdigit(static_cast<unsigned char>(t[0]))) {
      const int series = (t[0] - '0') * 10 + (t[1] - '0');  // RTX 5090 -> 50
      if (series == 50) return 120;
      if (series == 40) return 89;
      if (series == 30) return 86;
      if (series == 20) return 75;
    }
  }
  return 0;
}

void EnvFacts::note(std::string_view b) {
  size_t p;
  if ((p = b.find("NCCL version")) != std::string_view::npos) {
    const size_t v = skipSpaces(b, p + 12);
    const std::string ver = versionAt(b, v);
    if (ver.size() >= 3 && ver.find('.') != std::string::npos && (nccl.empty() || compareVersions(ver, nccl) < 0)) {
      nccl = ver;  // several copies in one job: the oldest is the one to question
      ncclCuda.clear();
      const size_t plus = v + ver.size();
      if (b.compare(plus, 5, "+cuda") == 0) ncclCuda = versionAt(b, plus + 5);
    }
  }
  if ((p = b.find("cudaDriverVersion")) != std::string_view::npos) {
    const int v = std::atoi(std::string(b.substr(skipSpaces(b, p + 17), 8)).c_str());
    if (v > 1000 && v < 100000) driverCuda = v;
  }
  if ((p = b.find("Driver Version")) != std::string_view::npos) {
    const std::string v = versionAt(b, skipSpaces(b, p + 14));
    if (!v.empty()) driverVersion = v;
  }
  if ((p = b.find("CUDA Version")) != std::string_view::npos) {
    const std::string v = versionAt(b, skipSpaces(b, p + 12));
    if (!v.empty()) smiCuda = v;
  }
  for (const char* key : {"compute capability", "Compute Capability", "CUDA capability"}) {
    p = b.find(key);
    if (p == std::string_view::npos) continue;
    if (b.substr(p >= 12 ? p - 12 : 0, std::min<size_t>(p, 12)).find("least") != std::string_view::npos) continue;
    size_t v = skipSpaces(b, p + std::strlen(key));
    if (b.compare(v, 3, "sm_") == 0) {
      const int sm = std::atoi(std::string(b.substr(v + 3, 4)).c_str());
      if (sm >= 30 && sm < 200) archs.insert(sm);
    } else if (v < b.size() && std::isdigit(static_cast<unsigned char>(b[v]))) {
      const std::string ver = versionAt(b, v);
      const size_t dot = ver.find('.');
      if (dot != std::string::npos) {
        const int sm = std::atoi(ver.c_str()) * 10 + std::atoi(ver.c_str() + dot + 1);
        if (sm >= 30 && sm < 200) archs.insert(sm);
      }
    }
  }
  if ((p = b.find("cudaArch ")) != std::string_view::npos) {
    const int a = std::atoi(std::string(b.substr(p + 9, 6)).c_str());
    if (a >= 300 && a < 2000) archs.insert(a / 10);
  }
  for (const char* key : {"NVIDIA ", "Tesla ", "GeForce "}) {
    p = b.find(key);
    if (p == std::string_view::npos) continue;
    size_t e = p;
    while (e < b.size() && e - p < 48 && (std::isalnum(static_cast<unsigned char>(b[e])) || b[e] == ' ' || b[e] == '-'))
      ++e;
    std::string name(b.substr(p, e - p));
    while (!name.empty() && (name.back() == ' ' || name.back() == '-')) name.pop_back();
    const int sm = archOfGpuName(name);
    if (sm == 0) continue;
    archs.insert(sm);
    bool known = false;
    for (const auto& g : gpus) known = known || g == name;
    if (!known && gpus.size() < 8) gpus.push_back(name);
    break;
  }
  for (const char* key : {"torch==", "PyTorch: ", "torch version", "PyTorch version"}) {
    p = b.find(key);
    if (p == std::string_view::npos) continue;
    size_t v = skipSpaces(b, p + std::strlen(key));
    size_t e = v;
    while (e < b.size() && e - v < 32 && (std::isalnum(static_cast<unsigned char>(b[e])) || b[e] == '.' || b[e] == '+'))
      ++e;
    if (e > v && std::isdigit(static_cast<unsigned char>(b[v]))) torch = std::string(b.substr(v, e - v));
  }
}

std::vector<std::string> environmentFacts(const EnvFacts& f) {
  std::vector<std::string> out;
  if (!f.nccl.empty())
    out.push_back("NCCL " + f.nccl + (f.ncclCuda.empty() ? "" : " (built with CUDA " + f.ncclCuda + ")"));
  if (f.driverCuda)
    out.push_back("driver supports CUDA " + cudaOfInt(f.driverCuda) + " (cudaDriverVersion " +
                  std::to_string(f.driverCuda) + ")");
  if (!f.driverVersion.empty())
    out.push_back("NVIDIA driver " + f.driverVersion + (f.smiCuda.empty() ? "" : " (CUDA " + f.smiCuda + ")"));
  if (!f.torch.empty()) out.push_back("torch " + f.torch);
  std::string gpus;
  for (const auto& g : f.gpus) gpus += (gpus.empty() ? "" : ", ") + g;
  if (!gpus.empty()) out.push_back("GPUs: " + gpus);
  std::string archs;
  for (int a : f.archs) archs += (archs.empty() ? "sm_" : ", sm_") + std::to_string(a);
  if (!archs.empty()) out.push_back("architecture: " + archs);
  return out;
}

std::vector<std::string> environmentNotes(const EnvFacts& f) {
  std::vector<std::string> out;
  for (int sm : f.archs) {
    const ArchRow* row = archRow(sm);
    if (!row) continue;
    const std::string arch = "sm_" + std::to_string(sm) + " (" + row->family + ")";
    if (!f.nccl.empty() && compareVersions(f.nccl, row->firstNccl) < 0) {
      out.push_back("NCCL " + f.nccl + " predates " + arch + ": the first NCCL with kernels for it is " +
                    row->firstNccl + ", built with CUDA >= " + row->buildCuda +
                    "; use that NCCL or newer (the nvidia-nccl-cu12 / cu13 "
                    "wheel, or VLLM_NCCL_SO_PATH / LD_LIBRARY_PATH pointing at it)");
    } else if (!f.ncclCuda.empty() && compareVersions(f.ncclCuda, row->buildCuda) < 0) {
      out.push_back("this NCCL build (+cuda" + f.ncclCuda + ") has no kernels for " + arch +
                    ": they need a build made with CUDA >= " + row->buildCuda);
    }
  }
  if (f.driverCuda && !f.ncclCuda.empty() && compareVersions(cudaOfInt(f.driverCuda), f.ncclCuda) < 0)
    out.push_back(
        "the driver supports CUDA " + cudaOfInt(f.driverCuda) + ", older than the CUDA " + f.ncclCuda +
        " NCCL was built with: only CUDA's minor-version compatibility lets it run, and features newer than the "
        "driver (PTX JIT, NVLS, cuMem) fail; upgrade the driver or use a build for CUDA " +
        cudaOfInt(f.driverCuda));
  const size_t cu = f.torch.find("+cu");
  const std::string torchCuda = cu == std::string::npos ? "" : cudaOfTag(std::string_view(f.torch).substr(cu + 3));
  const std::string driver = f.driverCuda ? cudaOfInt(f.driverCuda) : f.smiCuda;
  if (!torchCuda.empty() && !driver.empty() && compareVersions(driver, torchCuda) < 0 &&
      driver.substr(0, driver.find('.')) != torchCuda.substr(0, torchCuda.find('.')))
    out.push_back("torch " + f.torch + " needs a driver for CUDA " + torchCuda + "; the driver supports CUDA " +
                  driver);
  return out;
}

}  // namespace triage
}  // namespace arfuse
