// ClickHouse's RowBinary format (https://clickhouse.com/docs/en/interfaces/formats#rowbinary), the subset the
// flow tables use: UIntN little-endian, String as LEB128 length + bytes, FixedString(N) as N bytes,
// Array(T) as LEB128 count + elements. No client library is packaged in Debian; this is all an insert or a
// SELECT ... FORMAT RowBinary needs, and it is the same in ClickHouse 18.16 and current releases.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>

namespace netprism::clickhouse {

class RowWriter {
 public:
  explicit RowWriter(std::string& out) : out_(out) {}
  template <class U>
  void uint(U v) {  // UInt8/16/32/64 by the width of U
    static_assert(std::is_unsigned_v<U>);
    if constexpr (std::endian::native == std::endian::little) {
      out_.append(reinterpret_cast<const char*>(&v), sizeof v);  // the row's bytes as they are in memory
    } else {
      for (std::size_t i = 0; i < sizeof(U); ++i)
        out_.push_back(static_cast<char>((uint64_t{v} >> (8 * i)) & 0xff));
    }
  }
  void varint(uint64_t v);
  void string(std::string_view s) {
    varint(s.size());
    out_.append(s);
  }
  void fixed(const void* p, std::size_t n) { out_.append(static_cast<const char*>(p), n); }

 private:
  std::string& out_;
};

// Reads what RowWriter writes; every read checks the bytes left (a short or corrupt reply is an error,
// never a read past the end): ok() turns false and values read after that are zero.
class RowReader {
 public:
  explicit RowReader(std::string_view in) : in_(in) {}
  bool at_end() const { return in_.empty(); }
  bool ok() const { return ok_; }
  template <class U>
  U uint() {
    U v = 0;
    if (!take(sizeof(U))) return 0;
    for (std::size_t i = 0; i < sizeof(U); ++i)
      v = static_cast<U>(v | static_cast<U>(static_cast<uint64_t>(static_cast<uint8_t>(in_[i])) << (8 * i)));
    in_.remove_prefix(sizeof(U));
    return v;
  }
  uint64_t varint();
  std::string_view string();
  bool fixed(void* p, std::size_t n) {
    if (!take(n)) return false;
    std::memcpy(p, in_.data(), n);
    in_.remove_prefix(n);
    return true;
  }

 private:
  bool take(std::size_t n) {
    if (ok_ && in_.size() >= n) return true;
    ok_ = false;
    return false;
  }
  std::string_view in_;
  bool ok_ = true;
};

}  // namespace netprism::clickhouse
