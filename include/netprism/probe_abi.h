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
 * MAP_BUSY + FLOW_RACE + LOCK_TIMEOUT + (packets accounted into bursts), and every packet accounted into a
 * burst is delivered in it or counted in RINGBUF_LOST_PACKETS.
 * One list, X(ID, name): the enum below holds NP_CNT_<ID> and the agent ships the value as "probe_<name>"
 * (np_counter_name). New counters are only ever appended. */
#define NP_COUNTERS(X)                                                                                       \
  X(PACKETS, packets)           /* packets seen by any entry point (a GSO super-packet counts once) */       \
  X(NON_IP, non_ip)             /* ARP, LLDP, ... : counted, passed, no flow */                              \
  X(TRUNCATED, truncated)       /* packet ended inside a header we needed, or shorter than its IP length */  \
  X(UNPARSED, unparsed)         /* malformed header (bogus IHL, TCP offset, IP length; a third VLAN tag) */  \
  X(IPV6_EXT, ipv6_ext)         /* IPv6 extension chain longer than we walk */                               \
  X(OTHER_L4, other_l4)         /* IP but neither TCP nor UDP (ICMP, ESP, ...) */                            \
  X(EXCLUDED, excluded)         /* matched the exclusion list (the agent's own traffic) */                   \
  X(RINGBUF_FULL, ringbuf_full) /* a finished burst did not fit in the ring buffer: that burst is lost */    \
  /* new flow, its np_front slot taken and np_flows full (E2BIG): packet not tracked */                      \
  X(MAP_FULL, map_full)                                                                                      \
  X(MAP_BUSY, map_busy) /* flow table insert failed with EBUSY/ENOMEM/other: packet not tracked */           \
  X(BURSTS_EMITTED, bursts_emitted) /* bursts written to the ring buffer (gap, max-duration and flush) */    \
  X(IP_FRAGMENT, ip_fragment)       /* IPv4/IPv6 fragment: L4 header absent or payload split, not tracked */ \
  /* packet hit a flow entry being deleted by the idle flush and retries ran out */                          \
  X(FLOW_RACE, flow_race)                                                                                    \
  X(PULLED, pulled) /* tc: headers were non-linear and were pulled (informational, not a loss) */            \
  /* idle flush found the ring buffer full (or the entry locked) and kept the burst */                       \
  X(FLUSH_DEFERRED, flush_deferred)                                                                          \
  /* flow entry stayed locked by another CPU beyond the spin budget: packet not tracked */                   \
  X(LOCK_TIMEOUT, lock_timeout)                                                                              \
  /* the packets of the bursts counted in RINGBUF_FULL (a burst is lost whole) */                            \
  X(RINGBUF_LOST_PACKETS, ringbuf_lost_packets)

#define NP_COUNTER_ENUM(id, name) NP_CNT_##id,
enum np_counter {
  NP_COUNTERS(NP_COUNTER_ENUM) NP_CNT_MAX,
};
#undef NP_COUNTER_ENUM

#ifdef __cplusplus
/* The name the agent ships counter i under; nullptr for an index outside the list. */
inline const char* np_counter_name(int i) {
#define NP_COUNTER_NAME(id, name) "probe_" #name,
  static const char* const names[] = {NP_COUNTERS(NP_COUNTER_NAME)};
#undef NP_COUNTER_NAME
  static_assert(sizeof names / sizeof names[0] == NP_CNT_MAX, "a name for every counter");
  return i >= 0 && i < NP_CNT_MAX ? names[i] : nullptr;
}
#endif

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
  NP_BURST_FIELDS(NP_DECLARE_ADDR, NP_DECLARE_NUM, NP_DECLARE_VEC)
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
  __u32 data_ku; /* RoCE: the burst's last data packet, in 1.024 us units after b.first_ns (bpf/burst.h) */
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
  __u64 lock;    /* 0 free, 1 held (same protocol as np_flow_state.lock) */
  __u32 used;    /* 1: holds `key`'s burst in progress */
  __u32 data_ku; /* as np_flow_state.data_ku */
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
