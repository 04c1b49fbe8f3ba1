/* Burst ("flowlet") accounting shared by every entry point: exclusion check, per-flow burst state in np_flows
 * under a spin lock, gap and max-duration cuts emitted to the np_events ring buffer, and the per-CPU counters
 * that make every skip or loss visible. Included by probe.bpf.c after the map definitions.
 *
 * Default thresholds (NP_DEFAULT_GAP_NS = 4 ms, NP_DEFAULT_MAX_BURST_NS = 100 ms, probe_abi.h), and why:
 * - The gap must be longer than the pauses *inside* one communication phase and shorter than the compute
 *   between phases. Inside a gloo ring all-reduce the pauses are between ring steps (wait for the neighbour's
 *   chunk, reduce it, send on): sub-millisecond on a LAN, and up to ~1-2 ms when the host is CPU-starved
 *   (2 shared cores here). Between phases sit forward/backward compute and pipeline bubbles: tens of ms per
 *   micro-batch in the smallest jobs we care about, seconds in real LLM jobs. 4 ms sits above the first with
 *   a 2x margin and at least 2.5x below the second, so one collective is one burst and two micro-batches'
 *   pipeline sends are two bursts. TCP's own pauses inside a send (delayed ACK 40 ms excepted, which only
 *   stalls one-packet exchanges, not bulk data) are RTT-scale, microseconds in a data centre.
 * - The max duration bounds how stale a report can be for a flow that never pauses (a multi-second
 *   all-reduce of a large model, a checkpoint upload): 100 ms gives the aggregator a byte-rate sample of
 *   every long transfer at least 10 times per second, enough to place iteration boundaries of >= 0.5 s
 *   steps, at <= 10 records/s per busy flow. Cut records carry NP_END_MAX_DURATION so they can be merged.
 * Tuning on a testbed: attach with a tiny gap (e.g. 50 us) so every pause shows as a burst boundary,
 * histogram the inter-burst gaps per flow (bursts' first_ns minus the previous burst's last_ns): the
 * distribution is bimodal (intra-collective vs compute); put the gap in the valley, nearer the low mode's
 * tail (p99.9) times two. Both thresholds live in np_config and can be changed without reloading. */
#ifndef NETPRISM_BPF_BURST_H
#define NETPRISM_BPF_BURST_H

#include "parse.h"

/* Attempts to find or create a live entry for a key before the packet is counted as NP_CNT_FLOW_RACE.
 * A retry is only needed while the idle flush is deleting that very entry, which takes ~100 ns. */
#define NP_FLOW_RETRIES 4

static __always_inline void np_count(__u32 idx) {
  __u64* v = bpf_map_lookup_elem(&np_counters, &idx);
  if (v) *v += 1; /* per-CPU: no atomics needed */
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

static __always_inline bool np_key_eq(const struct np_flow_key* a, const struct np_flow_key* b) {
  const __u64* x = (const __u64*)a;
  const __u64* y = (const __u64*)b;
  return x[0] == y[0] && x[1] == y[1] && x[2] == y[2] && x[3] == y[3] && x[4] == y[4] && x[5] == y[5];
}

/* Starts a new burst in fl with this packet (the key is already there). */
static __always_inline void np_burst_start(struct np_flowlet* fl, const struct np_pkt* p, __u64 now, __u32 segs,
                                           __u64 bytes) {
  fl->first_ns = now;
  fl->last_ns = now;
  fl->packets = segs;
  fl->bytes = bytes;
  fl->payload_bytes = p->payload;
  fl->roce_ops[0] = 0;
  fl->roce_ops[1] = 0;
  fl->roce_ops[2] = 0;
  fl->roce_ops[3] = 0;
  if (p->roce_class < NP_ROCE_CLASSES) fl->roce_ops[p->roce_class & 3] = segs;
  fl->last_psn = p->psn;
  fl->tcp_flags = p->tcp_flags;
  fl->end_reason = 0;
  fl->pad0 = 0;
}

static __always_inline void np_burst_add(struct np_flowlet* fl, const struct np_pkt* p, __u64 now, __u32 segs,
                                         __u64 bytes) {
  /* Packets of one flow can reach the lock out of timestamp order across CPUs: keep last_ns monotonic. */
  if ((__s64)(now - fl->last_ns) > 0) fl->last_ns = now;
  fl->packets += segs;
  fl->bytes += bytes;
  fl->payload_bytes += p->payload;
  if (p->roce_class < NP_ROCE_CLASSES) fl->roce_ops[p->roce_class & 3] += segs;
  fl->last_psn = p->psn;
  fl->tcp_flags |= p->tcp_flags;
}

static __always_inline void np_emit(const struct np_flowlet* fl) {
  if (bpf_ringbuf_output(&np_events, (void*)fl, sizeof(*fl), 0))
    np_count(NP_CNT_RINGBUF_FULL);
  else
    np_count(NP_CNT_BURSTS_EMITTED);
}

/* Accounts one parsed packet. segs: wire packets it stands for (GSO segments; 1 for XDP). */
static __always_inline void np_account(struct np_pkt* p, __u32 segs) {
  __u32 zero = 0;
  struct np_probe_config* cfg = bpf_map_lookup_elem(&np_config, &zero);
  if (!cfg) return; /* array map: cannot happen */
  if (np_excluded(cfg, p)) {
    np_count(NP_CNT_EXCLUDED);
    return;
  }
  __u64 gap = cfg->gap_ns ? cfg->gap_ns : NP_DEFAULT_GAP_NS;
  __u64 max_burst = cfg->max_burst_ns ? cfg->max_burst_ns : NP_DEFAULT_MAX_BURST_NS;
  __u64 now = bpf_ktime_get_ns();
  /* IP bytes on the wire: a GSO packet becomes segs packets, each with its own IP and L4 header. */
  __u64 bytes = (__u64)p->ip_len + (__u64)(segs - 1) * p->hdr_len;

  /* One buffer serves as the new entry (insert path) or as the finished burst (cut path). */
  struct np_flow_state buf;

  for (int i = 0; i < NP_FLOW_RETRIES; i++) {
    struct np_flow_state* st = bpf_map_lookup_elem(&np_flows, &p->key);
    if (!st) {
      __builtin_memset(&buf, 0, sizeof(buf));
      buf.fl.key = p->key;
      np_burst_start(&buf.fl, p, now, segs, bytes);
      long err = bpf_map_update_elem(&np_flows, &p->key, &buf, BPF_NOEXIST);
      if (err == 0) return;
      if (err == -17 /* EEXIST: another CPU created it first */) continue;
      np_count(err == -7 /* E2BIG */ ? NP_CNT_MAP_FULL : NP_CNT_MAP_BUSY);
      return;
    }
    __u8 cut = 0;
    bpf_spin_lock(&st->lock);
    if (st->dead || !np_key_eq(&st->fl.key, &p->key)) {
      /* Being deleted by the idle flush (or already re-used for another flow): never write into it. */
      bpf_spin_unlock(&st->lock);
      continue;
    }
    if (st->fl.packets == 0) {
      np_burst_start(&st->fl, p, now, segs, bytes);
    } else {
      __s64 idle = (__s64)(now - st->fl.last_ns);
      if (idle > (__s64)gap)
        cut = NP_END_GAP;
      else if ((__s64)(now - st->fl.first_ns) >= (__s64)max_burst)
        cut = NP_END_MAX_DURATION;
      if (cut) {
        buf.fl = st->fl;
        buf.fl.end_reason = cut;
        np_burst_start(&st->fl, p, now, segs, bytes);
      } else {
        np_burst_add(&st->fl, p, now, segs, bytes);
      }
    }
    bpf_spin_unlock(&st->lock);
    /* Helpers may not run under the lock: the finished burst leaves from the stack copy. */
    if (cut) np_emit(&buf.fl);
    return;
  }
  np_count(NP_CNT_FLOW_RACE);
}

#endif /* NETPRISM_BPF_BURST_H */
