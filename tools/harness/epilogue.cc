#include "harness/epilogue.h"

#include <cmath>
#include <cstring>
#include <sstream>

#include "harness/numeric.h"
#include "quant/formats.h"
#include "quant/reference.h"

namespace arfuse {
namespace harness {
namespace {

const char* const kNames[kNumEpilogues] = {"none", "plain",     "first", "plusone",
                                           "fp8",  "fp8-token", "nvfp4", "nvfp4-swizzled"};

}  // namespace

const char* epilogueName(int kind) { return kind >= 0 && kind < kNumEpilogues ? kNames[kind] : "?"; }

std::string epilogueNameList() {
  std::string s;
  for (int k = 0; k < kNumEpilogues; ++k)
    s += std::string(k == 0 ? "" : k + 1 == kNumEpilogues ? " or " : ", ") + kNames[k];
  return s;
}

bool parseEpilogue(const std::string& name, int* kind) {
  for (int k = 0; k < kNumEpilogues; ++k)
    if (name == kNames[k]) {
      *kind = k;
      return true;
    }
  return false;
}

EpilogueForm epilogueForm(int kind) {
  EpilogueForm f;
  f.viaEpilogue = kind != kEpilogueNone;
  f.residualIn = kind != kEpilogueFirst;
  f.plusOne = kind == kEpiloguePlusOne;
  switch (kind) {
    case kEpilogueFp8:
      f.quant = arfuseQuantFp8Static;
      break;
    case kEpilogueFp8Token:
      f.quant = arfuseQuantFp8PerToken;
      break;
    case kEpilogueNvfp4:
      f.quant = arfuseQuantNvfp4;
      break;
    case kEpilogueNvfp4Swizzled:
      f.quant = arfuseQuantNvfp4;
      f.layout = arfuseScaleSwizzled128x4;
      break;
    default:
      break;
  }
  f.normOut = f.quant == arfuseQuantNone;  // quantised: the next GEMM reads only the quantised tensor
  return f;
}

float epilogueScaleIn(int quant) {
  if (quant == arfuseQuantFp8Static) return 8.0f / 448.0f;
  if (quant == arfuseQuantNvfp4) return 448.0f * 6.0f / 8.0f;
  return 0.0f;
}

size_t quantOutBytes(int quant, int tokens, int hidden) {
  const size_t count = static_cast<size_t>(tokens) * hidden;
  if (quant == arfuseQuantFp8Static || quant == arfuseQuantFp8PerToken) return count;
  if (quant == arfuseQuantNvfp4) return count / 2;
  return 0;
}

size_t scaleOutBytes(int quant, int layout, int tokens, int hidden) {
  if (quant == arfuseQuantFp8PerToken) return static_cast<size_t>(tokens) * sizeof(float);
  if (quant == arfuseQuantNvfp4) return quant::sfBytes(layout, tokens, hidden / quant::kNvfp4Block);
  return 0;
}

EpilogueBytes epilogueBytes(int kind, int tokens, int hidden, size_t esize) {
  const EpilogueForm f = epilogueForm(kind);
  const size_t n = static_cast<size_t>(tokens) * hidden * esize;
  EpilogueBytes b;
  b.x = n;
  b.residualIn = f.residualIn ? n : 0;
  b.weight = static_cast<size_t>(hidden) * esize;
  b.residualOut = f.residualOut ? n : 0;
  b.normOut = f.normOut ? n : 0;
  b.quant = quantOutBytes(f.quant, tokens, hidden);
  b.scaleOut = scaleOutBytes(f.quant, f.layout, tokens, hidden);
  b.scaleIn = f.quant == arfuseQuantFp8Static || f.quant == arfuseQuantNvfp4 ? sizeof(float) : 0;
  return b;
}

bool referenceQuant(int quant, int layout, float scaleIn, const float* norm, int tokens, int hidden,
                    std::vector<uint8_t>* q, std::vector<uint8_t>* sf) {
  q->assign(quantOutBytes(quant, tokens, hidden), 0);
  sf->assign(scaleOutBytes(quant, layout, tokens, hidden), 0);
  for (int t = 0; t < tokens; ++t) {
    const float* v = norm + static_cast<size_t>(t) * hidden;
    if (quant == arfuseQuantFp8Static) {
      quant::refFp8StaticRow(v, hidden, scaleIn, q->data() + static_cast<size_t>(t) * hidden);
    } else if (quant == arfuseQuantFp8PerToken) {
      const float s = quant::refFp8PerTokenRow(v, hidden, q->data() + static_cast<size_t>(t) * hidden);
      std::memcpy(sf->data() + static_cast<size_t>(t) * sizeof s, &s, sizeof s);
    }
  }
  if (quant == arfuseQuantNvfp4)
    return quant::refNvfp4Tensor(norm, tokens, hidden, scaleIn, layout, q->data(), sf->data());
  return quant == arfuseQuantFp8Static || quant == arfuseQuantFp8PerToken;
}

EpilogueCheck checkEpilogue(const EpilogueCase& c, const std::vector<EpilogueOutputs>& out) {
  EpilogueCheck res;
  std::ostringstream why;
  const int n = static_cast<int>(c.x.size());
  const size_t count = static_cast<size_t>(c.tokens) * c.hidden;
  const size_t bytes = count * numeric::elemSize(c.dtype);
  const EpilogueForm& f = c.form;
  if (n < 1 || static_cast<int>(out.size()) != n) {
    res.error = "epilogue check: one output set per rank needed";
    return res;
  }
  // Every requested output written with its full size.
  for (int r = 0; r < n; ++r) {
    const EpilogueOutputs& o = out[r];
    if ((f.residualOut && o.residual.size() != bytes) || (f.normOut && o.norm.size() != bytes) ||
        o.quant.size() != quantOutBytes(f.quant, c.tokens, c.hidden) ||
        o.scale.size() != scaleOutBytes(f.quant, f.layout, c.tokens, c.hidden)) {
      res.error = "epilogue check: rank " + std::to_string(r) + "'s outputs have the wrong sizes";
      return res;
    }
  }
  res.identical = true;
  for (int r = 1; r < n; ++r) {
    const char* what = out[r].residual != out[0].residual ? "residual_out"
                       : out[r].norm != out[0].norm       ? "norm_out"
                       : out[r].quant != out[0].quant     ? "quant_out"
                       : out[r].scale != out[0].scale     ? "scale_out"
                                                          : nullptr;
    if (what && res.identical) {
      res.identical = false;
      why << " " << what << " differs on rank " << r << ";";
    }
  }
  // The residual: round(sum [+ residual_in]). arfuse sums in fp32 in rank order, rounded once: exact.
  std::vector<float> exact(count);
  std::vector<double> ref(count);
  for (size_t i = 0; i < count; ++i) {
    float acc = 0.f;
    double d = 0;
    for (int s = 0; s < n; ++s) {
      acc += numeric::load(c.x[s], i, c.dtype);
      d += numeric::load(c.x[s], i, c.dtype);
    }
    if (f.residualIn) {
      acc += numeric::load(c.residualIn, i, c.dtype);
      d += numeric::load(c.residualIn, i, c.dtype);
    }
    exact[i] = numeric::round(acc, c.dtype);
    ref[i] = d;
  }
  const double tol = numeric::tolerance(c.dtype);
  // The residual the norm is defined on: the kernel's own (checked here) where it wrote one.
  std::vector<double> r(count);
  for (size_t i = 0; i < count; ++i)
    r[i] = f.residualOut ? numeric::load(out[0].residual.data(), i, c.dtype) : exact[i];
  bool residualOk = true;
  if (f.residualOut) {
    if (c.exactSum) {
      size_t wrong = 0;
      for (size_t i = 0; i < count; ++i) wrong += !(r[i] == static_cast<double>(exact[i]));  // NaN counts
      res.errResidual = static_cast<double>(wrong);
      residualOk = wrong == 0;
      if (!residualOk) why << " residual_out: " << wrong << " elements differ from the fp32 rank-order sum;";
    } else {
      double num = 0, den = 0;
      for (size_t i = 0; i < count; ++i) num += (r[i] - ref[i]) * (r[i] - ref[i]), den += ref[i] * ref[i];
      res.errResidual = std::isnan(num) ? INFINITY : std::sqrt(num / (den > 0 ? den : 1e-300));
      residualOk = res.errResidual <= tol * n;
      if (!residualOk) why << " residual_out errResidual=" << res.errResidual << " (tol " << tol * n << ");";
    }
  }
  bool normOk = true, quantOk = true;
  if (f.normOut) {
    std::vector<float> nv(count);
    double num = 0, den = 0;
    for (int t = 0; t < c.tokens; ++t) {
      const double* row = &r[static_cast<size_t>(t) * c.hidden];
      double sq = 0;
      for (int h = 0; h < c.hidden; ++h) sq += row[h] * row[h];
      const double inv = 1.0 / std::sqrt(sq / c.hidden + c.eps);
      for (int h = 0; h < c.hidden; ++h) {
        const size_t j = static_cast<size_t>(t) * c.hidden + h;
        const double w = numeric::load(c.weight, h, c.dtype) + (f.plusOne ? 1.0 : 0.0);
        const double want = row[h] * inv * w;
        nv[j] = numeric::load(out[0].norm.data(), j, c.dtype);
        num += (nv[j] - want) * (nv[j] - want);
        den += want * want;
      }
    }
    res.errNorm = std::isnan(num) ? INFINITY : std::sqrt(num / (den > 0 ? den : 1e-300));
    normOk = res.errNorm <= tol;
    if (!normOk) why << " norm_out errNorm=" << res.errNorm << " (tol " << tol << ");";
    if (f.quant != arfuseQuantNone) {
      std::vector<uint8_t> q, sf;
      if (!referenceQuant(f.quant, f.layout, c.scaleIn, nv.data(), c.tokens, c.hidden, &q, &sf)) {
        res.error = "epilogue check: the quantisation reference refuses this shape";
        return res;
      }
      for (size_t i = 0; i < q.size(); ++i) res.wrongQuant += q[i] != out[0].quant[i];
      for (size_t i = 0; i < sf.size(); ++i) res.wrongScale += sf[i] != out[0].scale[i];
      quantOk = res.wrongQuant == 0 && res.wrongScale == 0;
      if (!quantOk)
        why << " quantised bytes differing from the CPU reference: " << res.wrongQuant << " of " << q.size()
            << " values, " << res.wrongScale << " of " << sf.size() << " scale bytes;";
    }
  }
  res.ok = res.identical && residualOk && normOk && quantOk;
  if (!res.ok) res.error = "epilogue check failed:" + why.str();
  return res;
}

std::string sameQuantisedOutputs(const std::vector<EpilogueOutputs>& a, const std::vector<EpilogueOutputs>& b) {
  if (a.size() != b.size()) return "different rank counts";
  for (size_t r = 0; r < a.size(); ++r) {
    auto differ = [](const std::vector<uint8_t>& x, const std::vector<uint8_t>& y) {
      return !x.empty() && !y.empty() && x != y;
    };
    if (differ(a[r].residual, b[r].residual))
      return "residual_out differs with norm_out written (rank " + std::to_string(r) + ")";
    if (differ(a[r].quant, b[r].quant))
      return "quant_out differs with norm_out written (rank " + std::to_string(r) + ")";
    if (differ(a[r].scale, b[r].scale))
      return "scale_out differs with norm_out written (rank " + std::to_string(r) + ")";
  }
  return "";
}

}  // namespace harness
}  // namespace arfuse
