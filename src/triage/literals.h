// Which of a fixed set of literals occur in a line, ASCII case-insensitively: the prefilter that decides
// which signatures' patterns run on it. Every byte of every log line passes through here, so it is a
// table scan rather than a regex engine: at every second position, a hash of the next four (case-folded)
// bytes is tested in a 64 Kibit filter built from the four-byte windows at the first two offsets of every
// literal of five bytes or more, which rejects almost every window with one load; the few it passes
// compare the literals filed under that hash. The few shorter literals are found by their first byte
// (memchr): keep catalogue literals at five bytes or more where a longer one serves.
// Linear in the line (each position costs at most the literals sharing its hash or first byte, constants
// of the catalogue), no allocation.
//
// It replaced an RE2::Set over the same literals: the Set has to run its DFA in all-matches mode over
// the whole line, and with ~300 case-insensitive literals it cost about 8 ns per byte (most of triage's
// time on an error-dense log); this costs about one. Hyperscan would serve too, at the price of one more
// build dependency on every CI and GPU host for a set this small.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace arfuse {
namespace triage {

class LiteralScanner {
 public:
  // Adds a literal (empty ones are ignored); returns its id (ids count up from 0 in the order added).
  int add(std::string_view literal);
  // Builds the tables; call once after the last add().
  void build();
  // Appends to *hits the id of every literal that occurs in `text` (each id once, in no particular order).
  void scan(std::string_view text, std::vector<int>* hits) const;
  size_t size() const { return lits_.size(); }

 private:
  static constexpr uint32_t kStep = 2;  // the scan tests the four-byte window at every kStep-th position
  struct Entry {
    uint32_t id;      // the literal
    uint32_t offset;  // where in it the window starts
  };
  std::vector<std::string> lits_;  // lowercased
  uint64_t filter_[1024] = {};     // bit hash4(window) for the windows of every long literal
  std::vector<uint32_t> start_;    // literals by window hash: entries_[start_[k] .. start_[k + 1])
  std::vector<Entry> entries_;
  std::vector<uint32_t> short_[256];       // literals shorter than kStep + 3 bytes, by their first byte
  std::vector<unsigned char> shortFirst_;  // the first bytes that have some
  mutable std::vector<uint32_t> seen_;     // scan epoch that last reported each literal
  mutable uint32_t epoch_ = 0;
};

}  // namespace triage
}  // namespace arfuse
