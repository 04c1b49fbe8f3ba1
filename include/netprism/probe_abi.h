/* Control-plane ABI between the kernel probe and the agent: counter indices, runtime configuration and the
 * exclusion-list key. Shared by BPF C and C++ like flowlet.h. */
#ifndef NETPRISM_PROBE_ABI_H
#define NETPRISM_PROBE_ABI_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

/* Per-CPU counters: every packet the probe sees, and every reason it skipped or lost something.
 * Nothing is dropped silently: each loss path increments exactly one of these. */
enum np_counter {
  NP_CNT_PACKETS = 0,    /* packets seen by any entry point */
  NP_CNT_NON_IP,         /* ARP, LLDP, ... : counted, passed, no flow */
  NP_CNT_TRUNCATED,      /* packet ended inside a header we needed */
  NP_CNT_UNPARSED,       /* malformed header (bogus IHL, ...) */
  NP_CNT_IPV6_EXT,       /* IPv6 extension chain we do not walk */
  NP_CNT_OTHER_L4,       /* IP but neither TCP nor UDP (ICMP, ...) */
  NP_CNT_EXCLUDED,       /* matched the exclusion list (the agent's own traffic) */
  NP_CNT_RINGBUF_FULL,   /* a finished burst could not be reserved in the ring buffer */
  NP_CNT_MAP_FULL,       /* flow table full: new flow not tracked */
  NP_CNT_MAP_BUSY,       /* flow table update failed with EBUSY/other */
  NP_CNT_BURSTS_EMITTED, /* bursts written to the ring buffer */
  NP_CNT_MAX,
};

/* Runtime configuration, one entry in an array map so the agent can retune without reloading. */
struct np_probe_config {
  __u64 gap_ns;       /* idle gap that closes a burst */
  __u64 max_burst_ns; /* longest burst before it is cut and reported */
  __u32 flags;        /* reserved */
  __u32 pad0;
};

/* Exclusion list: traffic to or from (addr, port) is not observed. port 0 = every port of addr. */
struct np_exclude_key {
  __u8 addr[16]; /* v4-mapped for IPv4 */
  __u16 port;
  __u16 pad0;
  __u32 pad1;
};

#ifdef __cplusplus
static_assert(sizeof(struct np_probe_config) == 24, "np_probe_config layout");
static_assert(sizeof(struct np_exclude_key) == 24, "np_exclude_key layout");
#else
_Static_assert(sizeof(struct np_probe_config) == 24, "np_probe_config layout");
_Static_assert(sizeof(struct np_exclude_key) == 24, "np_exclude_key layout");
#endif

#endif /* NETPRISM_PROBE_ABI_H */
