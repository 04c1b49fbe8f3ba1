/* Control-plane ABI between the kernel probe and the agent: counter indices, runtime configuration, the
 * exclusion-list key, the per-flow state kept in np_flows and the idle-flush request. Shared by BPF C and C++
 * like flowlet.h. */
#ifndef NETPRISM_PROBE_ABI_H
#define NETPRISM_PROBE_ABI_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

#include "netprism/flowlet.h"

/* Per-CPU counters: every packet the probe sees, and every reason it skipped or lost something.
 * Nothing is dropped silently: each skip or loss path increments exactly one of the reason counters, so
 * PACKETS == NON_IP + TRUNCATED + UNPARSED + IPV6_EXT + OTHER_L4 + IP_FRAGMENT + EXCLUDED + MAP_FULL +
 * MAP_BUSY
 *            + FLOW_RACE + LOCK_TIMEOUT + (packets accounted into bursts).
 * New indices are only ever appended (before NP_CNT_MAX). */
enum np_counter {
  NP_CNT_PACKETS = 0,    /* packets seen by any entry point (a GSO super-packet counts once here) */
  NP_CNT_NON_IP,         /* ARP, LLDP, ... : counted, passed, no flow */
  NP_CNT_TRUNCATED,      /* packet ended inside a header we needed, or shorter than its IP length */
  NP_CNT_UNPARSED,       /* malformed header (bogus IHL, TCP offset, IP length; a third VLAN tag) */
  NP_CNT_IPV6_EXT,       /* IPv6 extension chain longer than we walk */
  NP_CNT_OTHER_L4,       /* IP but neither TCP nor UDP (ICMP, ESP, ...) */
  NP_CNT_EXCLUDED,       /* matched the exclusion list (the agent's own traffic) */
  NP_CNT_RINGBUF_FULL,   /* a finished burst could not be written to the ring buffer: that burst is lost */
  NP_CNT_MAP_FULL,       /* new flow, its np_front slot taken and np_flows full (E2BIG): packet not tracked */
  NP_CNT_MAP_BUSY,       /* flow table insert failed with EBUSY/ENOMEM/other: packet not tracked */
  NP_CNT_BURSTS_EMITTED, /* bursts written to the ring buffer (gap, max-duration and flush) */
  NP_CNT_IP_FRAGMENT,    /* IPv4/IPv6 fragment: L4 header absent or payload split, not tracked */
  NP_CNT_FLOW_RACE,      /* packet hit a flow entry being deleted by the idle flush and retries ran out */
  NP_CNT_PULLED,         /* tc: headers were non-linear and were pulled (informational, not a loss) */
  NP_CNT_FLUSH_DEFERRED, /* idle flush found the ring buffer full (or the entry locked) and kept the burst */
  NP_CNT_LOCK_TIMEOUT,   /* flow entry stayed locked by another CPU beyond the spin budget: packet not tracked
                          */
  NP_CNT_MAX,
};

/* Defaults for the runtime thresholds (the reasoning is in bpf/burst.h next to the code that uses them). */
#define NP_DEFAULT_GAP_NS 4000000ULL         /* 4 ms */
#define NP_DEFAULT_MAX_BURST_NS 100000000ULL /* 100 ms */

/* np_probe_config.flags */
#define NP_CFG_EXCLUDE_PORTS 0x1u /* np_exclude holds entries with a specific port */
#define NP_CFG_EXCLUDE_ADDRS 0x2u /* np_exclude holds whole-address entries (port 0) */

/* Runtime configuration, one entry in an array map so the agent can retune without reloading.
 * A zero threshold means "the default above". */
struct np_probe_config {
  __u64 gap_ns;       /* idle gap that closes a burst */
  __u64 max_burst_ns; /* longest burst before it is cut and reported */
  __u32 flags;        /* NP_CFG_* : which kinds of exclusion entries exist (skips lookups when none) */
  __u32 pad0;
  __u64 exclude_port_bloom; /* bit (port & 63) set for every excluded port: cheap pre-filter */
};

/* Exclusion list: traffic to or from (addr, port) is not observed. port 0 = every port of addr. */
struct np_exclude_key {
  __u8 addr[16]; /* v4-mapped for IPv4 */
  __u16 port;    /* host byte order */
  __u16 pad0;
  __u32 pad1;
};

/* The burst part of a flowlet: np_flowlet without its key, same layout as np_flowlet from first_ns on. */
struct np_burst {
  __u64 first_ns;
  __u64 last_ns;
  __u64 packets;
  __u64 bytes;
  __u64 payload_bytes;
  __u32 roce_ops[NP_ROCE_CLASSES];
  __u32 last_psn;
  __u16 tcp_flags;
  __u8 end_reason;
  __u8 pad0;
};

/* Value of np_flows: the burst in progress for one flow key, guarded by a lock word shared by the data path
 * (every CPU) and the idle-flush program (a compare-and-swap lock with a bounded spin, see bpf/burst.h: far
 * cheaper than bpf_spin_lock, which saves and restores interrupts). `dead` is set under the lock just before
 * the flush deletes the entry; a data-path CPU that finds it set, or finds the entry re-used for another key
 * (key_tag differs), retries with a fresh entry instead of writing into a deleted one. b.packets == 0: no
 * burst in progress. Kept small on purpose (the key lives only in the hash map's key): every cache line of
 * the entry is a likely miss on a busy host. */
struct np_flow_state {
  __u64 lock; /* 0 free, 1 held */
  __u32 dead;
  __u32 pad0;
  __u64 key_tag; /* np_key_tag(key): detects re-use of a deleted entry for another key */
  struct np_burst b;
  /* Pads the hash-table element (48-byte kernel header + 48-byte key + this value) to 192 bytes: preallocated
   * elements then sit on cache-line boundaries and every entry costs exactly 3 lines, not up to 4. */
  __u64 pad1;
};

/* One slot of np_front, the direct-mapped flow table in front of np_flows (bpf/burst.h): a flow whose slot
 * (a hash of its key) is free lives here rather than in np_flows. An array lookup is inlined by the verifier
 * into pointer arithmetic, so the common packet pays no hashing, bucket walk or key compare call, and the
 * slot is exactly two cache lines (the hash-table element is three, plus its bucket). The full key is kept
 * for the compare; every field is read and written under `lock`. used == 0: free. */
#define NP_FRONT_SLOTS_DEFAULT 2048
struct np_front_slot {
  __u64 lock; /* 0 free, 1 held (same protocol as np_flow_state.lock) */
  __u32 used; /* 1: holds `key`'s burst in progress */
  __u32 pad0;
  struct np_flow_key key;
  struct np_burst b;
};

/* Idle-flush request, written by user space into np_flush_req[0] before running np_flush through
 * BPF_PROG_TEST_RUN. The program closes the listed flows' bursts whose last packet is older than cutoff_ns
 * (every listed flow when NP_FLUSH_ALL), writes them to np_events and deletes the entries; it reports back
 * in the same struct. */
#define NP_FLUSH_BATCH 64
#define NP_FLUSH_ALL 0x1u
#define NP_FLUSH_IN_FLOWS 0xffffffffu /* slots[i]: the flow is in np_flows, not in an np_front slot */
struct np_flush_req {
  __u64 cutoff_ns; /* CLOCK_MONOTONIC */
  __u32 n;         /* keys used */
  __u32 flags;     /* NP_FLUSH_ALL */
  __u32 flushed;   /* out: bursts written to the ring buffer */
  __u32 deleted;   /* out: entries deleted */
  __u32 deferred;  /* out: kept because the ring buffer was full */
  __u32 pad0;
  struct np_flow_key keys[NP_FLUSH_BATCH];
  __u32 slots[NP_FLUSH_BATCH]; /* np_front slot holding keys[i], or NP_FLUSH_IN_FLOWS */
};

#ifdef __cplusplus
static_assert(sizeof(struct np_probe_config) == 32, "np_probe_config layout");
static_assert(sizeof(struct np_exclude_key) == 24, "np_exclude_key layout");
static_assert(sizeof(struct np_burst) == 64, "np_burst layout");
static_assert(sizeof(struct np_flow_state) == 96, "np_flow_state layout");
static_assert(sizeof(struct np_front_slot) == 128, "np_front_slot: two cache lines");
static_assert(sizeof(struct np_flowlet) == sizeof(struct np_flow_key) + sizeof(struct np_burst),
              "np_burst tail");
#else
_Static_assert(sizeof(struct np_probe_config) == 32, "np_probe_config layout");
_Static_assert(sizeof(struct np_exclude_key) == 24, "np_exclude_key layout");
_Static_assert(sizeof(struct np_burst) == 64, "np_burst layout");
_Static_assert(sizeof(struct np_flow_state) == 96, "np_flow_state layout");
_Static_assert(sizeof(struct np_front_slot) == 128, "np_front_slot: two cache lines");
_Static_assert(sizeof(struct np_flowlet) == sizeof(struct np_flow_key) + sizeof(struct np_burst),
               "np_burst tail");
#endif

#endif /* NETPRISM_PROBE_ABI_H */
