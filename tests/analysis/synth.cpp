#include "synth.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>

#include "netprism/flowlet.h"

namespace synth {

using netprism::analysis::FlowEvent;
using netprism::analysis::Input;

// Built with snprintf: GCC 12's -Wrestrict misfires on `"n" + std::to_string(...)` at -O2.
std::string node_name(const Spec& s, int i) {
  char b[32];
  std::snprintf(b, sizeof b, "n%d", s.node_base + i);
  return b;
}
std::string node_addr(const Spec& s, int i) {
  char b[32];
  std::snprintf(b, sizeof b, "%d", s.node_base + i + 1);
  return s.subnet + b;
}

namespace {

struct Emitter {
  const Spec& s;
  Input& in;
  std::map<std::pair<int, int>, uint16_t> port;  // (a, b) -> port of a on the a<->b connection
  uint16_t next_port = 40000;

  uint16_t port_of(int a, int b) {
    auto [it, ins] = port.try_emplace({a, b}, next_port);
    if (ins) ++next_port;
    return it->second;
  }
  void emit(int a, int b, uint64_t t0, uint64_t t1, uint64_t bytes, uint16_t flags = 0, uint16_t dport = 0) {
    FlowEvent e;
    e.src = node_addr(s, a);
    e.dst = node_addr(s, b);
    e.src_port = dport ? port_of(a, -1) : port_of(a, b);
    e.dst_port = dport ? dport : port_of(b, a);
    e.proto = NP_PROTO_TCP;
    e.first_ns = t0;
    e.last_ns = t1;
    e.packets = bytes / 1448 + 1;
    e.payload_bytes = bytes;
    e.bytes = bytes + 52 * e.packets;
    e.tcp_flags = flags;
    e.dir = NP_DIR_EGRESS;
    e.observer = node_name(s, a);
    in.events.push_back(e);
    if (s.both_observers) {
      e.dir = NP_DIR_INGRESS;
      e.observer = node_name(s, b);
      e.first_ns += 20'000;
      e.last_ns += 20'000;
      in.events.push_back(e);
    }
  }
  uint64_t xfer_ns(int src, int dst, uint64_t bytes, int iter) const {
    double rate = s.link_mbps * 1e6;
    bool through = src == s.slow_node || (s.slow_both && dst == s.slow_node);
    if (through && iter >= s.slow_from && iter <= s.slow_to) rate /= s.slow_factor;
    // Drawn from the direction (and iteration) alone: the same whatever the call order.
    if (s.link_spread > 0) {
      uint32_t dir =
          s.seed * 1'000'003u + static_cast<uint32_t>(src) * 7'919u + static_cast<uint32_t>(dst) * 104'729u;
      std::mt19937 lasting(dir), now(dir + 1'000u * static_cast<uint32_t>(iter + 1));
      rate *= std::exp(std::normal_distribution<double>(0, s.link_spread)(lasting) +
                       std::normal_distribution<double>(0, s.link_spread / 5)(now));
    }
    return static_cast<uint64_t>(static_cast<double>(bytes) / rate * 1e9) + 30'000;
  }
};

}  // namespace

Truth generate(const Spec& s, Input& in) {
  Truth truth;
  Emitter em{s, in, {}, static_cast<uint16_t>(s.port_base + 1000 * s.node_base)};
  std::mt19937 rng(s.seed);
  std::uniform_real_distribution<double> jit(0, s.jitter_ms * 1e6);
  int N = s.dp * s.pp;
  for (int i = 0; i < N; ++i) {
    truth.nodes.push_back(node_name(s, i));
    in.addr_node[node_addr(s, i)] = node_name(s, i);
  }
  auto node = [&](int stage, int rep) { return stage * s.dp + rep; };
  const int M = s.micro_batches;
  const uint64_t f_ns = static_cast<uint64_t>(s.fwd_ms * 1e6);

  // Control traffic at start: every node talks to the store on node 0, all-pairs connections say hello.
  uint64_t t = s.start_ns;
  if (s.control) {
    for (int v = 1; v < N; ++v) em.emit(v, 0, t + 1000 * v, t + 1000 * v + 5000, 300, 0, 29500);
    for (int a = 0; a < N; ++a)
      for (int b = a + 1; b < N; ++b) em.emit(a, b, t + 200'000, t + 210'000, 200);
  }
  t += 50'000'000;

  std::vector<uint64_t> stage_free(static_cast<size_t>(N), t);  // per node: when it is free to start
  for (int it = 0; it < s.iters; ++it) {
    if (it == s.hang_at) {
      // The hanging node stops at once; its peers do what they can without it: their early DP chunk.
      break;
    }
    if (it == s.pause_at)
      for (auto& f : stage_free) f += static_cast<uint64_t>(s.pause_ms * 1e6);
    std::vector<uint64_t> done(static_cast<size_t>(N), 0);
    for (int r = 0; r < s.dp; ++r) {
      // Per stage, the op order of the schedule: (is_backward, micro-batch).
      std::vector<std::vector<std::pair<bool, int>>> order(static_cast<size_t>(s.pp));
      for (int st = 0; st < s.pp; ++st) {
        auto& o = order[static_cast<size_t>(st)];
        if (s.gpipe) {
          for (int m = 0; m < M; ++m) o.push_back({false, m});
          for (int m = 0; m < M; ++m) o.push_back({true, m});
        } else {
          int warm = std::min(s.pp - st - 1, M);
          for (int m = 0; m < warm; ++m) o.push_back({false, m});
          for (int k = 0; k < M - warm; ++k) {
            o.push_back({false, warm + k});
            o.push_back({true, k});
          }
          for (int k = M - warm; k < M; ++k) o.push_back({true, k});
        }
      }
      // Arrival times of activations (into stage st for mb m) and gradients.
      const uint64_t NA = UINT64_MAX;
      std::vector<std::vector<uint64_t>> act(static_cast<size_t>(s.pp), std::vector<uint64_t>(M, NA));
      std::vector<std::vector<uint64_t>> grad(static_cast<size_t>(s.pp), std::vector<uint64_t>(M, NA));
      for (int m = 0; m < M; ++m) act[0][static_cast<size_t>(m)] = 0;
      for (int m = 0; m < M; ++m) grad[static_cast<size_t>(s.pp - 1)][static_cast<size_t>(m)] = 0;
      std::vector<size_t> pc(static_cast<size_t>(s.pp), 0);
      std::vector<uint64_t> free_at(static_cast<size_t>(s.pp));
      for (int st = 0; st < s.pp; ++st)
        free_at[static_cast<size_t>(st)] = stage_free[static_cast<size_t>(node(st, r))];
      // Run ops in dependency order: repeatedly execute any stage whose next op's input has arrived.
      bool progress = true;
      while (progress) {
        progress = false;
        for (int st = 0; st < s.pp; ++st) {
          auto& o = order[static_cast<size_t>(st)];
          size_t& p = pc[static_cast<size_t>(st)];
          while (p < o.size()) {
            auto [bw, m] = o[p];
            uint64_t ready = bw ? grad[static_cast<size_t>(st)][static_cast<size_t>(m)]
                                : act[static_cast<size_t>(st)][static_cast<size_t>(m)];
            if (ready == NA) break;
            int v = node(st, r);
            double factor = (v == s.straggler_node && it >= s.straggler_from && it <= s.straggler_to)
                                ? s.straggler_factor
                                : 1.0;
            uint64_t dur =
                static_cast<uint64_t>(static_cast<double>(bw ? 2 * f_ns : f_ns) * factor + jit(rng));
            uint64_t start = std::max(free_at[static_cast<size_t>(st)], ready);
            uint64_t end = start + dur;
            free_at[static_cast<size_t>(st)] = end;
            if (!bw && st + 1 < s.pp) {
              uint64_t x = em.xfer_ns(v, node(st + 1, r), s.act_bytes, it);
              em.emit(v, node(st + 1, r), end, end + x, s.act_bytes);
              act[static_cast<size_t>(st + 1)][static_cast<size_t>(m)] = end + x;
            }
            if (!bw && st + 1 == s.pp) grad[static_cast<size_t>(st)][static_cast<size_t>(m)] = end;  // loss
            if (bw && st > 0) {
              uint64_t x = em.xfer_ns(v, node(st - 1, r), s.act_bytes, it);
              em.emit(v, node(st - 1, r), end, end + x, s.act_bytes);
              grad[static_cast<size_t>(st - 1)][static_cast<size_t>(m)] = end + x;
            }
            ++p;
            progress = true;
          }
        }
      }
      for (int st = 0; st < s.pp; ++st)
        done[static_cast<size_t>(node(st, r))] = free_at[static_cast<size_t>(st)];
    }
    // DP synchronisation per stage: each member sends an early chunk when it is done, the rest of the ring
    // runs once the last member joined.
    uint64_t iter_end = 0;
    std::vector<uint64_t> sync_end(static_cast<size_t>(s.pp), 0);
    for (int st = 0; st < s.pp; ++st) {
      uint64_t join_all = 0;
      for (int r = 0; r < s.dp; ++r) join_all = std::max(join_all, done[static_cast<size_t>(node(st, r))]);
      uint64_t end = join_all;
      if (s.dp > 1) {
        uint64_t chunk = s.grad_bytes / static_cast<uint64_t>(s.dp);
        for (int r = 0; r < s.dp; ++r) {
          int v = node(st, r), nb = node(st, (r + 1) % s.dp);
          uint64_t t0 = done[static_cast<size_t>(v)];
          em.emit(v, nb, t0, t0 + em.xfer_ns(v, nb, chunk, it), chunk);
        }
        // 2 (dp - 1) - 1 further steps, every member sending one chunk to its neighbour in each.
        uint64_t tt = join_all + em.xfer_ns(node(st, 0), node(st, 1 % s.dp), chunk, it);
        for (int step = 1; step < 2 * (s.dp - 1); ++step) {
          uint64_t slow = 0;
          for (int r = 0; r < s.dp; ++r) {
            int v = node(st, r), nb = node(st, (r + 1) % s.dp);
            uint64_t x = em.xfer_ns(v, nb, chunk, it);
            em.emit(v, nb, tt, tt + x, chunk);
            slow = std::max(slow, x);
          }
          tt += slow + 100'000;
        }
        end = tt;
      }
      sync_end[static_cast<size_t>(st)] = end;
      for (int r = 0; r < s.dp; ++r)
        stage_free[static_cast<size_t>(node(st, r))] = end + 2'000'000;  // optimizer
      iter_end = std::max(iter_end, end);
    }
    std::vector<uint64_t> se = sync_end;
    std::sort(se.begin(), se.end());
    truth.boundaries.push_back(s.dp > 1 ? se[se.size() / 2] : iter_end);
    t = iter_end;
  }
  uint64_t last = 0;
  for (auto f : stage_free) last = std::max(last, f);
  if (s.teardown && s.hang_at < 0) {
    for (int a = 0; a < N; ++a)
      for (int b = a + 1; b < N; ++b) em.emit(a, b, last + 5'000'000, last + 5'000'000, 0, 0x01);
    for (int v = 1; v < N; ++v) em.emit(v, 0, last + 6'000'000, last + 6'000'000, 0, 0x01, 29500);
  }
  return truth;
}

}  // namespace synth
