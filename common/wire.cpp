#include "netprism/wire.hpp"

#include <msgpack.hpp>

#include <algorithm>
#include <cstring>
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

struct Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

const msgpack::object* fields(const msgpack::object& o, std::size_t need, const char* what) {
  if (o.type != msgpack::type::ARRAY) throw Failure(std::string(what) + ": expected array");
  if (o.via.array.size < need)
    throw Failure(std::string(what) + ": expected " + std::to_string(need) + " fields, got " +
                  std::to_string(o.via.array.size));
  return o.via.array.ptr;
}

template <class T>
T num(const msgpack::object& o, const char* what) {
  static_assert(std::is_integral_v<T>);
  if constexpr (std::is_unsigned_v<T>) {
    if (o.type != msgpack::type::POSITIVE_INTEGER)
      throw Failure(std::string(what) + ": expected unsigned integer");
    if (o.via.u64 > std::numeric_limits<T>::max()) throw Failure(std::string(what) + ": value out of range");
    return static_cast<T>(o.via.u64);
  } else {
    if (o.type == msgpack::type::POSITIVE_INTEGER) {
      if (o.via.u64 > static_cast<uint64_t>(std::numeric_limits<T>::max()))
        throw Failure(std::string(what) + ": value out of range");
      return static_cast<T>(o.via.u64);
    }
    if (o.type != msgpack::type::NEGATIVE_INTEGER) throw Failure(std::string(what) + ": expected integer");
    if (o.via.i64 < static_cast<int64_t>(std::numeric_limits<T>::min()))
      throw Failure(std::string(what) + ": value out of range");
    return static_cast<T>(o.via.i64);
  }
}

bool boolean(const msgpack::object& o, const char* what) {
  if (o.type != msgpack::type::BOOLEAN) throw Failure(std::string(what) + ": expected boolean");
  return o.via.boolean;
}

std::string str(const msgpack::object& o, const char* what) {
  if (o.type != msgpack::type::STR) throw Failure(std::string(what) + ": expected string");
  return std::string(o.via.str.ptr, o.via.str.size);
}

void bin_fixed(const msgpack::object& o, uint8_t* out, std::size_t n, const char* what) {
  if (o.type != msgpack::type::BIN || o.via.bin.size != n)
    throw Failure(std::string(what) + ": expected " + std::to_string(n) + "-byte binary");
  std::memcpy(out, o.via.bin.ptr, n);
}

template <class T, class Fn>
std::vector<T> vec(const msgpack::object& o, const char* what, Fn&& each) {
  if (o.type != msgpack::type::ARRAY) throw Failure(std::string(what) + ": expected array");
  std::vector<T> out;
  out.reserve(o.via.array.size);  // bounded: the unpacker capped this by the input length
  for (uint32_t i = 0; i < o.via.array.size; ++i) out.push_back(each(o.via.array.ptr[i]));
  return out;
}

Counters counters(const msgpack::object& o, const char* what) {
  if (o.type != msgpack::type::MAP) throw Failure(std::string(what) + ": expected map");
  Counters c;
  for (uint32_t i = 0; i < o.via.map.size; ++i)
    c[str(o.via.map.ptr[i].key, what)] = num<uint64_t>(o.via.map.ptr[i].val, what);
  return c;
}

Flowlet flowlet(const msgpack::object& o) {
  const auto* f = fields(o, 18, "flowlet");
  Flowlet r{};
  bin_fixed(f[0], r.key.saddr, sizeof r.key.saddr, "flowlet.saddr");
  bin_fixed(f[1], r.key.daddr, sizeof r.key.daddr, "flowlet.daddr");
  r.key.ifindex = num<uint32_t>(f[2], "flowlet.ifindex");
  r.key.sport = num<uint16_t>(f[3], "flowlet.sport");
  r.key.dport = num<uint16_t>(f[4], "flowlet.dport");
  r.key.qpn = num<uint32_t>(f[5], "flowlet.qpn");
  r.key.proto = num<uint8_t>(f[6], "flowlet.proto");
  if (r.key.proto < NP_PROTO_TCP || r.key.proto > NP_PROTO_ROCE)
    throw Failure("flowlet.proto: unknown protocol");
  r.key.dir = num<uint8_t>(f[7], "flowlet.dir");
  if (r.key.dir > NP_DIR_EGRESS) throw Failure("flowlet.dir: unknown direction");
  r.key.family = num<uint8_t>(f[8], "flowlet.family");
  if (r.key.family != 4 && r.key.family != 6) throw Failure("flowlet.family: must be 4 or 6");
  r.first_ns = num<uint64_t>(f[9], "flowlet.first_ns");
  r.last_ns = num<uint64_t>(f[10], "flowlet.last_ns");
  if (r.last_ns < r.first_ns) throw Failure("flowlet: last_ns before first_ns");
  r.packets = num<uint64_t>(f[11], "flowlet.packets");
  r.bytes = num<uint64_t>(f[12], "flowlet.bytes");
  r.payload_bytes = num<uint64_t>(f[13], "flowlet.payload_bytes");
  const auto* ops = fields(f[14], NP_ROCE_CLASSES, "flowlet.roce_ops");
  for (int i = 0; i < NP_ROCE_CLASSES; ++i) r.roce_ops[i] = num<uint32_t>(ops[i], "flowlet.roce_ops");
  r.last_psn = num<uint32_t>(f[15], "flowlet.last_psn");
  r.tcp_flags = num<uint16_t>(f[16], "flowlet.tcp_flags");
  r.end_reason = num<uint8_t>(f[17], "flowlet.end_reason");
  return r;
}

RdmaCounterSample rdma_sample(const msgpack::object& o) {
  const auto* f = fields(o, 8, "rdma_sample");
  return {str(f[0], "rdma_sample.device"),
          num<uint32_t>(f[1], "rdma_sample.port"),
          num<uint64_t>(f[2], "rdma_sample.ts_ns"),
          num<uint64_t>(f[3], "rdma_sample.xmit_bytes"),
          num<uint64_t>(f[4], "rdma_sample.rcv_bytes"),
          num<uint64_t>(f[5], "rdma_sample.xmit_packets"),
          num<uint64_t>(f[6], "rdma_sample.rcv_packets"),
          counters(f[7], "rdma_sample.hw")};
}

RdmaPortBurst rdma_burst(const msgpack::object& o) {
  const auto* f = fields(o, 8, "rdma_burst");
  RdmaPortBurst b{str(f[0], "rdma_burst.device"),
                  num<uint32_t>(f[1], "rdma_burst.port"),
                  num<uint64_t>(f[2], "rdma_burst.first_ns"),
                  num<uint64_t>(f[3], "rdma_burst.last_ns"),
                  num<uint64_t>(f[4], "rdma_burst.xmit_bytes"),
                  num<uint64_t>(f[5], "rdma_burst.rcv_bytes"),
                  num<uint64_t>(f[6], "rdma_burst.xmit_packets"),
                  num<uint64_t>(f[7], "rdma_burst.rcv_packets")};
  if (b.last_ns < b.first_ns) throw Failure("rdma_burst: last_ns before first_ns");
  return b;
}

QpEntry qp(const msgpack::object& o) {
  const auto* f = fields(o, 10, "qp");
  return {str(f[0], "qp.device"),         num<uint32_t>(f[1], "qp.port"),
          num<uint32_t>(f[2], "qp.lqpn"), num<uint32_t>(f[3], "qp.rqpn"),
          str(f[4], "qp.type"),           str(f[5], "qp.state"),
          str(f[6], "qp.src_addr"),       str(f[7], "qp.dst_addr"),
          num<uint32_t>(f[8], "qp.pid"),  str(f[9], "qp.comm")};
}

InterfaceInfo iface(const msgpack::object& o) {
  const auto* f = fields(o, 3, "interface");
  return {str(f[0], "interface.name"), num<uint32_t>(f[1], "interface.ifindex"),
          vec<std::string>(f[2], "interface.addrs",
                           [](const msgpack::object& a) { return str(a, "interface.addr"); })};
}

Hello hello(const msgpack::object& o) {
  const auto* f = fields(o, 6, "hello");
  Hello h;
  h.node = str(f[0], "hello.node");
  if (h.node.empty()) throw Failure("hello.node: empty node name");
  h.agent_version = str(f[1], "hello.agent_version");
  h.epoch = num<uint64_t>(f[2], "hello.epoch");
  h.interfaces = vec<InterfaceInfo>(f[3], "hello.interfaces", iface);
  const auto* c = fields(f[4], 3, "hello.clock");
  h.clock = {str(c[0], "hello.clock.source"), boolean(c[1], "hello.clock.synced"),
             num<int64_t>(c[2], "hello.clock.est_error_ns")};
  h.sent_ns = num<uint64_t>(f[5], "hello.sent_ns");
  return h;
}

Batch batch(const msgpack::object& o) {
  const auto* f = fields(o, 9, "batch");
  Batch b;
  b.node = str(f[0], "batch.node");
  b.epoch = num<uint64_t>(f[1], "batch.epoch");
  b.seq = num<uint64_t>(f[2], "batch.seq");
  b.sent_ns = num<uint64_t>(f[3], "batch.sent_ns");
  b.flowlets = vec<Flowlet>(f[4], "batch.flowlets", flowlet);
  b.rdma_samples = vec<RdmaCounterSample>(f[5], "batch.rdma_samples", rdma_sample);
  b.rdma_bursts = vec<RdmaPortBurst>(f[6], "batch.rdma_bursts", rdma_burst);
  b.qps = vec<QpEntry>(f[7], "batch.qps", qp);
  b.counters = counters(f[8], "batch.counters");
  return b;
}

Ack ack(const msgpack::object& o) {
  const auto* f = fields(o, 5, "ack");
  Ack a;
  a.epoch = num<uint64_t>(f[0], "ack.epoch");
  a.seq = num<uint64_t>(f[1], "ack.seq");
  auto st = num<uint32_t>(f[2], "ack.status");
  if (st > static_cast<uint32_t>(AckStatus::kHelloOk)) throw Failure("ack.status: unknown status");
  a.status = static_cast<AckStatus>(st);
  a.reason = str(f[3], "ack.reason");
  a.server_ns = num<uint64_t>(f[4], "ack.server_ns");
  return a;
}

Heartbeat heartbeat(const msgpack::object& o) {
  const auto* f = fields(o, 4, "heartbeat");
  return {str(f[0], "heartbeat.node"), num<uint64_t>(f[1], "heartbeat.epoch"),
          num<uint64_t>(f[2], "heartbeat.sent_ns"), counters(f[3], "heartbeat.counters")};
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
  // declared sizes by the input length bounds every allocation the unpacker makes by the message size.
  const std::size_t n = bytes.size();
  msgpack::unpack_limit lim(std::min(limits.max_array, n), std::min(limits.max_map, n / 2),
                            std::min(limits.max_str, n), std::min(limits.max_bin, n), /*ext=*/0,
                            limits.max_depth);
  try {
    std::size_t off = 0;
    msgpack::object_handle oh = msgpack::unpack(bytes.data(), bytes.size(), off, nullptr, nullptr, lim);
    if (off != bytes.size()) throw Failure("trailing bytes after the message");
    const auto* env = fields(oh.get(), 3, "envelope");
    auto version = num<uint32_t>(env[0], "envelope.version");
    if (version != kWireSchemaVersion)
      throw Failure("unsupported schema version " + std::to_string(version) + " (this build speaks " +
                    std::to_string(kWireSchemaVersion) + ")");
    auto type = static_cast<MsgType>(num<uint32_t>(env[1], "envelope.type"));
    switch (type) {
      case MsgType::kHello:
        r.message = Message{type, hello(env[2])};
        break;
      case MsgType::kBatch:
        r.message = Message{type, batch(env[2])};
        break;
      case MsgType::kAck:
        r.message = Message{type, ack(env[2])};
        break;
      case MsgType::kHeartbeat:
        r.message = Message{type, heartbeat(env[2])};
        break;
      default:
        throw Failure("unknown message type " + std::to_string(static_cast<uint32_t>(type)));
    }
  } catch (const Failure& e) {
    r.message.reset();
    r.error = e.what();
  } catch (const msgpack::insufficient_bytes&) {
    r.error = "truncated message";
  } catch (const msgpack::depth_size_overflow&) {  // before size_overflow: it derives from it
    r.error = "nesting too deep";
  } catch (const msgpack::size_overflow& e) {
    r.error = std::string("declared size exceeds the limit (") + e.what() + ")";
  } catch (const msgpack::parse_error& e) {
    r.error = std::string("malformed msgpack: ") + e.what();
  } catch (const std::bad_alloc&) {
    r.error = "message too large to decode";
  } catch (const std::exception& e) {
    r.error = std::string("undecodable message: ") + e.what();
  }
  if (!r.message && r.error.empty()) r.error = "undecodable message";
  return r;
}

}  // namespace netprism::wire
