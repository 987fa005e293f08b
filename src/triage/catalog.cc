#include "catalog.h"

#include <re2/re2.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <deque>

namespace arfuse {
namespace triage {

const char* sigClassName(SigClass c) {
  switch (c) {
    case SigClass::kOrigin:
      return "origin";
    case SigClass::kEcho:
      return "echo";
    case SigClass::kContext:
      return "context";
  }
  return "?";
}

// ---------------------------------------------------------------------------------------------
// LiteralScanner
// ---------------------------------------------------------------------------------------------

int LiteralScanner::add(std::string_view literal) {
  std::string lower(literal);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  literals_.push_back(std::move(lower));
  return static_cast<int>(literals_.size()) - 1;
}

bool LiteralScanner::build() {
  // Alphabet: one class per distinct (lowercased) byte used by a literal, class 0 for the rest.
  int classOf[256];
  for (int& c : classOf) c = 0;
  numClasses_ = 1;
  for (const auto& lit : literals_)
    for (unsigned char c : lit)
      if (classOf[c] == 0) classOf[c] = numClasses_++;
  if (numClasses_ > kMaxClasses) return false;
  shift_ = 0;
  while ((1 << shift_) < numClasses_) ++shift_;
  for (int b = 0; b < 256; ++b) cls_[b] = static_cast<uint8_t>(classOf[std::tolower(b)]);

  // Trie.
  std::vector<std::vector<int32_t>> go(1, std::vector<int32_t>(numClasses_, -1));
  std::vector<std::vector<int32_t>> out(1);
  for (size_t id = 0; id < literals_.size(); ++id) {
    int32_t s = 0;
    for (unsigned char c : literals_[id]) {
      int k = classOf[c];
      if (go[s][k] < 0) {
        go[s][k] = static_cast<int32_t>(go.size());
        go.emplace_back(numClasses_, -1);
        out.emplace_back();
      }
      s = go[s][k];
    }
    out[s].push_back(static_cast<int32_t>(id));
  }
  // BFS: failure links, complete transitions, merged outputs.
  std::vector<int32_t> fail(go.size(), 0);
  std::deque<int32_t> q;
  for (int k = 0; k < numClasses_; ++k) {
    if (go[0][k] < 0) {
      go[0][k] = 0;
    } else {
      fail[go[0][k]] = 0;
      q.push_back(go[0][k]);
    }
  }
  go[0][0] = 0;  // class 0 (bytes in no literal) always returns to the root
  while (!q.empty()) {
    int32_t s = q.front();
    q.pop_front();
    for (int32_t o : out[fail[s]]) out[s].push_back(o);
    for (int k = 0; k < numClasses_; ++k) {
      int32_t t = go[s][k];
      if (t < 0 || k == 0) {
        go[s][k] = (k == 0) ? 0 : go[fail[s]][k];
      } else {
        fail[t] = go[fail[s]][k];
        q.push_back(t);
      }
    }
  }
  // Renumber breadth-first (order[k] = old state of new state k) and emit the table.
  const size_t n = go.size();
  if (n > kMaxStates) return false;
  std::vector<int32_t> order, newId(n, -1);
  order.reserve(n);
  order.push_back(0);
  newId[0] = 0;
  for (size_t h = 0; h < order.size(); ++h)
    for (int k = 0; k < numClasses_; ++k) {
      int32_t t = go[order[h]][k];
      if (newId[t] < 0) {
        newId[t] = static_cast<int32_t>(order.size());
        order.push_back(t);
      }
    }
  const size_t row = size_t{1} << shift_;
  delta_.assign(n * row, 0);
  outBegin_.assign(n + 1, 0);
  outIds_.clear();
  for (size_t ns = 0; ns < n; ++ns) {
    const int32_t s = order[ns];
    for (int k = 0; k < numClasses_; ++k) {
      const int32_t t = go[s][k];
      delta_[ns * row + k] = static_cast<uint16_t>(newId[t] | (out[t].empty() ? 0 : 0x8000));
    }
    outBegin_[ns] = static_cast<int32_t>(outIds_.size());
    std::sort(out[s].begin(), out[s].end());
    out[s].erase(std::unique(out[s].begin(), out[s].end()), out[s].end());
    for (int32_t o : out[s]) outIds_.push_back(o);
  }
  outBegin_[n] = static_cast<int32_t>(outIds_.size());
  return true;
}

// ---------------------------------------------------------------------------------------------
// Catalogue parsing
// ---------------------------------------------------------------------------------------------

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::vector<std::string> splitLiterals(std::string_view v) {
  std::vector<std::string> r;
  size_t pos = 0;
  while (pos <= v.size()) {
    size_t bar = v.find('|', pos);
    if (bar == std::string_view::npos) bar = v.size();
    std::string_view lit = trim(v.substr(pos, bar - pos));
    if (!lit.empty()) r.emplace_back(lit);
    pos = bar + 1;
  }
  return r;
}

}  // namespace

bool Catalog::parse(std::string_view text, std::string* error) {
  sigs_.clear();
  int lineNo = 0;
  size_t pos = 0;
  std::string lastKey;
  auto fail = [&](const std::string& msg) {
    if (error) *error = "catalogue line " + std::to_string(lineNo) + ": " + msg;
    return false;
  };
  auto finishSig = [&]() -> bool {
    if (sigs_.empty()) return true;
    Signature& s = sigs_.back();
    if (s.pattern.empty() && s.when != SigWhen::kDerived) return fail("signature '" + s.id + "' has no pattern");
    if (s.when == SigWhen::kLine && s.literals.empty())
      return fail("signature '" + s.id + "' needs a literal (the prefilter)");
    if (s.meaning.empty() || s.remedy.empty() || s.next.empty() || s.source.empty())
      return fail("signature '" + s.id + "' needs meaning, remedy, next and source");
    if (s.cls == SigClass::kOrigin && s.title.empty())
      return fail("signature '" + s.id + "' is an origin and needs a title (the verdict line names it)");
    if (!s.pattern.empty()) {
      RE2::Options opt;
      opt.set_log_errors(false);
      opt.set_max_mem(8 << 20);  // per pattern: bounds the DFA cache however hostile the subject
      auto re = std::make_shared<RE2>(s.pattern, opt);
      if (!re->ok()) return fail("signature '" + s.id + "': bad pattern: " + re->error());
      for (const auto& [key, group] : s.extract)
        if (group < 1 || group > re->NumberOfCapturingGroups())
          return fail("signature '" + s.id + "': extract " + key + ":" + std::to_string(group) +
                      " names a capture group the pattern does not have");
      s.re = std::move(re);
    }
    return true;
  };
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    std::string_view raw = text.substr(pos, nl - pos);
    pos = nl + 1;
    ++lineNo;
    if (!raw.empty() && raw.back() == '\r') raw.remove_suffix(1);
    std::string_view line = trim(raw);
    if (line.empty() || line[0] == '#') continue;
    if (line.front() == '[' && line.back() == ']') {
      if (!finishSig()) return false;
      Signature s;
      s.id = std::string(trim(line.substr(1, line.size() - 2)));
      if (s.id.empty()) return fail("empty signature id");
      if (find(s.id) >= 0) return fail("duplicate signature id '" + s.id + "'");
      sigs_.push_back(std::move(s));
      lastKey.clear();
      continue;
    }
    if (sigs_.empty()) return fail("field outside a [signature] block");
    Signature& s = sigs_.back();
    if (std::isspace(static_cast<unsigned char>(raw.front()))) {  // continuation of the last field
      std::string* f = lastKey == "meaning"  ? &s.meaning
                       : lastKey == "remedy" ? &s.remedy
                       : lastKey == "next"   ? &s.next
                       : lastKey == "source" ? &s.source
                       : lastKey == "title"  ? &s.title
                                             : nullptr;
      if (!f) return fail("continuation line after field '" + lastKey + "' (only prose fields continue)");
      *f += ' ';
      *f += line;
      continue;
    }
    size_t eq = line.find('=');
    if (eq == std::string_view::npos) return fail("expected 'key = value'");
    std::string key(trim(line.substr(0, eq)));
    std::string_view val = trim(line.substr(eq + 1));
    lastKey = key;
    if (key == "class") {
      if (val == "origin")
        s.cls = SigClass::kOrigin;
      else if (val == "echo")
        s.cls = SigClass::kEcho;
      else if (val == "context")
        s.cls = SigClass::kContext;
      else
        return fail("class must be origin, echo or context");
    } else if (key == "when") {
      if (val == "line")
        s.when = SigWhen::kLine;
      else if (val == "traceback-end")
        s.when = SigWhen::kTracebackEnd;
      else if (val == "frame")
        s.when = SigWhen::kFrame;
      else if (val == "derived")
        s.when = SigWhen::kDerived;
      else
        return fail("when must be line, traceback-end, frame or derived");
    } else if (key == "weight") {
      s.weight = std::atoi(std::string(val).c_str());
      if (s.weight < 0 || s.weight > 100) return fail("weight must be 0..100");
    } else if (key == "literal") {
      s.literals = splitLiterals(val);
    } else if (key == "pattern") {
      s.pattern = std::string(val);
    } else if (key == "explained_by") {
      for (size_t i = 0; i < val.size();) {
        size_t sp = val.find(' ', i);
        if (sp == std::string_view::npos) sp = val.size();
        if (sp > i) s.explainedBy.emplace_back(val.substr(i, sp - i));
        i = sp + 1;
      }
    } else if (key == "title") {
      s.title = std::string(val);
    } else if (key == "extract") {
      size_t i = 0;
      while (i < val.size()) {
        size_t sp = val.find(' ', i);
        if (sp == std::string_view::npos) sp = val.size();
        std::string_view tok = val.substr(i, sp - i);
        i = sp + 1;
        if (tok.empty()) continue;
        size_t colon = tok.find(':');
        if (colon == std::string_view::npos) return fail("extract wants key:group tokens");
        s.extract.emplace_back(std::string(tok.substr(0, colon)),
                               std::atoi(std::string(tok.substr(colon + 1)).c_str()));
      }
    } else if (key == "meaning") {
      s.meaning = std::string(val);
    } else if (key == "remedy") {
      s.remedy = std::string(val);
    } else if (key == "next") {
      s.next = std::string(val);
    } else if (key == "source") {
      s.source = std::string(val);
    } else {
      return fail("unknown field '" + key + "'");
    }
  }
  return finishSig();
}

const Catalog& Catalog::builtin() {
  static const Catalog* cat = [] {
    auto* c = new Catalog();
    std::string error;
    if (!c->parse(kCatalogText, &error)) {
      std::fprintf(stderr, "arfuse triage: built-in %s\n", error.c_str());
      std::abort();
    }
    return c;
  }();
  return *cat;
}

int Catalog::find(std::string_view id) const {
  for (size_t i = 0; i < sigs_.size(); ++i)
    if (sigs_[i].id == id) return static_cast<int>(i);
  return -1;
}

Matcher::Matcher(const Catalog& catalog, const std::vector<std::string>& extras) : catalog_(catalog) {
  const auto& sigs = catalog.signatures();
  for (size_t i = 0; i < sigs.size(); ++i) {
    if (sigs[i].when != SigWhen::kLine) continue;
    for (const auto& lit : sigs[i].literals) {
      scanner_.add(lit);
      sigOfLiteral_.push_back(static_cast<int>(i));
      extraOfLiteral_.push_back(-1);
    }
  }
  for (size_t e = 0; e < extras.size() && e < 32; ++e) {
    scanner_.add(extras[e]);
    sigOfLiteral_.push_back(-1);
    extraOfLiteral_.push_back(static_cast<int>(e));
  }
  if (!scanner_.build()) {  // the unit tests build the built-in catalogue's matcher first
    std::fprintf(stderr, "arfuse triage: the catalogue's literals exceed the scanner's %zu states / %d byte classes\n",
                 LiteralScanner::kMaxStates, LiteralScanner::kMaxClasses);
    std::abort();
  }
  byRank_.resize(sigs.size());
  for (size_t i = 0; i < sigs.size(); ++i) byRank_[i] = static_cast<int>(i);
  std::stable_sort(byRank_.begin(), byRank_.end(), [&](int a, int b) { return sigs[a].weight > sigs[b].weight; });
  rankOf_.assign(sigs.size(), 0);
  for (size_t r = 0; r < byRank_.size(); ++r) rankOf_[byRank_[r]] = static_cast<int>(r);
}

bool Matcher::matchOne(int sig, std::string_view subject, SigMatch* m) const {
  const Signature& s = catalog_.sig(sig);
  if (!s.re) return false;
  subject = subject.substr(0, kMaxSubject);
  constexpr int kMaxGroups = 10;
  re2::StringPiece groups[kMaxGroups];
  const int n = std::min(kMaxGroups, s.re->NumberOfCapturingGroups() + 1);
  if (!s.re->Match(re2::StringPiece(subject.data(), subject.size()), 0, subject.size(), RE2::UNANCHORED, groups, n))
    return false;
  m->sig = sig;
  m->details.clear();
  for (const auto& [key, group] : s.extract) {
    if (group < n && groups[group].data() != nullptr)
      m->details.emplace_back(key, std::string(groups[group].data(), std::min(groups[group].size(), kMaxDetail)));
  }
  return true;
}

bool Matcher::matchKind(SigWhen when, std::string_view subject, SigMatch* m) const {
  for (int idx : byRank_)
    if (catalog_.sig(idx).when == when && matchOne(idx, subject, m)) return true;
  return false;
}

bool Matcher::match(std::string_view line, std::string_view body, SigMatch* m, uint32_t* extraMask) const {
  (void)line;  // the message is scanned: prefixes hold stamps, ranks and file names, never a literal that matters
  // Candidate signatures as precedence ranks; a line rarely hits more than a couple.
  int cand[64];
  int numCand = 0;
  scanner_.scan(body, [&](int32_t id) {
    int e = extraOfLiteral_[id];
    if (e >= 0) {
      *extraMask |= (1u << e);
      return;
    }
    int r = rankOf_[sigOfLiteral_[id]];
    for (int i = 0; i < numCand; ++i)
      if (cand[i] == r) return;
    if (numCand < 64) cand[numCand++] = r;
  });
  if (numCand == 0) return false;
  std::sort(cand, cand + numCand);
  for (int i = 0; i < numCand; ++i)
    if (matchOne(byRank_[cand[i]], body, m)) return true;
  return false;
}

}  // namespace triage
}  // namespace arfuse
