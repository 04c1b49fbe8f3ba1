#include "rowbinary.hpp"

namespace netprism::clickhouse {

void RowWriter::varint(uint64_t v) {
  while (v >= 0x80) {
    out_.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out_.push_back(static_cast<char>(v));
}

uint64_t RowReader::varint() {
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (!take(1)) return 0;
    const auto b = static_cast<uint8_t>(in_[0]);
    in_.remove_prefix(1);
    v |= uint64_t{b & 0x7fu} << shift;
    if (!(b & 0x80)) return v;
  }
  ok_ = false;  // more than 10 bytes: not a varint
  return 0;
}

std::string_view RowReader::string() {
  const uint64_t n = varint();
  if (!take(n)) return {};
  std::string_view s = in_.substr(0, n);
  in_.remove_prefix(n);
  return s;
}

}  // namespace netprism::clickhouse
