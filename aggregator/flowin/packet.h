/* User-space entry to the probe's packet parser (bpf/parse.h; see packet_parse.c). */
#ifndef NETPRISM_FLOWIN_PACKET_H
#define NETPRISM_FLOWIN_PACKET_H

#include <stddef.h>
#include <stdint.h>

#include "netprism/flowlet.h"
#include "netprism/probe_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

#define NP_USER_PARSE_OK 0xffffffffu

struct np_user_pkt {
  struct np_flow_key key; /* ifindex 0, dir 0: the caller sets them */
  uint32_t ip_len;        /* IP-level bytes of the packet (its header's length field) */
  uint32_t payload;       /* L4 payload bytes */
  uint32_t payload_off;   /* offset of the L4 payload in the frame (may be past the captured bytes) */
  uint16_t tcp_flags;
  uint8_t roce_class; /* enum np_roce_class, NP_ROCE_CLASSES when none */
};

/* frame: an Ethernet frame's first `captured` bytes; frame_len: its whole length. Returns NP_USER_PARSE_OK or
 * the probe's counter index saying why the frame carries no TCP/UDP flow (enum np_counter). */
uint32_t np_user_parse(const uint8_t* frame, size_t captured, uint32_t frame_len, struct np_user_pkt* out);

#ifdef __cplusplus
}
#endif

#endif
