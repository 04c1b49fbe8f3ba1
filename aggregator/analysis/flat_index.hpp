// FlatIndex: key -> dense record index for tables whose records already live in a vector (the streaming
// engine's flows_ and conns_), replacing std::unordered_map<Key, uint32_t> on the per-event path.
//
// Why: the daemon's live analysis looks up one flow per flowlet (over a million per second under load).
// A node-based map costs a bucket read plus a node read per lookup, both random in memory, and then the
// record itself is read; here a lookup reads one 8-byte slot (linear probing keeps a probe sequence inside
// one or two cache lines at load <= 1/2) and then the record, which the caller reads next anyway. The key
// is not copied into the table: the caller's record holds it, and is compared only when the slot's tag
// (the hash's upper 32 bits) matches, so a wrong record is practically never touched.
//
// Insert and reset only, no erase: the engine drops records by rebuilding its vectors (compaction) and
// then re-inserts every key, which keeps probing free of tombstones.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

namespace netprism::analysis {

// A strong, cheap 64-bit mixer (the folded 128-bit product of wyhash): every output bit depends on every
// input bit, so the low bits used for the slot position are as good as the high ones.
inline uint64_t mum64(uint64_t a, uint64_t b) {
  __uint128_t r = static_cast<__uint128_t>(a) * b;
  return static_cast<uint64_t>(r) ^ static_cast<uint64_t>(r >> 64);
}

// Hash of up to three 64-bit words with a per-process seed: keys come from network traffic, and a fixed
// seed would let a sender choose ports that all land in one probe sequence.
inline uint64_t hash_words(uint64_t w0, uint64_t w1, uint64_t w2 = 0) {
  static const uint64_t seed = [] {
    std::random_device rd;
    return (uint64_t{rd()} << 32) ^ rd();
  }();
  constexpr uint64_t k0 = 0xa0761d6478bd642full, k1 = 0xe7037ed1a0b428dbull, k2 = 0x8ebc6af09c88c6e3ull;
  uint64_t h = mum64(w0 ^ seed ^ k0, w1 ^ k1);
  return mum64(h ^ w2 ^ k2, seed ^ k1);
}

class FlatIndex {
 public:
  static constexpr uint32_t npos = UINT32_MAX;

  // Index of the record, among those inserted with hash h, whose key the caller's `is_key(index)`
  // accepts; npos if none.
  template <class IsKey>
  uint32_t find(uint64_t h, IsKey&& is_key) const {
    if (slots_.empty()) return npos;
    const uint32_t tag = tag_of(h);
    for (size_t i = tag & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.index == npos) return npos;
      if (s.tag == tag && is_key(s.index)) return s.index;
    }
  }
  // Hints for a lookup of hash h coming soon (StreamingAnalysis::add of a run of events): prefetch() starts
  // loading h's first slot; peek() returns the record index in that slot if its tag matches (npos
  // otherwise), unchecked -- only for prefetching that record; find() is what decides.
  void prefetch(uint64_t h) const {
    if (!slots_.empty()) __builtin_prefetch(&slots_[tag_of(h) & mask_]);
  }
  uint32_t peek(uint64_t h) const {
    if (slots_.empty()) return npos;
    const Slot& s = slots_[tag_of(h) & mask_];
    return s.tag == tag_of(h) ? s.index : npos;
  }
  // Adds a record; its key must not be present (find() first).
  void insert(uint64_t h, uint32_t index) {
    if (2 * (size_ + 1) > slots_.size()) rehash(capacity_for(size_ + 1));
    place(tag_of(h), index);
    ++size_;
  }
  // Empties the table, sized for n records without growing: compaction, every pass that forgets
  // connections, re-inserts a known count. The slots are kept when already of about that size (up to twice
  // it), so a steady table is refilled in place instead of freed and allocated again (the target run's flow
  // index is tens of MB; freeing and reserving it every such pass left the heap holding both).
  void reset(size_t n) {
    const size_t cap = capacity_for(n);
    if (slots_.size() < cap || slots_.size() > 2 * cap) {
      slots_ = std::vector<Slot>(cap);
    } else {
      std::fill(slots_.begin(), slots_.end(), Slot{});
    }
    mask_ = slots_.size() - 1;
    size_ = 0;
  }
  size_t size() const { return size_; }
  size_t capacity() const { return slots_.size(); }

 private:
  // The slot position is taken from the tag (the hash's upper 32 bits, which mum64 mixes fully), so the
  // table can grow from its slots alone: no stored hashes, no call back into the records. Tables stay far
  // below 2^32 slots (the engine bounds its records to a few hundred thousand).
  static uint32_t tag_of(uint64_t h) { return static_cast<uint32_t>(h >> 32); }
  struct Slot {
    uint32_t tag = 0;
    uint32_t index = npos;  // npos: empty
  };
  // Load at most 1/2: linear probing then reads ~1.5 slots per hit and ~2.5 per miss on average.
  static size_t capacity_for(size_t n) {
    size_t c = 16;
    while (c < 2 * n) c *= 2;
    return c;
  }
  void place(uint32_t tag, uint32_t index) {
    size_t i = tag & mask_;
    while (slots_[i].index != npos) i = (i + 1) & mask_;
    slots_[i] = {tag, index};
  }
  void rehash(size_t cap) {
    std::vector<Slot> old(cap);
    old.swap(slots_);
    mask_ = cap - 1;
    for (const Slot& s : old)
      if (s.index != npos) place(s.tag, s.index);
  }

  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

}  // namespace netprism::analysis
