/* The probe's packet parser (bpf/parse.h), compiled for user space: sFlow's sampled packet headers and the
 * UDP datagrams of a capture are parsed by the same code as the kernel parses live packets, so a header is
 * read one way everywhere (Ethernet, VLAN tags, IPv4/IPv6 with extension headers, TCP/UDP, RoCEv2 BTH). */
#include <arpa/inet.h>

#include "packet.h"

/* What the BPF toolchain provides and a user-space C compiler does not. */
#ifndef __always_inline
#define __always_inline inline __attribute__((always_inline))
#endif
#define bpf_htons(x) htons(x)
#define bpf_ntohs(x) ntohs(x)
#define bpf_ntohl(x) ntohl(x)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunknown-pragmas" /* #pragma unroll: a verifier hint */
#pragma GCC diagnostic ignored "-Wpointer-arith"   /* void* arithmetic: the parser's pointer idiom */
#include "../../bpf/parse.h"
#pragma GCC diagnostic pop

uint32_t np_user_parse(const uint8_t* frame, size_t captured, uint32_t frame_len, struct np_user_pkt* out) {
  struct np_pkt p;
  __builtin_memset(&p, 0, sizeof p);
  __builtin_memset(out, 0, sizeof *out);
  uint8_t* data = (uint8_t*)frame; /* np_parse never writes the packet */
  uint32_t rc = np_parse(data, data + captured, frame_len, &p);
  if (rc != NP_PARSE_OK) return rc;
  /* L3 offset: Ethernet plus the (at most two, or np_parse would have refused) VLAN tags it skipped. */
  uint32_t l3 = sizeof(struct np_eth);
  while (l3 + sizeof(struct np_vlan) <= captured && (frame[l3 - 2] << 8 | frame[l3 - 1]) != NP_ETH_P_IP &&
         (frame[l3 - 2] << 8 | frame[l3 - 1]) != NP_ETH_P_IPV6)
    l3 += sizeof(struct np_vlan);
  out->key = p.key;
  out->ip_len = p.ip_len;
  out->payload = p.payload;
  out->payload_off = l3 + p.hdr_len;
  out->tcp_flags = p.tcp_flags;
  out->roce_class = p.roce_class;
  return NP_PARSE_OK;
}
