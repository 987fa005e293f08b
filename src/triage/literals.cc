#include "literals.h"

#include <algorithm>
#include <cstring>

namespace arfuse {
namespace triage {

namespace {

inline unsigned char low(unsigned char c) { return static_cast<unsigned char>(c - 'A' < 26u ? c + 32 : c); }

// Four bytes as one word with bit 5 of every byte set: ASCII letters fold to lower case (and a few
// punctuation bytes fold together, which only makes the filter a little less selective; every candidate
// is verified exactly).
inline uint32_t folded4(const unsigned char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v | 0x20202020u;
}

inline uint32_t hash4(uint32_t v) { return (v * 2654435761u) >> 16; }

}  // namespace

int LiteralScanner::add(std::string_view literal) {
  std::string l(literal);
  for (char& c : l) c = static_cast<char>(low(static_cast<unsigned char>(c)));
  lits_.push_back(std::move(l));
  return static_cast<int>(lits_.size()) - 1;
}

// A literal of kStep + 3 bytes or more covers, at one of its first kStep offsets, a four-byte window that
// starts at a multiple of kStep in the line: the scan tests only those windows, and each long literal is
// filed under the windows at its first kStep offsets. Shorter literals are looked for byte by byte.
void LiteralScanner::build() {
  std::vector<std::vector<Entry>> buckets(65536);
  for (size_t id = 0; id < lits_.size(); ++id) {
    const std::string& l = lits_[id];
    if (l.empty()) continue;
    if (l.size() < kStep + 3) {
      const unsigned char first = static_cast<unsigned char>(l[0]);
      if (short_[first].empty()) shortFirst_.push_back(first);
      short_[first].push_back(static_cast<uint32_t>(id));
      continue;
    }
    for (uint32_t off = 0; off < kStep; ++off) {
      const uint32_t key = hash4(folded4(reinterpret_cast<const unsigned char*>(l.data()) + off));
      filter_[key >> 6] |= uint64_t{1} << (key & 63);
      buckets[key].push_back(Entry{static_cast<uint32_t>(id), off});
    }
  }
  start_.assign(65537, 0);
  entries_.clear();
  for (unsigned k = 0; k < 65536; ++k) {
    start_[k] = static_cast<uint32_t>(entries_.size());
    entries_.insert(entries_.end(), buckets[k].begin(), buckets[k].end());
  }
  start_[65536] = static_cast<uint32_t>(entries_.size());
  seen_.assign(lits_.size(), 0);
  epoch_ = 0;
}

void LiteralScanner::scan(std::string_view text, std::vector<int>* hits) const {
  if (++epoch_ == 0) {  // wrapped: forget every mark
    std::fill(seen_.begin(), seen_.end(), 0);
    epoch_ = 1;
  }
  const size_t n = text.size();
  const unsigned char* s = reinterpret_cast<const unsigned char*>(text.data());
  // Literal `id` at `at`, compared case-insensitively in place; reported once per scan.
  auto tryAt = [&](uint32_t id, size_t at) {
    const std::string& l = lits_[id];
    if (seen_[id] == epoch_ || l.size() > n - at) return;
    for (size_t j = 0; j < l.size(); ++j)
      if (low(s[at + j]) != static_cast<unsigned char>(l[j])) return;
    seen_[id] = epoch_;
    hits->push_back(static_cast<int>(id));
  };
  for (size_t i = 0; i + 4 <= n; i += kStep) {
    const uint32_t key = hash4(folded4(s + i));
    if (!((filter_[key >> 6] >> (key & 63)) & 1)) continue;
    for (uint32_t k = start_[key], e = start_[key + 1]; k < e; ++k) {
      const Entry& en = entries_[k];
      if (en.offset <= i) tryAt(en.id, i - en.offset);
    }
  }
  // Short literals (a handful, by design of the catalogue): found by their first byte with memchr, in both
  // cases when it is a letter.
  for (unsigned char first : shortFirst_) {
    const unsigned char upper = static_cast<unsigned char>(first - 'a' < 26u ? first - 32 : first);
    for (unsigned char c : {first, upper}) {
      for (const void* p = std::memchr(s, c, n); p != nullptr;) {
        const size_t at = static_cast<const unsigned char*>(p) - s;
        for (uint32_t id : short_[first]) tryAt(id, at);
        p = at + 1 < n ? std::memchr(s + at + 1, c, n - at - 1) : nullptr;
      }
      if (upper == first) break;
    }
  }
}

}  // namespace triage
}  // namespace arfuse
