// The streaming analysis: one pass over every line of every input, keeping only what it needs
// (grouped events, per-rank counters, small per-stream state machines), then a finish() step that
// merges ranks, resolves the time line and picks the root cause.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "catalog.h"
#include "environment.h"
#include "lineformat.h"
#include "memo.h"

namespace arfuse {
namespace triage {

struct Occurrence {
  int file = -1;
  uint64_t line = 0;
  int rank = -1;
  bool rankInferred = false;  // unprefixed line: rank of the nearest prefixed line above it
  std::string proc;           // label when the rank is unknown ("main", "EngineCore_0", host:pid)
  Stamp stamp;
  bool stampApprox = false;  // no stamp on the line: the last stamp above it in the same file
  double uptime = -1;        // dmesg seconds since boot
  double t = -1;             // seconds since 1970 after finish(); -1 when unknown
};

// One event group: the same signature with the same normalised text (digits masked), merged
// across ranks and repetitions.
struct EventGroup {
  // Ranks kept per group; further ranks are counted in moreRanks (a line claiming rank 10^9 or a
  // million ranks must not grow memory without bound).
  static constexpr size_t kMaxRanksKept = 4096;

  int sig = -1;
  SigClass cls = SigClass::kOrigin;  // the signature's class, unless demoted (chained wrapper)
  std::string text;                  // message of the first occurrence, prefixes stripped
  std::string raw;                   // first occurrence as written
  Occurrence first;
  uint64_t count = 0;
  std::set<int> ranks;
  uint64_t moreRanks = 0;  // ranks seen beyond kMaxRanksKept
  std::set<std::string> procs;
  std::vector<std::pair<std::string, std::string>> details;  // key=value facts about the event
  std::vector<std::string> notes;                            // derived remarks, printed as-is
  std::vector<std::string> chain;                            // NCCL return chain (file.cc:N -> code)
  std::string chainStream;
  std::vector<std::pair<uint64_t, std::string>> context;  // --context lines around the first occurrence
  int contextAfterLeft = 0;
  bool inTraceback = false;
  int knowledge = -1;  // the error-table entry that explains the error this event captured (finish())

  std::string detail(const std::string& key) const;
  void setDetail(const std::string& key, const std::string& value);
  void addRank(int r);
  size_t rankCount() const { return ranks.size() + moreRanks; }
};

struct ErrorLine;  // errorline.h

struct InputStats {
  std::string path;
  std::string compression;
  uint64_t lines = 0;
  uint64_t bytes = 0;
  uint64_t windowedLines = 0;  // lines longer than the scan window (scanned in overlapping windows)
  std::string error;
};

struct TorchrunFailure {
  int rank = -1;
  std::string exitcode, traceback, time;
  bool first = false;  // the "Root Cause (first observed failure)" entry
  Occurrence at;
};

struct Result {
  // kInsufficient: the best evidence is a symptom (a segfault, a hang, a cut traceback) and no line says
  // why; rootGroup is then that symptom, reported as such, with what to capture next.
  enum Status { kRootCause, kEchoesOnly, kNoEvidence, kInsufficient } status = kNoEvidence;
  int rootGroup = -1;             // index into groups
  std::vector<int> otherOrigins;  // further origin groups, best first
  std::vector<int> echoes;        // echo groups, most frequent first
  std::vector<int> contexts;      // context groups
  std::vector<int> timeline;      // groups by time of first occurrence
  int nranks = 0;                 // 0 when unknown
  std::string nranksSource;
  std::vector<std::string> orderingNotes;
  std::vector<std::string> capture;   // what to capture next when no root cause
  std::string confidence;             // high / medium / low
  std::string verdict;                // the one self-contained line: cause, where, which ranks
  int explainedSurface = -1;          // group of the surface message the root cause explains
  std::vector<std::string> envNotes;  // what the stated versions and GPUs imply (environment.cc)
};

class Analyzer {
 public:
  // memoEntries: message texts remembered per memo (the matcher's, the groups', the grep floor's; memo.h).
  // 0 turns every memo off: the plain path, which must give the same report (a test compares them).
  explicit Analyzer(const Catalog& catalog, int contextLines = 0, size_t memoEntries = Matcher::kMemoEntries);
  ~Analyzer();

  // Largest rank number taken from a log line; larger ones are treated as unknown (and counted).
  static constexpr int kMaxRank = 65535;

  // Starts a new input; lines are numbered from 1.
  int beginFile(const std::string& path);
  // One line, or one more segment of the current line (after a '\r' or a window edge: sameLine).
  void feed(std::string_view line, bool sameLine = false);
  void endFile(const std::string& compression, uint64_t bytes, uint64_t windowedLines, const std::string& error);
  void endFile(const std::string& compression, uint64_t bytes, const std::string& error) {
    endFile(compression, bytes, 0, error);
  }
  // Warnings about the inputs (skipped files, truncated archives), shown with the report.
  void setInputWarnings(std::vector<std::string> w, uint64_t skipped) {
    inputWarnings_ = std::move(w);
    skippedInputs_ = skipped;
  }
  Result finish();

  const Catalog& catalog() const { return catalog_; }
  size_t memoEntries() const { return memoEntries_; }
  const EnvFacts& env() const { return env_; }
  const std::vector<EventGroup>& groups() const { return groups_; }
  const std::vector<InputStats>& inputs() const { return inputs_; }
  const std::vector<TorchrunFailure>& torchrunFailures() const { return torchrun_; }
  const std::vector<std::string>& inputWarnings() const { return inputWarnings_; }
  uint64_t skippedInputs() const { return skippedInputs_; }
  uint64_t totalLines() const;
  uint64_t totalBytes() const;
  uint64_t ranksOutOfRange() const { return ranksOutOfRange_; }
  int defaultYear() const { return defaultYear_; }

  // Formats "rank 5 only", "8/8 ranks", "ranks 0-4,6,7 (7/8)", "main process".
  std::string ranksText(const EventGroup& g, int nranks) const;

 private:
  struct FileState;
  struct Stream;

  std::string groupKey(int sig, std::string_view body) const;
  std::string attribute(const LineInfo& info, bool indented, Occurrence* occ);
  // The group of (sig, body), or -1 when there is none yet. Memoised per text (groupMemo_): the key masks
  // digits and is hashed, which cost ~4 instructions per input byte on every line of a dense log.
  int findGroup(int sig, std::string_view body);
  // known: findGroup(sig, info.body) when the caller asked already and found one (-1: looked up here).
  int addEvent(int sig, SigClass cls, const LineInfo& info, std::string_view raw, const Occurrence& occ,
               const std::vector<std::pair<std::string, std::string>>& details, int known = -1);
  // traceback.cc: the Python traceback / faulthandler state machine of one stream, for one line.
  // Returns the group of the event the line produced (or -1); *g is the group a line signature
  // already produced for it.
  int tracebackLine(Stream* st, const std::string& key, const LineInfo& info, std::string_view raw,
                    const Occurrence& occ, uint32_t extra, int g);
  // A traceback that ended without its exception line: an event naming its innermost frame.
  void cutTraceback(Stream* st);
  // A line that reads like a Python exception ("KeyError: 'x'") outside any traceback.
  int bareException(const LineInfo& info, std::string_view raw, const Occurrence& occ);
  // floor.cc: an error line no signature knows (the grep floor), messages that continue on the next
  // lines, and the knowledge-table explanations and consequences chosen at the end.
  int floorLine(const LineInfo& info, std::string_view raw, const Occurrence& occ, const std::string& key);
  void startContinuation(int g, const std::string& key, const LineInfo& info);
  bool continueMessage(const LineInfo& info, const std::string& key, uint32_t extra, bool sameLine);
  void explainGroups();
  void tieConsequences(Result* r);
  void composeVerdict(Result* r);
  void ncclChain(const LineInfo& info, uint32_t extra, int g);
  void nativeFrames(const std::string& key, const LineInfo& info, int g);
  void rankHints(std::string_view line, uint32_t extra);
  void chooseRoot(Result* r, const std::vector<int>& origins);
  void insufficientCapture(Result* r);
  void torchrunCapture(Result* r);
  void appendCaptures(Result* r, const std::string& next);
  void noteOrdering(Result* r);
  int clampRank(long r);
  void handleArfuseTokens(std::string_view body, Occurrence* occ,
                          std::vector<std::pair<std::string, std::string>>* details);
  void handleFlightRecorder(std::string_view body, const Occurrence& occ, uint32_t extra);
  void handleTorchrunSummary(std::string_view body, const Occurrence& occ);
  void analyseWatchdog(Result* r);
  void analyseArfuseTimeouts(Result* r);
  void analyseNcclWatch(Result* r);
  void analyseFlightRecorder(Result* r);
  void analyseErrorRecords(Result* r);

  const Catalog& catalog_;
  std::unique_ptr<Matcher> matcher_;
  int sigFloor_ = -1, sigFloorWeak_ = -1;           // grep.error_line / grep.error_line_weak
  std::unique_ptr<TextMemo<ErrorLine>> floorMemo_;  // the grep floor's classification per (text, level)
  EnvFacts env_;
  int contextLines_;
  std::vector<InputStats> inputs_;
  std::unique_ptr<FileState> fs_;
  std::vector<EventGroup> groups_;
  std::unordered_map<std::string, int> groupIndex_;
  size_t memoEntries_;
  std::unique_ptr<TextMemo<int>> groupMemo_;  // (message text, signature) -> group index
  uint64_t droppedGroups_ = 0;

  // Facts for the cross-rank analyses.
  std::map<int, long> seqByRank_;             // c10d watchdog: SeqNum at timeout
  std::map<int, long> lastCompletedByRank_;   // c10d: "last completed NCCL work"
  std::map<int, std::pair<int, int>> waits_;  // arfuse timeouts: waiting rank -> (peer, group)
  // arfuse's NCCL watch across hosts: per line, the reporting rank (-1 unknown) and the ranks its
  // operation waits with.
  std::vector<std::pair<int, std::set<int>>> ncclWaits_;
  struct FrRank {
    int dev = -1, nranks = 0;
    long lastCompleted = -1, firstPending = -1;
    std::string pendingOp;
    std::string lastError;  // "arfuse-dump-note rank=R last_error: ..."
    Occurrence header;
  };
  std::map<int, FrRank> fr_;
  std::vector<std::pair<int, int>> errorRecords_;  // (rank, peer) of timeouts: rank waited for peer
  // Error records that are not waits (code=mismatch / concurrent): they name their own cause.
  struct OtherRecord {
    int rank = -1, peer = -1;
    long epoch = -1;
    std::string code, mine, theirs;
    Occurrence at;
  };
  std::vector<OtherRecord> otherRecords_;
  std::vector<TorchrunFailure> torchrun_;
  int nranksHint_ = 0;
  std::string nranksHintSource_;
  uint64_t nranksClaimIgnored_ = 0;  // nranks claims above kMaxRank + 1
  int maxRank_ = -1;
  uint64_t ranksOutOfRange_ = 0;
  std::vector<std::string> inputWarnings_;
  uint64_t skippedInputs_ = 0;
  uint64_t droppedRecords_ = 0;  // error records / failures beyond the kept maximum
  int defaultYear_ = 0;
  uint64_t stampedEvents_ = 0, unstampedEvents_ = 0, uptimeEvents_ = 0;
};

}  // namespace triage
}  // namespace arfuse
