// The records that cross the agent -> aggregator boundary, and the messages that carry them.
// One definition each; the msgpack codec (wire.hpp) is the only code that turns them into bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "netprism/flowlet.h"

#include <cstring>

// Field-wise equality of the C record; padding fields are always zero (the codec writes and reads zeros), so
// comparing the bytes is comparing the fields. Global namespace so ADL finds it for np_flowlet.
inline bool operator==(const np_flowlet& a, const np_flowlet& b) {
  return std::memcmp(&a, &b, sizeof a) == 0;
}

namespace netprism {

// Version of the wire schema below; the codec rejects any other value with a clear error.
inline constexpr uint32_t kWireSchemaVersion = 1;

// A flowlet as shipped: the kernel record with first_ns/last_ns converted to Unix-epoch ns by the agent.
using Flowlet = np_flowlet;

// The flowlet's fields for the C++ codecs (the wire codec, the store's columns), from flowlet.h's lists.
enum class FlowletField : uint8_t {
#define NP_FIELD_ID(name, ...) name,
  NP_FLOW_KEY_FIELDS(NP_FIELD_ID, NP_FIELD_ID, NP_FIELD_ID)
      NP_BURST_FIELDS(NP_FIELD_ID, NP_FIELD_ID, NP_FIELD_ID)
#undef NP_FIELD_ID
};
enum class FieldKind : uint8_t { kAddr, kNum, kVec };  // flowlet.h's A, N and V entries

inline constexpr const char* kFlowletFieldNames[] = {
#define NP_FIELD_NAME(name, ...) #name,
    NP_FLOW_KEY_FIELDS(NP_FIELD_NAME, NP_FIELD_NAME, NP_FIELD_NAME)
        NP_BURST_FIELDS(NP_FIELD_NAME, NP_FIELD_NAME, NP_FIELD_NAME)
#undef NP_FIELD_NAME
};
// The number of fields (a vector is one field).
inline constexpr std::size_t kFlowletFields = std::size(kFlowletFieldNames);

// One field, as a type: its id, kind and name ("saddr", ...).
template <FlowletField Id, FieldKind Kind>
struct FlowletFieldInfo {
  static constexpr FlowletField id = Id;
  static constexpr FieldKind kind = Kind;
  static constexpr const char* name = kFlowletFieldNames[static_cast<std::size_t>(Id)];
};

// Calls fn(field, get) for every field of a flowlet in list order (= wire and column order): field is a
// FlowletFieldInfo, get(f) the field's member of flowlet f (const when f is).
// Always inlined: the codecs' per-flowlet loops then compile to straight-line code, as if written out.
template <class Fn>
[[gnu::always_inline]] constexpr inline void for_each_flowlet_field(Fn&& fn) {
  using F = FlowletField;
  using K = FieldKind;
  // clang-format off
#define NP_VISIT(k, n) fn(FlowletFieldInfo<F::n, K::k>{}, [](auto& f) -> auto& { return NP_PART(f).n; });
  // clang-format on
#define NP_VISIT_A(n) NP_VISIT(kAddr, n)
#define NP_VISIT_N(n, type) NP_VISIT(kNum, n)
#define NP_VISIT_V(n, type, count) NP_VISIT(kVec, n)
#define NP_PART(f) f.key
  NP_FLOW_KEY_FIELDS(NP_VISIT_A, NP_VISIT_N, NP_VISIT_V)
#undef NP_PART
#define NP_PART(f) f
  NP_BURST_FIELDS(NP_VISIT_A, NP_VISIT_N, NP_VISIT_V)
#undef NP_PART
#undef NP_VISIT_V
#undef NP_VISIT_N
#undef NP_VISIT_A
#undef NP_VISIT
}

// The values every decoder (wire, store) rejects in a field beyond its type's range: nullptr if v is valid,
// else why not.
constexpr const char* flowlet_field_invalid(FlowletField id, uint64_t v) {
  switch (id) {
    case FlowletField::proto:
      return v < NP_PROTO_TCP || v > NP_PROTO_ROCE ? "unknown protocol" : nullptr;
    case FlowletField::dir:
      return v > NP_DIR_EGRESS ? "unknown direction" : nullptr;
    case FlowletField::family:
      return v != 4 && v != 6 ? "must be 4 or 6" : nullptr;
    default:
      return nullptr;
  }
}

// One sample of one RDMA port's counters, as read from sysfs. Byte counters are already in bytes
// (port_xmit_data/port_rcv_data count 4-byte words; the agent multiplies by 4).
struct RdmaCounterSample {
  std::string device;
  uint32_t port = 0;
  uint64_t ts_ns = 0;
  uint64_t xmit_bytes = 0;
  uint64_t rcv_bytes = 0;
  uint64_t xmit_packets = 0;
  uint64_t rcv_packets = 0;
  std::map<std::string, uint64_t> hw;  // hw_counters/*, by file name
  bool operator==(const RdmaCounterSample&) const = default;
};

// A burst of activity on one RDMA port, made from counter deltas with the probe's burst rule.
struct RdmaPortBurst {
  std::string device;
  uint32_t port = 0;
  uint64_t first_ns = 0;
  uint64_t last_ns = 0;
  uint64_t xmit_bytes = 0;
  uint64_t rcv_bytes = 0;
  uint64_t xmit_packets = 0;
  uint64_t rcv_packets = 0;
  bool operator==(const RdmaPortBurst&) const = default;
};

// One row of the RDMA QP table (RDMA_NLDEV_CMD_RES_QP_GET), used to attribute per-QP traffic.
struct QpEntry {
  std::string device;
  uint32_t port = 0;
  uint32_t lqpn = 0;
  uint32_t rqpn = 0;
  std::string type;   // RC, UD, ...
  std::string state;  // RTS, ...
  std::string src_addr;
  std::string dst_addr;
  uint32_t pid = 0;
  std::string comm;
  // Next packet sequence number to send / expected (RDMA_NLDEV_ATTR_RES_SQ_PSN / RQ_PSN, 24 bits, RC/UC):
  // each advances by one per packet, so two reads of the table give a QP's packets in between -- per-peer
  // activity that the port counters, summed over every QP, cannot give. 0 from older agents.
  uint32_t sq_psn = 0;
  uint32_t rq_psn = 0;
  uint64_t ts_ns = 0;  // when the table holding this row was read (Unix ns); 0 from older agents
  bool operator==(const QpEntry&) const = default;
};

struct InterfaceInfo {
  std::string name;
  uint32_t ifindex = 0;
  std::vector<std::string> addrs;  // textual, RFC 5952 / dotted quad
  bool operator==(const InterfaceInfo&) const = default;
};

// How the node's clock is disciplined, as far as the agent can read it.
struct ClockInfo {
  std::string source = "unknown";  // chrony | ptp | ntp | unknown
  bool synced = false;
  int64_t est_error_ns = -1;  // -1: unknown
  bool operator==(const ClockInfo&) const = default;
};

// Agent counters by name (captured, shipped, acked, spooled, dropped_*, probe_*): open-ended on purpose,
// so a newer agent can report more without a schema change.
using Counters = std::map<std::string, uint64_t>;

enum class MsgType : uint32_t {
  kHello = 1,
  kBatch = 2,
  kAck = 3,
  kHeartbeat = 4,
};

struct Hello {
  std::string node;
  std::string agent_version;
  uint64_t epoch = 0;  // identifies one agent run; seq restarts at 0 with every new epoch
  std::vector<InterfaceInfo> interfaces;
  ClockInfo clock;
  uint64_t sent_ns = 0;
  bool operator==(const Hello&) const = default;
};

struct Batch {
  std::string node;
  uint64_t epoch = 0;
  uint64_t seq = 0;
  uint64_t sent_ns = 0;
  std::vector<Flowlet> flowlets;
  std::vector<RdmaCounterSample> rdma_samples;
  std::vector<RdmaPortBurst> rdma_bursts;
  std::vector<QpEntry> qps;
  Counters counters;
  bool operator==(const Batch&) const = default;
};

// The batch without its flowlets: what the store and ClickHouse keep as one wire message beside the
// flowlets' columns.
inline Batch without_flowlets(const Batch& b) {
  Batch rest;
  rest.node = b.node;
  rest.epoch = b.epoch;
  rest.seq = b.seq;
  rest.sent_ns = b.sent_ns;
  rest.rdma_samples = b.rdma_samples;
  rest.rdma_bursts = b.rdma_bursts;
  rest.qps = b.qps;
  rest.counters = b.counters;
  return rest;
}

enum class AckStatus : uint32_t {
  kOk = 0,           // durably stored
  kDuplicate = 1,    // already stored earlier; not stored again
  kUnknownNode = 2,  // send HELLO again, then resend
  kRejected = 3,     // malformed; reason says why (never resent as is)
  kHelloOk = 4,      // answer to HELLO
};

struct Ack {
  uint64_t epoch = 0;
  uint64_t seq = 0;
  AckStatus status = AckStatus::kOk;
  std::string reason;
  uint64_t server_ns = 0;  // aggregator clock when answering (for offset estimation)
  bool operator==(const Ack&) const = default;
};

struct Heartbeat {
  std::string node;
  uint64_t epoch = 0;
  uint64_t sent_ns = 0;
  Counters counters;
  bool operator==(const Heartbeat&) const = default;
};

}  // namespace netprism
