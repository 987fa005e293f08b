// The signature catalogue: data (catalog/*.catalog, embedded at build time) describing what a log
// line means. This header parses it and matches lines against it.
//
// Matching is two-stage, both on RE2 (linear time in the subject, memory per pattern capped, no
// recursion: a crafted line cannot make a match take minutes or a deep stack as std::regex's
// backtracking did). Every signature names literal substrings that any line it matches must
// contain; one RE2::Set over all literals of the catalogue (case-insensitive, one DFA pass over the
// line) finds which occur, and only the signatures whose literals were seen run their pattern. On a
// typical log 99.9 % of lines hit no literal and cost that one pass.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

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
  kKnowledge,     // never matched against a line: an entry of the error table, looked up by error text
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

  // The error table (`error =`, `text =`, `context =`): the entry describes one error code of a layer -
  // a CUDA error, an NCCL result, an InfiniBand completion status, an Xid - by its code, its names and
  // the text the layer prints for it. Signatures that only carry an error (`explain =`) are explained
  // by the entry their captured text names; `context` restricts an entry to lines that match it (the
  // same "invalid argument" means one thing from cudaIpcOpenMemHandle and another from NVLS setup).
  std::string errKind;                      // cuda | nccl | ibv | xid | hip; empty: not a table entry
  long errCode = -1;                        // the numeric code, -1 when none
  std::vector<std::string> errNames;        // cudaErrorIllegalAddress, CUDA_ERROR_ILLEGAL_ADDRESS, ...
  std::vector<std::string> errTexts;        // the printed text, lowercased ("an illegal memory access ...")
  std::shared_ptr<const re2::RE2> context;  // where the entry applies (searched in the raw line)
  // What a signature's captured error is looked up as: (kind, detail key or "message"); kind "any" tries
  // every kind.
  std::vector<std::pair<std::string, std::string>> explain;
  bool generic = false;  // a generic report (an exception type, a WARN, an error line): ranked by time
  bool symptom = false;  // says what happened, not why (a segfault, a cut traceback): never a root cause
  // Origins of these id prefixes are consequences of this one (a GPU off the bus -> the workers' CUDA errors).
  std::vector<std::string> consequences;
  // Set by the parser: an extract key the cross-rank analyses read from every occurrence (seq,
  // last_completed, waited_for, waits_with), so its capture groups are taken on every line it matches.
  bool everyOccurrence = false;
};

class Catalog {
 public:
  // Parses catalogue text; arfuseInvalidArgument with "catalogue line N: ..." when it is malformed.
  Status parse(std::string_view text);
  // The catalogue compiled into the library (parsed once; aborts with a message if it is broken,
  // which the unit tests catch first).
  static const Catalog& builtin();

  const std::vector<Signature>& signatures() const { return sigs_; }
  const Signature& sig(int i) const { return sigs_[static_cast<size_t>(i)]; }
  int find(std::string_view id) const;
  // The error-table entry that explains `subject` (an error text or a whole message) as an error of
  // `kind` ("any": every kind), preferring entries whose `context` matches `context` (the raw line, the
  // NCCL chain), then the longest text matched; -1 when none does. For a whole message, a CUDA / HIP /
  // NCCL text only counts after that layer's marker ("CUDA error", "Cuda failure", "hipError", ...), so
  // "ValueError: invalid argument" is not taken for cudaErrorInvalidValue; names and codes match anywhere.
  int lookup(std::string_view kind, std::string_view subject, std::string_view context, bool wholeMessage) const;

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
  // extras: at most 32 literals; match() reports which were seen as bits of *extraMask (literal i ->
  // bit i). grouped: more literals, each reported as the bit it is paired with (several words, one bit).
  // memoEntries: message texts whose results are remembered per memo (memo.h; 0: none, the plain path).
  Matcher(const Catalog& catalog, const std::vector<std::string>& extras,
          const std::vector<std::pair<std::string, int>>& grouped = {}, size_t memoEntries = kMemoEntries);
  static constexpr size_t kMemoEntries = 4096;
  const Catalog& catalog() const { return catalog_; }
  // Finds the highest-weight kLine signature matching a line: literals and patterns both look at its
  // message (`body`: the line after the prefixes parseLine recognises - stamps, ranks, logger fields,
  // which never hold a literal that matters and are a fifth of a typical line's bytes).
  // With details = false the signature is found without its capture groups (the DFA alone); matchOne()
  // fills them in when the caller needs them (a new event, or a signature whose every occurrence counts).
  bool match(std::string_view line, std::string_view body, SigMatch* m, uint32_t* extraMask, bool details = true) const;
  bool matchUncached(std::string_view body, SigMatch* m, uint32_t* extraMask, bool details) const;
  // Tries one signature's pattern on `subject`.
  bool matchOne(int sig, std::string_view subject, SigMatch* m, bool details = true) const;
  // The highest-weight signature of a kind (kTracebackEnd, kFrame) whose pattern matches.
  bool matchKind(SigWhen when, std::string_view subject, SigMatch* m) const;

  // Longest subject a pattern is run on: RE2 is linear, this only bounds the work per line.
  static constexpr size_t kMaxSubject = 64 * 1024;
  // Longest detail value kept from a capture group.
  static constexpr size_t kMaxDetail = 200;

  Matcher(const Matcher&) = delete;
  Matcher& operator=(const Matcher&) = delete;
  ~Matcher();

 private:
  struct LiteralSet;  // the literal scanner over every literal (catalog.cc, literals.h)
  const Catalog& catalog_;
  std::unique_ptr<LiteralSet> literals_;
  std::vector<int> sigOfLiteral_;    // literal id -> signature index, or -1 for an extra
  std::vector<int> extraOfLiteral_;  // literal id -> extra bit, or -1
  std::vector<int> rankOf_;          // signature index -> precedence (0 = highest weight)
  std::vector<int> byRank_;          // precedence -> signature index
};

// Text of the built-in catalogue (catalog/*.catalog concatenated in name order).
extern const char kCatalogText[];

}  // namespace triage
}  // namespace arfuse
