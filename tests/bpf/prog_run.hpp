// BPF_PROG_TEST_RUN helpers for the probe's entry points, and small readers of its maps, shared by the
// fixture tests and the benchmarks.
#pragma once

#include <bpf/bpf.h>
#include <linux/bpf.h>

#include <cstdint>
#include <string>
#include <vector>

#include "netprism/flowlet.h"
#include "netprism/probe_abi.h"

namespace netprism::test {

enum class Entry { kTcIngress, kTcEgress, kXdp };

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
inline RunResult run_prog(int prog_fd, bool tc, const std::vector<uint8_t>& pkt, uint32_t repeat = 1,
                          uint32_t gso_segs = 0) {
  __sk_buff ctx{};
  LIBBPF_OPTS(bpf_test_run_opts, o, .data_in = pkt.data(), .data_size_in = static_cast<uint32_t>(pkt.size()),
              .repeat = static_cast<int>(repeat));
  if (tc && gso_segs) {
    ctx.gso_segs = gso_segs;
    ctx.gso_size = 1000;
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

}  // namespace netprism::test
