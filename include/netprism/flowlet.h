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

/* Flow identity as seen at one interface in one direction. IPv4 addresses are stored v4-mapped
 * (::ffff:a.b.c.d) so one key type serves both families; users always see plain dotted quads. */
struct np_flow_key {
  __u8 saddr[16];
  __u8 daddr[16];
  __u32 ifindex;
  __u16 sport;
  __u16 dport;
  __u32 qpn;   /* RoCE destination QP (24 bits); 0 for TCP/UDP */
  __u8 proto;  /* enum np_proto */
  __u8 dir;    /* enum np_direction */
  __u8 family; /* 4 or 6 */
  __u8 pad0;
};

struct np_flowlet {
  struct np_flow_key key;
  __u64 first_ns; /* kernel: CLOCK_MONOTONIC (bpf_ktime_get_ns); on the wire: Unix-epoch ns */
  __u64 last_ns;
  __u64 packets;
  __u64 bytes;         /* IP-level bytes (IP header included) */
  __u64 payload_bytes; /* L4 payload of every packet seen, retransmissions included */
  __u32 roce_ops[NP_ROCE_CLASSES];
  __u32 last_psn;  /* RoCE PSN of the last packet (24 bits) */
  __u16 tcp_flags; /* OR of the TCP flags seen in the burst (FIN 0x01 SYN 0x02 RST 0x04 ...) */
  __u8 end_reason; /* enum np_end_reason */
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
