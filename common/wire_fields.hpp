// The wire fields of every record (records.hpp): each message body and nested record is a positional msgpack
// array of its fields in the order listed here (the flowlet's: flowlet.h's lists). wire.cpp generates both
// its encoder and its decoder from these lists, so a field is added (at the end: older decoders skip
// trailing fields) by one edit here. Private to the codec.
#pragma once

#include <cstddef>
#include <type_traits>
#include <vector>

#include "netprism/records.hpp"

namespace netprism::wire {

// NP_FOR_EACH(m, a, b, ...) expands to m(a) m(b) ... (up to 64 arguments: one rescan per argument).
#define NP_PARENS ()
#define NP_EXPAND(...) NP_EXPAND3(NP_EXPAND3(NP_EXPAND3(NP_EXPAND3(__VA_ARGS__))))
#define NP_EXPAND3(...) NP_EXPAND2(NP_EXPAND2(NP_EXPAND2(NP_EXPAND2(__VA_ARGS__))))
#define NP_EXPAND2(...) NP_EXPAND1(NP_EXPAND1(NP_EXPAND1(NP_EXPAND1(__VA_ARGS__))))
#define NP_EXPAND1(...) __VA_ARGS__
#define NP_FOR_EACH(m, ...) __VA_OPT__(NP_EXPAND(NP_FOR_EACH_STEP(m, __VA_ARGS__)))
#define NP_FOR_EACH_STEP(m, a, ...) m(a) __VA_OPT__(NP_FOR_EACH_AGAIN NP_PARENS(m, __VA_ARGS__))
#define NP_FOR_EACH_AGAIN() NP_FOR_EACH_STEP
#define NP_FIELD(member) fn(#member, s.member, Plain{});
#define NP_ONE(member) +1

// Record<T>: a record's name (the prefix of its error messages), its field count, the nils reserved after
// its fields, and each(s, fn), which calls fn(field name, member, tag) for every field of s in order (tag:
// the flowlet's FlowletFieldInfo, else Plain).
template <class T>
struct Record {};  // specialised for every record below
struct Plain {};   // the tag of a field that is checked by its type alone

#define NP_RECORD(T, label, ...)                                              \
  template <>                                                                 \
  struct Record<T> {                                                          \
    static constexpr const char* name = label;                                \
    static constexpr std::size_t fields = 0 NP_FOR_EACH(NP_ONE, __VA_ARGS__); \
    static constexpr std::size_t reserved = 0;                                \
    template <class S, class Fn>                                              \
    static void each(S& s, Fn&& fn) {                                         \
      NP_FOR_EACH(NP_FIELD, __VA_ARGS__)                                      \
    }                                                                         \
  };

NP_RECORD(RdmaCounterSample, "rdma_sample", device, port, ts_ns, xmit_bytes, rcv_bytes, xmit_packets,
          rcv_packets, hw)
NP_RECORD(RdmaPortBurst, "rdma_burst", device, port, first_ns, last_ns, xmit_bytes, rcv_bytes, xmit_packets,
          rcv_packets)
NP_RECORD(QpEntry, "qp", device, port, lqpn, rqpn, type, state, src_addr, dst_addr, pid, comm, sq_psn, rq_psn,
          ts_ns)
NP_RECORD(InterfaceInfo, "interface", name, ifindex, addrs)
NP_RECORD(ClockInfo, "hello.clock", source, synced, est_error_ns)
NP_RECORD(Hello, "hello", node, agent_version, epoch, interfaces, clock, sent_ns)
NP_RECORD(Batch, "batch", node, epoch, seq, sent_ns, flowlets, rdma_samples, rdma_bursts, qps, counters)
NP_RECORD(Ack, "ack", epoch, seq, status, reason, server_ns)
NP_RECORD(Heartbeat, "heartbeat", node, epoch, sent_ns, counters)

// Fields a decoder requires of a record: all, except where a field was appended later (a record from an
// older sender then lacks it and the field keeps its default).
template <class T>
inline constexpr std::size_t kRequiredFields = Record<T>::fields;
template <>
inline constexpr std::size_t kRequiredFields<QpEntry> = 10;  // sq_psn, rq_psn, ts_ns appended

// The flowlet: flowlet.h's fields, then two reserved nils.
template <>
struct Record<Flowlet> {
  static constexpr const char* name = "flowlet";
  static constexpr std::size_t fields = kFlowletFields;
  static constexpr std::size_t reserved = 2;
  template <class S, class Fn>
  static void each(S& s, Fn&& fn) {
    for_each_flowlet_field([&](auto field, auto get) { fn(decltype(field)::name, get(s), field); });
  }
};

template <class T>
concept Described = requires {
  Record<T>::name;
};
template <class T>
struct IsVector : std::false_type {};
template <class T>
struct IsVector<std::vector<T>> : std::true_type {};
template <class T>
constexpr bool kAddress = std::is_same_v<T, uint8_t[16]>;  // flowlet.h's A entries

}  // namespace netprism::wire
