// Topology <-> JSON. The schema is documented field by field in docs/topology.md.
//
// The writer puts one GPU and one link per line: a recorded 8-GPU machine is ~70 lines that a
// reviewer can read and a diff can show pair by pair. Absent optional fields are omitted (never
// written as null), so there is exactly one spelling of every value and write(read(x)) is stable.
//
// The reader is strict because these files key calibration and drive path selection: a typo such as
// "read_gpbs" silently ignored would turn a measured fact into "not measured" without anyone noticing.
#include <charconv>
#include <cmath>
#include <fstream>
#include <sstream>
#include <type_traits>

#include "json.h"
#include "topology.h"

namespace arfuse {
namespace topo {

namespace {

constexpr const char* kSchema = "arfuse-topology/1";

using json::Pos;
using json::Value;

std::string at(Pos p) { return std::to_string(p.line) + ":" + std::to_string(p.col); }

// ---- writer ---------------------------------------------------------------------------------

void key(std::string* o, const char* k) {
  json::appendString(o, k);
  *o += ": ";
}

void field(std::string* o, bool* first, const char* k) {
  if (!*first) *o += ", ";
  *first = false;
  key(o, k);
}

// A field's value, spelled once for each type the schema uses.
void appendValue(std::string* o, bool v) { *o += v ? "true" : "false"; }
void appendValue(std::string* o, double v) { *o += json::formatDouble(v); }
void appendValue(std::string* o, const std::string& v) { json::appendString(o, v); }
void appendValue(std::string* o, const char* v) { json::appendString(o, v); }
template <typename I, typename = std::enable_if_t<std::is_integral_v<I>>>
void appendValue(std::string* o, I v) {
  *o += std::to_string(v);
}

template <typename T>
void field(std::string* o, bool* first, const char* k, const T& v) {
  field(o, first, k);
  appendValue(o, v);
}
// An absent optional is left out (never written as null).
template <typename T>
void field(std::string* o, bool* first, const char* k, const std::optional<T>& v) {
  if (v) field(o, first, k, *v);
}

void writeGpu(std::string* o, const Gpu& g) {
  bool first = true;
  *o += "{";
  field(o, &first, "index", g.index);
  field(o, &first, "name", g.name);
  field(o, &first, "uuid", g.uuid);
  field(o, &first, "pci_bus_id", g.pciBusId);
  field(o, &first, "cc_major", g.ccMajor);
  field(o, &first, "cc_minor", g.ccMinor);
  field(o, &first, "sm_count", g.smCount);
  field(o, &first, "numa_node", g.numaNode);
  field(o, &first, "memory_bytes", g.memoryBytes);
  field(o, &first, "pcie_gen", g.pcieGen);
  field(o, &first, "pcie_width", g.pcieWidth);
  if (g.host.any()) {
    field(o, &first, "measured");
    bool f2 = true;
    *o += "{";
    field(o, &f2, "host_read_gbps", g.host.readGBps);
    field(o, &f2, "host_write_gbps", g.host.writeGBps);
    field(o, &f2, "host_flag_rtt_us", g.host.flagRoundTripUs);
    *o += "}";
  }
  *o += "}";
}

void writeMeasured(std::string* o, const Measured& m) {
  bool first = true;
  *o += "{";
  field(o, &first, "peer_load", m.peerLoad);
  field(o, &first, "peer_store", m.peerStore);
  field(o, &first, "read_gbps", m.readGBps);
  field(o, &first, "write_gbps", m.writeGBps);
  field(o, &first, "flag_latency_us", m.flagLatencyUs);
  field(o, &first, "solo_read_gbps", m.soloReadGBps);
  *o += "}";
}

void writeLink(std::string* o, const Link& l) {
  bool first = true;
  *o += "{";
  field(o, &first, "from", l.from);
  field(o, &first, "to", l.to);
  field(o, &first, "can_access_peer", l.canAccessPeer);
  field(o, &first, "p2p_read", p2pStatusName(l.p2pRead));
  field(o, &first, "p2p_write", p2pStatusName(l.p2pWrite));
  field(o, &first, "p2p_atomics", p2pStatusName(l.p2pAtomics));
  field(o, &first, "nvlinks", l.nvlinks);
  field(o, &first, "pcie", pcieLinkName(l.pcie));
  if (l.measured.any()) {
    field(o, &first, "measured");
    writeMeasured(o, l.measured);
  }
  *o += "}";
}

void optionalString(std::string* o, const char* k, const std::optional<std::string>& v) {
  if (!v) return;
  *o += "  ";
  key(o, k);
  json::appendString(o, *v);
  *o += ",\n";
}

// ---- reader ---------------------------------------------------------------------------------

class Reader {
 public:
  bool failed() const { return !err_.empty(); }
  const std::string& error() const { return err_; }

  bool fail(const std::string& path, Pos p, const std::string& msg) {
    if (err_.empty()) err_ = path + " at " + at(p) + ": " + msg;
    return false;
  }

  // An object being read: remembers which keys were consumed so leftovers can be reported.
  class Obj {
   public:
    Obj(Reader* r, const Value& v, std::string path) : r_(r), v_(v), path_(std::move(path)) {
      used_.assign(v.members.size(), false);
    }
    std::string path(const char* k) const { return path_.empty() ? std::string(k) : path_ + "." + k; }
    const Value* find(const char* k, bool required) {
      for (size_t i = 0; i < v_.members.size(); ++i) {
        if (v_.members[i].key == k) {
          used_[i] = true;
          return &v_.members[i].value;
        }
      }
      if (required) {
        r_->fail(path(k), v_.pos, std::string("missing required field \"") + k + "\" in the object starting here");
      }
      return nullptr;
    }
    // Call last: any key not consumed is an error (typos must not pass as "absent").
    bool noUnknown() {
      for (size_t i = 0; i < v_.members.size(); ++i) {
        if (!used_[i]) return r_->fail(path(v_.members[i].key.c_str()), v_.members[i].keyPos, "unknown field");
      }
      return true;
    }

    bool str(const char* k, std::string* out) { return strImpl(k, true, out); }
    bool optStr(const char* k, std::optional<std::string>* out) {
      std::string s;
      if (!strImpl(k, false, &s, out)) return false;
      return true;
    }
    bool boolean(const char* k, bool* out) {
      const Value* v = find(k, true);
      if (!v) return false;
      return r_->asBool(path(k), *v, out);
    }
    bool optBool(const char* k, std::optional<bool>* out) {
      const Value* v = find(k, false);
      if (!v) return !r_->failed();
      bool b = false;
      if (!r_->asBool(path(k), *v, &b)) return false;
      *out = b;
      return true;
    }
    bool integer(const char* k, int64_t lo, int64_t hi, int64_t* out) {
      const Value* v = find(k, true);
      if (!v) return false;
      return r_->asInt(path(k), *v, lo, hi, out);
    }
    bool optInt(const char* k, int64_t lo, int64_t hi, std::optional<int>* out) {
      const Value* v = find(k, false);
      if (!v) return !r_->failed();
      int64_t x = 0;
      if (!r_->asInt(path(k), *v, lo, hi, &x)) return false;
      *out = static_cast<int>(x);
      return true;
    }
    bool optDouble(const char* k, std::optional<double>* out) {
      const Value* v = find(k, false);
      if (!v) return !r_->failed();
      double x = 0;
      if (!r_->asDouble(path(k), *v, &x)) return false;
      *out = x;
      return true;
    }

   private:
    bool strImpl(const char* k, bool required, std::string* s, std::optional<std::string>* opt = nullptr) {
      const Value* v = find(k, required);
      if (!v) return !r_->failed();
      if (v->kind != Value::Kind::kString) return r_->typeError(path(k), *v, "a string");
      *s = v->text;
      if (opt) *opt = v->text;
      return true;
    }

    Reader* r_;
    const Value& v_;
    std::string path_;
    std::vector<bool> used_;
  };

  bool typeError(const std::string& path, const Value& v, const char* want) {
    return fail(path, v.pos, std::string("expected ") + want + ", got " + json::kindName(v.kind));
  }
  bool asBool(const std::string& path, const Value& v, bool* out) {
    if (v.kind != Value::Kind::kBool) return typeError(path, v, "true or false");
    *out = v.boolean;
    return true;
  }
  bool asInt(const std::string& path, const Value& v, int64_t lo, int64_t hi, int64_t* out) {
    if (v.kind != Value::Kind::kNumber) return typeError(path, v, "an integer");
    if (v.text.find_first_of(".eE") != std::string::npos) {
      return fail(path, v.pos, "expected an integer, got " + v.text);
    }
    int64_t x = 0;
    auto r = std::from_chars(v.text.data(), v.text.data() + v.text.size(), x);
    if (r.ec != std::errc() || r.ptr != v.text.data() + v.text.size() || x < lo || x > hi) {
      return fail(path, v.pos, v.text + " is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    }
    *out = x;
    return true;
  }
  bool asDouble(const std::string& path, const Value& v, double* out) {
    if (v.kind != Value::Kind::kNumber) return typeError(path, v, "a number");
    double x = 0;
    auto r = std::from_chars(v.text.data(), v.text.data() + v.text.size(), x);
    if (r.ec != std::errc() || r.ptr != v.text.data() + v.text.size() || !std::isfinite(x)) {
      return fail(path, v.pos, v.text + " is not representable as a finite double");
    }
    if (x < 0) return fail(path, v.pos, "must not be negative, got " + v.text);
    *out = x;
    return true;
  }

  template <typename E>
  bool asEnum(Obj& o, const char* k, std::optional<E> (*parseFn)(std::string_view), E* out) {
    std::string s;
    if (!o.str(k, &s)) return false;
    auto e = parseFn(s);
    if (!e) {
      const Value* v = o.find(k, true);
      return fail(o.path(k), v->pos, "unknown value \"" + s + "\"");
    }
    *out = *e;
    return true;
  }

  bool gpu(const Value& v, int i, Gpu* g) {
    std::string p = "gpus[" + std::to_string(i) + "]";
    if (v.kind != Value::Kind::kObject) return typeError(p, v, "an object");
    Obj o(this, v, p);
    int64_t x = 0;
    if (!o.integer("index", 0, 1 << 20, &x)) return false;
    if (x != i) {
      return fail(o.path("index"), o.find("index", true)->pos,
                  "is " + std::to_string(x) + " but this is entry " + std::to_string(i) +
                      " (gpus are listed in index order, starting at 0)");
    }
    g->index = i;
    if (!o.str("name", &g->name) || !o.str("uuid", &g->uuid) || !o.str("pci_bus_id", &g->pciBusId)) return false;
    if (!o.integer("cc_major", 1, 99, &x)) return false;
    g->ccMajor = static_cast<int>(x);
    if (!o.integer("cc_minor", 0, 99, &x)) return false;
    g->ccMinor = static_cast<int>(x);
    if (!o.integer("sm_count", 1, 1 << 20, &x)) return false;
    g->smCount = static_cast<int>(x);
    if (!o.optInt("numa_node", 0, 1 << 20, &g->numaNode)) return false;
    if (!o.integer("memory_bytes", 0, INT64_MAX, &g->memoryBytes)) return false;
    if (!o.optInt("pcie_gen", 1, 16, &g->pcieGen) || !o.optInt("pcie_width", 1, 64, &g->pcieWidth)) return false;
    if (const Value* m = o.find("measured", false)) {
      if (m->kind != Value::Kind::kObject) return typeError(o.path("measured"), *m, "an object");
      Obj h(this, *m, o.path("measured"));
      if (!h.optDouble("host_read_gbps", &g->host.readGBps) || !h.optDouble("host_write_gbps", &g->host.writeGBps) ||
          !h.optDouble("host_flag_rtt_us", &g->host.flagRoundTripUs) || !h.noUnknown()) {
        return false;
      }
    }
    return o.noUnknown();
  }

  bool measured(const Value& v, const std::string& p, Measured* m) {
    if (v.kind != Value::Kind::kObject) return typeError(p, v, "an object");
    Obj o(this, v, p);
    if (!o.optBool("peer_load", &m->peerLoad) || !o.optBool("peer_store", &m->peerStore) ||
        !o.optDouble("read_gbps", &m->readGBps) || !o.optDouble("write_gbps", &m->writeGBps) ||
        !o.optDouble("flag_latency_us", &m->flagLatencyUs) || !o.optDouble("solo_read_gbps", &m->soloReadGBps)) {
      return false;
    }
    return o.noUnknown();
  }

  bool link(const Value& v, int k, int n, Link* l) {
    std::string p = "links[" + std::to_string(k) + "]";
    if (v.kind != Value::Kind::kObject) return typeError(p, v, "an object");
    Obj o(this, v, p);
    int64_t from = 0, to = 0;
    if (!o.integer("from", 0, n - 1, &from) || !o.integer("to", 0, n - 1, &to)) return false;
    // Position k must hold the k-th ordered pair: this one check rules out gaps, duplicates,
    // self-links and disorder, and the message says which pair was expected.
    int wantFrom = k / (n - 1), wantTo = k % (n - 1);
    if (wantTo >= wantFrom) ++wantTo;
    if (from != wantFrom || to != wantTo) {
      return fail(p, v.pos,
                  "expected the pair " + std::to_string(wantFrom) + "->" + std::to_string(wantTo) + ", found " +
                      std::to_string(from) + "->" + std::to_string(to) +
                      " (links list every ordered pair once, sorted by from, then to)");
    }
    l->from = static_cast<int>(from);
    l->to = static_cast<int>(to);
    if (!o.boolean("can_access_peer", &l->canAccessPeer)) return false;
    if (!asEnum(o, "p2p_read", parseP2pStatus, &l->p2pRead) || !asEnum(o, "p2p_write", parseP2pStatus, &l->p2pWrite) ||
        !asEnum(o, "p2p_atomics", parseP2pStatus, &l->p2pAtomics)) {
      return false;
    }
    if (!o.optInt("nvlinks", 0, 64, &l->nvlinks)) return false;
    if (!asEnum(o, "pcie", parsePcieLink, &l->pcie)) return false;
    if (const Value* m = o.find("measured", false)) {
      if (!measured(*m, o.path("measured"), &l->measured)) return false;
    }
    return o.noUnknown();
  }

  bool notes(Obj& o, std::vector<std::string>* out) {
    const Value* v = o.find("notes", true);
    if (!v) return false;
    if (v->kind != Value::Kind::kArray) return typeError("notes", *v, "an array of strings");
    for (size_t i = 0; i < v->items.size(); ++i) {
      const Value& s = v->items[i];
      if (s.kind != Value::Kind::kString) return typeError("notes[" + std::to_string(i) + "]", s, "a string");
      out->push_back(s.text);
    }
    return true;
  }

  bool topology(const Value& root, Topology* t) {
    if (root.kind != Value::Kind::kObject) return typeError("(document)", root, "an object");
    Obj o(this, root, "");
    std::string schema;
    if (!o.str("schema", &schema)) return false;
    if (schema != kSchema) {
      return fail("schema", o.find("schema", true)->pos,
                  "unsupported schema \"" + schema + "\" (this reader understands \"" + kSchema + "\")");
    }
    if (!o.str("source", &t->source) || !o.optStr("hostname", &t->hostname) ||
        !o.optStr("driver_version", &t->driverVersion) || !o.optStr("cuda_runtime_version", &t->cudaRuntimeVersion) ||
        !o.optStr("nccl_version", &t->ncclVersion) || !o.optStr("nvml_version", &t->nvmlVersion) ||
        !notes(o, &t->notes)) {
      return false;
    }
    const Value* gpus = o.find("gpus", true);
    if (!gpus) return false;
    if (gpus->kind != Value::Kind::kArray) return typeError("gpus", *gpus, "an array");
    if (gpus->items.empty()) return fail("gpus", gpus->pos, "must list at least one GPU");
    t->gpus.resize(gpus->items.size());
    for (size_t i = 0; i < gpus->items.size(); ++i) {
      if (!gpu(gpus->items[i], static_cast<int>(i), &t->gpus[i])) return false;
    }
    const Value* links = o.find("links", true);
    if (!links) return false;
    if (links->kind != Value::Kind::kArray) return typeError("links", *links, "an array");
    int n = t->size();
    size_t want = static_cast<size_t>(n) * (n - 1);
    if (links->items.size() != want) {
      return fail("links", links->pos,
                  "has " + std::to_string(links->items.size()) + " entries, " + std::to_string(n) + " GPUs need " +
                      std::to_string(want) + " (every ordered pair)");
    }
    t->links.resize(want);
    for (size_t k = 0; k < want; ++k) {
      if (!link(links->items[k], static_cast<int>(k), n, &t->links[k])) return false;
    }
    return o.noUnknown();
  }

 private:
  std::string err_;
};

}  // namespace

std::string toJson(const Topology& t) {
  std::string o;
  o += "{\n  ";
  key(&o, "schema");
  json::appendString(&o, kSchema);
  o += ",\n  ";
  key(&o, "source");
  json::appendString(&o, t.source);
  o += ",\n";
  optionalString(&o, "hostname", t.hostname);
  optionalString(&o, "driver_version", t.driverVersion);
  optionalString(&o, "cuda_runtime_version", t.cudaRuntimeVersion);
  optionalString(&o, "nccl_version", t.ncclVersion);
  optionalString(&o, "nvml_version", t.nvmlVersion);
  o += "  ";
  key(&o, "notes");
  if (t.notes.empty()) {
    o += "[],\n";
  } else {
    o += "[\n";
    for (size_t i = 0; i < t.notes.size(); ++i) {
      o += "    ";
      json::appendString(&o, t.notes[i]);
      o += i + 1 < t.notes.size() ? ",\n" : "\n";
    }
    o += "  ],\n";
  }
  o += "  ";
  key(&o, "gpus");
  o += "[\n";
  for (size_t i = 0; i < t.gpus.size(); ++i) {
    o += "    ";
    writeGpu(&o, t.gpus[i]);
    o += i + 1 < t.gpus.size() ? ",\n" : "\n";
  }
  o += "  ],\n  ";
  key(&o, "links");
  if (t.links.empty()) {
    o += "[]\n";
  } else {
    o += "[\n";
    for (size_t i = 0; i < t.links.size(); ++i) {
      o += "    ";
      writeLink(&o, t.links[i]);
      o += i + 1 < t.links.size() ? ",\n" : "\n";
    }
    o += "  ]\n";
  }
  o += "}\n";
  return o;
}

Status fromJson(std::string_view text, Topology* out) {
  Value root;
  ARFUSE_CHECK_PREFIXED("JSON syntax error at ", json::parse(text, &root));
  Reader r;
  Topology t;
  if (!r.topology(root, &t)) return ARFUSE_FAIL_TEXT(arfuseInvalidArgument, r.error());
  std::string bad = validate(t);
  if (!bad.empty()) return ARFUSE_FAIL_TEXT(arfuseInvalidArgument, "invalid topology: " + bad);
  *out = std::move(t);
  return Status();
}

Status readJsonFile(const std::string& path, Topology* out) {
  std::string text;
  ARFUSE_CHECK(json::readFile(path, &text));  // regular files only, size-capped
  ARFUSE_CHECK_PREFIXED(path + ": ", fromJson(text, out));
  return Status();
}

}  // namespace topo
}  // namespace arfuse
