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

// ---- the schema: each struct's fields, once ---------------------------------------------------
//
// One function per struct names its fields in the order they are written and read, with what the
// reader accepts: an integer's range (a double must be finite and not negative, an enum one of its
// JSON names, an optional may be absent). V is the Writer (appends each field; an absent optional
// and an empty nested object are left out) or the Reader's Obj (reads and checks each; the first
// problem ends the walk, so the && chains stop there). check() states a fact about the enclosing
// array, tested by the reader right after the field it names; the writer's values were vouched for
// by validate(), so it ignores them.

struct Range {
  int64_t lo, hi;
};

// An enum's JSON names, for the field() overloads that take an enum (none for other types).
template <class E>
struct EnumNames {};
template <>
struct EnumNames<P2pStatus> {
  static const char* name(P2pStatus v) { return p2pStatusName(v); }
  static std::optional<P2pStatus> parse(std::string_view s) { return parseP2pStatus(s); }
};
template <>
struct EnumNames<PcieLink> {
  static const char* name(PcieLink v) { return pcieLinkName(v); }
  static std::optional<PcieLink> parse(std::string_view s) { return parsePcieLink(s); }
};

template <class V, class H>  // H: HostMeasured (const for the writer), and so on below
bool hostFields(V& v, H& h) {
  return v.field("host_read_gbps", h.readGBps) && v.field("host_write_gbps", h.writeGBps) &&
         v.field("host_flag_rtt_us", h.flagRoundTripUs);
}

template <class V, class M>
bool measuredFields(V& v, M& m) {
  return v.field("peer_load", m.peerLoad) && v.field("peer_store", m.peerStore) && v.field("read_gbps", m.readGBps) &&
         v.field("write_gbps", m.writeGBps) && v.field("flag_latency_us", m.flagLatencyUs) &&
         v.field("solo_read_gbps", m.soloReadGBps);
}

// `entry`: the GPU's position in gpus, which its index must equal.
template <class V, class G>
bool gpuFields(V& v, G& g, int entry) {
  const auto isEntry = [&] {
    return g.index == entry ? std::string()
                            : "is " + std::to_string(g.index) + " but this is entry " + std::to_string(entry) +
                                  " (gpus are listed in index order, starting at 0)";
  };
  return v.field("index", g.index, Range{0, 1 << 20}) && v.check("index", isEntry) && v.field("name", g.name) &&
         v.field("uuid", g.uuid) && v.field("pci_bus_id", g.pciBusId) && v.field("cc_major", g.ccMajor, Range{1, 99}) &&
         v.field("cc_minor", g.ccMinor, Range{0, 99}) && v.field("sm_count", g.smCount, Range{1, 1 << 20}) &&
         v.field("numa_node", g.numaNode, Range{0, 1 << 20}) &&
         v.field("memory_bytes", g.memoryBytes, Range{0, INT64_MAX}) && v.field("pcie_gen", g.pcieGen, Range{1, 16}) &&
         v.field("pcie_width", g.pcieWidth, Range{1, 64}) &&
         v.object("measured", g.host, [](V& sub, auto& h) { return hostFields(sub, h); });
}

// `entry`: the link's position in links, which must hold the entry-th ordered pair of n GPUs.
template <class V, class L>
bool linkFields(V& v, L& l, int entry, int n) {
  // This one check rules out gaps, duplicates, self-links and disorder, and the message says which
  // pair was expected. Said of the whole object (nullptr), as it is about both fields.
  const auto isEntry = [&] {
    const int wantFrom = entry / (n - 1);
    int wantTo = entry % (n - 1);
    if (wantTo >= wantFrom) ++wantTo;
    if (l.from == wantFrom && l.to == wantTo) return std::string();
    return "expected the pair " + std::to_string(wantFrom) + "->" + std::to_string(wantTo) + ", found " +
           std::to_string(l.from) + "->" + std::to_string(l.to) +
           " (links list every ordered pair once, sorted by from, then to)";
  };
  return v.field("from", l.from, Range{0, n - 1}) && v.field("to", l.to, Range{0, n - 1}) &&
         v.check(nullptr, isEntry) && v.field("can_access_peer", l.canAccessPeer) && v.field("p2p_read", l.p2pRead) &&
         v.field("p2p_write", l.p2pWrite) && v.field("p2p_atomics", l.p2pAtomics) &&
         v.field("nvlinks", l.nvlinks, Range{0, 64}) && v.field("pcie", l.pcie) &&
         v.object("measured", l.measured, [](V& sub, auto& m) { return measuredFields(sub, m); });
}

// ---- writer ---------------------------------------------------------------------------------

void key(std::string* o, const char* k) {
  json::appendString(o, k);
  *o += ": ";
}

// Appends an object's fields, `"key": value` separated by ", "; the caller writes the braces.
class Writer {
 public:
  explicit Writer(std::string* o) : o_(o) {}

  bool field(const char* k, bool v) { return put(k, v ? "true" : "false"); }
  bool field(const char* k, double v) { return put(k, json::formatDouble(v)); }
  bool field(const char* k, const std::string& v) {
    name(k);
    json::appendString(o_, v);
    return true;
  }
  template <class I, class = std::enable_if_t<std::is_integral_v<I>>>
  bool field(const char* k, I v, Range) {
    return put(k, std::to_string(v));
  }
  template <class E, class = decltype(EnumNames<E>::name)>
  bool field(const char* k, E v) {
    name(k);
    json::appendString(o_, EnumNames<E>::name(v));
    return true;
  }
  // An absent optional is left out (never written as null).
  template <class T, class... R>
  bool field(const char* k, const std::optional<T>& v, R... range) {
    return !v || field(k, *v, range...);
  }
  // A nested object with nothing in it is left out.
  template <class T, class F>
  bool object(const char* k, const T& v, F fields) {
    if (!v.any()) return true;
    name(k);
    *o_ += "{";
    Writer sub(o_);
    fields(sub, v);
    *o_ += "}";
    return true;
  }
  template <class F>
  bool check(const char*, F) {
    return true;
  }

 private:
  void name(const char* k) {
    if (!first_) *o_ += ", ";
    first_ = false;
    key(o_, k);
  }
  bool put(const char* k, const std::string& text) {
    name(k);
    *o_ += text;
    return true;
  }

  std::string* o_;
  bool first_ = true;
};

void writeGpu(std::string* o, const Gpu& g) {
  Writer w(o);
  *o += "{";
  gpuFields(w, g, g.index);
  *o += "}";
}

void writeLink(std::string* o, const Link& l, int entry, int n) {
  Writer w(o);
  *o += "{";
  linkFields(w, l, entry, n);
  *o += "}";
}

void optionalString(std::string* o, const char* k, const std::optional<std::string>& v) {
  if (!v) return;
  *o += "  ";
  key(o, k);
  json::appendString(o, *v);
  *o += ",\n";
}

// How an empty array is written: "[]" on the key's line, or its brackets on two lines as a non-empty
// one's are. gpus has always been written the second way (a valid topology never has it empty, see
// validate()); kept so that no writer's output changes.
enum class EmptyArray { kInline, kOnLines };

// `  "k": [` then the n elements one per line, element(i) writing the i-th, then `  ]` and `end`.
template <class F>
void array(std::string* o, const char* k, size_t n, EmptyArray empty, const char* end, F element) {
  *o += "  ";
  key(o, k);
  if (n == 0 && empty == EmptyArray::kInline) {
    *o += "[]";
  } else {
    *o += "[\n";
    for (size_t i = 0; i < n; ++i) {
      *o += "    ";
      element(i);
      *o += i + 1 < n ? ",\n" : "\n";
    }
    *o += "  ]";
  }
  *o += end;
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

  // An object being read: remembers which keys were consumed so leftovers can be reported. Its
  // field() overloads read what the schema functions above name; each returns false on a problem
  // (recorded in the Reader), and an absent optional is fine.
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

    bool field(const char* k, std::string& out) { return str(k, true, &out); }
    bool field(const char* k, std::optional<std::string>& out) { return str(k, false, nullptr, &out); }
    bool field(const char* k, bool& out) {
      const Value* v = find(k, true);
      return v && r_->asBool(path(k), *v, &out);
    }
    bool field(const char* k, std::optional<bool>& out) {
      return optional<bool>(k, out, [&](const Value& v, bool* b) { return r_->asBool(path(k), v, b); });
    }
    template <class I, class = std::enable_if_t<std::is_integral_v<I>>>
    bool field(const char* k, I& out, Range r) {
      const Value* v = find(k, true);
      int64_t x = 0;
      if (!v || !r_->asInt(path(k), *v, r.lo, r.hi, &x)) return false;
      out = static_cast<I>(x);
      return true;
    }
    template <class I>
    bool field(const char* k, std::optional<I>& out, Range r) {
      return optional<int64_t>(k, out,
                               [&](const Value& v, int64_t* x) { return r_->asInt(path(k), v, r.lo, r.hi, x); });
    }
    bool field(const char* k, std::optional<double>& out) {
      return optional<double>(k, out, [&](const Value& v, double* x) { return r_->asDouble(path(k), v, x); });
    }
    template <class E, class = decltype(EnumNames<E>::parse)>
    bool field(const char* k, E& out) {
      std::string s;
      if (!str(k, true, &s)) return false;
      const std::optional<E> e = EnumNames<E>::parse(s);
      if (!e) return r_->fail(path(k), find(k, true)->pos, "unknown value \"" + s + "\"");
      out = *e;
      return true;
    }
    // An optional nested object, read by `fields` and then checked for unknown keys.
    template <class T, class F>
    bool object(const char* k, T& out, F fields) {
      const Value* m = find(k, false);
      if (!m) return !r_->failed();
      if (m->kind != Value::Kind::kObject) return r_->typeError(path(k), *m, "an object");
      Obj sub(r_, *m, path(k));
      return fields(sub, out) && sub.noUnknown();
    }
    // `problem()` is "" or what is wrong with the field k (nullptr: with this object as a whole).
    template <class F>
    bool check(const char* k, F problem) {
      const std::string p = problem();
      if (p.empty()) return true;
      return k ? r_->fail(path(k), find(k, true)->pos, p) : r_->fail(path_, v_.pos, p);
    }

   private:
    // An optional field: absent is fine (unless the walk already failed); present, `read` checks it
    // and converts it to X, which `out` then holds as its own type.
    template <class X, class T, class Read>
    bool optional(const char* k, std::optional<T>& out, Read read) {
      const Value* v = find(k, false);
      if (!v) return !r_->failed();
      X x{};
      if (!read(*v, &x)) return false;
      out = static_cast<T>(x);
      return true;
    }
    bool str(const char* k, bool required, std::string* s, std::optional<std::string>* opt = nullptr) {
      const Value* v = find(k, required);
      if (!v) return !r_->failed();
      if (v->kind != Value::Kind::kString) return r_->typeError(path(k), *v, "a string");
      if (s) *s = v->text;
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

  bool gpu(const Value& v, int i, Gpu* g) {
    std::string p = "gpus[" + std::to_string(i) + "]";
    if (v.kind != Value::Kind::kObject) return typeError(p, v, "an object");
    Obj o(this, v, p);
    return gpuFields(o, *g, i) && o.noUnknown();
  }

  bool link(const Value& v, int k, int n, Link* l) {
    std::string p = "links[" + std::to_string(k) + "]";
    if (v.kind != Value::Kind::kObject) return typeError(p, v, "an object");
    Obj o(this, v, p);
    return linkFields(o, *l, k, n) && o.noUnknown();
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
    if (!o.field("schema", schema)) return false;
    if (schema != kSchema) {
      return fail("schema", o.find("schema", true)->pos,
                  "unsupported schema \"" + schema + "\" (this reader understands \"" + kSchema + "\")");
    }
    if (!o.field("source", t->source) || !o.field("hostname", t->hostname) ||
        !o.field("driver_version", t->driverVersion) || !o.field("cuda_runtime_version", t->cudaRuntimeVersion) ||
        !o.field("nccl_version", t->ncclVersion) || !o.field("nvml_version", t->nvmlVersion) || !notes(o, &t->notes)) {
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
  array(&o, "notes", t.notes.size(), EmptyArray::kInline, ",\n", [&](size_t i) { json::appendString(&o, t.notes[i]); });
  array(&o, "gpus", t.gpus.size(), EmptyArray::kOnLines, ",\n", [&](size_t i) { writeGpu(&o, t.gpus[i]); });
  array(&o, "links", t.links.size(), EmptyArray::kInline, "\n",
        [&](size_t i) { writeLink(&o, t.links[i], static_cast<int>(i), t.size()); });
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
