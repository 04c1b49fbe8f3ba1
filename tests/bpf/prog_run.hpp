// BPF_PROG_TEST_RUN helpers for the probe's entry points, and small readers of its maps, shared by the
// fixture tests and the benchmarks.
#pragma once

#include <bpf/bpf.h>
#include <linux/bpf.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "netprism/flowlet.h"
#include "netprism/probe_abi.h"
#include "probe.hpp"

namespace netprism::test {

enum class Entry { kTcIngress, kTcEgress, kXdp };

// Every program variant the loader can choose (bpf/README.md "Kernel variants"): the kernel tests run each.
inline constexpr agent::ProbeVariant kVariants[] = {agent::ProbeVariant::kModern,
                                                    agent::ProbeVariant::kCompat};

inline const char* entry_prog(Entry e) {
  switch (e) {
    case Entry::kTcIngress:
      return "np_tc_ingress";
    case Entry::kTcEgress:
      return "np_tc_egress";
    case Entry::kXdp:
      return "np_xdp";
  }
  return "";
}
inline uint8_t entry_dir(Entry e) {
  return e == Entry::kTcEgress ? NP_DIR_EGRESS : NP_DIR_INGRESS;
}
inline bool entry_is_tc(Entry e) {
  return e != Entry::kXdp;
}

struct RunResult {
  int err = 0;          // 0 or -errno of the syscall
  uint32_t retval = 0;  // the program's verdict
  uint32_t duration_ns = 0;
};

// gso_segs: tc only, sets __sk_buff.gso_segs through ctx_in (0: leave the packet a plain one).
// tstamp: tc only, __sk_buff.tstamp. The harness accepts no tstamp_type, so this is an unspecified-clock
// time (like a receive time in CLOCK_REALTIME), which the probe must not use.
inline RunResult run_prog(int prog_fd, bool tc, const std::vector<uint8_t>& pkt, uint32_t repeat = 1,
                          uint32_t gso_segs = 0, uint64_t tstamp = 0) {
  __sk_buff ctx{};
  LIBBPF_OPTS(bpf_test_run_opts, o, .data_in = pkt.data(), .data_size_in = static_cast<uint32_t>(pkt.size()),
              .repeat = static_cast<int>(repeat));
  if (tc && gso_segs) {
    ctx.gso_segs = gso_segs;
    ctx.gso_size = 1000;
  }
  if (tc && tstamp) ctx.tstamp = tstamp;
  if (tc && (gso_segs || tstamp)) {
    o.ctx_in = &ctx;
    o.ctx_size_in = sizeof ctx;
  }
  RunResult r;
  r.err = bpf_prog_test_run_opts(prog_fd, &o);
  r.retval = o.retval;
  r.duration_ns = o.duration;
  return r;
}

inline std::vector<std::pair<np_flow_key, np_flow_state>> dump_flows(int flows_fd) {
  std::vector<std::pair<np_flow_key, np_flow_state>> out;
  np_flow_key cur{}, next{};
  for (int r = bpf_map_get_next_key(flows_fd, nullptr, &next); r == 0;
       r = bpf_map_get_next_key(flows_fd, &cur, &next)) {
    np_flow_state st{};
    if (bpf_map_lookup_elem(flows_fd, &next, &st) == 0) out.emplace_back(next, st);
    cur = next;
  }
  return out;
}

inline void clear_flows(int flows_fd) {
  for (auto& [k, v] : dump_flows(flows_fd)) bpf_map_delete_elem(flows_fd, &k);
}

// bpf/burst.h np_key_tag, for flows read from np_front (which keeps the whole key instead of a tag).
inline uint64_t key_tag(const np_flow_key& k) {
  uint64_t w[6];
  static_assert(sizeof w == sizeof k);
  std::memcpy(w, &k, sizeof w);
  uint64_t t = w[0];
  for (int i = 1; i < 6; ++i) t = ((t << 7) | (t >> 57)) ^ w[i];
  return t | 1;
}

// Every flow the probe holds, wherever it lives (np_front slot or np_flows entry), as np_flows entries.
inline std::vector<std::pair<np_flow_key, np_flow_state>> dump_flows(const agent::Probe& probe) {
  auto out = dump_flows(probe.map_fd("np_flows"));
  for (const auto& [idx, slot] : agent::read_front_slots(probe.map_fd("np_front"))) {
    np_flow_state st{};
    st.lock = slot.lock;
    st.key_tag = key_tag(slot.key);
    st.b = slot.b;
    out.emplace_back(slot.key, st);
  }
  return out;
}

inline void clear_flows(const agent::Probe& probe) {
  clear_flows(probe.map_fd("np_flows"));
  int front = probe.map_fd("np_front");
  np_front_slot empty{};
  for (const auto& [idx, slot] : agent::read_front_slots(front))
    bpf_map_update_elem(front, &idx, &empty, BPF_ANY);
}

}  // namespace netprism::test
