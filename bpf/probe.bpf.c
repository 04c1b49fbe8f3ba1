// SPDX-License-Identifier: GPL-2.0
/* netprism flow probe. Map and program names are the agent's interface to it (see
 * include/netprism/probe_abi.h): maps: np_front (direct-mapped per-flow burst state, the common case),
 * np_flows (hash table of the flows whose front slot is taken), np_events (ring buffer of finished bursts),
 * np_counters (per-CPU loss and skip counters), np_config (runtime thresholds), np_exclude (addresses/ports
 * never observed), np_flush_req (idle-flush request, user space -> np_flush), np_tc_jump (tc hooks -> the
 * shared tc data path). Programs: np_tc_ingress, np_tc_egress (tc clsact; both tail-call np_tc_shared),
 * np_xdp (XDP ingress), np_flush (run by user space through BPF_PROG_TEST_RUN, never attached).
 * The probe only observes: every entry point returns TC_ACT_OK / XDP_PASS whatever it finds. */
#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "netprism/flowlet.h"
#include "netprism/probe_abi.h"

#ifdef NP_POISON_MODERN
/* Test build only (tests/bpf/probe_poison.bpf.c): every use of a kernel feature the compat variant must not
 * need becomes a call to a helper no kernel has, so the verifier refuses the program exactly when its live
 * code reaches one (tests/bpf/probe_variant_test.cpp). */
static long (*const np_poison)(void) = (void*)0x7fff;
#define bpf_loop(n, fn, ctx, flags) ((void)(n), (void)(fn), (void)(ctx), np_poison())
#define NP_SKB_TSTAMP_TYPE(skb) ((__u8)np_poison())
#else
#define NP_SKB_TSTAMP_TYPE(skb) ((skb)->tstamp_type)
#endif

/* Flow table size: a training node talks to tens of peers over a few sockets/QPs each; 64 Ki entries of 168
 * bytes (key + state) is ~11 MiB preallocated, room for scans and short-lived flows between idle flushes.
 * Preallocated on purpose: inserts never allocate in the data path (no ENOMEM under memory pressure). */
#define NP_MAX_FLOWS 65536

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, NP_MAX_FLOWS);
  __type(key, struct np_flow_key);
  __type(value, struct np_flow_state);
} np_flows SEC(".maps");

/* 4 MiB = ~37 000 bursts of 112 bytes: the agent drains it at least every few ms (epoll on ring_fd), and even
 * a 1 s stall at 10 000 bursts/s fits. Overflow is counted (NP_CNT_RINGBUF_FULL), never silent. */
struct {
  __uint(type, BPF_MAP_TYPE_RINGBUF);
  __uint(max_entries, 1 << 22);
} np_events SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, NP_CNT_MAX);
  __type(key, __u32);
  __type(value, __u64);
} np_counters SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct np_probe_config);
} np_config SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 64);
  __type(key, struct np_exclude_key);
  __type(value, __u8);
} np_exclude SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct np_flush_req);
} np_flush_req SEC(".maps");

/* The direct-mapped front of the flow table (np_front_slot in probe_abi.h, np_account in burst.h). 2 048
 * slots of 128 bytes = 256 KiB: with n flows on a node a flow shares its slot (and falls back to np_flows,
 * correct but slower) with probability ~n/2048, 5 % for 100 flows. User space scans it whole at each idle
 * flush (every 100 ms by default): a 256 KiB copy. The size (a power of two) can be set before load. */
struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, NP_FRONT_SLOTS_DEFAULT);
  __type(key, __u32);
  __type(value, struct np_front_slot);
} np_front SEC(".maps");
/* Slots - 1; user space sets it with the map size before load. Read-only data: the verifier sees a constant.
 */
const volatile __u32 np_front_mask = NP_FRONT_SLOTS_DEFAULT - 1;
/* The program variant (bpf/README.md "Kernel variants"), set by user space before load from its feature
 * probes: 0 modern (bpf_loop, 5.17+; __sk_buff.tstamp_type, 5.18+), 1 compat (bounded loops in global
 * functions and a clock-checked egress timestamp, 5.13+). Read-only data: the verifier sees a constant, never
 * walks the other variant's code and removes it, so a kernel without bpf_loop never meets a call to it. */
const volatile __u32 np_compat = 0;

#include "burst.h"
#include "parse.h"

/* Enough linear bytes for Ethernet + 2 VLAN + IPv6 with extensions + TCP with options + BTH. */
#define NP_PULL_LEN 256

/* The skb's linear part parsed into p (cleared first). Not inlined: np_tc calls it twice. */
static __noinline __u32 np_parse_skb(struct __sk_buff* skb, struct np_pkt* p) {
  __builtin_memset(p, 0, sizeof(*p));
  void* data = (void*)(long)skb->data;
  void* data_end = (void*)(long)skb->data_end;
  return np_parse(data, data_end, skb->len, p);
}

/* The window around the clock within which compat takes skb->tstamp as a departure time: 1 s back, 10 s ahead
 * (fq's default horizon, the farthest a departure can be scheduled). */
#define NP_EDT_PAST_NS 1000000000ull
#define NP_EDT_FUTURE_NS 10000000000ull

/* Compat (no __sk_buff.tstamp_type before 5.18): skb->tstamp alone does not say its clock. On egress it is
 * TCP's departure time (CLOCK_MONOTONIC, since 4.20), an SO_TXTIME time (the socket's clock, often TAI), or 0
 * (forwarding clears it before 5.18). So the clock is read and the stamp taken only when it lies within
 * [now - 1 s, now + 10 s]: a CLOCK_MONOTONIC departure time always does, a REALTIME or TAI value is decades
 * away (uptime vs the Unix epoch). The times then mean what the modern variant's mean; the cost is the clock
 * read the modern variant saves on egress. */
static __always_inline __u64 np_egress_time_compat(struct __sk_buff* skb) {
  __u64 now = bpf_ktime_get_ns();
  __u64 ts = skb->tstamp;
  if (ts - (now - NP_EDT_PAST_NS) <= NP_EDT_PAST_NS + NP_EDT_FUTURE_NS) return ts;
  return now;
}

/* Locally sent TCP (and SO_TXTIME) packets carry their departure time in CLOCK_MONOTONIC, the clock of
 * bpf_ktime_get_ns: use it rather than reading the clock (~90 ns of cache misses on a busy host, a third of
 * the probe's cost). It is the earliest time the packet may leave (EDT), so with pacing it is nearer the
 * wire time than the moment this hook runs. Ingress always reads the clock: a packet from a sender on
 * this host (behind a veth) still carries the sender's departure time, but the receiver's view exists to
 * tell when data *arrived* (after a shaped link, a queue, a bridge), which only this hook's time says; the
 * analysis ends DP synchronisations on it. Taking the departure time there saved ~200 ns per cold ACK and
 * broke exactly that (live timelines merged iterations).
 * Returns the egress packet's time, or 0 when np_account must read the clock. */
static __always_inline __u64 np_egress_time(struct __sk_buff* skb) {
  if (np_compat) return np_egress_time_compat(skb);
  /* Modern: the field exists (CO-RE; a kernel without it takes the compat path even if forced modern). */
  if (!bpf_core_field_exists(skb->tstamp_type)) return np_egress_time_compat(skb);
  return NP_SKB_TSTAMP_TYPE(skb) == BPF_SKB_TSTAMP_DELIVERY_MONO ? skb->tstamp : 0;
}

static __always_inline int np_tc(struct __sk_buff* skb, __u8 dir) {
  np_count(NP_CNT_PACKETS);
  struct np_pkt p;
  /* At most two parses: the second only when the headers are in the skb but not in its linear part (rare:
   * tunnels, some drivers), after pulling them in, rather than calling a whole packet truncated. The parser
   * is a subprogram called twice, so it is emitted once. (A two-pass loop did that before, but clang lays
   * its counter out in a block that falls through into the loop head, and kernels before ~6.3 reject such a
   * fall-through back-edge: "back-edge from insn 24 to 25" on Debian's 6.1, issue 16.) */
  __u32 r = np_parse_skb(skb, &p);
  if (r == NP_CNT_TRUNCATED && skb->len > (__u32)((long)skb->data_end - (long)skb->data)) {
    __u32 want = skb->len < NP_PULL_LEN ? skb->len : NP_PULL_LEN;
    if (bpf_skb_pull_data(skb, want) == 0) {
      np_count(NP_CNT_PULLED);
      r = np_parse_skb(skb, &p);
    }
  }
  if (r != NP_PARSE_OK) {
    np_count(r);
    return 0; /* TC_ACT_OK */
  }
  p.key.ifindex = skb->ifindex;
  p.key.dir = dir;
  /* A GSO super-packet stands for gso_segs wire packets. */
  __u32 segs = skb->gso_segs;
  if (segs == 0) segs = 1;
  __u64 now = 0;
  if (dir == NP_DIR_EGRESS) now = np_egress_time(skb);
  np_account_pkt(&p, segs, now);
  return 0; /* TC_ACT_OK */
}

/* Both tc hooks run one shared copy of the data path, np_tc_shared, through a tail call. Attached to a TCP
 * stream the probe runs only ~2 000 times a second on ingress (ACKs) against ~15 000 on egress (GSO
 * packets); as two separate programs the ingress copy of the code was always cold (i-cache and iTLB misses:
 * ~900 ns per ACK against ~270 per egress packet). One image is kept warm by both directions, which is
 * what the one-program baseline gets for free. The direction travels in skb->cb[0] (the tc scratch area
 * meant for passing data across tail calls), tagged so a stray value is never taken for one. The tail call
 * has a constant index, which the JIT turns into a direct jump. If the jump table were ever empty, the entry
 * point runs the same code inline, so no packet goes unobserved either way. */
#define NP_CB_TAG 0x4e500000u

SEC("tc")
int np_tc_shared(struct __sk_buff* skb) {
  __u32 cb = skb->cb[0];
  return np_tc(skb, cb == (NP_CB_TAG | NP_DIR_EGRESS) ? NP_DIR_EGRESS : NP_DIR_INGRESS);
}

struct {
  __uint(type, BPF_MAP_TYPE_PROG_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __array(values, int(struct __sk_buff*));
} np_tc_jump SEC(".maps") = {.values = {[0] = (void*)&np_tc_shared}};

SEC("tc")
int np_tc_ingress(struct __sk_buff* skb) {
  skb->cb[0] = NP_CB_TAG | NP_DIR_INGRESS;
  bpf_tail_call_static(skb, &np_tc_jump, 0);
  return np_tc(skb, NP_DIR_INGRESS);
}

SEC("tc")
int np_tc_egress(struct __sk_buff* skb) {
  skb->cb[0] = NP_CB_TAG | NP_DIR_EGRESS;
  bpf_tail_call_static(skb, &np_tc_jump, 0);
  return np_tc(skb, NP_DIR_EGRESS);
}

SEC("xdp")
int np_xdp(struct xdp_md* ctx) {
  np_count(NP_CNT_PACKETS);
  struct np_pkt p = {};
  void* data = (void*)(long)ctx->data;
  void* data_end = (void*)(long)ctx->data_end;
  __u32 r = np_parse(data, data_end, (__u32)(data_end - data), &p);
  if (r != NP_PARSE_OK) {
    np_count(r);
    return XDP_PASS;
  }
  p.key.ifindex = ctx->ingress_ifindex;
  p.key.dir = NP_DIR_INGRESS;
  np_account_pkt(&p, 1, 0);
  return XDP_PASS;
}

/* ---- idle flush, run from user space with BPF_PROG_TEST_RUN ----
 * User space picks candidate keys (idle, or all at shutdown) from a racy read of np_flows; this program
 * decides under each entry's lock, so a packet that arrived meanwhile keeps its flow alive. Order per entry:
 * reserve ring space first (no helper runs under the lock), lock, re-check, copy the burst, mark dead,
 * unlock, submit, delete. The data path never writes into a dead entry (see np_account), so nothing is
 * counted into an entry after its burst left, and the burst leaves exactly once. */
struct np_flush_ctx {
  struct np_flush_req* req;
};

/* A flow in an np_front slot: nothing is deleted, the slot is freed under its lock (a data-path CPU checks
 * `used` and the key under that lock, so a packet lands either in the burst that leaves here or in a new
 * one). */
static __always_inline long np_flush_slot(struct np_flush_req* req, const struct np_flow_key* key, __u32 idx,
                                          bool compat) {
  struct np_front_slot* fs = bpf_map_lookup_elem(&np_front, &idx);
  if (!fs) return 0; /* index out of range: nothing there */
  struct np_flowlet* rec = bpf_ringbuf_reserve(&np_events, sizeof(struct np_flowlet), 0);
  if (!rec) {
    req->deferred++;
    np_count(NP_CNT_FLUSH_DEFERRED);
    return 0;
  }
  bool all = req->flags & NP_FLUSH_ALL;
  if (!np_lock(&fs->lock, NP_LOCK_FLUSH_SPINS, compat)) {
    bpf_ringbuf_discard(rec, 0);
    req->deferred++;
    np_count(NP_CNT_FLUSH_DEFERRED);
    return 0;
  }
  bool emit = false;
  if (fs->used && np_key_eq(&fs->key, key) && (all || (__s64)(fs->b.last_ns - req->cutoff_ns) < 0)) {
    np_flowlet_fill(rec, key, &fs->b, all ? NP_END_SHUTDOWN : NP_END_IDLE_FLUSH);
    fs->used = 0;
    fs->b.packets = 0;
    emit = true;
  }
  np_unlock(&fs->lock);
  if (emit) {
    bpf_ringbuf_submit(rec, 0);
    req->flushed++;
    req->deleted++;
    np_count(NP_CNT_BURSTS_EMITTED);
  } else {
    bpf_ringbuf_discard(rec, 0);
  }
  return 0;
}

static __always_inline long np_flush_key(__u64 i, struct np_flush_ctx* c, bool compat) {
  struct np_flush_req* req = c->req;
  if (i >= NP_FLUSH_BATCH) return 1;
  struct np_flow_key* key = &req->keys[i];
  if (req->slots[i] != NP_FLUSH_IN_FLOWS) return np_flush_slot(req, key, req->slots[i], compat);
  struct np_flow_state* st = bpf_map_lookup_elem(&np_flows, key);
  if (!st) return 0; /* already gone */
  struct np_flowlet* rec = bpf_ringbuf_reserve(&np_events, sizeof(struct np_flowlet), 0);
  if (!rec) {
    req->deferred++;
    np_count(NP_CNT_FLUSH_DEFERRED);
    return 0; /* keep the burst in the map; the next flush retries */
  }
  bool all = req->flags & NP_FLUSH_ALL;
  bool emit = false, del = false;
  if (!np_lock(&st->lock, NP_LOCK_FLUSH_SPINS, compat)) {
    bpf_ringbuf_discard(rec, 0);
    req->deferred++;
    np_count(NP_CNT_FLUSH_DEFERRED);
    return 0;
  }
  if (!st->dead && st->key_tag == np_key_tag(key)) {
    if (st->b.packets == 0) {
      del = true; /* empty entry left by a failed delete: just remove it */
    } else if (all || (__s64)(st->b.last_ns - req->cutoff_ns) < 0) {
      np_flowlet_fill(rec, key, &st->b, all ? NP_END_SHUTDOWN : NP_END_IDLE_FLUSH);
      emit = true;
      del = true;
    }
    if (del) st->dead = 1;
  }
  np_unlock(&st->lock);
  if (emit) {
    bpf_ringbuf_submit(rec, 0);
    req->flushed++;
    np_count(NP_CNT_BURSTS_EMITTED);
  } else {
    bpf_ringbuf_discard(rec, 0);
  }
  if (del) {
    if (bpf_map_delete_elem(&np_flows, key) == 0) {
      req->deleted++;
    } else {
      /* Could not delete (bucket busy): revive the entry empty so the data path keeps using it. */
      if (np_lock(&st->lock, NP_LOCK_SLOW_SPINS, compat)) {
        st->b.packets = 0;
        st->dead = 0;
        np_unlock(&st->lock);
      }
    }
  }
  return 0;
}

/* Modern: bpf_loop's callback. */
static long np_flush_one(__u64 i, struct np_flush_ctx* c) {
  return np_flush_key(i, c, false);
}

/* Compat: one key of the flush request, as a global function (see np_flush). */
__noinline int np_flush_entry(__u32 i) {
  __u32 zero = 0;
  struct np_flush_req* req = bpf_map_lookup_elem(&np_flush_req, &zero);
  if (!req) return 0;
  struct np_flush_ctx c = {.req = req};
  return (int)np_flush_key(i, &c, true);
}

SEC("tc")
int np_flush(struct __sk_buff* skb) {
  __u32 zero = 0;
  struct np_flush_req* req = bpf_map_lookup_elem(&np_flush_req, &zero);
  if (!req) return 0;
  req->flushed = 0;
  req->deleted = 0;
  req->deferred = 0;
  __u32 n = req->n;
  if (n > NP_FLUSH_BATCH) n = NP_FLUSH_BATCH;
  if (np_compat) {
    /* Bounded loop (5.3+) over a global function, verified once on its own: the loop costs the verifier
     * ~5 instructions per key, where inlining the body would cost its whole length 64 times. */
    for (__u32 i = 0; i < NP_FLUSH_BATCH; i++) {
      if (i >= n) break;
      np_flush_entry(i);
    }
    return 0;
  }
  struct np_flush_ctx c = {.req = req};
  bpf_loop(n, np_flush_one, &c, 0);
  return 0;
}

char LICENSE[] SEC("license") = "GPL";
