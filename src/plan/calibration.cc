#include "plan/calibration.h"

#include <algorithm>
#include <charconv>
#include <climits>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "topo/json.h"

namespace arfuse {

namespace json = topo::json;

namespace {

// ---- crossovers ---------------------------------------------------------------------------------

int algoRank(const std::string& a) {
  const auto& all = calibrationAlgos();
  return static_cast<int>(std::find(all.begin(), all.end(), a) - all.begin());
}

// The fastest path at each measured size (ties: plan order).
std::map<long long, std::string> bestBySize(const std::vector<CalibrationPoint>& points) {
  std::map<long long, const CalibrationPoint*> best;
  for (const CalibrationPoint& p : points) {
    auto it = best.find(p.bytes);
    if (it == best.end() || p.us < it->second->us ||
        (p.us == it->second->us && algoRank(p.algo) < algoRank(it->second->algo)))
      best[p.bytes] = &p;
  }
  std::map<long long, std::string> out;
  for (const auto& kv : best) out[kv.first] = kv.second->algo;
  return out;
}

std::string bytesText(long long v) { return v == LLONG_MAX ? std::string("unlimited") : std::to_string(v) + " B"; }

// Bounds on what a file may say: far above any measurement (a 1 TiB message, 16M tokens, 1000 s a
// call), low enough that the policy's arithmetic on them cannot overflow (kMaxBytes x 1023 peers
// < 2^63). ARFUSE_ONESHOT_MAX_BYTES has the same byte bound.
constexpr long long kMaxBytes = 1ll << 40;
constexpr long long kMaxTokens = 1ll << 24;
constexpr double kMaxUs = 1e9;

// a x b, or LLONG_MAX when it does not fit: a limit that overflowed is no limit, never a negative
// one that silently turns a path off.
long long saturatingMul(long long a, long long b) {
  long long r = 0;
  return __builtin_mul_overflow(a, b, &r) || r < 0 ? LLONG_MAX : r;
}

// ---- writer -------------------------------------------------------------------------------------

void str(std::string* o, const std::string& s) { json::appendString(o, s); }

// ---- reader -------------------------------------------------------------------------------------

class Reader {
 public:
  const std::string& error() const { return err_; }
  bool fail(const std::string& path, json::Pos p, const std::string& msg) {
    if (err_.empty()) err_ = path + " at " + std::to_string(p.line) + ":" + std::to_string(p.col) + ": " + msg;
    return false;
  }
  bool want(const std::string& path, const json::Value& v, json::Value::Kind k, const char* what) {
    if (v.kind == k) return true;
    return fail(path, v.pos, std::string("expected ") + what + ", got " + json::kindName(v.kind));
  }

  class Obj {
   public:
    Obj(Reader* r, const json::Value& v, std::string path) : r_(r), v_(v), path_(std::move(path)) {
      used_.assign(v.members.size(), false);
    }
    std::string path(const std::string& k) const { return path_.empty() ? k : path_ + "." + k; }
    const json::Value* get(const char* k, bool required = true) {
      for (size_t i = 0; i < v_.members.size(); ++i) {
        if (v_.members[i].key == k) {
          used_[i] = true;
          return &v_.members[i].value;
        }
      }
      if (required) r_->fail(path(k), v_.pos, std::string("missing required field \"") + k + "\"");
      return nullptr;
    }
    bool text(const char* k, std::string* out) {
      const json::Value* v = get(k);
      if (!v || !r_->want(path(k), *v, json::Value::Kind::kString, "a string")) return false;
      *out = v->text;
      return true;
    }
    bool integer(const char* k, long long lo, long long hi, long long* out) {
      const json::Value* v = get(k);
      return v && r_->integer(path(k), *v, lo, hi, out);
    }
    bool boolean(const char* k, bool* out) {
      const json::Value* v = get(k);
      if (!v || !r_->want(path(k), *v, json::Value::Kind::kBool, "true or false")) return false;
      *out = v->boolean;
      return true;
    }
    bool done() {
      for (size_t i = 0; i < used_.size(); ++i)
        if (!used_[i]) return r_->fail(path(v_.members[i].key), v_.members[i].keyPos, "unknown field");
      return true;
    }

   private:
    Reader* r_;
    const json::Value& v_;
    std::string path_;
    std::vector<bool> used_;
  };

  bool integer(const std::string& path, const json::Value& v, long long lo, long long hi, long long* out) {
    if (!want(path, v, json::Value::Kind::kNumber, "an integer")) return false;
    if (v.text.find_first_of(".eE") != std::string::npos)
      return fail(path, v.pos, "expected an integer, got " + v.text);
    long long x = 0;
    auto r = std::from_chars(v.text.data(), v.text.data() + v.text.size(), x);
    if (r.ec != std::errc() || r.ptr != v.text.data() + v.text.size() || x < lo || x > hi)
      return fail(path, v.pos, v.text + " is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    *out = x;
    return true;
  }

  bool point(const json::Value& v, const std::string& p, CalibrationPoint* out) {
    if (!want(p, v, json::Value::Kind::kObject, "an object")) return false;
    Obj o(this, v, p);
    long long tokens = 0;
    if (!o.text("algo", &out->algo)) return false;
    if (algoRank(out->algo) >= static_cast<int>(calibrationAlgos().size()))
      return fail(o.path("algo"), o.get("algo")->pos,
                  "unknown path \"" + out->algo + "\" (lowlatency, lowlatency2, oneshot, twoshot, hoststaged or nccl)");
    if (!o.integer("tokens", 1, kMaxTokens, &tokens) || !o.integer("bytes", 1, kMaxBytes, &out->bytes)) return false;
    out->tokens = static_cast<int>(tokens);
    const json::Value* us = o.get("us");
    if (!us || !want(o.path("us"), *us, json::Value::Kind::kNumber, "a number")) return false;
    double x = 0;
    auto r = std::from_chars(us->text.data(), us->text.data() + us->text.size(), x);
    if (r.ec != std::errc() || !std::isfinite(x) || x <= 0)
      return fail(o.path("us"), us->pos, "must be a positive number of microseconds, got " + us->text);
    if (x > kMaxUs) return fail(o.path("us"), us->pos, us->text + " us is over the bound of 1e9 us (1000 s) per call");
    out->us = x;
    return o.done();
  }

  bool group(const json::Value& v, const std::string& p, CalibrationGroup* g) {
    if (!want(p, v, json::Value::Kind::kObject, "an object")) return false;
    Obj o(this, v, p);
    long long n = 0;
    if (!o.integer("nranks", 1, 1024, &n) || !o.boolean("virtual_ranks", &g->virtualRanks)) return false;
    g->nranks = static_cast<int>(n);
    const json::Value* best = o.get("best_up_to_bytes");
    if (!best || !want(o.path("best_up_to_bytes"), *best, json::Value::Kind::kObject, "an object")) return false;
    for (const json::Member& m : best->members) {
      const std::string mp = o.path("best_up_to_bytes") + "." + m.key;
      if (algoRank(m.key) >= static_cast<int>(calibrationAlgos().size()))
        return fail(mp, m.keyPos, "unknown path (lowlatency, lowlatency2, oneshot, twoshot, hoststaged or nccl)");
      long long b = 0;
      if (!integer(mp, m.value, 1, kMaxBytes, &b)) return false;
      g->bestUpTo.emplace_back(m.key, b);
    }
    const json::Value* notes = o.get("notes");
    if (!notes || !want(o.path("notes"), *notes, json::Value::Kind::kArray, "an array of strings")) return false;
    for (size_t i = 0; i < notes->items.size(); ++i) {
      if (!want(o.path("notes") + "[" + std::to_string(i) + "]", notes->items[i], json::Value::Kind::kString,
                "a string"))
        return false;
      g->notes.push_back(notes->items[i].text);
    }
    const json::Value* pts = o.get("points");
    if (!pts || !want(o.path("points"), *pts, json::Value::Kind::kArray, "an array")) return false;
    for (size_t i = 0; i < pts->items.size(); ++i) {
      CalibrationPoint cp;
      if (!point(pts->items[i], o.path("points") + "[" + std::to_string(i) + "]", &cp)) return false;
      g->points.push_back(cp);
    }
    if (!o.done()) return false;
    auto sorted = [](std::vector<std::pair<std::string, long long>> v) {
      std::sort(v.begin(), v.end());
      return v;
    };
    if (sorted(g->bestUpTo) != sorted(calibrationCrossovers(g->points)))
      return fail(o.path("best_up_to_bytes"), best->pos,
                  "disagrees with the points (crossovers come from the measurements; re-run arfuse doctor "
                  "--calibrate instead of editing the file)");
    return true;
  }

  bool file(const json::Value& root, Calibration* c) {
    if (!want("(document)", root, json::Value::Kind::kObject, "an object")) return false;
    Obj o(this, root, "");
    std::string schema;
    if (!o.text("schema", &schema)) return false;
    if (schema != kCalibrationSchema)
      return fail("schema", o.get("schema")->pos,
                  "unsupported schema \"" + schema + "\" (this reader understands \"" + kCalibrationSchema + "\")");
    long long hidden = 0;
    if (!o.text("created", &c->created) || !o.text("arfuse", &c->arfuse) || !o.text("hostname", &c->hostname))
      return false;
    const json::Value* gpus = o.get("gpus");
    if (!gpus || !want("gpus", *gpus, json::Value::Kind::kArray, "an array of GPU UUIDs")) return false;
    if (gpus->items.empty()) return fail("gpus", gpus->pos, "must list at least one GPU");
    for (size_t i = 0; i < gpus->items.size(); ++i) {
      if (!want("gpus[" + std::to_string(i) + "]", gpus->items[i], json::Value::Kind::kString, "a string"))
        return false;
      c->gpus.push_back(gpus->items[i].text);
    }
    if (!o.text("fingerprint", &c->fingerprint) || !o.integer("hidden", 8, 1 << 20, &hidden) ||
        !o.text("dtype", &c->dtype))
      return false;
    c->hidden = static_cast<int>(hidden);
    const json::Value* groups = o.get("groups");
    if (!groups || !want("groups", *groups, json::Value::Kind::kArray, "an array")) return false;
    std::set<int> seen;
    for (size_t i = 0; i < groups->items.size(); ++i) {
      CalibrationGroup g;
      const std::string p = "groups[" + std::to_string(i) + "]";
      if (!group(groups->items[i], p, &g)) return false;
      if (!seen.insert(g.nranks).second)
        return fail(p + ".nranks", groups->items[i].pos, std::to_string(g.nranks) + " ranks appear twice");
      c->groups.push_back(std::move(g));
    }
    return o.done();
  }

 private:
  std::string err_;
};

}  // namespace

const std::vector<std::string>& calibrationAlgos() {
  // lowlatency2: the low-latency path above its one-phase limit, i.e. its two-phase variant
  static const std::vector<std::string> kAlgos = {"lowlatency", "lowlatency2", "oneshot",
                                                  "twoshot",    "hoststaged",  "nccl"};
  return kAlgos;
}

std::vector<std::pair<std::string, long long>> calibrationCrossovers(const std::vector<CalibrationPoint>& points) {
  std::map<std::string, long long> up;
  for (const auto& kv : bestBySize(points)) up[kv.second] = std::max(up[kv.second], kv.first);
  std::vector<std::pair<std::string, long long>> out;
  for (const std::string& a : calibrationAlgos()) {
    auto it = up.find(a);
    if (it != up.end()) out.emplace_back(a, it->second);
  }
  return out;
}

std::string calibrationToJson(const Calibration& c) {
  std::string o = "{\n  \"schema\": ";
  str(&o, kCalibrationSchema);
  o += ",\n  \"created\": ";
  str(&o, c.created);
  o += ",\n  \"arfuse\": ";
  str(&o, c.arfuse);
  o += ",\n  \"hostname\": ";
  str(&o, c.hostname);
  o += ",\n  \"gpus\": [";
  for (size_t i = 0; i < c.gpus.size(); ++i) {
    if (i) o += ", ";
    str(&o, c.gpus[i]);
  }
  o += "],\n  \"fingerprint\": ";
  str(&o, c.fingerprint);
  o += ",\n  \"hidden\": " + std::to_string(c.hidden) + ",\n  \"dtype\": ";
  str(&o, c.dtype);
  o += ",\n  \"groups\": [";
  for (size_t gi = 0; gi < c.groups.size(); ++gi) {
    const CalibrationGroup& g = c.groups[gi];
    o += gi ? ",\n" : "\n";
    o += "    {\n      \"nranks\": " + std::to_string(g.nranks) + ",\n      \"virtual_ranks\": ";
    o += g.virtualRanks ? "true" : "false";
    o += ",\n      \"best_up_to_bytes\": {";
    const auto best = calibrationCrossovers(g.points);
    for (size_t i = 0; i < best.size(); ++i) {
      if (i) o += ", ";
      str(&o, best[i].first);
      o += ": " + std::to_string(best[i].second);
    }
    o += "},\n      \"notes\": [";
    for (size_t i = 0; i < g.notes.size(); ++i) {
      o += i ? ",\n        " : "\n        ";
      str(&o, g.notes[i]);
    }
    o += g.notes.empty() ? "],\n" : "\n      ],\n";
    o += "      \"points\": [";
    for (size_t i = 0; i < g.points.size(); ++i) {
      const CalibrationPoint& p = g.points[i];
      o += i ? ",\n        " : "\n        ";
      o += "{\"algo\": ";
      str(&o, p.algo);
      o += ", \"tokens\": " + std::to_string(p.tokens) + ", \"bytes\": " + std::to_string(p.bytes) +
           ", \"us\": " + json::formatDouble(p.us) + "}";
    }
    o += g.points.empty() ? "]\n    }" : "\n      ]\n    }";
  }
  o += c.groups.empty() ? "]\n}\n" : "\n  ]\n}\n";
  return o;
}

Status calibrationFromJson(std::string_view text, Calibration* out) {
  json::Value root;
  ARFUSE_CHECK_PREFIXED("JSON syntax error at ", json::parse(text, &root));
  Reader r;
  Calibration c;
  if (!r.file(root, &c)) return ARFUSE_FAIL_TEXT(arfuseInvalidArgument, r.error());
  *out = std::move(c);
  return Status();
}

Status policyFromCalibration(const Calibration& c, const std::vector<std::string>& uuids,
                             const std::string& fingerprint, int nranks, const std::string& label, PlanPolicy* policy,
                             std::string* summary) {
  const auto doesNotApply = [&](const std::string& why) {
    return ARFUSE_FAIL_TEXT(arfuseInvalidArgument, label + " does not apply: " + why);
  };
  std::vector<std::string> mine = uuids;
  std::sort(mine.begin(), mine.end());
  mine.erase(std::unique(mine.begin(), mine.end()), mine.end());
  std::vector<std::string> theirs = c.gpus;
  std::sort(theirs.begin(), theirs.end());
  auto list = [](const std::vector<std::string>& v) {
    std::string s;
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + v[i];
    return "[" + s + "]";
  };
  if (mine != theirs) {
    return doesNotApply("it was measured on GPUs " + list(theirs) + ", this group runs on " + list(mine));
  }
  if (fingerprint != c.fingerprint) {
    return doesNotApply("the fabric changed since it was measured (fingerprint " + c.fingerprint + " then, " +
                        fingerprint +
                        " now: a link or P2P status differs, or this process sees them differently, "
                        "e.g. without NVML); re-run `arfuse doctor --calibrate`");
  }
  const CalibrationGroup* g = nullptr;
  std::string have;
  for (const CalibrationGroup& x : c.groups) {
    if (x.nranks == nranks) g = &x;
    have += (have.empty() ? "" : ", ") + std::to_string(x.nranks);
  }
  if (!g) {
    return doesNotApply("it has no measurement for " + std::to_string(nranks) + " ranks (it has " +
                        (have.empty() ? std::string("none") : have) + "); run `arfuse doctor --calibrate --ranks " +
                        std::to_string(nranks) + "`");
  }
  const bool virtualRanks = static_cast<int>(mine.size()) < nranks;
  if (g->virtualRanks != virtualRanks) {
    return doesNotApply("its " + std::to_string(nranks) + "-rank measurement used " +
                        (g->virtualRanks ? "virtual ranks" : "one GPU per rank") + ", this group " +
                        (virtualRanks ? "has virtual ranks" : "has one GPU per rank"));
  }
  if (g->points.empty()) {
    return doesNotApply("its " + std::to_string(nranks) + "-rank group holds no successful measurement");
  }

  // Per path: was it measured, up to which size was it the fastest, and its largest measured size.
  const auto best = bestBySize(g->points);
  std::map<std::string, long long> cross, largestOf;
  for (const auto& kv : best) cross[kv.second] = std::max(cross[kv.second], kv.first);
  for (const CalibrationPoint& p : g->points) largestOf[p.algo] = std::max(largestOf[p.algo], p.bytes);
  const long long largest = best.rbegin()->first;
  auto measured = [&](const char* a) { return largestOf.count(a) != 0; };
  auto crossOf = [&](const char* a) { return cross.count(a) ? cross.at(a) : 0LL; };

  PlanPolicy p = *policy;
  std::vector<std::string> said;
  if (measured("lowlatency")) {
    // Fastest up to its own largest size: the buffer limit decides, not the calibration.
    p.lowLatencyMaxBytes = crossOf("lowlatency") == largestOf["lowlatency"] ? -1 : crossOf("lowlatency");
    said.push_back("lowlatency " + (p.lowLatencyMaxBytes < 0 ? std::string("up to its buffer limit")
                                                             : "<= " + bytesText(p.lowLatencyMaxBytes)));
  }
  if (measured("lowlatency2")) {
    // The two-phase variant's window of the auto plan: up to the largest size where it was fastest.
    p.llTwoPhaseMaxBytes = crossOf("lowlatency2");
    said.push_back(p.llTwoPhaseMaxBytes > 0 ? "lowlatency two-phase <= " + bytesText(p.llTwoPhaseMaxBytes)
                                            : std::string("lowlatency two-phase never the fastest"));
  }
  if (measured("oneshot")) {
    const long long up = crossOf("oneshot");
    p.oneShotMaxBytes = up == largest ? LLONG_MAX : saturatingMul(up, std::max(1, nranks - 1));
    said.push_back("one-shot limit " + bytesText(p.oneShotMaxBytes) + " (x peers)");
  }
  if (measured("nccl")) {
    // The limit applies where peers reach each other, so only the peer paths count against NCCL.
    long long arfuseBest = 0;
    for (const char* a : {"lowlatency", "lowlatency2", "oneshot", "twoshot"})
      arfuseBest = std::max(arfuseBest, crossOf(a));
    p.ncclAboveBytes = best.rbegin()->second == "nccl" ? arfuseBest : -1;
    said.push_back(p.ncclAboveBytes < 0 ? std::string("nccl never above the arfuse paths")
                                        : "nccl above " + bytesText(p.ncclAboveBytes));
  }
  if (measured("hoststaged") && measured("nccl")) {
    // Host-staged against NCCL alone: the choice the plan makes when peers cannot reach each other.
    std::map<long long, double> hs, nc;
    for (const CalibrationPoint& q : g->points) {
      if (q.algo == "hoststaged") hs[q.bytes] = q.us;
      if (q.algo == "nccl") nc[q.bytes] = q.us;
    }
    long long up = 0, common = 0;
    bool winsAtLargest = false;
    for (const auto& kv : hs) {
      auto it = nc.find(kv.first);
      if (it == nc.end()) continue;
      common = kv.first;
      winsAtLargest = kv.second <= it->second;
      if (winsAtLargest) up = kv.first;
    }
    if (common > 0) {
      p.hostStagedMaxBytes = winsAtLargest ? LLONG_MAX : up;
      said.push_back("host-staged limit " + bytesText(p.hostStagedMaxBytes));
    }
  }
  if (said.empty()) {
    return doesNotApply("its " + std::to_string(nranks) + "-rank group measured no path the plan has a limit for");
  }
  p.calibratedFrom = label;
  *policy = p;
  std::string s;
  for (size_t i = 0; i < said.size(); ++i) s += (i ? ", " : "") + said[i];
  *summary = label + " applies (" + std::to_string(nranks) + (virtualRanks ? " virtual" : "") + " ranks, " +
             c.fingerprint + ", measured " + c.created + " at hidden " + std::to_string(c.hidden) + " " + c.dtype +
             "): " + s;
  return Status();
}

Status loadCalibrationPolicy(const std::string& path, const std::vector<std::string>& uuids,
                             const std::string& fingerprint, int nranks, PlanPolicy* policy, std::string* summary) {
  const std::string label = "calibration " + path;
  const std::string prefix = label + " does not apply: ";
  std::string text;
  // Regular files only, size-capped: never blocks on a FIFO.
  ARFUSE_CHECK_PREFIXED(prefix, topo::json::readFile(path, &text));
  Calibration c;
  ARFUSE_CHECK_PREFIXED(prefix, calibrationFromJson(text, &c));
  return policyFromCalibration(c, uuids, fingerprint, nranks, label, policy, summary);
}

}  // namespace arfuse
