#include "netprism/wire.hpp"

#include "msgpack_format.hpp"
#include "wire_fields.hpp"

#include <msgpack.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstring>
#include <limits>
#include <new>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <variant>

namespace netprism::wire {
namespace {

// ---- encoding -------------------------------------------------------------------------------------------

using Packer = msgpack::packer<msgpack::sbuffer>;

template <class T>
void pack(Packer& pk, const T& v) {
  if constexpr (kAddress<T>) {
    pk.pack_bin(sizeof v);
    pk.pack_bin_body(reinterpret_cast<const char*>(v), sizeof v);
  } else if constexpr (std::is_array_v<T> || IsVector<T>::value) {
    pk.pack_array(static_cast<uint32_t>(std::size(v)));
    for (const auto& e : v) pack(pk, e);
  } else if constexpr (std::is_same_v<T, Counters>) {
    pk.pack_map(static_cast<uint32_t>(v.size()));
    for (const auto& [k, n] : v) {
      pk.pack(k);
      pk.pack(n);
    }
  } else if constexpr (std::is_enum_v<T>) {
    pk.pack(static_cast<std::underlying_type_t<T>>(v));
  } else if constexpr (Described<T>) {
    pk.pack_array(static_cast<uint32_t>(Record<T>::fields + Record<T>::reserved));
    Record<T>::each(v, [&](const char*, const auto& m, auto) { pack(pk, m); });
    for (std::size_t i = 0; i < Record<T>::reserved; ++i) pk.pack_nil();
  } else {
    pk.pack(v);  // integers, booleans, strings
  }
}

template <class T>
std::string envelope(MsgType t, const T& body) {
  msgpack::sbuffer buf;
  Packer pk(buf);
  pk.pack_array(3);
  pk.pack(kWireSchemaVersion);
  pk.pack(static_cast<uint32_t>(t));
  pack(pk, body);
  return std::string(buf.data(), buf.size());
}

// ---- decoding -------------------------------------------------------------------------------------------
//
// One pass over the bytes that builds no msgpack object tree (the tree cost one zone object per field --
// 22 per flowlet -- and was the aggregator's largest single cost): a typed cursor (Reader) decodes the
// fields straight into the records, checking every type and range, and holds every container, string and
// binary it opens to the limits (declared sizes capped by the limits and by the input length, nesting
// depth); fields it does not know are skipped through validate_objects(), which enforces the same limits
// and rejects ext types and reserved bytes. Only when the cursor fails does validate() walk the whole
// message, so that a structural error anywhere wins over the field error, exactly as when the message was
// unpacked in full before conversion. Every bounds check has the form "at least k bytes remain".

struct Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

[[noreturn]] void truncated() {
  throw Failure("truncated message");
}
[[noreturn]] void overflow(const char* what) {
  throw Failure(std::string("declared size exceeds the limit (") + what + " size overflow)");
}

// The name errors give a field: "record.field", or a record's own name.
struct What {
  What(const char* rec, const char* field = nullptr) : rec_(rec), field_(field) {}
  std::string str() const { return field_ ? std::string(rec_) + "." + field_ : std::string(rec_); }
  [[noreturn]] void fail(const char* why) const { throw Failure(str() + ": " + why); }

 private:
  const char* rec_;
  const char* field_;
};

struct Limits {
  std::size_t array, map, str, bin, depth;
};

// Walks `count` whole objects starting at `off` inside containers already `base_depth` deep, enforcing
// every limit; returns the offset after them. Iterative (an explicit stack of "items still expected" per
// open container), so a hostile depth never recurses; the stack is bounded by limits.depth.
std::size_t validate_objects(const uint8_t* p, std::size_t n, std::size_t off, uint64_t count,
                             std::size_t base_depth, const Limits& lim) {
  std::vector<uint64_t> open{count};
  open.reserve(std::min<std::size_t>(lim.depth, 64) + 1);
  auto need = [&](std::size_t k) {
    if (n - off < k) truncated();
  };
  while (!open.empty()) {
    if (open.back() == 0) {
      open.pop_back();
      continue;
    }
    open.back()--;
    need(1);
    const Head h = kHeads[p[off++]];
    need(h.k);
    const uint64_t v = h.k ? load_be(p + off, h.k) : h.fixed;
    off += h.k;
    const bool text = h.fam == Fam::kStr;
    switch (h.fam) {
      case Fam::kStr:
      case Fam::kBin:
        need(v);  // a truncated body is reported as truncation, whatever it declares
        if (v > (text ? lim.str : lim.bin)) overflow(text ? "str" : "bin");
        off += v;
        break;
      case Fam::kArray:
      case Fam::kMap:
        if (v > (h.fam == Fam::kMap ? lim.map : lim.array)) overflow(h.fam == Fam::kMap ? "map" : "array");
        // The new container sits at nesting level base_depth + open.size() (open[0] is the caller's level).
        if (base_depth + open.size() > lim.depth) throw Failure("nesting too deep");
        open.push_back(h.fam == Fam::kMap ? 2 * v : v);
        break;
      case Fam::kExt:
        overflow("ext");  // no netprism message uses ext types (the ext limit is 0)
      case Fam::kBad:
        throw Failure("malformed msgpack: parse error");
      default:
        break;  // scalars: skipped with their value bytes
    }
  }
  return off;
}

// The whole message: exactly one object, within the limits.
void validate(const uint8_t* p, std::size_t n, const Limits& lim) {
  if (validate_objects(p, n, 0, 1, 0, lim) != n) throw Failure("trailing bytes after the message");
}

// The typed cursor. Every read is bounds-checked and every container/string/binary it opens is held to
// the same limits (size, depth) as validate(); the fields it does not know are skipped through
// validate_objects(). Containers are opened by fields()/array()/map() and closed by close().
class Reader {
 public:
  Reader(const uint8_t* p, std::size_t n, const Limits& lim) : begin_(p), p_(p), end_(p + n), lim_(lim) {}

  bool at_end() const { return p_ == end_; }

  // An array header with at least `need` entries; returns the count (the caller skips the extras).
  uint32_t fields(std::size_t need, What what) {
    const uint32_t k = array(what);
    if (k < need)
      throw Failure(what.str() + ": expected " + std::to_string(need) + " fields, got " + std::to_string(k));
    return k;
  }
  uint32_t array(What what) { return open(Fam::kArray, lim_.array, "array", what); }
  uint32_t map(What what) { return open(Fam::kMap, lim_.map, "map", what); }
  void close() { --depth_; }

  // Fast path for what encoders write for non-negative values (positive fixint, uint8..uint64) when the
  // value fits T; everything else -- negative or signed encodings, truncation, range errors -- goes through
  // num_slow(), which re-reads from the same position and so produces the same results and messages.
  template <class T>
  T num(What what) {
    static_assert(std::is_integral_v<T>);
    if (has(1)) {
      const uint8_t c = *p_;
      if (c <= 0x7f) {  // fits every integral T (int8_t included)
        ++p_;
        return static_cast<T>(c);
      }
      if (c >= 0xcc && c <= 0xcf) {
        const std::size_t k = std::size_t{1} << (c - 0xcc);
        if (has(1 + k)) {
          const uint64_t u = load_be(p_ + 1, k);
          if (u <= static_cast<uint64_t>(std::numeric_limits<T>::max())) {
            p_ += 1 + k;
            return static_cast<T>(u);
          }
        }
      }
    }
    return num_slow<T>(what);
  }

  bool boolean(What what) {
    const Head h = head();
    if (h.fam != Fam::kBool) what.fail("expected boolean");
    return h.fixed;
  }

  std::string str(What what) {
    const Head h = head();
    if (h.fam != Fam::kStr) what.fail("expected string");
    const uint64_t k = length(h);
    const uint8_t* s = body(k);
    if (k > lim_.str) overflow("str");
    return std::string(reinterpret_cast<const char*>(s), static_cast<std::size_t>(k));
  }

  template <std::size_t N>
  void bin_fixed(uint8_t (&out)[N], What what) {
    // Fast path: bin8 of exactly N bytes, all present and within the limit (addresses: 16 bytes).
    if (N < 256 && has(N + 2) && p_[0] == 0xc4 && p_[1] == N && N <= lim_.bin) {
      std::memcpy(out, p_ + 2, N);
      p_ += N + 2;
      return;
    }
    const Head h = head();
    const uint64_t k = h.fam == Fam::kBin ? length(h) : UINT64_MAX;
    if (k != N) what.fail(("expected " + std::to_string(N) + "-byte binary").c_str());
    const uint8_t* b = body(k);
    if (k > lim_.bin) overflow("bin");
    std::memcpy(out, b, N);
  }

  bool flowlet_fast(Flowlet& f);

  // Skips `count` whole objects (trailing fields of a newer minor revision), validating them.
  void skip(uint64_t count) {
    // Fast path: the trailing fields are one-byte objects (nil, booleans, fixints -- the reserved nils of
    // a flowlet), which validate_objects() would accept byte by byte without a limit to check.
    while (count > 0 && has(1)) {
      const uint8_t c = *p_;
      if (!(c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3)) break;
      ++p_;
      --count;
    }
    if (count == 0) return;
    const std::size_t n = static_cast<std::size_t>(end_ - begin_);
    p_ = begin_ + validate_objects(begin_, n, static_cast<std::size_t>(p_ - begin_), count, depth_, lim_);
  }

 private:
  // At least k bytes remain: the only form any bounds check takes.
  bool has(std::size_t k) const { return static_cast<std::size_t>(end_ - p_) >= k; }
  const uint8_t* body(uint64_t k) {
    if (!has(k)) truncated();
    const uint8_t* s = p_;
    p_ += k;
    return s;
  }
  Head head() { return kHeads[*body(1)]; }
  uint64_t length(const Head& h) { return h.k ? load_be(body(h.k), h.k) : h.fixed; }

  uint32_t open(Fam fam, std::size_t limit, const char* kind, What what) {
    const Head h = head();
    if (h.fam != fam) what.fail(fam == Fam::kMap ? "expected map" : "expected array");
    const uint64_t k = length(h);
    if (k > limit) overflow(kind);
    if (depth_ + 1 > lim_.depth) throw Failure("nesting too deep");
    ++depth_;
    return static_cast<uint32_t>(k);
  }

  // msgpack integers: positive fixint / uint8..64 are unsigned; negative fixint / int8..64 are negative
  // only when their value is (a non-negative intN counts as unsigned, as msgpack-c treats it).
  template <class T>
  T num_slow(What what) {
    constexpr bool kUnsigned = std::is_unsigned_v<T>;
    const Head h = head();
    if (h.fam != Fam::kUint && h.fam != Fam::kInt)
      what.fail(kUnsigned ? "expected unsigned integer" : "expected integer");
    const uint64_t raw = length(h);
    const unsigned shift = h.k ? 64 - 8 * h.k : 56;  // sign extension of an intN (negative fixint: 8 bits)
    const int64_t s = h.fam == Fam::kInt ? static_cast<int64_t>(raw << shift) >> shift : 0;
    if (h.fam == Fam::kUint || s >= 0) {
      const uint64_t u = h.fam == Fam::kUint ? raw : static_cast<uint64_t>(s);
      if (u > static_cast<uint64_t>(std::numeric_limits<T>::max())) what.fail("value out of range");
      return static_cast<T>(u);
    }
    if constexpr (kUnsigned) {
      what.fail("expected unsigned integer");
    } else {
      if (s < static_cast<int64_t>(std::numeric_limits<T>::min())) what.fail("value out of range");
      return static_cast<T>(s);
    }
  }

  const uint8_t* begin_;
  const uint8_t* p_;
  const uint8_t* end_;
  const Limits& lim_;
  std::size_t depth_ = 0;  // containers open around the cursor
};

// Positive fixint or uint8..64 at p within max (the caller has checked the bytes are there); else clears ok.
// Advances p by at most 9 bytes, whatever it finds. Inlined into flowlet_fast(), 21 times per flowlet.
[[gnu::always_inline]] inline uint64_t fast_uint(const uint8_t*& p, uint64_t max, bool& ok) {
  const uint8_t c = *p;
  if (c <= 0x7f) {
    ++p;
    return c;
  }
  if (c >= 0xcc && c <= 0xcf) {
    const std::size_t k = std::size_t{1} << (c - 0xcc);
    const uint64_t v = load_be(p + 1, k);
    p += 1 + k;
    if (v <= max) return v;
  }
  ok = false;
  return 0;
}

// The most bytes flowlet_fast() reads: an array16 header, every field at its widest (an address as bin8, a
// number as uint64 -- a legal encoding of any value --, a vector as a fixarray of numbers), two nils.
constexpr std::size_t kFlowletLongest = [] {
  std::size_t n = 3 + Record<Flowlet>::reserved;
  for_each_flowlet_field([&](auto field, auto get) {
    using M = std::remove_reference_t<decltype(get(std::declval<Flowlet&>()))>;
    if constexpr (decltype(field)::kind == FieldKind::kAddr)
      n += 2 + sizeof(M);
    else if constexpr (decltype(field)::kind == FieldKind::kVec)
      n += 1 + 9 * std::extent_v<M>;
    else
      n += 9;
  });
  return n;
}();
static_assert(kFlowletLongest == 213, "3 + 2 x 18 + 15 x 9 + (1 + 4 x 9) + 2");

// A flowlet exactly as encode() lays it out (array16 of 20: the addresses as bin8, numbers as fixint or
// uint8..64, the vector as a fixarray, two reserved nils), read with one bounds check for the whole record.
// Returns false -- with the cursor where it was -- for anything else, including every value the checked path
// would reject, so that path then reads it and produces the same result or error.
bool Reader::flowlet_fast(Flowlet& f) {
  constexpr std::size_t kWire = Record<Flowlet>::fields + Record<Flowlet>::reserved;
  if (!has(kFlowletLongest) || lim_.array < kWire || lim_.bin < 16 || depth_ + 2 > lim_.depth) return false;
  const uint8_t* p = p_;
  if (p[0] != 0xdc || p[1] != 0 || p[2] != kWire) return false;
  p += 3;
  bool ok = true;
  for_each_flowlet_field([&](auto field, auto get) {
    using F = decltype(field);
    auto& m = get(f);
    if constexpr (F::kind == FieldKind::kAddr) {
      ok &= p[0] == 0xc4 && p[1] == sizeof m;
      std::memcpy(m, p + 2, sizeof m);
      p += 2 + sizeof m;
    } else if constexpr (F::kind == FieldKind::kVec) {
      using M = std::remove_reference_t<decltype(m)>;
      static_assert(std::extent_v<M> < 16, "a fixarray");
      ok &= *p++ == 0x90 + std::extent_v<M>;
      using E = std::remove_reference_t<decltype(m[0])>;
      for (auto& e : m) e = static_cast<E>(fast_uint(p, std::numeric_limits<E>::max(), ok));
    } else {
      using T = std::remove_reference_t<decltype(m)>;
      m = static_cast<T>(fast_uint(p, std::numeric_limits<T>::max(), ok));
      ok &= flowlet_field_invalid(F::id, m) == nullptr;
    }
  });
  if (!ok || p[0] != 0xc0 || p[1] != 0xc0 || f.last_ns < f.first_ns) return false;
  p_ = p + 2;
  return true;
}

// Reads an array of at least `need` fields with fn, then skips the fields a newer revision appended.
template <class Fn>
void record(Reader& r, std::size_t need, What what, Fn&& fn) {
  uint32_t k = r.fields(need, what);
  fn();
  r.skip(k - need);
  r.close();
}

// Checks beyond a field's type, made as soon as the field is read (after_field) or the record (after_record).
template <class Field>
void after_field(const Flowlet& f, const auto& m, Field) {
  if constexpr (Field::kind == FieldKind::kNum) {
    if (const char* why = flowlet_field_invalid(Field::id, m)) What("flowlet", Field::name).fail(why);
  }
  if (Field::id == FlowletField::last_ns && f.last_ns < f.first_ns)
    throw Failure("flowlet: last_ns before first_ns");
}
void after_field(const Hello& h, const auto& m, Plain) {
  if (static_cast<const void*>(&m) == &h.node && h.node.empty()) throw Failure("hello.node: empty node name");
}
void after_field(const auto&, const auto&, Plain) {}
void after_record(const RdmaPortBurst& b) {
  if (b.last_ns < b.first_ns) throw Failure("rdma_burst: last_ns before first_ns");
}
void after_record(const auto&) {}

template <class T>
void read(Reader& r, T& v, What what);

template <class T>
void read_record(Reader& r, T& v) {
  using R = Record<T>;
  if constexpr (std::is_same_v<T, Flowlet>) {
    if (r.flowlet_fast(v)) return;
    v = Flowlet{};  // the checked path starts from zeros, as always
  }
  if constexpr (kRequiredFields<T> < R::fields) {
    // A record from an older sender may lack the appended fields: read what it has, defaults for the rest.
    const uint32_t k = r.fields(kRequiredFields<T>, What(R::name));
    std::size_t i = 0;
    R::each(v, [&](const char* field, auto& m, auto tag) {
      if (i++ >= k) return;
      read(r, m, What(R::name, field));
      after_field(v, m, tag);
    });
    if (k > R::fields) r.skip(k - R::fields);
    r.close();
  } else {
    record(r, R::fields, R::name, [&] {
      R::each(v, [&](const char* field, auto& m, auto tag) {
        read(r, m, What(R::name, field));
        after_field(v, m, tag);
      });
    });
  }
  after_record(v);
}

template <class T>
void read(Reader& r, T& v, What what) {
  if constexpr (kAddress<T>) {
    r.bin_fixed(v, what);
  } else if constexpr (std::is_array_v<T>) {
    record(r, std::extent_v<T>, what, [&] {
      for (auto& e : v) read(r, e, what);
    });
  } else if constexpr (IsVector<T>::value) {
    const uint32_t k = r.array(what);
    v.clear();
    v.reserve(k);  // bounded: array() capped the declared size by the input length
    for (uint32_t i = 0; i < k; ++i) read(r, v.emplace_back(), what);
    r.close();
  } else if constexpr (std::is_same_v<T, Counters>) {
    const uint32_t k = r.map(what);
    for (uint32_t i = 0; i < k; ++i) {
      std::string key = r.str(what);
      v[std::move(key)] = r.num<uint64_t>(what);
    }
    r.close();
  } else if constexpr (std::is_same_v<T, AckStatus>) {
    const auto st = r.num<uint32_t>(what);
    if (st > static_cast<uint32_t>(AckStatus::kHelloOk)) what.fail("unknown status");
    v = static_cast<AckStatus>(st);
  } else if constexpr (Described<T>) {
    read_record(r, v);
  } else if constexpr (std::is_same_v<T, std::string>) {
    v = r.str(what);
  } else if constexpr (std::is_same_v<T, bool>) {
    v = r.boolean(what);
  } else {
    v = r.num<T>(what);
  }
}

template <class T>
Body read_body(Reader& r) {
  T m;
  read_record(r, m);
  return m;
}

// A message body by its type: MsgType k is Body's alternative k - 1.
template <MsgType K, class T>
constexpr bool kBodyOf = std::is_same_v<std::variant_alternative_t<static_cast<std::size_t>(K) - 1, Body>, T>;
static_assert(kBodyOf<MsgType::kHello, Hello> && kBodyOf<MsgType::kBatch, Batch> &&
              kBodyOf<MsgType::kAck, Ack> && kBodyOf<MsgType::kHeartbeat, Heartbeat>);
Body body(MsgType type, Reader& r) {
  const uint32_t i = static_cast<uint32_t>(type) - 1;
  if (i >= std::variant_size_v<Body>)
    throw Failure("unknown message type " + std::to_string(static_cast<uint32_t>(type)));
  return [&]<std::size_t... I>(std::index_sequence<I...>) {
    static constexpr Body (*kReaders[])(Reader&) = {&read_body<std::variant_alternative_t<I, Body>>...};
    return kReaders[i](r);
  }
  (std::make_index_sequence<std::variant_size_v<Body>>{});
}

}  // namespace

std::string encode(const Hello& m) {
  return envelope(MsgType::kHello, m);
}
std::string encode(const Batch& m) {
  return envelope(MsgType::kBatch, m);
}
std::string encode(const Ack& m) {
  return envelope(MsgType::kAck, m);
}
std::string encode(const Heartbeat& m) {
  return envelope(MsgType::kHeartbeat, m);
}

DecodeResult decode(std::string_view bytes, const DecodeLimits& limits) {
  DecodeResult r;
  if (bytes.empty()) {
    r.error = "empty message";
    return r;
  }
  if (bytes.size() > limits.max_message_bytes) {
    r.error = "message of " + std::to_string(bytes.size()) + " bytes exceeds the limit";
    return r;
  }
  // Every element of a container takes at least one byte of input (a map entry two), so capping the
  // declared sizes by the input length bounds every allocation the decoder makes by the message size.
  const std::size_t n = bytes.size();
  const Limits lim{std::min(limits.max_array, n), std::min(limits.max_map, n / 2),
                   std::min(limits.max_str, n), std::min(limits.max_bin, n), limits.max_depth};
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  try {
    Reader rd(p, n, lim);
    uint32_t fields = rd.fields(3, "envelope");
    auto version = rd.num<uint32_t>(What("envelope", "version"));
    if (version != kWireSchemaVersion)
      throw Failure("unsupported schema version " + std::to_string(version) + " (this build speaks " +
                    std::to_string(kWireSchemaVersion) + ")");
    auto type = static_cast<MsgType>(rd.num<uint32_t>(What("envelope", "type")));
    r.message = Message{type, body(type, rd)};
    rd.skip(fields - 3);
    rd.close();
    if (!rd.at_end()) throw Failure("trailing bytes after the message");
  } catch (const Failure& e) {
    r.message.reset();
    r.error = e.what();
    // Structural errors (truncation, limits, depth, malformed bytes, trailing bytes) anywhere in the
    // message take precedence over the field error found first, as with a full unpack before conversion.
    try {
      validate(p, n, lim);
    } catch (const Failure& structural) {
      r.error = structural.what();
    }
  } catch (const std::bad_alloc&) {
    r.message.reset();
    r.error = "message too large to decode";
  } catch (const std::exception& e) {
    r.message.reset();
    r.error = std::string("undecodable message: ") + e.what();
  }
  if (!r.message && r.error.empty()) r.error = "undecodable message";
  return r;
}

}  // namespace netprism::wire
