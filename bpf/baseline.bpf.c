// SPDX-License-Identifier: GPL-2.0
/* The benchmark baseline of contracts.md: the cheapest observing program, one per-CPU array update of the
 * packet length, returning pass. Probe costs are reported as ratios against this, measured in the same run.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, __u64);
} np_baseline_bytes SEC(".maps");

static __always_inline void account(__u32 len) {
  __u32 k = 0;
  __u64* v = bpf_map_lookup_elem(&np_baseline_bytes, &k);
  if (v) *v += len;
}

SEC("tc")
int np_baseline_tc(struct __sk_buff* skb) {
  account(skb->len);
  return 0; /* TC_ACT_OK */
}

SEC("xdp")
int np_baseline_xdp(struct xdp_md* ctx) {
  account(ctx->data_end - ctx->data);
  return XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
