#include "batch_codec.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "netprism/wire.hpp"
#include "zstd_blob.hpp"

namespace netprism::store {

namespace {

// NPC2 (written): columns in byte planes. NPC1 (read): values interleaved, as stores before it wrote them.
constexpr char kMagic[4] = {'N', 'P', 'C', '2'};
constexpr char kMagicV1[4] = {'N', 'P', 'C', '1'};
// Columns: the flowlet's fields in list order (records.hpp), an address as its index into the batch's address
// table, a vector as one column per element.
constexpr std::size_t kColumns = [] {
  std::size_t n = 0;
  for_each_flowlet_field([&](auto field, auto get) {
    using M = std::remove_reference_t<decltype(get(std::declval<Flowlet&>()))>;
    n += decltype(field)::kind == FieldKind::kVec ? std::extent_v<M> : 1;
  });
  return n;
}();
static_assert(kColumns == 21, "the column layout of NPC1 and NPC2 (batch_codec.hpp)");
constexpr std::size_t kAddrs = [] {
  std::size_t n = 0;
  for_each_flowlet_field([&](auto field, auto) { n += decltype(field)::kind == FieldKind::kAddr; });
  return n;
}();
static_assert(std::endian::native == std::endian::little, "column values are stored little-endian");
constexpr std::size_t kMaxVarint = 10;

inline uint8_t* put(uint8_t* p, uint64_t v) {
  while (v >= 0x80) {
    *p++ = static_cast<uint8_t>(v | 0x80);
    v >>= 7;
  }
  *p++ = static_cast<uint8_t>(v);
  return p;
}
inline bool same16(const uint8_t* a, const uint8_t* b) {
  uint64_t a0, a1, b0, b1;
  std::memcpy(&a0, a, 8);
  std::memcpy(&a1, a + 8, 8);
  std::memcpy(&b0, b, 8);
  std::memcpy(&b1, b + 8, 8);
  return ((a0 ^ b0) | (a1 ^ b1)) == 0;
}
inline uint64_t zigzag(int64_t v) {
  return (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63);
}
inline int64_t unzigzag(uint64_t v) {
  return static_cast<int64_t>(v >> 1) ^ -static_cast<int64_t>(v & 1);
}

// Per-batch address table: open addressing with the 16-byte keys held in the slots themselves (a compare
// touches one cache line, not the flowlet the address came from). Reused per thread, so no allocation per
// batch once warm.
class AddrTable {
 public:
  // Starts small (most batches hold a few dozen distinct addresses) and doubles at half load, so the
  // table a batch touches stays in cache.
  void reset() {
    resize(256);
    keys_.clear();
  }
  inline uint32_t index(const uint8_t* a) {
    uint64_t x, y;
    std::memcpy(&x, a, 8);
    std::memcpy(&y, a + 8, 8);
    for (std::size_t i = slot_of(x, y);; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.index == 0) {  // empty: a new address
        keys_.push_back(a);
        s = {x, y, static_cast<uint32_t>(keys_.size())};
        const uint32_t index = s.index - 1;
        if (2 * keys_.size() > slots_.size()) grow();
        return index;
      }
      if (s.x == x && s.y == y) return s.index - 1;
    }
  }
  const std::vector<const uint8_t*>& keys() const { return keys_; }

 private:
  struct Slot {
    uint64_t x = 0, y = 0;
    uint32_t index = 0;  // 1-based; 0: empty
  };
  std::size_t slot_of(uint64_t x, uint64_t y) const {
    // The top bits of the product depend on every input bit (v4-mapped addresses differ only in their last
    // bytes, so lower product bits would put a whole subnet into one slot).
    return static_cast<std::size_t>((((x * 0x9e3779b97f4a7c15ull) ^ y) * 0xff51afd7ed558ccdull) >> shift_);
  }
  void resize(std::size_t cap) {
    slots_.assign(cap, Slot{});
    mask_ = cap - 1;
    shift_ = 64 - __builtin_ctzll(cap);
  }
  [[gnu::noinline]] void grow() {
    std::vector<Slot> old = std::move(slots_);
    resize(old.size() * 2);
    for (const Slot& s : old) {
      if (s.index == 0) continue;
      std::size_t i = slot_of(s.x, s.y);
      while (slots_[i].index != 0) i = (i + 1) & mask_;
      slots_[i] = s;
    }
  }
  std::vector<Slot> slots_;
  std::vector<const uint8_t*> keys_;
  std::size_t mask_ = 0;
  int shift_ = 64;
};

// What a column holds for a number: first_ns as the difference from the previous flowlet's (modular, zigzag:
// any order round-trips), last_ns as the duration (the wire codec guarantees last >= first), else the value.
template <FlowletField Id>
uint64_t to_column(const Flowlet* fl, std::size_t i, uint64_t v) {
  if constexpr (Id == FlowletField::first_ns)
    return zigzag(static_cast<int64_t>(v - (i ? fl[i - 1].first_ns : 0)));
  else if constexpr (Id == FlowletField::last_ns)
    return v - fl[i].first_ns;
  else
    return v;
}

// Calls fn(c, value) for every column c in stored order, value(i) being what it holds for flowlet i (idx: the
// address indexes, kAddrs per flowlet).
template <class Fn>
// GCC inlines a lambda marked here (the codec's per-field loop); clang reads an attribute in this position as
// one on the lambda's type and warns (-Werror in the fuzz build), so it gets none.
#if defined(__clang__)
#define NP_LAMBDA_ALWAYS_INLINE
#else
#define NP_LAMBDA_ALWAYS_INLINE [[gnu::always_inline]]
#endif
[[gnu::always_inline]] inline void for_each_column(const Flowlet* fl, const uint32_t* idx, Fn&& fn) {
  std::size_t c = 0, a = 0;
  for_each_flowlet_field([&](auto field, auto get) NP_LAMBDA_ALWAYS_INLINE {
    using F = decltype(field);
    using M = std::remove_reference_t<decltype(get(*fl))>;
    if constexpr (F::kind == FieldKind::kAddr) {
      fn(c++, [idx, k = a++](std::size_t i) -> uint64_t { return idx[kAddrs * i + k]; });
    } else if constexpr (F::kind == FieldKind::kVec) {
      for (std::size_t e = 0; e < std::extent_v<M>; ++e)
        fn(c++, [fl, e, get](std::size_t i) -> uint64_t { return get(fl[i])[e]; });
    } else {
      fn(c++, [fl, get](std::size_t i) -> uint64_t { return to_column<F::id>(fl, i, get(fl[i])); });
    }
  });
}

// One column: header byte w (bytes per value, 0..8), varint lo (the smallest value), then every value minus
// lo in w bytes, as w byte planes: the lowest byte of every value, then the next byte of every value, ...
// w = 0: all values equal lo (ports, protocol, interface... take no space, and cost no pass over the rows).
// Why planes: the high bytes of a column's values are mostly equal (small values in a wide column, times
// close together), and in a plane of their own they form runs that zstd encodes as matches; interleaved
// with the noisy low bytes they were literals, which zstd has to entropy-code byte by byte -- the larger
// part of its time on these batches (planes: ~25 % less zstd time and ~2 % fewer bytes on the ingest
// bench's batches).
inline int width(uint64_t lo, uint64_t hi) {
  const uint64_t range = hi - lo;
  return range == 0 ? 0 : (64 - __builtin_clzll(range) + 7) / 8;
}
// Writes n values as W byte planes (W a constant, so the per-byte loop unrolls into W plain stores).
template <int W, class Get>
void planes(uint8_t* p, std::size_t n, uint64_t lo, Get& get) {
  for (std::size_t i = 0; i < n; ++i) {
    const uint64_t v = get(i) - lo;
    for (int k = 0; k < W; ++k) p[static_cast<std::size_t>(k) * n + i] = static_cast<uint8_t>(v >> (8 * k));
  }
}
template <class Get>
uint8_t* column(uint8_t* p, std::size_t n, uint64_t lo, uint64_t hi, Get get) {
  const int w = width(lo, hi);
  *p++ = static_cast<uint8_t>(w);
  p = put(p, lo);
  switch (w) {
    case 0:
      return p;
    case 1:
      planes<1>(p, n, lo, get);
      break;
    case 2:
      planes<2>(p, n, lo, get);
      break;
    case 3:
      planes<3>(p, n, lo, get);
      break;
    case 4:
      planes<4>(p, n, lo, get);
      break;
    case 5:
      planes<5>(p, n, lo, get);
      break;
    case 6:
      planes<6>(p, n, lo, get);
      break;
    case 7:
      planes<7>(p, n, lo, get);
      break;
    default:
      planes<8>(p, n, lo, get);
      break;
  }
  return p + static_cast<std::size_t>(w) * n;
}

// Encodes into buf (grown, never shrunk, so its bytes are not zero-filled again per batch); returns the
// length used.
std::size_t encode_into(const Batch& b, std::string& buf) {
  const std::string rest_wire = wire::encode(without_flowlets(b));  // everything but the flowlets

  const auto& fl = b.flowlets;
  const std::size_t n = fl.size();
  thread_local AddrTable table;
  thread_local std::vector<uint32_t> idx;
  table.reset();
  idx.resize(kAddrs * n);
  // One pass over the rows (112 bytes each, read in order) finds the address indexes and every column's
  // range; then only the columns that vary get a pass of their own.
  uint64_t lo[kColumns], hi[kColumns];
  std::fill(std::begin(lo), std::end(lo), n ? std::numeric_limits<uint64_t>::max() : 0);
  std::fill(std::begin(hi), std::end(hi), 0);
  for (std::size_t i = 0; i < n; ++i) {
    // Consecutive flowlets often share an address (the node's own, on the same side): compare with the
    // previous one before hashing.
    std::size_t a = 0;
    for_each_flowlet_field([&](auto field, auto get) {
      if constexpr (decltype(field)::kind == FieldKind::kAddr) {
        const std::size_t at = kAddrs * i + a++;
        idx[at] = i && same16(get(fl[i]), get(fl[i - 1])) ? idx[at - kAddrs] : table.index(get(fl[i]));
      }
    });
    for_each_column(fl.data(), idx.data(), [&](std::size_t c, auto value) NP_LAMBDA_ALWAYS_INLINE {
      const uint64_t v = value(i);
      lo[c] = std::min(lo[c], v);
      hi[c] = std::max(hi[c], v);
    });
  }
  const std::size_t bound = sizeof kMagic + 3 * kMaxVarint + rest_wire.size() + 16 * table.keys().size() +
                            kColumns * (1 + kMaxVarint + 8 * n) + 8;
  if (buf.size() < bound) buf.resize(bound);
  auto* const start = reinterpret_cast<uint8_t*>(buf.data());
  uint8_t* p = start;
  std::memcpy(p, kMagic, sizeof kMagic);
  p += sizeof kMagic;
  p = put(p, rest_wire.size());
  std::memcpy(p, rest_wire.data(), rest_wire.size());
  p += rest_wire.size();
  p = put(p, n);
  p = put(p, table.keys().size());
  for (const uint8_t* a : table.keys()) {
    std::memcpy(p, a, 16);
    p += 16;
  }
  for_each_column(fl.data(), idx.data(),
                  [&](std::size_t c, auto value) { p = column(p, n, lo[c], hi[c], value); });
  return static_cast<std::size_t>(p - start);
}

struct Corrupt : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Bounds-checked reader over the stored bytes.
class In {
 public:
  In(const uint8_t* p, std::size_t n) : p_(p), end_(p + n) {}
  std::size_t left() const { return static_cast<std::size_t>(end_ - p_); }
  uint64_t var() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p_ == end_) throw Corrupt("truncated");
      const uint8_t c = *p_++;
      if (shift == 63 && c > 1) throw Corrupt("varint overflow");
      v |= static_cast<uint64_t>(c & 0x7f) << shift;
      if (!(c & 0x80)) return v;
    }
    throw Corrupt("varint overflow");
  }
  const uint8_t* take(std::size_t k) {
    if (left() < k) throw Corrupt("truncated");
    const uint8_t* s = p_;
    p_ += k;
    return s;
  }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
};

// Reads one column (see column(); `planes` false: NPC1's interleaved values) and hands value i to
// set(i, v); every value is checked against max.
template <class Set>
void read_column(In& in, std::size_t n, uint64_t max, std::string_view what, bool planes, Set set) {
  const uint8_t w = in.take(1)[0];
  if (w > 8) throw Corrupt(std::string(what) + ": bad width");
  const uint64_t lo = in.var();
  if (lo > max) throw Corrupt(std::string(what) + " out of range");
  const uint8_t* d = in.take(n * w);  // n is bounded (decode_columns), so n * w cannot overflow
  // Byte k of value i: planes at d[k * n + i], interleaved at d[i * w + k].
  const std::size_t step_k = planes ? n : 1, step_i = planes ? 1 : w;
  for (std::size_t i = 0; i < n; ++i) {
    uint64_t v = 0;
    for (int k = w - 1; k >= 0; --k) v = (v << 8) | d[i * step_i + static_cast<std::size_t>(k) * step_k];
    if (v > max - lo) throw Corrupt(std::string(what) + " out of range");
    set(i, lo + v);
  }
}

Batch decode_columns(std::string_view bytes, bool planes) {
  In in(reinterpret_cast<const uint8_t*>(bytes.data()) + sizeof kMagic, bytes.size() - sizeof kMagic);
  const uint64_t rest_len = in.var();
  if (rest_len > in.left()) throw Corrupt("truncated");
  const auto* rest = in.take(static_cast<std::size_t>(rest_len));
  auto d =
      wire::decode(std::string_view(reinterpret_cast<const char*>(rest), static_cast<std::size_t>(rest_len)));
  if (!d) throw Corrupt("batch header: " + d.error);
  if (d.message->type != MsgType::kBatch) throw Corrupt("batch header is not a batch");
  Batch b = std::move(std::get<Batch>(d.message->body));
  if (!b.flowlets.empty()) throw Corrupt("batch header holds flowlets");

  const uint64_t n = in.var();
  // Constant columns take no bytes, so the data does not bound the count: the wire codec's array limit
  // does (no batch with more flowlets was ever accepted, so none was stored).
  if (n > wire::DecodeLimits{}.max_array) throw Corrupt("flowlet count above the limit");
  const uint64_t a = in.var();
  if (a > in.left() / 16) throw Corrupt("address count exceeds the data");
  const uint8_t* addrs = in.take(static_cast<std::size_t>(16 * a));
  const auto k = static_cast<std::size_t>(n);
  std::vector<Flowlet> fl(k);  // value-initialised: padding stays zero
  const uint64_t last_addr = a == 0 ? 0 : a - 1;
  if (a == 0 && k > 0) throw Corrupt("address index out of range");
  uint64_t prev = 0;  // first_ns of the previous flowlet
  for_each_flowlet_field([&](auto field, auto get) {
    using F = decltype(field);
    using M = std::remove_reference_t<decltype(get(fl[0]))>;
    if constexpr (F::kind == FieldKind::kAddr) {
      read_column(in, k, last_addr, std::string(F::name) + " index", planes,
                  [&](std::size_t i, uint64_t v) { std::memcpy(get(fl[i]), addrs + 16 * v, sizeof(M)); });
    } else if constexpr (F::kind == FieldKind::kVec) {
      using E = std::remove_extent_t<M>;
      for (std::size_t e = 0; e < std::extent_v<M>; ++e)
        read_column(in, k, std::numeric_limits<E>::max(), F::name, planes,
                    [&](std::size_t i, uint64_t v) { get(fl[i])[e] = static_cast<E>(v); });
    } else {
      // The inverse of to_column(), with the same checks as the wire codec, so a stored row can never yield
      // a flowlet a live one could not be.
      read_column(in, k, std::numeric_limits<M>::max(), F::name, planes, [&](std::size_t i, uint64_t v) {
        Flowlet& f = fl[i];
        if constexpr (F::id == FlowletField::first_ns) {
          prev = f.first_ns = prev + static_cast<uint64_t>(unzigzag(v));
        } else if constexpr (F::id == FlowletField::last_ns) {
          if (v > std::numeric_limits<uint64_t>::max() - f.first_ns) throw Corrupt("last_ns out of range");
          f.last_ns = f.first_ns + v;
        } else {
          if (const char* why = flowlet_field_invalid(F::id, v))
            throw Corrupt(std::string(F::name) + ": " + why);
          get(f) = static_cast<M>(v);
        }
      });
    }
  });
  if (in.left() != 0) throw Corrupt("trailing bytes");
  b.flowlets = std::move(fl);
  return b;
}

}  // namespace

void encode_stored(const Batch& b, std::string& out) {
  // Through a per-thread buffer kept at its largest size: encode_into() first sizes its buffer to a bound
  // (~8 bytes per value), and growing `out` to it again on every call would zero-fill it every time.
  thread_local std::string scratch;
  // Encoded first, then copied: encode_into() may reallocate scratch, and the order in which a call's
  // arguments are evaluated is unspecified (clang reads scratch.data() first: a stale pointer -- found by
  // fuzz_stored_batch, stored_batch_test's EncodeStoredFromAFreshThread).
  const std::size_t n = encode_into(b, scratch);
  out.assign(scratch.data(), n);
}

std::optional<Batch> decode_stored(std::string_view bytes, std::string& err) {
  const bool v2 = bytes.size() >= sizeof kMagic && std::memcmp(bytes.data(), kMagic, sizeof kMagic) == 0;
  const bool v1 =
      bytes.size() >= sizeof kMagicV1 && std::memcmp(bytes.data(), kMagicV1, sizeof kMagicV1) == 0;
  if (v1 || v2) {
    try {
      return decode_columns(bytes, v2);
    } catch (const Corrupt& e) {
      err = std::string("corrupt stored batch: ") + e.what();
    } catch (const std::bad_alloc&) {
      err = "corrupt stored batch: too large to decode";
    }
    return std::nullopt;
  }
  auto d = wire::decode(bytes);  // a row from before the column encoding: the wire message itself
  if (d && d.message->type == MsgType::kBatch) return std::move(std::get<Batch>(d.message->body));
  err = d ? "stored row is not a batch" : d.error;
  return std::nullopt;
}

bool compress_stored(const Batch& b, int level, std::string& out, std::string& scratch) {
  const std::size_t n = encode_into(b, scratch);
  return zstd_compress_into(std::string_view(scratch.data(), n), level, out);
}

std::optional<Batch> decompress_stored(std::string_view stored, std::string& err) {
  static const std::size_t kMaxDecompressed = 2 * wire::DecodeLimits{}.max_message_bytes;
  auto raw = zstd_decompress(stored, kMaxDecompressed, err);
  if (!raw) return std::nullopt;
  return decode_stored(*raw, err);
}

}  // namespace netprism::store
