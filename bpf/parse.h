/* The one packet parser of the probe, shared by the tc and XDP entry points: Ethernet, up to two VLAN tags,
 * IPv4 (IHL honoured) or IPv6 (fixed header plus a short walk over common extension headers), TCP or UDP,
 * and the InfiniBand Base Transport Header of RoCEv2 (UDP destination port 4791).
 *
 * It works on direct packet pointers [data, data_end) and an offset kept as a bounded scalar, the form the
 * verifier tracks best. It never writes the packet. It returns NP_PARSE_OK with the flow key and sizes
 * filled in, or the np_counter index that says why the packet carries no flow. */
#ifndef NETPRISM_BPF_PARSE_H
#define NETPRISM_BPF_PARSE_H

#include "netprism/flowlet.h"
#include "netprism/probe_abi.h"

#define NP_PARSE_OK 0xffffffffu

#define NP_ETH_P_IP 0x0800
#define NP_ETH_P_IPV6 0x86DD
#define NP_ETH_P_8021Q 0x8100
#define NP_ETH_P_8021AD 0x88A8

#define NP_IPPROTO_HOPOPTS 0
#define NP_IPPROTO_TCP 6
#define NP_IPPROTO_UDP 17
#define NP_IPPROTO_ROUTING 43
#define NP_IPPROTO_FRAGMENT 44
#define NP_IPPROTO_AH 51
#define NP_IPPROTO_DSTOPTS 60

/* Headers are small and fixed: every offset we compute stays below this, which is what lets the verifier
 * bound the pointer arithmetic (an IPv6 extension chain that goes further is counted, not followed). */
#define NP_MAX_HDR_OFF 512
/* Extension headers walked before giving up (hop-by-hop, routing, destination options twice, AH covers
 * every order RFC 8200 recommends for real traffic). */
#define NP_MAX_IPV6_EXT 4

/* Own wire-format structs rather than vmlinux.h ones: the probe must not depend on the kernel's internal
 * type names, and these are the on-wire layouts by definition. */
struct np_eth {
  __u8 dst[6];
  __u8 src[6];
  __be16 proto;
};
struct np_vlan {
  __be16 tci;
  __be16 proto;
};
struct np_ip4 {
  __u8 ver_ihl;
  __u8 tos;
  __be16 tot_len;
  __be16 id;
  __be16 frag_off;
  __u8 ttl;
  __u8 protocol;
  __u16 check;
  __u8 saddr[4];
  __u8 daddr[4];
};
struct np_ip6 {
  __be32 ver_tc_flow;
  __be16 payload_len;
  __u8 nexthdr;
  __u8 hop_limit;
  __u8 saddr[16];
  __u8 daddr[16];
};
struct np_ip6_ext {
  __u8 nexthdr;
  __u8 hdrlen;
  __u8 rest[6];
};
struct np_ip6_frag {
  __u8 nexthdr;
  __u8 reserved;
  __be16 frag_off; /* offset << 3 | M flag */
  __be32 id;
};
struct np_tcp {
  __be16 sport;
  __be16 dport;
  __be32 seq;
  __be32 ack;
  __u8 doff_ns; /* data offset << 4 | NS flag */
  __u8 flags;
  __be16 window;
  __u16 check;
  __be16 urg;
};
struct np_udp {
  __be16 sport;
  __be16 dport;
  __be16 len;
  __u16 check;
};
/* InfiniBand Base Transport Header (IBA vol. 1, 9.2): 12 bytes right after the UDP header in RoCEv2. */
struct np_bth {
  __u8 opcode;
  __u8 flags; /* SE, M, pad count, transport version */
  __be16 pkey;
  __u8 resv8;
  __u8 dqpn[3];
  __u8 ack_resv;
  __u8 psn[3];
};

/* What the parser extracts from one packet. */
struct np_pkt {
  struct np_flow_key key;
  __u32 ip_len;  /* IP-level bytes: the IP header's length field (or the frame length when it is 0) */
  __u32 payload; /* L4 payload bytes */
  __u32 hdr_len; /* IP + L4 header bytes, to count the headers of every segment of a GSO packet */
  __u32 psn;     /* RoCE PSN */
  __u16 tcp_flags;
  __u8 roce_class; /* enum np_roce_class, or NP_ROCE_CLASSES when not a counted class */
  __u8 pad0;
};

/* RoCE opcode -> class. The top 3 bits are the transport (RC, UC, RD, UD, CNP, XRC), the low 5 bits the
 * operation; the operation codes are the same for every transport that has them (IBA vol. 1, table 38). */
static __always_inline __u8 np_roce_class(__u8 opcode) {
  __u8 op = opcode & 0x1f;
  if ((opcode & 0xe0) == 0x80) return NP_ROCE_CLASSES; /* CNP: congestion notification, no data */
  if (op <= 0x05 || op == 0x16 || op == 0x17)
    return NP_ROCE_SEND;                            /* SEND first/middle/last/only (+imm, +inv) */
  if (op <= 0x0b) return NP_ROCE_WRITE;             /* RDMA WRITE first/middle/last/only (+imm) */
  if (op <= 0x10) return NP_ROCE_READ;              /* READ request and response first..only */
  if (op == 0x11 || op == 0x12) return NP_ROCE_ACK; /* ACK, ATOMIC ACK */
  return NP_ROCE_CLASSES;                           /* atomics, reserved */
}

static __always_inline void np_v4_mapped(__u8 out[16], const __u8 in[4]) {
  __builtin_memset(out, 0, 10);
  out[10] = 0xff;
  out[11] = 0xff;
  out[12] = in[0];
  out[13] = in[1];
  out[14] = in[2];
  out[15] = in[3];
}

/* pkt_len: the whole packet's length (skb->len for tc, which may exceed the linear data; the frame length
 * for XDP). Returns NP_PARSE_OK or an np_counter index. */
static __always_inline __u32 np_parse(void* data, void* data_end, __u32 pkt_len, struct np_pkt* p) {
  __u32 off = sizeof(struct np_eth);
  struct np_eth* eth = data;
  if ((void*)(eth + 1) > data_end) return NP_CNT_TRUNCATED;
  __be16 proto = eth->proto;

#pragma unroll
  for (int i = 0; i < 2; i++) {
    if (proto != bpf_htons(NP_ETH_P_8021Q) && proto != bpf_htons(NP_ETH_P_8021AD)) break;
    struct np_vlan* vh = data + off;
    if ((void*)(vh + 1) > data_end) return NP_CNT_TRUNCATED;
    proto = vh->proto;
    off += sizeof(struct np_vlan);
  }
  if (proto == bpf_htons(NP_ETH_P_8021Q) || proto == bpf_htons(NP_ETH_P_8021AD)) return NP_CNT_UNPARSED;

  __u32 l3 = off; /* <= 22 */
  __u32 ip_len, l3_hdr;
  __u8 l4proto;
  if (proto == bpf_htons(NP_ETH_P_IP)) {
    struct np_ip4* ip = data + off;
    if ((void*)(ip + 1) > data_end) return NP_CNT_TRUNCATED;
    if ((ip->ver_ihl >> 4) != 4) return NP_CNT_UNPARSED;
    l3_hdr = (ip->ver_ihl & 0x0f) * 4;
    if (l3_hdr < sizeof(struct np_ip4)) return NP_CNT_UNPARSED; /* bogus IHL */
    if (data + off + l3_hdr > data_end) return NP_CNT_TRUNCATED;
    ip_len = bpf_ntohs(ip->tot_len);
    /* 0 = length not set in the header (TSO / BIG TCP super-packets): the frame says it. */
    if (ip_len == 0) ip_len = pkt_len - l3;
    if (ip_len < l3_hdr) return NP_CNT_UNPARSED;
    if (bpf_ntohs(ip->frag_off) & 0x3fff) return NP_CNT_IP_FRAGMENT; /* MF or offset */
    l4proto = ip->protocol;
    p->key.family = 4;
    np_v4_mapped(p->key.saddr, ip->saddr);
    np_v4_mapped(p->key.daddr, ip->daddr);
    off += l3_hdr;
  } else if (proto == bpf_htons(NP_ETH_P_IPV6)) {
    struct np_ip6* ip6 = data + off;
    if ((void*)(ip6 + 1) > data_end) return NP_CNT_TRUNCATED;
    if ((bpf_ntohl(ip6->ver_tc_flow) >> 28) != 6) return NP_CNT_UNPARSED;
    ip_len = bpf_ntohs(ip6->payload_len);
    ip_len = ip_len ? ip_len + sizeof(struct np_ip6) : pkt_len - l3; /* 0: jumbogram / BIG TCP */
    l4proto = ip6->nexthdr;
    p->key.family = 6;
    __builtin_memcpy(p->key.saddr, ip6->saddr, 16);
    __builtin_memcpy(p->key.daddr, ip6->daddr, 16);
    off += sizeof(struct np_ip6);
#pragma unroll
    for (int i = 0; i < NP_MAX_IPV6_EXT; i++) {
      if (l4proto == NP_IPPROTO_HOPOPTS || l4proto == NP_IPPROTO_ROUTING || l4proto == NP_IPPROTO_DSTOPTS ||
          l4proto == NP_IPPROTO_AH) {
        struct np_ip6_ext* ext = data + off;
        if ((void*)(ext + 1) > data_end) return NP_CNT_TRUNCATED;
        __u32 len = l4proto == NP_IPPROTO_AH ? ((__u32)ext->hdrlen + 2) * 4 : ((__u32)ext->hdrlen + 1) * 8;
        l4proto = ext->nexthdr;
        off += len;
        if (off > NP_MAX_HDR_OFF) return NP_CNT_IPV6_EXT;
      } else if (l4proto == NP_IPPROTO_FRAGMENT) {
        struct np_ip6_frag* fh = data + off;
        if ((void*)(fh + 1) > data_end) return NP_CNT_TRUNCATED;
        /* An atomic fragment (offset 0, no M flag; RFC 6946) is a whole packet; anything else is split. */
        if (bpf_ntohs(fh->frag_off) & 0xfff9) return NP_CNT_IP_FRAGMENT;
        l4proto = fh->nexthdr;
        off += sizeof(struct np_ip6_frag);
      } else {
        break;
      }
    }
    if (l4proto == NP_IPPROTO_HOPOPTS || l4proto == NP_IPPROTO_ROUTING || l4proto == NP_IPPROTO_DSTOPTS ||
        l4proto == NP_IPPROTO_AH || l4proto == NP_IPPROTO_FRAGMENT)
      return NP_CNT_IPV6_EXT;
    l3_hdr = off - l3;
    if (ip_len < l3_hdr) return NP_CNT_UNPARSED;
  } else {
    return NP_CNT_NON_IP;
  }
  /* Fewer bytes than the IP header announces: the capture or the frame was cut. */
  if (ip_len > pkt_len - l3) return NP_CNT_TRUNCATED;
  if (off > NP_MAX_HDR_OFF) return NP_CNT_IPV6_EXT;

  __u32 l4_hdr;
  p->roce_class = NP_ROCE_CLASSES;
  if (l4proto == NP_IPPROTO_TCP) {
    struct np_tcp* th = data + off;
    if ((void*)(th + 1) > data_end) return NP_CNT_TRUNCATED;
    l4_hdr = (th->doff_ns >> 4) * 4;
    if (l4_hdr < sizeof(struct np_tcp)) return NP_CNT_UNPARSED;
    if (data + off + l4_hdr > data_end) return NP_CNT_TRUNCATED;
    p->key.proto = NP_PROTO_TCP;
    p->key.sport = bpf_ntohs(th->sport);
    p->key.dport = bpf_ntohs(th->dport);
    p->tcp_flags = th->flags | ((__u16)(th->doff_ns & 1) << 8);
  } else if (l4proto == NP_IPPROTO_UDP) {
    struct np_udp* uh = data + off;
    if ((void*)(uh + 1) > data_end) return NP_CNT_TRUNCATED;
    l4_hdr = sizeof(struct np_udp);
    p->key.proto = NP_PROTO_UDP;
    p->key.sport = bpf_ntohs(uh->sport);
    p->key.dport = bpf_ntohs(uh->dport);
    if (p->key.dport == NP_ROCE_UDP_PORT) {
      struct np_bth* bth = data + off + sizeof(struct np_udp);
      if ((void*)(bth + 1) > data_end) return NP_CNT_TRUNCATED;
      p->key.proto = NP_PROTO_ROCE;
      p->key.qpn = ((__u32)bth->dqpn[0] << 16) | ((__u32)bth->dqpn[1] << 8) | bth->dqpn[2];
      p->psn = ((__u32)bth->psn[0] << 16) | ((__u32)bth->psn[1] << 8) | bth->psn[2];
      p->roce_class = np_roce_class(bth->opcode);
    }
  } else {
    return NP_CNT_OTHER_L4;
  }
  if (ip_len < l3_hdr + l4_hdr) return NP_CNT_UNPARSED;
  p->ip_len = ip_len;
  p->hdr_len = l3_hdr + l4_hdr;
  p->payload = ip_len - l3_hdr - l4_hdr;
  return NP_PARSE_OK;
}

#endif /* NETPRISM_BPF_PARSE_H */
