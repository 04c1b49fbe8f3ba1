/* Burst ("flowlet") accounting shared by every entry point: exclusion check, per-flow burst state in np_flows
 * under a per-entry lock, gap and max-duration cuts emitted to the np_events ring buffer, and the per-CPU
 * counters that make every skip or loss visible. Included by probe.bpf.c after the map definitions.
 *
 * Default thresholds (NP_DEFAULT_GAP_NS = 4 ms, NP_DEFAULT_MAX_BURST_NS = 100 ms, probe_abi.h), and why:
 * - The gap must be longer than the pauses *inside* one communication phase and shorter than the compute
 *   between phases. Inside a gloo ring all-reduce the pauses are between ring steps (wait for the neighbour's
 *   chunk, reduce it, send on): sub-millisecond on a LAN, stretched to a few ms when a sender is descheduled.
 *   Between phases sit forward/backward compute and pipeline bubbles: >= 10 ms per micro-batch even in the
 *   toy models of our testbed, seconds in real LLM jobs. Measured on the testbed recordings (gloo DP2xPP2
 *   1F1B/GPipe, DP2xPP2xTP2, DP4 samples: 3 838 within-flow gaps above 1 ms; 79 % of all within-flow
 *   gaps are below 1 ms per the testbed's own packet-level count): the 1-10 ms range holds a tail that thins
 * out with length (per-ms density 72 at 1-1.5 ms, 27 at 3-4 ms, 5 at 8-10 ms), then compute starts with a
 * mode at 10-15 ms and the bulk at 30-100 ms. 4 ms merges the dense part of the intra-phase tail and
 * stays 2.5x below the shortest compute gap, so one collective is (nearly always) one burst and two
 * micro-batches' pipeline sends are two bursts. TCP's own pauses inside a send are RTT-scale (microseconds in
 * a data centre).
 * - The max duration bounds how stale a report can be for a flow that never pauses (a multi-second
 *   all-reduce of a large model, a checkpoint upload): 100 ms gives the aggregator a byte-rate sample of
 *   every long transfer at least 10 times per second, enough to place iteration boundaries of >= 0.5 s
 *   steps, at <= 10 records/s per busy flow. Cut records carry NP_END_MAX_DURATION so they can be merged.
 * Tuning on a testbed: attach with a tiny gap (e.g. 50 us) so every pause shows as a burst boundary (or
 * take a header capture: tests/e2e/pcap_to_csv.py --gap-stats on the testbed branch), histogram the gaps
 * between consecutive bursts of each flow on a log scale, and put the gap in the valley between the
 * intra-collective tail and the first compute mode, at most half the latter. Both thresholds live in
 * np_config (Probe::set_thresholds) and can be changed without reloading. */
#ifndef NETPRISM_BPF_BURST_H
#define NETPRISM_BPF_BURST_H

#include "parse.h"

/* Attempts to find or create a live entry for a key before the packet is counted as NP_CNT_FLOW_RACE.
 * A retry is only needed while the idle flush is deleting that very entry, which takes ~100 ns. */
#define NP_FLOW_RETRIES 4

static __always_inline void np_count_n(__u32 idx, __u64 n) {
  __u64* v = bpf_map_lookup_elem(&np_counters, &idx);
  if (v) *v += n; /* per-CPU: no atomics needed */
}

static __always_inline void np_count(__u32 idx) {
  np_count_n(idx, 1);
}

/* The per-entry lock. bpf_spin_lock costs ~50 ns here (two helper calls that save and restore interrupts);
 * a compare-and-swap costs ~10. No helper is called while the lock is held and the data path runs with bottom
 * halves off, so a holder is never interrupted by another holder on its own CPU. A holder can still be
 * delayed by a hard interrupt, or (the flush program runs from a syscall) by preemption or a hypervisor
 * stealing its vCPU. So the first attempt is inline, and a contended data path keeps trying through bpf_loop
 * (the verifier requires a bound; the compat variant uses bounded loops, below) for up to NP_LOCK_SLOW_SPINS
 * attempts, ~1 ms: far beyond any interrupt, the common preemption. Only beyond that is the packet counted as
 * NP_CNT_LOCK_TIMEOUT, never silently lost. The idle flush, for which waiting is pointless, gives up after
 * NP_LOCK_FLUSH_SPINS and retries at its next run. Both operations are fully ordered atomics (BPF_CMPXCHG,
 * BPF_XCHG), so the critical section cannot leak past them on weakly ordered CPUs either. */
#define NP_LOCK_SLOW_SPINS (1u << 16)
#define NP_LOCK_FLUSH_SPINS 64u

struct np_spin_ctx {
  __u64* lock;
  __u32 got;
};

static long np_spin_once(__u64 i, struct np_spin_ctx* c) {
  if (*(volatile __u64*)c->lock == 0 && __sync_val_compare_and_swap(c->lock, 0, 1) == 0) {
    c->got = 1;
    return 1; /* stop */
  }
  return 0;
}

/* Compat (kernels without bpf_loop, before 5.17): the spin as bounded loops (5.3+). The verifier walks a
 * bounded loop once per iteration at every call site, so a plain loop of 65 536 attempts would cost it
 * ~500 000 instructions per site (its limit is 1 M per program). A global function is verified once, on its
 * own, and a call to it costs a few instructions: np_spin_some is a loop of at most 256 attempts (~2 000
 * verified instructions), np_spin_rounds 256 calls to it (65 536 attempts, modern's count), np_spin_slow
 * repeats that until NP_LOCK_SLOW_NS have passed (one clock read per 65 536 attempts). A bare loop makes an
 * attempt faster than a bpf_loop callback does, so the same count alone would be a shorter wait: in the
 * emulated 6.1 VM, whose vCPUs the loaded host deschedules for milliseconds, it timed out 77 times in a race
 * test where modern never did. Pointer arguments to global functions need 5.12+; the verifier requires the
 * NULL checks. */
#define NP_SPIN_ROUND 256u
/* At least modern's wait wherever it runs: its 65 536 callback iterations take ~1 ms on the host, longer in
 * the emulated VM, where a 1 ms floor still timed out 3 times in the shared-slot race; 5 ms did not. Only a
 * stalled lock holder makes anyone wait that long, and then a packet waits instead of going uncounted. */
#define NP_LOCK_SLOW_NS 5000000ull

__noinline int np_spin_some(__u64* lock, __u32 n) {
  if (!lock) return 0;
  for (__u32 i = 0; i < NP_SPIN_ROUND; i++) {
    if (i >= n) return 0;
    if (*(volatile __u64*)lock == 0 && __sync_val_compare_and_swap(lock, 0, 1) == 0) return 1;
  }
  return 0;
}

__noinline int np_spin_rounds(__u64* lock) {
  if (!lock) return 0;
  for (__u32 r = 0; r < NP_SPIN_ROUND; r++)
    if (np_spin_some(lock, NP_SPIN_ROUND)) return 1;
  return 0;
}

__noinline int np_spin_slow(__u64* lock) {
  if (!lock) return 0;
  __u64 deadline = bpf_ktime_get_ns() + NP_LOCK_SLOW_NS;
  for (__u32 k = 0; k < NP_SPIN_ROUND; k++) {
    if (np_spin_rounds(lock)) return 1;
    if ((__s64)(bpf_ktime_get_ns() - deadline) >= 0) return 0;
  }
  return 0;
}

_Static_assert(NP_LOCK_FLUSH_SPINS <= NP_SPIN_ROUND, "one call of np_spin_some covers the flush's budget");
_Static_assert(NP_LOCK_SLOW_SPINS == NP_SPIN_ROUND * NP_SPIN_ROUND, "np_spin_rounds makes modern's count");

/* compat: a constant at every call site (the global functions below pass true, the modern paths false), so
 * the compat variant's global functions, which older kernels verify whether or not they are called, hold no
 * bpf_loop call at all. */
static __always_inline bool np_lock(__u64* l, __u32 spins, bool compat) {
  if (__sync_val_compare_and_swap(l, 0, 1) == 0) return true;
  if (compat) return spins <= NP_SPIN_ROUND ? np_spin_some(l, spins) : np_spin_slow(l);
  struct np_spin_ctx c = {.lock = l, .got = 0};
  bpf_loop(spins, np_spin_once, &c, 0);
  return c.got;
}

static __always_inline void np_unlock(__u64* l) {
  (void)__sync_lock_test_and_set(l, 0);
}

static __always_inline bool np_excluded_one(const __u8 addr[16], __u16 port) {
  struct np_exclude_key k = {};
  __builtin_memcpy(k.addr, addr, 16);
  k.port = port;
  return bpf_map_lookup_elem(&np_exclude, &k) != NULL;
}

/* The agent's own traffic (to/from the aggregator) must never be observed. Lookups happen only when the
 * list has entries of the matching kind, and port entries go through a 64-bit bloom filter first, so the
 * common packet pays one bit test. */
static __always_inline bool np_excluded(const struct np_probe_config* cfg, const struct np_pkt* p) {
  if (!cfg->flags) return false;
  if (cfg->flags & NP_CFG_EXCLUDE_PORTS) {
    if ((cfg->exclude_port_bloom >> (p->key.sport & 63)) & 1)
      if (np_excluded_one(p->key.saddr, p->key.sport)) return true;
    if ((cfg->exclude_port_bloom >> (p->key.dport & 63)) & 1)
      if (np_excluded_one(p->key.daddr, p->key.dport)) return true;
  }
  if (cfg->flags & NP_CFG_EXCLUDE_ADDRS) {
    if (np_excluded_one(p->key.saddr, 0)) return true;
    if (np_excluded_one(p->key.daddr, 0)) return true;
  }
  return false;
}

/* A 64-bit digest of the key, stored in the entry so a CPU holding a pointer to an entry that was deleted and
 * re-used for another flow notices (see np_flow_state). Rotations keep mirrored keys (A->B vs B->A) apart. */
static __always_inline __u64 np_key_tag(const struct np_flow_key* k) {
  const __u64* w = (const __u64*)k;
  __u64 t = w[0];
  t = ((t << 7) | (t >> 57)) ^ w[1];
  t = ((t << 7) | (t >> 57)) ^ w[2];
  t = ((t << 7) | (t >> 57)) ^ w[3];
  t = ((t << 7) | (t >> 57)) ^ w[4];
  t = ((t << 7) | (t >> 57)) ^ w[5];
  return t | 1; /* never 0, so a zeroed entry never matches */
}

/* Starts a new burst in b with this packet. */
static __always_inline void np_burst_start(struct np_burst* b, const struct np_pkt* p, __u64 now, __u32 segs,
                                           __u64 bytes) {
  b->first_ns = now;
  b->last_ns = now;
  b->packets = segs;
  b->bytes = bytes;
  b->payload_bytes = p->payload;
  b->roce_ops[0] = 0;
  b->roce_ops[1] = 0;
  b->roce_ops[2] = 0;
  b->roce_ops[3] = 0;
  if (p->roce_class < NP_ROCE_CLASSES) b->roce_ops[p->roce_class & 3] = segs;
  b->last_psn = p->psn;
  b->tcp_flags = p->tcp_flags;
  b->end_reason = 0;
  b->pad0 = 0;
}

/* True for a packet that acknowledges the other direction's data and carries none of its own: a TCP segment
 * without payload (a pure ACK, or a bare SYN/FIN/RST) or a RoCE acknowledgement (RC ACK or ATOMIC ACK: the
 * responder's NIC answering the requester's packets on the requester's QP, so in the same flow as the
 * responder's own data to that QP). */
static __always_inline bool np_pure_ack(const struct np_pkt* p) {
  if (p->key.proto == NP_PROTO_ROCE) return p->roce_class == NP_ROCE_ACK;
  return p->key.proto == NP_PROTO_TCP && p->payload == 0;
}

/* Whether burst b holds data yet (for TCP and RoCE, whose acknowledgements share the data's flow). */
static __always_inline bool np_burst_has_data(const struct np_burst* b, __u8 proto) {
  if (proto == NP_PROTO_ROCE) return b->packets != b->roce_ops[NP_ROCE_ACK];
  return b->payload_bytes != 0;
}

/* A burst's times are those of its data. A TCP direction that carries data also carries the ACKs of the
 * opposite direction's data, and on a slow or shaped link those keep coming long after this direction's last
 * byte: timed by them, a burst would end when the *other* side's data was acknowledged, which is what made a
 * receiver's view of a synchronisation end tens of ms late. So once a burst has payload, a pure TCP ACK is
 * counted (packets, bytes, flags) but moves neither end; an ACK after an idle gap in the data still closes it
 * (the data is idle, whatever the ACKs do), and a burst of acknowledgements alone is timed by them until data
 * joins, when it restarts its clock at that data (its acknowledgements stay counted in it).
 * RoCE's RC acknowledgements differ in one way: a requester's send completes only when its ACK arrives (a
 * zero-copy send's buffer is the application's), so the ACK, not the data, is when the other side's
 * collective step is done, and it still ends the burst it joins. Measured on soft-RoCE (OpenMPI + UCX, DP2
 * with a 300 ms straggler, 2026-11-29): timed by their data alone, the synchronisation ends sat a
 * median 5.5-13 ms before the ranks returned (duration error median 0.54-1.28 %, three runs); with the
 * ACKs, 2.4-3.2 ms (0.28-0.30 %, two runs). The cost: ACKs that keep coming bridge the probe's idle gap, so a
 * later message can join the burst (the finalize token 54 ms after the last all-reduce, its last iteration 5
 * % long). It never starts one: ACKs of the other side's data before this side's first byte are not this side
 * sending. */
static __always_inline void np_burst_add(struct np_burst* b, const struct np_pkt* p, __u64 now, __u32 segs,
                                         __u64 bytes) {
  const bool has_data = np_burst_has_data(b, p->key.proto);
  if (np_pure_ack(p)) {
    /* Counted below; an acknowledgement-only burst is timed by its acknowledgements, a RoCE one always ends
     * at its last (see above). */
    if ((!has_data || p->key.proto == NP_PROTO_ROCE) && (__s64)(now - b->last_ns) > 0) b->last_ns = now;
  } else if (!has_data && (p->key.proto == NP_PROTO_TCP || p->key.proto == NP_PROTO_ROCE)) {
    b->first_ns = now; /* the first data of an acknowledgement-only burst */
    b->last_ns = now;
  } else if ((__s64)(now - b->last_ns) > 0) {
    /* Packets of one flow can reach the lock out of timestamp order across CPUs: keep last_ns monotonic. */
    b->last_ns = now;
  }
  b->packets += segs;
  b->bytes += bytes;
  b->payload_bytes += p->payload;
  if (p->roce_class < NP_ROCE_CLASSES) b->roce_ops[p->roce_class & 3] += segs;
  b->last_psn = p->psn;
  b->tcp_flags |= p->tcp_flags;
}

/* A flowlet record from a key and a burst (np_flowlet is the key followed by np_burst's layout). */
static __always_inline void np_flowlet_fill(struct np_flowlet* out, const struct np_flow_key* k,
                                            const struct np_burst* b, __u8 reason) {
  out->key = *k;
  __builtin_memcpy(&out->first_ns, b, sizeof(*b));
  out->end_reason = reason;
}

/* A RoCE data packet after an idle gap in the burst's data, however many ACKs kept the flow busy meanwhile
 * (their times end a burst, see np_burst_add): a new message. Without it, rxe's trailing ACKs bridged the 54
 * ms from a job's last all-reduce to its finalize token, and the last iteration read 5 % long. The data's
 * last time is kept in *data_ku (1.024 us units after first_ns: a shift, not a division, and 73 minutes of
 * range, beyond any burst's max duration). */
static __always_inline bool np_roce_data_idle(const struct np_burst* b, const struct np_pkt* p, __u32 data_ku,
                                              __u64 now, __u64 gap) {
  if (p->key.proto != NP_PROTO_ROCE || np_pure_ack(p) || !np_burst_has_data(b, NP_PROTO_ROCE)) return false;
  return (__s64)(now - (b->first_ns + ((__u64)data_ku << 10))) > (__s64)gap;
}

/* Adds the packet to the burst in progress b (its lock held): closes b first, copying it to *done, when the
 * packet comes after an idle gap or b has run for max_burst. Returns the end reason of the closed burst, or
 * 0 when the packet simply joined b. *data_ku: see np_roce_data_idle. */
static __always_inline __u8 np_burst_step(struct np_burst* b, __u32* data_ku, struct np_burst* done,
                                          const struct np_pkt* p, __u64 now, __u32 segs, __u64 bytes,
                                          __u64 gap, __u64 max_burst) {
  if (b->packets == 0) {
    np_burst_start(b, p, now, segs, bytes);
    *data_ku = 0;
    return 0;
  }
  __u8 cut = 0;
  if ((__s64)(now - b->last_ns) > (__s64)gap || np_roce_data_idle(b, p, *data_ku, now, gap))
    cut = NP_END_GAP;
  else if ((__s64)(now - b->first_ns) >= (__s64)max_burst)
    cut = NP_END_MAX_DURATION;
  if (cut) {
    *done = *b;
    np_burst_start(b, p, now, segs, bytes);
    *data_ku = 0;
  } else {
    np_burst_add(b, p, now, segs, bytes);
    if (p->key.proto == NP_PROTO_ROCE && !np_pure_ack(p)) *data_ku = (__u32)((now - b->first_ns) >> 10);
  }
  return cut;
}

/* Sends a burst closed by the data path (after the lock is released: no helper runs under a lock). */
static __always_inline void np_emit(const struct np_flow_key* k, const struct np_burst* done, __u8 cut) {
  struct np_flowlet* rec = bpf_ringbuf_reserve(&np_events, sizeof(struct np_flowlet), 0);
  if (!rec) {
    np_count(NP_CNT_RINGBUF_FULL);
    np_count_n(NP_CNT_RINGBUF_LOST_PACKETS, done->packets);
    return;
  }
  np_flowlet_fill(rec, k, done, cut);
  bpf_ringbuf_submit(rec, 0);
  np_count(NP_CNT_BURSTS_EMITTED);
}

static __always_inline bool np_key_eq(const struct np_flow_key* a, const struct np_flow_key* b) {
  const __u64* x = (const __u64*)a;
  const __u64* y = (const __u64*)b;
  return ((x[0] ^ y[0]) | (x[1] ^ y[1]) | (x[2] ^ y[2]) | (x[3] ^ y[3]) | (x[4] ^ y[4]) | (x[5] ^ y[5])) == 0;
}

/* The np_front slot of a key: the top bits of a multiplicative hash of its tag (np_front_mask + 1 is a power
 * of two, set by user space before load together with the map size). */
static __always_inline __u32 np_front_index(__u64 tag) {
  return (__u32)((tag * 0x9E3779B97F4A7C15ull) >> 32) & np_front_mask;
}

/* Accounts one parsed packet. segs: wire packets it stands for (GSO segments; 1 for XDP). now: the packet's
 * CLOCK_MONOTONIC time if the caller has it for free, else 0 (read here).
 *
 * Where a flow lives: in its np_front slot when it found the slot free, else in np_flows; never in both.
 * That invariant holds because a flow's state is only ever *created* under its front slot's lock, after
 * checking the other place: a free slot is claimed only if np_flows has no entry for the key, and an
 * np_flows entry is only inserted while the slot holds another flow. Removal (the idle flush) frees a slot
 * under its lock, or marks an np_flows entry dead under the entry's lock before deleting it, as before. A
 * packet that finds its flow in neither place (removed meanwhile) starts over, at most NP_FLOW_RETRIES
 * times, then counts NP_CNT_FLOW_RACE. The claim and the insert call one map helper under the slot lock: it
 * happens once per flow, not per packet, and nothing on the data path waits for a slot lock while it holds
 * another lock, so no lock order can deadlock. */
static __always_inline void np_account(struct np_pkt* p, __u32 segs, __u64 now, bool compat) {
  __u32 zero = 0;
  struct np_probe_config* cfg = bpf_map_lookup_elem(&np_config, &zero);
  if (!cfg) return; /* array map: cannot happen */
  if (np_excluded(cfg, p)) {
    np_count(NP_CNT_EXCLUDED);
    return;
  }
  __u64 gap = cfg->gap_ns ? cfg->gap_ns : NP_DEFAULT_GAP_NS;
  __u64 max_burst = cfg->max_burst_ns ? cfg->max_burst_ns : NP_DEFAULT_MAX_BURST_NS;
  if (!now) now = bpf_ktime_get_ns();
  /* IP bytes on the wire: a GSO packet becomes segs packets, each with its own IP and L4 header. */
  __u64 bytes = (__u64)p->ip_len + (__u64)(segs - 1) * p->hdr_len;
  __u64 tag = np_key_tag(&p->key);
  __u32 idx = np_front_index(tag);
  struct np_front_slot* fs = bpf_map_lookup_elem(&np_front, &idx);
  if (!fs) {
    np_count(NP_CNT_MAP_BUSY); /* index is masked to the map size: cannot happen, but never silent */
    return;
  }
  struct np_burst done;
  __u8 cut;

  for (int i = 0; i < NP_FLOW_RETRIES; i++) {
    /* 1. The front slot: the flow's own (the common case), free (claim it), or another flow's. */
    if (!np_lock(&fs->lock, NP_LOCK_SLOW_SPINS, compat)) {
      np_count(NP_CNT_LOCK_TIMEOUT);
      return;
    }
    struct np_flow_state* st = NULL;
    if (fs->used) {
      if (np_key_eq(&fs->key, &p->key)) {
        cut = np_burst_step(&fs->b, &fs->data_ku, &done, p, now, segs, bytes, gap, max_burst);
        np_unlock(&fs->lock);
        if (cut) np_emit(&p->key, &done, cut);
        return;
      }
    } else {
      /* Free: take it, unless the flow already lives in np_flows (it began while the slot was taken). */
      st = bpf_map_lookup_elem(&np_flows, &p->key);
      if (!st) {
        fs->key = p->key;
        np_burst_start(&fs->b, p, now, segs, bytes);
        fs->data_ku = 0;
        fs->used = 1;
        np_unlock(&fs->lock);
        return;
      }
    }
    np_unlock(&fs->lock);

    /* 2. np_flows. */
    if (!st) st = bpf_map_lookup_elem(&np_flows, &p->key);
    if (!st) {
      /* New flow whose slot is taken: insert under the slot lock, re-checked (see above). */
      if (!np_lock(&fs->lock, NP_LOCK_SLOW_SPINS, compat)) {
        np_count(NP_CNT_LOCK_TIMEOUT);
        return;
      }
      if (!fs->used || np_key_eq(&fs->key, &p->key)) {
        np_unlock(&fs->lock); /* the slot was freed or claimed for this flow meanwhile: start over */
        continue;
      }
      struct np_flow_state init = {};
      init.key_tag = tag;
      np_burst_start(&init.b, p, now, segs, bytes);
      long err = bpf_map_update_elem(&np_flows, &p->key, &init, BPF_NOEXIST);
      np_unlock(&fs->lock);
      if (err == 0) return;
      if (err == -17 /* EEXIST: another CPU inserted it between our lookup and the lock */) continue;
      np_count(err == -7 /* E2BIG */ ? NP_CNT_MAP_FULL : NP_CNT_MAP_BUSY);
      return;
    }
    if (!np_lock(&st->lock, NP_LOCK_SLOW_SPINS, compat)) {
      np_count(NP_CNT_LOCK_TIMEOUT);
      return;
    }
    if (st->dead || st->key_tag != tag) {
      /* Being deleted by the idle flush (or already re-used for another flow): never write into it. */
      np_unlock(&st->lock);
      continue;
    }
    cut = np_burst_step(&st->b, &st->data_ku, &done, p, now, segs, bytes, gap, max_burst);
    np_unlock(&st->lock);
    if (cut) np_emit(&p->key, &done, cut);
    return;
  }
  np_count(NP_CNT_FLOW_RACE);
}

/* Accounts a parsed packet through the variant's path. */
static __always_inline void np_account_pkt(struct np_pkt* p, __u32 segs, __u64 now) {
  /* Inlined in both variants. (A global np_account for compat, verified once, cut its verification on 6.1 by
   * 40 %, but Debian's 6.1 verifier adds up the stack of every call chain, dead calls included (6.18's does
   * not), and modern's frame with the inlined copy plus the global function's came to 608 of the 512 bytes
   * allowed: modern no longer loaded there.) */
  np_account(p, segs, now, np_compat);
}

#endif /* NETPRISM_BPF_BURST_H */
