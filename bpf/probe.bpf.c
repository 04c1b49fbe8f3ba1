// SPDX-License-Identifier: GPL-2.0
/* netprism flow probe. Map and program names are the agent's interface to it (see include/netprism/probe_abi.h):
 *   maps: np_flows (per-flow burst state), np_events (ring buffer of finished bursts), np_counters (per-CPU loss
 *   and skip counters), np_config (runtime thresholds), np_exclude (addresses/ports never observed)
 *   programs: np_tc_ingress, np_tc_egress (tc clsact), np_xdp (XDP ingress)
 * Foundation version: counts packets only; the flowlet logic lands with the probe issue. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

#include "netprism/flowlet.h"
#include "netprism/probe_abi.h"

#define NP_MAX_FLOWS 65536

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, NP_MAX_FLOWS);
  __type(key, struct np_flow_key);
  __type(value, struct np_flowlet);
} np_flows SEC(".maps");

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

static __always_inline void count(__u32 idx) {
  __u64* v = bpf_map_lookup_elem(&np_counters, &idx);
  if (v) *v += 1;
}

SEC("tc")
int np_tc_ingress(struct __sk_buff* skb) {
  count(NP_CNT_PACKETS);
  return 0; /* TC_ACT_OK: observe only */
}

SEC("tc")
int np_tc_egress(struct __sk_buff* skb) {
  count(NP_CNT_PACKETS);
  return 0;
}

SEC("xdp")
int np_xdp(struct xdp_md* ctx) {
  count(NP_CNT_PACKETS);
  return XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
