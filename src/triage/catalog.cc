#include "catalog.h"

#include <re2/re2.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "base/status.h"
#include "literals.h"
#include "memo.h"

namespace arfuse {
namespace triage {

namespace {

// The catalogue's spelling of an enum's values: one table serves the parser and the name.
template <typename E>
struct Named {
  E value;
  const char* name;
};
constexpr Named<SigClass> kClassNames[] = {
    {SigClass::kOrigin, "origin"}, {SigClass::kEcho, "echo"}, {SigClass::kContext, "context"}};
constexpr Named<SigWhen> kWhenNames[] = {{SigWhen::kLine, "line"},
                                         {SigWhen::kTracebackEnd, "traceback-end"},
                                         {SigWhen::kFrame, "frame"},
                                         {SigWhen::kDerived, "derived"},
                                         {SigWhen::kKnowledge, "knowledge"}};

// *out = the value `val` names; else "`key` must be a, b or c".
template <typename E, size_t N>
Status parseNamed(const Named<E> (&names)[N], const std::string& key, std::string_view val, E* out) {
  for (const Named<E>& n : names) {
    if (val == n.name) {
      *out = n.value;
      return Status();
    }
  }
  std::string msg = key + " must be ";
  for (size_t i = 0; i < N; ++i) msg += std::string(i == 0 ? "" : i + 1 == N ? " or " : ", ") + names[i].name;
  return ARFUSE_FAIL_TEXT(arfuseInvalidArgument, msg);
}

}  // namespace

const char* sigClassName(SigClass c) {
  for (const Named<SigClass>& n : kClassNames)
    if (n.value == c) return n.name;
  return "?";
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

std::vector<std::string> splitWords(std::string_view v) {
  std::vector<std::string> r;
  for (size_t i = 0; i < v.size();) {
    while (i < v.size() && std::isspace(static_cast<unsigned char>(v[i]))) ++i;
    size_t e = i;
    while (e < v.size() && !std::isspace(static_cast<unsigned char>(v[e]))) ++e;
    if (e > i) r.emplace_back(v.substr(i, e - i));
    i = e;
  }
  return r;
}

std::string lowered(std::string_view v) {
  std::string r(v);
  for (char& c : r) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

bool identByte(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// `needle` (lowercase) in `hay` (lowercase) as a whole identifier, at or after `from`.
bool containsWord(std::string_view hay, std::string_view needle, size_t from = 0) {
  for (size_t p = hay.find(needle, from); p != std::string_view::npos; p = hay.find(needle, p + 1)) {
    const bool left = p == 0 || !identByte(hay[p - 1]);
    const bool right = p + needle.size() >= hay.size() || !identByte(hay[p + needle.size()]);
    if (left && right) return true;
  }
  return false;
}

// Where a layer's own text may start in a whole message: after its marker. Kinds without markers
// (ibv, xid) are matched by names and codes, their texts anywhere.
size_t afterMarker(std::string_view kind, std::string_view lower) {
  static const char* kCuda[] = {"cuda error",     "cuda failure",   "cuda runtime error", "cuda driver error",
                                "cudaerror",      "cuda_error",     "curesult",           "cuda call failed",
                                "cuda exception", "cuda api failed"};
  static const char* kHip[] = {"hip error", "hiperror", "hip_error", "hip failure", "hip runtime error"};
  static const char* kNccl[] = {"nccl error", "ncclerror", "nccl warn", "nccl failure"};
  const char* const* m = nullptr;
  size_t n = 0;
  if (kind == "cuda") {
    m = kCuda;
    n = sizeof(kCuda) / sizeof(kCuda[0]);
  } else if (kind == "hip") {
    m = kHip;
    n = sizeof(kHip) / sizeof(kHip[0]);
  } else if (kind == "nccl") {
    m = kNccl;
    n = sizeof(kNccl) / sizeof(kNccl[0]);
  } else {
    return 0;
  }
  size_t best = std::string_view::npos;
  for (size_t i = 0; i < n; ++i) {
    const size_t p = lower.find(m[i]);
    if (p != std::string_view::npos) best = std::min(best, p + std::strlen(m[i]));
  }
  return best;
}

}  // namespace

int Catalog::lookup(std::string_view kind, std::string_view subject, std::string_view context,
                    bool wholeMessage) const {
  const std::string lower = lowered(subject.substr(0, 4096));
  std::string_view digits = subject;
  while (!digits.empty() && std::isspace(static_cast<unsigned char>(digits.front()))) digits.remove_prefix(1);
  while (!digits.empty() && std::isspace(static_cast<unsigned char>(digits.back()))) digits.remove_suffix(1);
  const bool numeric = !digits.empty() && digits.size() < 10 &&
                       std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
  const long code = numeric ? std::atol(std::string(digits).c_str()) : -1;
  int best = -1;
  long bestScore = -1;
  for (size_t i = 0; i < sigs_.size(); ++i) {
    const Signature& s = sigs_[i];
    if (s.errKind.empty() || (kind != "any" && s.errKind != kind)) continue;
    long score = -1;
    for (const auto& n : s.errNames)
      if (containsWord(lower, lowered(n))) score = std::max<long>(score, 1000 + static_cast<long>(n.size()));
    if (numeric && s.errCode >= 0 && code == s.errCode) score = std::max<long>(score, 500);
    const size_t from = wholeMessage ? afterMarker(s.errKind, lower) : 0;
    if (from != std::string::npos)
      for (const auto& t : s.errTexts)
        if (lower.find(t, from) != std::string::npos) score = std::max<long>(score, static_cast<long>(t.size()));
    if (score < 0) continue;
    if (s.context) {
      if (!RE2::PartialMatch(re2::StringPiece(context.data(), std::min(context.size(), size_t{64 * 1024})), *s.context))
        continue;
      score += 100000;  // the entry for this very situation beats the general one
    }
    if (score > bestScore) {
      bestScore = score;
      best = static_cast<int>(i);
    }
  }
  return best;
}

// One `key = value` field of a signature block (arfuseInvalidArgument when it does not parse; the
// caller puts the line number before the message).
Status setField(Signature* s, const std::string& key, std::string_view val) {
  if (key == "class") {
    return parseNamed(kClassNames, key, val, &s->cls);
  } else if (key == "when") {
    return parseNamed(kWhenNames, key, val, &s->when);
  } else if (key == "weight") {
    s->weight = std::atoi(std::string(val).c_str());
    if (s->weight < 0 || s->weight > 100) return ARFUSE_FAIL_TEXT(arfuseInvalidArgument, "weight must be 0..100");
  } else if (key == "literal") {
    s->literals = splitLiterals(val);
  } else if (key == "pattern") {
    s->pattern = std::string(val);
  } else if (key == "explained_by") {
    for (size_t i = 0; i < val.size();) {
      size_t sp = val.find(' ', i);
      if (sp == std::string_view::npos) sp = val.size();
      if (sp > i) s->explainedBy.emplace_back(val.substr(i, sp - i));
      i = sp + 1;
    }
  } else if (key == "title") {
    s->title = std::string(val);
  } else if (key == "error") {
    // error = KIND [CODE] [NAME ...]
    std::vector<std::string> toks = splitWords(val);
    if (toks.empty())
      return ARFUSE_FAIL_TEXT(arfuseInvalidArgument, "error = wants a kind (cuda, nccl, ibv, xid, hip)");
    s->errKind = toks[0];
    for (size_t i = 1; i < toks.size(); ++i) {
      if (std::all_of(toks[i].begin(), toks[i].end(), [](char c) { return c >= '0' && c <= '9'; }))
        s->errCode = std::atol(toks[i].c_str());
      else
        s->errNames.push_back(toks[i]);
    }
  } else if (key == "text") {
    for (auto& t : splitLiterals(val)) s->errTexts.push_back(lowered(t));
  } else if (key == "context") {
    RE2::Options opt;
    opt.set_log_errors(false);
    opt.set_max_mem(8 << 20);
    auto re = std::make_shared<RE2>(std::string(val), opt);
    if (!re->ok())
      return ARFUSE_FAIL_TEXT(arfuseInvalidArgument, "signature '" + s->id + "': bad context pattern: " + re->error());
    s->context = std::move(re);
  } else if (key == "explain") {
    for (const auto& tok : splitWords(val)) {
      const size_t colon = tok.find(':');
      if (colon == std::string::npos || colon == 0 || colon + 1 == tok.size())
        return ARFUSE_FAIL_TEXT(arfuseInvalidArgument,
                                "explain wants KIND:DETAIL tokens (e.g. cuda:cuda_error any:message)");
      s->explain.emplace_back(tok.substr(0, colon), tok.substr(colon + 1));
    }
  } else if (key == "generic" || key == "symptom") {
    if (val != "yes" && val != "no") return ARFUSE_FAIL_TEXT(arfuseInvalidArgument, key + " must be yes or no");
    (key == "generic" ? s->generic : s->symptom) = val == "yes";
  } else if (key == "consequences") {
    s->consequences = splitWords(val);
  } else if (key == "extract") {
    size_t i = 0;
    while (i < val.size()) {
      size_t sp = val.find(' ', i);
      if (sp == std::string_view::npos) sp = val.size();
      std::string_view tok = val.substr(i, sp - i);
      i = sp + 1;
      if (tok.empty()) continue;
      size_t colon = tok.find(':');
      if (colon == std::string_view::npos)
        return ARFUSE_FAIL_TEXT(arfuseInvalidArgument, "extract wants key:group tokens");
      s->extract.emplace_back(std::string(tok.substr(0, colon)), std::atoi(std::string(tok.substr(colon + 1)).c_str()));
    }
  } else if (key == "meaning") {
    s->meaning = std::string(val);
  } else if (key == "remedy") {
    s->remedy = std::string(val);
  } else if (key == "next") {
    s->next = std::string(val);
  } else if (key == "source") {
    s->source = std::string(val);
  } else {
    return ARFUSE_FAIL_TEXT(arfuseInvalidArgument, "unknown field '" + key + "'");
  }
  return Status();
}

Status Catalog::parse(std::string_view text) {
  sigs_.clear();
  int lineNo = 0;
  size_t pos = 0;
  std::string lastKey;
  auto where = [&] { return "catalogue line " + std::to_string(lineNo) + ": "; };
  auto fail = [&](const std::string& msg) { return ARFUSE_FAIL_TEXT(arfuseInvalidArgument, where() + msg); };
  auto finishSig = [&]() -> Status {
    if (sigs_.empty()) return Status();
    Signature& s = sigs_.back();
    if (s.when == SigWhen::kKnowledge && s.errKind.empty())
      return fail("signature '" + s.id + "' is a knowledge entry and needs an error = KIND [CODE] [NAME...] line");
    if (!s.errKind.empty() && s.errNames.empty() && s.errTexts.empty() && s.errCode < 0)
      return fail("signature '" + s.id + "': error = names a kind but no code, name or text to look it up by");
    // A line signature that is also a table entry may leave its prefilter and pattern to the entry:
    // the printed texts and the names are both.
    if (s.when == SigWhen::kLine && s.pattern.empty() && s.literals.empty() && !s.errKind.empty()) {
      std::string pat = "(?i)";
      for (const auto& t : s.errTexts) {
        s.literals.push_back(t);
        pat += (pat.size() > 4 ? "|" : "") + RE2::QuoteMeta(t);
      }
      for (const auto& n : s.errNames) {
        s.literals.push_back(n);
        pat += (pat.size() > 4 ? "|" : "") + RE2::QuoteMeta(n);
      }
      s.pattern = pat;
    }
    if (s.pattern.empty() && s.when != SigWhen::kDerived && s.when != SigWhen::kKnowledge)
      return fail("signature '" + s.id + "' has no pattern");
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
      for (const auto& [key, group] : s.extract) {
        if (key == "seq" || key == "last_completed" || key == "waited_for" || key == "waits_with")
          s.everyOccurrence = true;
        if (group < 1 || group > re->NumberOfCapturingGroups())
          return fail("signature '" + s.id + "': extract " + key + ":" + std::to_string(group) +
                      " names a capture group the pattern does not have");
      }
      s.re = std::move(re);
    }
    return Status();
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
      ARFUSE_CHECK(finishSig());
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
    ARFUSE_CHECK_PREFIXED(where(), setField(&s, key, val));
  }
  ARFUSE_CHECK(finishSig());
  return Status();
}

const Catalog& Catalog::builtin() {
  static const Catalog* cat = [] {
    auto* c = new Catalog();
    const Status st = c->parse(kCatalogText);
    if (!st.ok()) {
      std::fprintf(stderr, "arfuse triage: built-in %s\n", st.message().c_str());
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

struct Matcher::LiteralSet {
  LiteralScanner scanner;
  mutable std::vector<int> hits;  // scratch of match(); a Matcher serves one analysis thread
  // The last results per message text (memo.h): ranks print the same messages, tracebacks repeat frame
  // for frame, so the scan and the patterns run once per distinct text. Bounded per memo: kMemoEntries
  // texts of at most kMaxText bytes, kBudget bytes of text in all.
  explicit LiteralSet(size_t entries) : lines(entries, kMaxText, kBudget), kinds(entries, kMaxText, kBudget) {}
  static constexpr size_t kMaxText = 4096, kBudget = 2u << 20;
  struct Remembered {
    bool hit = false;
    int sig = -1;
    uint32_t extra = 0;
    std::vector<std::pair<std::string, std::string>> details;  // those every occurrence needs
  };
  mutable TextMemo<Remembered> lines;  // match()'s
  mutable TextMemo<Remembered> kinds;  // matchKind()'s (tag: the kind)
};

Matcher::Matcher(const Catalog& catalog, const std::vector<std::string>& extras,
                 const std::vector<std::pair<std::string, int>>& grouped, size_t memoEntries)
    : catalog_(catalog), literals_(new LiteralSet(memoEntries)) {
  const auto& sigs = catalog.signatures();
  auto add = [&](const std::string& lit, int sig, int extra) {
    literals_->scanner.add(lit);
    sigOfLiteral_.push_back(sig);
    extraOfLiteral_.push_back(extra);
  };
  for (size_t i = 0; i < sigs.size(); ++i) {
    if (sigs[i].when != SigWhen::kLine) continue;
    for (const auto& lit : sigs[i].literals) add(lit, static_cast<int>(i), -1);
  }
  for (size_t e = 0; e < extras.size() && e < 32; ++e) {
    add(extras[e], -1, static_cast<int>(e));
  }
  for (const auto& [lit, bit] : grouped) {
    if (bit < 0 || bit >= 32) continue;
    add(lit, -1, bit);
  }
  literals_->scanner.build();
  byRank_.resize(sigs.size());
  for (size_t i = 0; i < sigs.size(); ++i) byRank_[i] = static_cast<int>(i);
  std::stable_sort(byRank_.begin(), byRank_.end(), [&](int a, int b) { return sigs[a].weight > sigs[b].weight; });
  rankOf_.assign(sigs.size(), 0);
  for (size_t r = 0; r < byRank_.size(); ++r) {
    rankOf_[byRank_[r]] = static_cast<int>(r);
  }
}

Matcher::~Matcher() = default;

bool Matcher::matchOne(int sig, std::string_view subject, SigMatch* m, bool details) const {
  const Signature& s = catalog_.sig(sig);
  if (!s.re) return false;
  subject = subject.substr(0, kMaxSubject);
  // Ask RE2 only for the groups the signature extracts: with none, a match is one DFA pass; with
  // groups, RE2 still finds the match with its DFA first and runs the slower submatch engine on it.
  constexpr int kMaxGroups = 10;
  int n = 0;
  if (details)
    for (const auto& kv : s.extract) n = std::max(n, kv.second + 1);
  n = std::min(n, kMaxGroups);
  re2::StringPiece groups[kMaxGroups];
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
  // Exception lines repeat across ranks as much as any: memoised like match().
  const bool memo = literals_->kinds.fits(subject);
  const auto key =
      TextMemo<LiteralSet::Remembered>::key(memo ? subject : std::string_view(), static_cast<uint64_t>(when));
  if (const LiteralSet::Remembered* r = memo ? literals_->kinds.find(key) : nullptr) {
    if (r->hit) {
      m->sig = r->sig;
      m->details = r->details;
    }
    return r->hit;
  }
  bool hit = false;
  for (int idx : byRank_)
    if (catalog_.sig(idx).when == when && matchOne(idx, subject, m)) {
      hit = true;
      break;
    }
  if (memo) {
    LiteralSet::Remembered r;
    r.hit = hit;
    r.sig = hit ? m->sig : -1;
    if (hit) r.details = m->details;
    literals_->kinds.put(key, std::move(r));
  }
  return hit;
}

bool Matcher::match(std::string_view line, std::string_view body, SigMatch* m, uint32_t* extraMask,
                    bool details) const {
  (void)line;  // the message is scanned: prefixes hold stamps, ranks and file names, never a literal that matters
  const bool memo = !details && literals_->lines.fits(body);
  const auto key = TextMemo<LiteralSet::Remembered>::key(memo ? body : std::string_view(), 0);
  if (memo) {
    if (const LiteralSet::Remembered* r = literals_->lines.find(key)) {
      *extraMask |= r->extra;
      m->details = r->details;
      if (r->hit) m->sig = r->sig;
      return r->hit;
    }
  }
  uint32_t extraSeen = 0;
  const bool hit = matchUncached(body, m, &extraSeen, details);
  *extraMask |= extraSeen;
  if (memo) {
    LiteralSet::Remembered r;
    r.hit = hit;
    r.sig = hit ? m->sig : -1;
    r.extra = extraSeen;
    if (hit) r.details = m->details;
    literals_->lines.put(key, std::move(r));
  }
  return hit;
}

bool Matcher::matchUncached(std::string_view body, SigMatch* m, uint32_t* extraMask, bool details) const {
  std::vector<int>& hits = literals_->hits;
  hits.clear();
  literals_->scanner.scan(body, &hits);
  if (hits.empty()) return false;
  // Candidate signatures as precedence ranks; a line rarely hits more than a couple.
  int cand[64];
  int numCand = 0;
  for (int id : hits) {
    const int e = extraOfLiteral_[static_cast<size_t>(id)];
    if (e >= 0) {
      *extraMask |= (1u << e);
      continue;
    }
    const int r = rankOf_[static_cast<size_t>(sigOfLiteral_[static_cast<size_t>(id)])];
    bool dup = false;
    for (int i = 0; i < numCand && !dup; ++i) dup = cand[i] == r;
    if (!dup && numCand < 64) cand[numCand++] = r;
  }
  std::sort(cand, cand + numCand);
  for (int i = 0; i < numCand; ++i)
    if (matchOne(byRank_[cand[i]], body, m, details || catalog_.sig(byRank_[cand[i]]).everyOccurrence)) return true;
  return false;
}

}  // namespace triage
}  // namespace arfuse
