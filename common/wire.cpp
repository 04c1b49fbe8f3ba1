#include "netprism/wire.hpp"

#include <msgpack.hpp>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <limits>
#include <new>
#include <stdexcept>

namespace netprism::wire {
namespace {

using Packer = msgpack::packer<msgpack::sbuffer>;

// ---- encoding -------------------------------------------------------------------------------------------

void pack_bin(Packer& pk, const uint8_t* p, std::size_t n) {
  pk.pack_bin(static_cast<uint32_t>(n));
  pk.pack_bin_body(reinterpret_cast<const char*>(p), static_cast<uint32_t>(n));
}

void pack(Packer& pk, const Flowlet& f) {
  pk.pack_array(20);
  pack_bin(pk, f.key.saddr, sizeof f.key.saddr);
  pack_bin(pk, f.key.daddr, sizeof f.key.daddr);
  pk.pack(f.key.ifindex);
  pk.pack(f.key.sport);
  pk.pack(f.key.dport);
  pk.pack(f.key.qpn);
  pk.pack(f.key.proto);
  pk.pack(f.key.dir);
  pk.pack(f.key.family);
  pk.pack(f.first_ns);
  pk.pack(f.last_ns);
  pk.pack(f.packets);
  pk.pack(f.bytes);
  pk.pack(f.payload_bytes);
  pk.pack_array(NP_ROCE_CLASSES);
  for (auto v : f.roce_ops) pk.pack(v);
  pk.pack(f.last_psn);
  pk.pack(f.tcp_flags);
  pk.pack(f.end_reason);
  pk.pack_nil();  // reserved
  pk.pack_nil();  // reserved
}

void pack(Packer& pk, const Counters& c) {
  pk.pack_map(static_cast<uint32_t>(c.size()));
  for (const auto& [k, v] : c) {
    pk.pack(k);
    pk.pack(v);
  }
}

void pack(Packer& pk, const RdmaCounterSample& s) {
  pk.pack_array(8);
  pk.pack(s.device);
  pk.pack(s.port);
  pk.pack(s.ts_ns);
  pk.pack(s.xmit_bytes);
  pk.pack(s.rcv_bytes);
  pk.pack(s.xmit_packets);
  pk.pack(s.rcv_packets);
  pack(pk, s.hw);
}

void pack(Packer& pk, const RdmaPortBurst& b) {
  pk.pack_array(8);
  pk.pack(b.device);
  pk.pack(b.port);
  pk.pack(b.first_ns);
  pk.pack(b.last_ns);
  pk.pack(b.xmit_bytes);
  pk.pack(b.rcv_bytes);
  pk.pack(b.xmit_packets);
  pk.pack(b.rcv_packets);
}

void pack(Packer& pk, const QpEntry& q) {
  pk.pack_array(10);
  pk.pack(q.device);
  pk.pack(q.port);
  pk.pack(q.lqpn);
  pk.pack(q.rqpn);
  pk.pack(q.type);
  pk.pack(q.state);
  pk.pack(q.src_addr);
  pk.pack(q.dst_addr);
  pk.pack(q.pid);
  pk.pack(q.comm);
}

void pack(Packer& pk, const InterfaceInfo& i) {
  pk.pack_array(3);
  pk.pack(i.name);
  pk.pack(i.ifindex);
  pk.pack(i.addrs);
}

template <class T>
void pack_vec(Packer& pk, const std::vector<T>& v) {
  pk.pack_array(static_cast<uint32_t>(v.size()));
  for (const auto& e : v) pack(pk, e);
}

template <class Fn>
std::string envelope(MsgType t, Fn&& body) {
  msgpack::sbuffer buf;
  Packer pk(buf);
  pk.pack_array(3);
  pk.pack(kWireSchemaVersion);
  pk.pack(static_cast<uint32_t>(t));
  body(pk);
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
// unpacked in full before conversion.

struct Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

[[noreturn]] void truncated() {
  throw Failure("truncated message");
}
[[noreturn]] void overflow(const char* what) {
  throw Failure(std::string("declared size exceeds the limit (") + what + " size overflow)");
}

uint64_t be(const uint8_t* p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v = (v << 8) | p[i];
  return v;
}

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
  auto container = [&](uint64_t items, uint64_t entries, std::size_t limit, const char* what) {
    if (entries > limit) overflow(what);
    // The new container sits at nesting level base_depth + open.size() (open[0] is the caller's level).
    if (base_depth + open.size() > lim.depth) throw Failure("nesting too deep");
    open.push_back(items);
  };
  auto blob = [&](uint64_t size, std::size_t limit, const char* what) {
    need(size);  // a truncated body is reported as truncation, whatever it declares
    if (size > limit) overflow(what);
    off += size;
  };
  while (!open.empty()) {
    if (open.back() == 0) {
      open.pop_back();
      continue;
    }
    open.back()--;
    need(1);
    const uint8_t c = p[off++];
    if (c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3) continue;  // fixints, nil, bool
    if (c >= 0xa0 && c <= 0xbf) {
      blob(c & 0x1f, lim.str, "str");
      continue;
    }
    if (c >= 0x90 && c <= 0x9f) {
      container(c & 0x0f, c & 0x0f, lim.array, "array");
      continue;
    }
    if (c >= 0x80 && c <= 0x8f) {
      container(2u * (c & 0x0f), c & 0x0f, lim.map, "map");
      continue;
    }
    switch (c) {
      case 0xcc:
      case 0xd0:
        need(1);
        off += 1;
        break;
      case 0xcd:
      case 0xd1:
        need(2);
        off += 2;
        break;
      case 0xce:
      case 0xd2:
      case 0xca:
        need(4);
        off += 4;
        break;
      case 0xcf:
      case 0xd3:
      case 0xcb:
        need(8);
        off += 8;
        break;
      case 0xd9:
      case 0xc4:
        need(1);
        off += 1;
        blob(p[off - 1], c == 0xd9 ? lim.str : lim.bin, c == 0xd9 ? "str" : "bin");
        break;
      case 0xda:
      case 0xc5:
        need(2);
        off += 2;
        blob(be(p + off - 2, 2), c == 0xda ? lim.str : lim.bin, c == 0xda ? "str" : "bin");
        break;
      case 0xdb:
      case 0xc6:
        need(4);
        off += 4;
        blob(be(p + off - 4, 4), c == 0xdb ? lim.str : lim.bin, c == 0xdb ? "str" : "bin");
        break;
      case 0xdc: {
        need(2);
        uint64_t k = be(p + off, 2);
        off += 2;
        container(k, k, lim.array, "array");
        break;
      }
      case 0xdd: {
        need(4);
        uint64_t k = be(p + off, 4);
        off += 4;
        container(k, k, lim.array, "array");
        break;
      }
      case 0xde: {
        need(2);
        uint64_t k = be(p + off, 2);
        off += 2;
        container(2 * k, k, lim.map, "map");
        break;
      }
      case 0xdf: {
        need(4);
        uint64_t k = be(p + off, 4);
        off += 4;
        container(2 * k, k, lim.map, "map");
        break;
      }
      case 0xc7:
      case 0xc8:
      case 0xc9:
      case 0xd4:
      case 0xd5:
      case 0xd6:
      case 0xd7:
      case 0xd8:
        overflow("ext");  // no netprism message uses ext types (the ext limit is 0)
      default:            // 0xc1: never used by msgpack
        throw Failure("malformed msgpack: parse error");
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
  uint32_t fields(std::size_t need, const char* what) {
    uint32_t k = 0;
    if (!try_array(k)) throw Failure(std::string(what) + ": expected array");
    open(k, lim_.array, "array");
    if (k < need)
      throw Failure(std::string(what) + ": expected " + std::to_string(need) + " fields, got " +
                    std::to_string(k));
    return k;
  }
  uint32_t array(const char* what) {
    uint32_t k = 0;
    if (!try_array(k)) throw Failure(std::string(what) + ": expected array");
    open(k, lim_.array, "array");
    return k;
  }
  uint32_t map(const char* what) {
    uint8_t c = byte();
    uint32_t k;
    if (c >= 0x80 && c <= 0x8f)
      k = c & 0x0f;
    else if (c == 0xde)
      k = static_cast<uint32_t>(take(2));
    else if (c == 0xdf)
      k = static_cast<uint32_t>(take(4));
    else
      throw Failure(std::string(what) + ": expected map");
    open(k, lim_.map, "map");
    return k;
  }
  void close() { --depth_; }

  // Fast path for what encoders write for non-negative values (positive fixint, uint8..uint64) when the
  // value fits T; everything else -- negative or signed encodings, truncation, range errors -- goes through
  // num_slow(), which re-reads from the same position and so produces the same results and messages.
  template <class T>
  T num(const char* what) {
    static_assert(std::is_integral_v<T>);
    if (p_ != end_) {
      const uint8_t c = *p_;
      if (c <= 0x7f) {  // fits every integral T (int8_t included)
        ++p_;
        return static_cast<T>(c);
      }
      if (c >= 0xcc && c <= 0xcf) {
        const std::size_t k = std::size_t{1} << (c - 0xcc);
        if (static_cast<std::size_t>(end_ - p_) > k) {
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

  template <class T>
  T num_slow(const char* what) {
    bool neg = false;
    uint64_t u = 0;
    int64_t i = 0;
    if (!integer(neg, u, i)) {
      if constexpr (std::is_unsigned_v<T>)
        throw Failure(std::string(what) + ": expected unsigned integer");
      else
        throw Failure(std::string(what) + ": expected integer");
    }
    if constexpr (std::is_unsigned_v<T>) {
      if (neg) throw Failure(std::string(what) + ": expected unsigned integer");
      if (u > std::numeric_limits<T>::max()) throw Failure(std::string(what) + ": value out of range");
      return static_cast<T>(u);
    } else {
      if (!neg) {
        if (u > static_cast<uint64_t>(std::numeric_limits<T>::max()))
          throw Failure(std::string(what) + ": value out of range");
        return static_cast<T>(u);
      }
      if (i < static_cast<int64_t>(std::numeric_limits<T>::min()))
        throw Failure(std::string(what) + ": value out of range");
      return static_cast<T>(i);
    }
  }

  bool boolean(const char* what) {
    uint8_t c = byte();
    if (c == 0xc2 || c == 0xc3) return c == 0xc3;
    throw Failure(std::string(what) + ": expected boolean");
  }

  std::string_view str_view(const char* what) {
    uint8_t c = byte();
    uint64_t k;
    if (c >= 0xa0 && c <= 0xbf)
      k = c & 0x1f;
    else if (c == 0xd9)
      k = take(1);
    else if (c == 0xda)
      k = take(2);
    else if (c == 0xdb)
      k = take(4);
    else
      throw Failure(std::string(what) + ": expected string");
    const uint8_t* s = body(k);
    if (k > lim_.str) overflow("str");
    return {reinterpret_cast<const char*>(s), static_cast<std::size_t>(k)};
  }
  std::string str(const char* what) { return std::string(str_view(what)); }

  void bin_fixed(uint8_t* out, std::size_t n, const char* what) {
    // Fast path: bin8 of exactly n bytes, all present and within the limit (addresses: 16 bytes).
    if (n < 256 && end_ - p_ >= static_cast<std::ptrdiff_t>(n + 2) && p_[0] == 0xc4 && p_[1] == n &&
        n <= lim_.bin) {
      std::memcpy(out, p_ + 2, n);
      p_ += n + 2;
      return;
    }
    uint8_t c = byte();
    uint64_t k = UINT64_MAX;
    if (c == 0xc4)
      k = take(1);
    else if (c == 0xc5)
      k = take(2);
    else if (c == 0xc6)
      k = take(4);
    if (k != n) throw Failure(std::string(what) + ": expected " + std::to_string(n) + "-byte binary");
    const uint8_t* b = body(k);
    if (k > lim_.bin) overflow("bin");
    std::memcpy(out, b, n);
  }

  // Positive fixint or uint8..64 at p within max (the caller has checked the bytes are there); else clears
  // ok. Inlined into flowlet_fast(), where it runs 21 times per flowlet.
  [[gnu::always_inline]] static inline uint64_t fast_uint(const uint8_t*& p, uint64_t max, bool& ok) {
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

  // A flowlet exactly as encode() lays it out (array16 of 20: two bin8 addresses, 17 unsigned integers with
  // a fixarray of 4 among them, two reserved nils), read with one bounds check for the whole record. Returns
  // false -- with the cursor where it was -- for anything else, including every value the checked path
  // would reject, so that path then reads it and produces the same result or error.
  bool flowlet_fast(Flowlet& f) {
    // The longest such record: 3 + 2 x 18 + 5 x 9 (u64) + 7 x 5 (u32) + 3 x 3 (u16) + 3 x 2 (u8) + 1 + 2.
    constexpr std::ptrdiff_t kLongest = 137;
    if (end_ - p_ < kLongest || lim_.array < 20 || lim_.bin < 16 || depth_ + 2 > lim_.depth) return false;
    const uint8_t* p = p_;
    if (p[0] != 0xdc || p[1] != 0 || p[2] != 20 || p[3] != 0xc4 || p[4] != 16) return false;
    std::memcpy(f.key.saddr, p + 5, 16);
    if (p[21] != 0xc4 || p[22] != 16) return false;
    std::memcpy(f.key.daddr, p + 23, 16);
    p += 39;
    bool ok = true;
    constexpr uint64_t u8 = 0xff, u16 = 0xffff, u32 = 0xffffffff, u64 = ~uint64_t{0};
    f.key.ifindex = static_cast<uint32_t>(fast_uint(p, u32, ok));
    f.key.sport = static_cast<uint16_t>(fast_uint(p, u16, ok));
    f.key.dport = static_cast<uint16_t>(fast_uint(p, u16, ok));
    f.key.qpn = static_cast<uint32_t>(fast_uint(p, u32, ok));
    f.key.proto = static_cast<uint8_t>(fast_uint(p, u8, ok));
    f.key.dir = static_cast<uint8_t>(fast_uint(p, u8, ok));
    f.key.family = static_cast<uint8_t>(fast_uint(p, u8, ok));
    f.first_ns = fast_uint(p, u64, ok);
    f.last_ns = fast_uint(p, u64, ok);
    f.packets = fast_uint(p, u64, ok);
    f.bytes = fast_uint(p, u64, ok);
    f.payload_bytes = fast_uint(p, u64, ok);
    if (!ok || *p++ != 0x94) return false;  // roce_ops: fixarray of 4
    for (auto& op : f.roce_ops) op = static_cast<uint32_t>(fast_uint(p, u32, ok));
    f.last_psn = static_cast<uint32_t>(fast_uint(p, u32, ok));
    f.tcp_flags = static_cast<uint16_t>(fast_uint(p, u16, ok));
    f.end_reason = static_cast<uint8_t>(fast_uint(p, u8, ok));
    if (!ok || p[0] != 0xc0 || p[1] != 0xc0) return false;
    if (f.key.proto < NP_PROTO_TCP || f.key.proto > NP_PROTO_ROCE || f.key.dir > NP_DIR_EGRESS ||
        (f.key.family != 4 && f.key.family != 6) || f.last_ns < f.first_ns)
      return false;
    p_ = p + 2;
    return true;
  }

  // Skips `count` whole objects (trailing fields of a newer minor revision), validating them.
  void skip(uint64_t count) {
    // Fast path: the trailing fields are one-byte objects (nil, booleans, fixints -- the reserved nils of
    // a flowlet), which validate_objects() would accept byte by byte without a limit to check.
    while (count > 0 && p_ != end_) {
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
  uint8_t byte() {
    if (p_ == end_) truncated();
    return *p_++;
  }
  const uint8_t* body(uint64_t k) {
    if (static_cast<uint64_t>(end_ - p_) < k) truncated();
    const uint8_t* s = p_;
    p_ += k;
    return s;
  }
  uint64_t take(int k) { return be(body(static_cast<uint64_t>(k)), k); }
  bool try_array(uint32_t& k) {
    if (p_ == end_) truncated();
    uint8_t c = *p_;
    if (c >= 0x90 && c <= 0x9f) {
      ++p_;
      k = c & 0x0f;
    } else if (c == 0xdc) {
      ++p_;
      k = static_cast<uint32_t>(take(2));
    } else if (c == 0xdd) {
      ++p_;
      k = static_cast<uint32_t>(take(4));
    } else {
      return false;
    }
    return true;
  }
  // msgpack integers: positive fixint / uint8..64 are unsigned; negative fixint / int8..64 are negative
  // only when their value is (a non-negative intN counts as unsigned, as msgpack-c treats it).
  bool integer(bool& neg, uint64_t& u, int64_t& i) {
    if (p_ == end_) truncated();
    uint8_t c = *p_;
    if (c <= 0x7f) {
      ++p_;
      u = c;
      return true;
    }
    if (c >= 0xe0) {
      ++p_;
      neg = true;
      i = static_cast<int8_t>(c);
      return true;
    }
    int64_t s;
    switch (c) {
      case 0xcc:
        ++p_;
        u = take(1);
        return true;
      case 0xcd:
        ++p_;
        u = take(2);
        return true;
      case 0xce:
        ++p_;
        u = take(4);
        return true;
      case 0xcf:
        ++p_;
        u = take(8);
        return true;
      case 0xd0:
        ++p_;
        s = static_cast<int8_t>(take(1));
        break;
      case 0xd1:
        ++p_;
        s = static_cast<int16_t>(take(2));
        break;
      case 0xd2:
        ++p_;
        s = static_cast<int32_t>(take(4));
        break;
      case 0xd3:
        ++p_;
        s = static_cast<int64_t>(take(8));
        break;
      default:
        return false;
    }
    if (s >= 0) {
      u = static_cast<uint64_t>(s);
    } else {
      neg = true;
      i = s;
    }
    return true;
  }
  void open(uint64_t entries, std::size_t limit, const char* what) {
    if (entries > limit) overflow(what);
    if (depth_ + 1 > lim_.depth) throw Failure("nesting too deep");
    ++depth_;
  }
  const uint8_t* begin_;
  const uint8_t* p_;
  const uint8_t* end_;
  const Limits& lim_;
  std::size_t depth_ = 0;  // containers open around the cursor
};

// Reads an array of at least `need` fields with fn, then skips the fields a newer revision appended.
template <class Fn>
void record(Reader& r, std::size_t need, const char* what, Fn&& fn) {
  uint32_t k = r.fields(need, what);
  fn();
  r.skip(k - need);
  r.close();
}

template <class T, class Fn>
std::vector<T> vec(Reader& r, const char* what, Fn&& each) {
  uint32_t k = r.array(what);
  std::vector<T> out;
  out.reserve(k);  // bounded: array() capped the declared size by the input length
  for (uint32_t i = 0; i < k; ++i) out.push_back(each(r));
  r.close();
  return out;
}

Counters counters(Reader& r, const char* what) {
  uint32_t k = r.map(what);
  Counters c;
  for (uint32_t i = 0; i < k; ++i) {
    std::string key = r.str(what);
    c[std::move(key)] = r.num<uint64_t>(what);
  }
  r.close();
  return c;
}

Flowlet flowlet(Reader& r) {
  Flowlet f{};
  if (r.flowlet_fast(f)) return f;
  f = Flowlet{};  // the checked path starts from zeros, as always
  record(r, 18, "flowlet", [&] {
    r.bin_fixed(f.key.saddr, sizeof f.key.saddr, "flowlet.saddr");
    r.bin_fixed(f.key.daddr, sizeof f.key.daddr, "flowlet.daddr");
    f.key.ifindex = r.num<uint32_t>("flowlet.ifindex");
    f.key.sport = r.num<uint16_t>("flowlet.sport");
    f.key.dport = r.num<uint16_t>("flowlet.dport");
    f.key.qpn = r.num<uint32_t>("flowlet.qpn");
    f.key.proto = r.num<uint8_t>("flowlet.proto");
    if (f.key.proto < NP_PROTO_TCP || f.key.proto > NP_PROTO_ROCE)
      throw Failure("flowlet.proto: unknown protocol");
    f.key.dir = r.num<uint8_t>("flowlet.dir");
    if (f.key.dir > NP_DIR_EGRESS) throw Failure("flowlet.dir: unknown direction");
    f.key.family = r.num<uint8_t>("flowlet.family");
    if (f.key.family != 4 && f.key.family != 6) throw Failure("flowlet.family: must be 4 or 6");
    f.first_ns = r.num<uint64_t>("flowlet.first_ns");
    f.last_ns = r.num<uint64_t>("flowlet.last_ns");
    if (f.last_ns < f.first_ns) throw Failure("flowlet: last_ns before first_ns");
    f.packets = r.num<uint64_t>("flowlet.packets");
    f.bytes = r.num<uint64_t>("flowlet.bytes");
    f.payload_bytes = r.num<uint64_t>("flowlet.payload_bytes");
    record(r, NP_ROCE_CLASSES, "flowlet.roce_ops", [&] {
      for (int i = 0; i < NP_ROCE_CLASSES; ++i) f.roce_ops[i] = r.num<uint32_t>("flowlet.roce_ops");
    });
    f.last_psn = r.num<uint32_t>("flowlet.last_psn");
    f.tcp_flags = r.num<uint16_t>("flowlet.tcp_flags");
    f.end_reason = r.num<uint8_t>("flowlet.end_reason");
  });
  return f;
}

RdmaCounterSample rdma_sample(Reader& r) {
  RdmaCounterSample s;
  record(r, 8, "rdma_sample", [&] {
    s.device = r.str("rdma_sample.device");
    s.port = r.num<uint32_t>("rdma_sample.port");
    s.ts_ns = r.num<uint64_t>("rdma_sample.ts_ns");
    s.xmit_bytes = r.num<uint64_t>("rdma_sample.xmit_bytes");
    s.rcv_bytes = r.num<uint64_t>("rdma_sample.rcv_bytes");
    s.xmit_packets = r.num<uint64_t>("rdma_sample.xmit_packets");
    s.rcv_packets = r.num<uint64_t>("rdma_sample.rcv_packets");
    s.hw = counters(r, "rdma_sample.hw");
  });
  return s;
}

RdmaPortBurst rdma_burst(Reader& r) {
  RdmaPortBurst b;
  record(r, 8, "rdma_burst", [&] {
    b.device = r.str("rdma_burst.device");
    b.port = r.num<uint32_t>("rdma_burst.port");
    b.first_ns = r.num<uint64_t>("rdma_burst.first_ns");
    b.last_ns = r.num<uint64_t>("rdma_burst.last_ns");
    b.xmit_bytes = r.num<uint64_t>("rdma_burst.xmit_bytes");
    b.rcv_bytes = r.num<uint64_t>("rdma_burst.rcv_bytes");
    b.xmit_packets = r.num<uint64_t>("rdma_burst.xmit_packets");
    b.rcv_packets = r.num<uint64_t>("rdma_burst.rcv_packets");
  });
  if (b.last_ns < b.first_ns) throw Failure("rdma_burst: last_ns before first_ns");
  return b;
}

QpEntry qp(Reader& r) {
  QpEntry q;
  record(r, 10, "qp", [&] {
    q.device = r.str("qp.device");
    q.port = r.num<uint32_t>("qp.port");
    q.lqpn = r.num<uint32_t>("qp.lqpn");
    q.rqpn = r.num<uint32_t>("qp.rqpn");
    q.type = r.str("qp.type");
    q.state = r.str("qp.state");
    q.src_addr = r.str("qp.src_addr");
    q.dst_addr = r.str("qp.dst_addr");
    q.pid = r.num<uint32_t>("qp.pid");
    q.comm = r.str("qp.comm");
  });
  return q;
}

InterfaceInfo iface(Reader& r) {
  InterfaceInfo i;
  record(r, 3, "interface", [&] {
    i.name = r.str("interface.name");
    i.ifindex = r.num<uint32_t>("interface.ifindex");
    i.addrs = vec<std::string>(r, "interface.addrs", [](Reader& a) { return a.str("interface.addr"); });
  });
  return i;
}

Hello hello(Reader& r) {
  Hello h;
  record(r, 6, "hello", [&] {
    h.node = r.str("hello.node");
    if (h.node.empty()) throw Failure("hello.node: empty node name");
    h.agent_version = r.str("hello.agent_version");
    h.epoch = r.num<uint64_t>("hello.epoch");
    h.interfaces = vec<InterfaceInfo>(r, "hello.interfaces", iface);
    record(r, 3, "hello.clock", [&] {
      h.clock.source = r.str("hello.clock.source");
      h.clock.synced = r.boolean("hello.clock.synced");
      h.clock.est_error_ns = r.num<int64_t>("hello.clock.est_error_ns");
    });
    h.sent_ns = r.num<uint64_t>("hello.sent_ns");
  });
  return h;
}

Batch batch(Reader& r) {
  Batch b;
  record(r, 9, "batch", [&] {
    b.node = r.str("batch.node");
    b.epoch = r.num<uint64_t>("batch.epoch");
    b.seq = r.num<uint64_t>("batch.seq");
    b.sent_ns = r.num<uint64_t>("batch.sent_ns");
    b.flowlets = vec<Flowlet>(r, "batch.flowlets", flowlet);
    b.rdma_samples = vec<RdmaCounterSample>(r, "batch.rdma_samples", rdma_sample);
    b.rdma_bursts = vec<RdmaPortBurst>(r, "batch.rdma_bursts", rdma_burst);
    b.qps = vec<QpEntry>(r, "batch.qps", qp);
    b.counters = counters(r, "batch.counters");
  });
  return b;
}

Ack ack(Reader& r) {
  Ack a;
  record(r, 5, "ack", [&] {
    a.epoch = r.num<uint64_t>("ack.epoch");
    a.seq = r.num<uint64_t>("ack.seq");
    auto st = r.num<uint32_t>("ack.status");
    if (st > static_cast<uint32_t>(AckStatus::kHelloOk)) throw Failure("ack.status: unknown status");
    a.status = static_cast<AckStatus>(st);
    a.reason = r.str("ack.reason");
    a.server_ns = r.num<uint64_t>("ack.server_ns");
  });
  return a;
}

Heartbeat heartbeat(Reader& r) {
  Heartbeat h;
  record(r, 4, "heartbeat", [&] {
    h.node = r.str("heartbeat.node");
    h.epoch = r.num<uint64_t>("heartbeat.epoch");
    h.sent_ns = r.num<uint64_t>("heartbeat.sent_ns");
    h.counters = counters(r, "heartbeat.counters");
  });
  return h;
}

}  // namespace

std::string encode(const Hello& m) {
  return envelope(MsgType::kHello, [&](Packer& pk) {
    pk.pack_array(6);
    pk.pack(m.node);
    pk.pack(m.agent_version);
    pk.pack(m.epoch);
    pack_vec(pk, m.interfaces);
    pk.pack_array(3);
    pk.pack(m.clock.source);
    pk.pack(m.clock.synced);
    pk.pack(m.clock.est_error_ns);
    pk.pack(m.sent_ns);
  });
}

std::string encode(const Batch& m) {
  return envelope(MsgType::kBatch, [&](Packer& pk) {
    pk.pack_array(9);
    pk.pack(m.node);
    pk.pack(m.epoch);
    pk.pack(m.seq);
    pk.pack(m.sent_ns);
    pack_vec(pk, m.flowlets);
    pack_vec(pk, m.rdma_samples);
    pack_vec(pk, m.rdma_bursts);
    pack_vec(pk, m.qps);
    pack(pk, m.counters);
  });
}

std::string encode(const Ack& m) {
  return envelope(MsgType::kAck, [&](Packer& pk) {
    pk.pack_array(5);
    pk.pack(m.epoch);
    pk.pack(m.seq);
    pk.pack(static_cast<uint32_t>(m.status));
    pk.pack(m.reason);
    pk.pack(m.server_ns);
  });
}

std::string encode(const Heartbeat& m) {
  return envelope(MsgType::kHeartbeat, [&](Packer& pk) {
    pk.pack_array(4);
    pk.pack(m.node);
    pk.pack(m.epoch);
    pk.pack(m.sent_ns);
    pack(pk, m.counters);
  });
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
    auto version = rd.num<uint32_t>("envelope.version");
    if (version != kWireSchemaVersion)
      throw Failure("unsupported schema version " + std::to_string(version) + " (this build speaks " +
                    std::to_string(kWireSchemaVersion) + ")");
    auto type = static_cast<MsgType>(rd.num<uint32_t>("envelope.type"));
    switch (type) {
      case MsgType::kHello:
        r.message = Message{type, hello(rd)};
        break;
      case MsgType::kBatch:
        r.message = Message{type, batch(rd)};
        break;
      case MsgType::kAck:
        r.message = Message{type, ack(rd)};
        break;
      case MsgType::kHeartbeat:
        r.message = Message{type, heartbeat(rd)};
        break;
      default:
        throw Failure("unknown message type " + std::to_string(static_cast<uint32_t>(type)));
    }
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
