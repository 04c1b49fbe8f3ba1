// Bounds-checked big-endian reading of one datagram: every read names what it wanted, and running past the
// end throws DecodeError, which the decoders turn into the datagram's one-line error (never a crash).
#pragma once

#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>

namespace netprism::flowin {

struct DecodeError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Reader {
 public:
  explicit Reader(std::span<const uint8_t> d, size_t base = 0) : d_(d), base_(base) {}
  size_t left() const { return d_.size() - pos_; }
  size_t offset() const { return base_ + pos_; }  // in the datagram, for error messages

  // An unsigned big-endian number of n <= 8 bytes (IPFIX's reduced-size encoding sends counters shorter).
  uint64_t uint(size_t n, const char* what) {
    auto b = bytes(n, what);
    uint64_t v = 0;
    for (uint8_t c : b) v = v << 8 | c;
    return v;
  }
  std::span<const uint8_t> bytes(size_t n, const char* what) {
    if (n > left())
      throw DecodeError(std::string(what) + " at offset " + std::to_string(offset()) + ": needs " +
                        std::to_string(n) + " bytes, " + std::to_string(left()) + " left");
    auto b = d_.subspan(pos_, n);
    pos_ += n;
    return b;
  }
  // The next n bytes as a reader of their own (a set, a record, a sample).
  Reader sub(size_t n, const char* what) {
    size_t at = offset();
    return Reader(bytes(n, what), at);
  }

 private:
  std::span<const uint8_t> d_;
  size_t base_ = 0;
  size_t pos_ = 0;
};

}  // namespace netprism::flowin
