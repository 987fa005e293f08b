// The signature catalogue: data (catalog/*.catalog, embedded at build time) describing what a log
// line means. This header parses it and matches lines against it.
//
// Matching is two-stage. Every signature names literal substrings that any line it matches must
// contain; one Aho-Corasick pass over the line (case-insensitive, one table lookup per byte) finds
// which literals occur, and only the signatures whose literals were seen run their pattern. On a
// typical log 99.9 % of lines hit no literal and cost one pass over their bytes. Patterns run on
// RE2, whose matching time is linear in the subject and whose memory per pattern is capped, so a
// crafted line cannot make one match take minutes or a deep stack (std::regex backtracks).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace re2 {
class RE2;
}

namespace arfuse {
namespace triage {

enum class SigClass { kOrigin, kEcho, kContext };
const char* sigClassName(SigClass c);

// When a signature is tried.
enum class SigWhen {
  kLine,          // on every line whose literal prefilter hit
  kTracebackEnd,  // only on the final exception line of a Python traceback that nothing else matched
  kFrame,         // on the innermost frame of a traceback cut off before its exception line
  kDerived,       // never matched against a line: produced by a cross-rank analysis (or the verdict)
};

struct Signature {
  std::string id;
  SigClass cls = SigClass::kOrigin;
  SigWhen when = SigWhen::kLine;
  int weight = 50;  // precedence when several match one line; rank among origins (0..100)
  std::vector<std::string> literals;
  std::string pattern;                               // RE2 syntax; "(?i)" at the start ignores case
  std::vector<std::pair<std::string, int>> extract;  // detail key -> regex capture group
  std::string title;                                 // the cause in a few words (the verdict line)
  std::string meaning, remedy, next, source;
  // A surface message (e.g. NCCL's "invalid usage") that a more specific origin explains: when an
  // origin whose id starts with one of these prefixes shares its rank or process, that origin is the
  // root cause and this one is listed as its consequence.
  std::vector<std::string> explainedBy;
  std::shared_ptr<const re2::RE2> re;
};

// Aho-Corasick automaton over lowercased bytes, with a reduced alphabet (bytes that appear in no
// literal share one class). The scan is the hot loop of triage - every byte of every log passes
// through it, one dependent table load per byte - so the table is laid out for the cache: 16-bit
// entries, rows padded to a power of two (a shift, not a multiply), states numbered breadth-first
// so the shallow states a log's text keeps returning to sit together, and each entry carries the
// next state's "has output" flag in its top bit so no second load is needed.
class LiteralScanner {
 public:
  // Returns the id of the literal (its index in the order added).
  int add(std::string_view literal);
  // False when the literals need more than kMaxStates states or kMaxClasses distinct bytes.
  bool build();
  // Calls hit(id) for every literal occurrence (an id may be reported more than once).
  template <typename F>
  void scan(std::string_view text, F&& hit) const {
    uint32_t e = 0;  // entry of the current state: (has-output << 15) | state
    const uint8_t* p = reinterpret_cast<const uint8_t*>(text.data());
    const uint8_t* end = p + text.size();
    const uint16_t* delta = delta_.data();
    const int shift = shift_;
    for (; p != end; ++p) {
      e = delta[((e & 0x7FFFu) << shift) | cls_[*p]];
      if (e & 0x8000u) {
        const uint32_t state = e & 0x7FFFu;
        for (int32_t i = outBegin_[state]; i < outBegin_[state + 1]; ++i) hit(outIds_[i]);
      }
    }
  }
  size_t numLiterals() const { return literals_.size(); }
  size_t numStates() const { return outBegin_.empty() ? 0 : outBegin_.size() - 1; }

  static constexpr size_t kMaxStates = 32768;
  static constexpr int kMaxClasses = 128;

 private:
  std::vector<std::string> literals_;
  uint8_t cls_[256] = {};
  int numClasses_ = 1;
  int shift_ = 0;  // log2 of the padded row length
  std::vector<uint16_t> delta_;
  std::vector<int32_t> outBegin_, outIds_;
};

class Catalog {
 public:
  // Parses catalogue text; on error returns false and sets *error ("catalogue line N: ...").
  bool parse(std::string_view text, std::string* error);
  // The catalogue compiled into the library (parsed once; aborts with a message if it is broken,
  // which the unit tests catch first).
  static const Catalog& builtin();

  const std::vector<Signature>& signatures() const { return sigs_; }
  const Signature& sig(int i) const { return sigs_[static_cast<size_t>(i)]; }
  int find(std::string_view id) const;

 private:
  std::vector<Signature> sigs_;
};

struct SigMatch {
  int sig = -1;                                              // best matching signature, -1 if none
  std::vector<std::pair<std::string, std::string>> details;  // from the signature's extract list
};

// The per-line matcher: one literal scan for all signatures plus caller-supplied structural
// literals (e.g. "Traceback (most recent call last)"), then the patterns of the hit signatures in
// weight order.
class Matcher {
 public:
  // extras: at most 32 literals; match() reports which were seen as bits of *extraMask.
  Matcher(const Catalog& catalog, const std::vector<std::string>& extras);
  const Catalog& catalog() const { return catalog_; }
  // Finds the highest-weight kLine signature matching a line: literals and patterns both look at its
  // message (`body`: the line after the prefixes parseLine recognises - stamps, ranks, logger fields,
  // which never hold a literal that matters and are a fifth of a typical line's bytes).
  bool match(std::string_view line, std::string_view body, SigMatch* m, uint32_t* extraMask) const;
  // Tries one signature's pattern on `subject`.
  bool matchOne(int sig, std::string_view subject, SigMatch* m) const;
  // The highest-weight signature of a kind (kTracebackEnd, kFrame) whose pattern matches.
  bool matchKind(SigWhen when, std::string_view subject, SigMatch* m) const;

  // Longest subject a pattern is run on: RE2 is linear, this only bounds the work per line.
  static constexpr size_t kMaxSubject = 64 * 1024;
  // Longest detail value kept from a capture group.
  static constexpr size_t kMaxDetail = 200;

 private:
  const Catalog& catalog_;
  LiteralScanner scanner_;
  std::vector<int> sigOfLiteral_;    // scanner id -> signature index, or -1 for an extra
  std::vector<int> extraOfLiteral_;  // scanner id -> extra bit, or -1
  std::vector<int> rankOf_;          // signature index -> precedence (0 = highest weight)
  std::vector<int> byRank_;          // precedence -> signature index
};

// Text of the built-in catalogue (catalog/*.catalog concatenated in name order).
extern const char kCatalogText[];

}  // namespace triage
}  // namespace arfuse
