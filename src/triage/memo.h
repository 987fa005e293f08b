// A bounded memo of results per message text. Logs repeat: eight ranks print the same message, a
// traceback repeats frame for frame, a retry loop prints its error every second; so the literal scan, the
// patterns and the grep floor's classification run once per distinct text and are looked up after that.
//
// Set-associative (kWays texts per set, the least recently used replaced): a direct-mapped table of 4096
// slots holding the ~1600 distinct texts of a dense log lost about a third of them to collisions, each
// pair of colliding texts evicting each other on every repetition. Bounded by bytes rather than by a short
// cap per text: long lines (an arfuse error line with a dozen fields, a server_args dump, a JSON-wrapped
// error) are the costliest to match again (callgrind: ~100 instructions per byte, capture groups
// included) and repeat across ranks like any other, so a text may be long as long as the kept texts stay
// within `budget` bytes (a text that would exceed it is simply not kept). A text is compared in full on a
// hit, so a crafted hash collision only costs a miss.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace arfuse {
namespace triage {

// 64-bit hash of a text (eight bytes per step); `tag` separates results of different questions about
// the same text (the level a line was said at, the kind of signature looked for).
inline uint64_t memoHash(std::string_view s, uint64_t tag) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ s.size() ^ (tag * 0xC2B2AE3D27D4EB4Full);
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    h = (h ^ w) * 0xFF51AFD7ED558CCDull;
    h ^= h >> 29;
  }
  for (; i < s.size(); ++i) h = (h ^ static_cast<unsigned char>(s[i])) * 0x100000001B3ull;
  return h ^ (h >> 32);
}

template <class V>
class TextMemo {
 public:
  static constexpr size_t kWays = 4;

  // entries: rounded down to a multiple of kWays (0: remember nothing, every question is answered anew -
  // the plain path the tests compare the memoised one with); maxText: the longest text kept; budget: the
  // most bytes all kept texts may hold together.
  TextMemo(size_t entries, size_t maxText, size_t budget)
      : sets_(entries / kWays), maxText_(maxText), budget_(budget), slots_(sets_ * kWays) {}

  size_t bytesKept() const { return bytes_; }  // capacity of the kept texts' buffers (at most the budget)

  // Whether `text` can be remembered at all (longer texts are always recomputed).
  bool fits(std::string_view text) const { return sets_ > 0 && text.size() <= maxText_; }

  // A text, the question asked about it, and their hash: computed once for a find() and the put() after it.
  struct Key {
    std::string_view text;
    uint64_t tag, hash;
  };
  static Key key(std::string_view text, uint64_t tag) { return Key{text, tag, memoHash(text, tag)}; }

  // The value remembered for the key, or nullptr.
  const V* find(const Key& k) {
    if (!fits(k.text)) return nullptr;
    Slot* set = &slots_[(k.hash % sets_) * kWays];
    for (size_t w = 0; w < kWays; ++w) {
      Slot& s = set[w];
      if (s.used != 0 && s.hash == k.hash && s.tag == k.tag && s.text == k.text) {
        s.used = ++clock_;
        return &s.value;
      }
    }
    return nullptr;
  }
  const V* find(std::string_view text, uint64_t tag) { return fits(text) ? find(key(text, tag)) : nullptr; }

  // Remembers value for the key in place of the least recently used text of its set.
  void put(const Key& k, V value) {
    const std::string_view text = k.text;
    if (!fits(text)) return;
    Slot* set = &slots_[(k.hash % sets_) * kWays];
    Slot* victim = set;
    for (size_t w = 1; w < kWays; ++w)
      if (set[w].used < victim->used) victim = &set[w];
    // The budget counts the buffers' capacity. The slot's buffer is reused (no allocation on a miss) unless
    // it is much larger than the new text needs, so replaced long texts cannot leave every slot holding a
    // long buffer.
    const size_t had = victim->text.capacity();
    if (had > 2 * text.size() + 64) std::string().swap(victim->text);
    if (bytes_ - had + std::max(victim->text.capacity(), text.size()) > budget_) {
      victim->used = 0;  // over the budget: the new text is not kept, and the one it would replace is dropped
      std::string().swap(victim->text);
      bytes_ -= had;
      return;
    }
    victim->text.assign(text.data(), text.size());
    bytes_ = bytes_ - had + victim->text.capacity();
    victim->hash = k.hash;
    victim->tag = k.tag;
    victim->used = ++clock_;
    victim->value = std::move(value);
  }
  void put(std::string_view text, uint64_t tag, V value) {
    if (fits(text)) put(key(text, tag), std::move(value));
  }

 private:
  struct Slot {
    uint64_t hash = 0, tag = 0;
    uint64_t used = 0;  // clock of the last use; 0: empty
    std::string text;
    V value{};
  };
  size_t sets_, maxText_, budget_;
  std::vector<Slot> slots_;
  size_t bytes_ = 0;  // capacity of the kept texts
  uint64_t clock_ = 0;
};

}  // namespace triage
}  // namespace arfuse
