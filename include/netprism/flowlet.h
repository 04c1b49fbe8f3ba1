/* The flowlet record: one burst of one flow, as emitted by the kernel probe into its ring buffer.
 *
 * This header is the single definition shared by the BPF programs (compiled with vmlinux.h) and the C++
 * agent and aggregator (compiled with <linux/types.h>). Every field is fixed-width and every hole is an
 * explicit padding field, so the layout is identical on both sides; the size asserts below are checked by
 * both compilers. Change the layout only together with NP_FLOWLET_LAYOUT_VERSION.
 */
#ifndef NETPRISM_FLOWLET_H
#define NETPRISM_FLOWLET_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

#define NP_FLOWLET_LAYOUT_VERSION 1

/* L4 protocol class of a flow. RoCEv2 is UDP to port 4791 carrying an InfiniBand BTH. */
enum np_proto {
  NP_PROTO_TCP = 1,
  NP_PROTO_UDP = 2,
  NP_PROTO_ROCE = 3,
};

enum np_direction {
  NP_DIR_INGRESS = 0,
  NP_DIR_EGRESS = 1,
};

/* Why a burst was closed and emitted. */
enum np_end_reason {
  NP_END_GAP = 1,          /* a packet arrived after an idle gap above the threshold */
  NP_END_MAX_DURATION = 2, /* the burst reached the maximum duration and was cut */
  NP_END_IDLE_FLUSH = 3,   /* user space flushed an idle flow's last burst */
  NP_END_SHUTDOWN = 4,     /* the agent flushed everything on exit */
  NP_END_SAMPLE = 5,       /* not a burst: one 1:N packet sample (sFlow); packets holds N, bytes are scaled */
};

/* RoCE opcode classes counted per burst (index into roce_ops). */
enum np_roce_class {
  NP_ROCE_SEND = 0,
  NP_ROCE_WRITE = 1,
  NP_ROCE_READ = 2,
  NP_ROCE_ACK = 3,
  NP_ROCE_CLASSES = 4,
};

#define NP_ROCE_UDP_PORT 4791

/* The flowlet's fields, one list per part, in the order of the record, of its msgpack encoding
 * (common/wire.cpp) and of the store's columns (aggregator/store/batch_codec.cpp). The structs below and
 * every codec are generated from these lists, so a field is added by one edit here (then the explicit
 * padding, which the size asserts check). The wire encoding is positional and a decoder ignores trailing
 * fields it does not know: a new field goes at the end of NP_BURST_FIELDS. Each entry is A(name), a 16-byte
 * address; N(name, type), an unsigned integer; or V(name, type, n), a vector of n unsigned integers. The
 * caller passes the three macros to apply (C++: netprism::for_each_field in records.hpp). */

/* Flow identity as seen at one interface in one direction. IPv4 addresses are stored v4-mapped
 * (::ffff:a.b.c.d) so one key type serves both families; users always see plain dotted quads. */
#define NP_FLOW_KEY_FIELDS(A, N, V)                                  \
  A(saddr)                                                           \
  A(daddr)                                                           \
  N(ifindex, __u32)                                                  \
  N(sport, __u16)                                                    \
  N(dport, __u16)                                                    \
  N(qpn, __u32)   /* RoCE destination QP (24 bits); 0 for TCP/UDP */ \
  N(proto, __u8)  /* enum np_proto */                                \
  N(dir, __u8)    /* enum np_direction */                            \
  N(family, __u8) /* 4 or 6 */

/* One burst of the flow. */
#define NP_BURST_FIELDS(A, N, V)                                                                   \
  N(first_ns, __u64) /* kernel: CLOCK_MONOTONIC (bpf_ktime_get_ns); on the wire: Unix-epoch ns */  \
  N(last_ns, __u64)                                                                                \
  N(packets, __u64)                                                                                \
  N(bytes, __u64)         /* IP-level bytes (IP header included) */                                \
  N(payload_bytes, __u64) /* L4 payload of every packet seen, retransmissions included */          \
  V(roce_ops, __u32, NP_ROCE_CLASSES)                                                              \
  N(last_psn, __u32)  /* RoCE PSN of the last packet (24 bits) */                                  \
  N(tcp_flags, __u16) /* OR of the TCP flags seen in the burst (FIN 0x01 SYN 0x02 RST 0x04 ...) */ \
  N(end_reason, __u8) /* enum np_end_reason */

/* Member declarations from the lists. */
#define NP_DECLARE_ADDR(name) __u8 name[16];
#define NP_DECLARE_NUM(name, type) type name;
#define NP_DECLARE_VEC(name, type, n) type name[n];

struct np_flow_key {
  NP_FLOW_KEY_FIELDS(NP_DECLARE_ADDR, NP_DECLARE_NUM, NP_DECLARE_VEC)
  __u8 pad0;
};

struct np_flowlet {
  struct np_flow_key key;
  NP_BURST_FIELDS(NP_DECLARE_ADDR, NP_DECLARE_NUM, NP_DECLARE_VEC)
  __u8 pad0;
};

#ifdef __cplusplus
static_assert(sizeof(struct np_flow_key) == 48, "np_flow_key layout");
static_assert(sizeof(struct np_flowlet) == 112, "np_flowlet layout");
#else
_Static_assert(sizeof(struct np_flow_key) == 48, "np_flow_key layout");
_Static_assert(sizeof(struct np_flowlet) == 112, "np_flowlet layout");
#endif

#endif /* NETPRISM_FLOWLET_H */
