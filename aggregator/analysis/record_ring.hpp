// RecordRing: a FIFO of fixed-size records in one ring buffer, the streaming engine's per-flow transfer list
// (the most recent transfers of a flow, appended as they arrive, dropped from the front as the tail moves).
//
// Why not a vector with a dead prefix (before): a flow's list grew by doubling and its dead prefix was erased
// only once it was as long as the live part, so a steady flow with L live transfers held a buffer of 2-4 L
// (the target live_scale run: ~114 bytes of heap per 32-byte live transfer, most of the aggregator's
// growth when large jobs ran). A ring holds L in a power-of-two buffer of L..2L, never moves a record to
// drop older ones, and halves when a quarter full (hysteresis: a list that shrank must double before it
// grows again, so a list that breathes by a pass' worth does not reallocate every pass).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace netprism::analysis {

template <class T>
class RecordRing {
 public:
  size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  size_t capacity() const { return cap_; }
  // i-th record from the oldest.
  const T& operator[](size_t i) const { return buf_[(head_ + i) & (cap_ - 1)]; }
  T& operator[](size_t i) { return buf_[(head_ + i) & (cap_ - 1)]; }
  // Where the next push_back() writes (for a prefetch); null when it would grow first.
  const T* next_slot() const { return n_ < cap_ ? &buf_[(head_ + n_) & (cap_ - 1)] : nullptr; }

  void push_back(const T& x) {
    if (n_ == cap_) resize_buffer(cap_ ? 2 * cap_ : kMinCapacity);
    buf_[(head_ + n_) & (cap_ - 1)] = x;
    ++n_;
  }
  // Drops the k oldest records (k <= size()).
  void pop_front(size_t k) {
    if (k == 0) return;
    n_ -= k;
    head_ = n_ ? (head_ + k) & (cap_ - 1) : 0;
    shrink();
  }
  // Keeps the records pred accepts, oldest first (the rare eviction at the transfer bound).
  template <class Pred>
  size_t retain_if(Pred&& pred) {
    size_t kept = 0;
    for (size_t i = 0; i < n_; ++i)
      if (pred(static_cast<const T&>((*this)[i]))) (*this)[kept++] = (*this)[i];
    const size_t gone = n_ - kept;
    // Kept records now sit at the front, in order: dropping from the back is dropping the rest.
    n_ = kept;
    if (n_ == 0) head_ = 0;
    shrink();
    return gone;
  }

 private:
  static constexpr size_t kMinCapacity = 4;
  // Halves while at most a quarter full (one copy, to the final size).
  void shrink() {
    size_t cap = cap_;
    while (cap > kMinCapacity && 4 * n_ <= cap) cap /= 2;
    if (cap != cap_) resize_buffer(cap);
  }
  // To `cap` (a power of two >= n_), the records unwrapped to the front.
  void resize_buffer(size_t cap) {
    auto next = std::make_unique_for_overwrite<T[]>(cap);
    for (size_t i = 0; i < n_; ++i) next[i] = (*this)[i];
    buf_ = std::move(next);
    cap_ = cap;
    head_ = 0;
  }

  std::unique_ptr<T[]> buf_;
  size_t head_ = 0, n_ = 0, cap_ = 0;
};

}  // namespace netprism::analysis
