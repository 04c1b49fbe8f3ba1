// msgpack at the byte level, for the wire decoder (wire.cpp): what each type byte introduces, and big-endian
// loads. Private to the codec.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace netprism::wire {

// What a msgpack type byte introduces: its family, and how the value or length is held -- in the next `k`
// bytes (big-endian), or, with k = 0, in the type byte itself (`fixed`).
enum class Fam : uint8_t { kNil, kBool, kUint, kInt, kFloat, kStr, kBin, kArray, kMap, kExt, kBad };
struct Head {
  Fam fam = Fam::kBad;
  uint8_t k = 0;
  uint8_t fixed = 0;
};

constexpr Head classify(unsigned c) {
  const auto fixed = [](Fam f, unsigned v) { return Head{f, 0, static_cast<uint8_t>(v)}; };
  const auto sized = [](Fam f, unsigned first,
                        unsigned c) {  // 1, 2, 4, 8 bytes for c = first, first + 1, ...
    return Head{f, static_cast<uint8_t>(1u << (c - first)), 0};
  };
  if (c <= 0x7f) return fixed(Fam::kUint, c);
  if (c <= 0x8f) return fixed(Fam::kMap, c & 0x0f);
  if (c <= 0x9f) return fixed(Fam::kArray, c & 0x0f);
  if (c <= 0xbf) return fixed(Fam::kStr, c & 0x1f);
  if (c >= 0xe0) return fixed(Fam::kInt, c);  // negative fixint
  if (c == 0xc0) return fixed(Fam::kNil, 0);
  if (c == 0xc2 || c == 0xc3) return fixed(Fam::kBool, c & 1);
  if (c >= 0xc4 && c <= 0xc6) return sized(Fam::kBin, 0xc4, c);
  if (c == 0xca || c == 0xcb) return Head{Fam::kFloat, static_cast<uint8_t>(c == 0xca ? 4 : 8), 0};
  if (c >= 0xcc && c <= 0xcf) return sized(Fam::kUint, 0xcc, c);
  if (c >= 0xd0 && c <= 0xd3) return sized(Fam::kInt, 0xd0, c);
  if (c >= 0xd9 && c <= 0xdb) return sized(Fam::kStr, 0xd9, c);
  if (c == 0xdc || c == 0xdd) return sized(Fam::kArray, 0xdb, c);  // 2 or 4 bytes
  if (c == 0xde || c == 0xdf) return sized(Fam::kMap, 0xdd, c);
  if ((c >= 0xc7 && c <= 0xc9) || (c >= 0xd4 && c <= 0xd8)) return fixed(Fam::kExt, 0);
  return {};  // 0xc1: never used by msgpack
}

constexpr std::array<Head, 256> kHeads = [] {
  std::array<Head, 256> t{};
  for (unsigned c = 0; c < 256; ++c) t[c] = classify(c);
  return t;
}();

// Big-endian load of k = 1, 2, 4 or 8 bytes (the caller has checked they are there).
[[gnu::always_inline]] inline uint64_t load_be(const uint8_t* p, std::size_t k) {
  switch (k) {
    case 1:
      return p[0];
    case 2: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return __builtin_bswap16(v);
    }
    case 4: {
      uint32_t v;
      std::memcpy(&v, p, 4);
      return __builtin_bswap32(v);
    }
    default: {
      uint64_t v;
      std::memcpy(&v, p, 8);
      return __builtin_bswap64(v);
    }
  }
}

}  // namespace netprism::wire
