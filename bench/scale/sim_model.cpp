#include "sim_model.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include <fmt/format.h>

namespace netprism::sim {
namespace {

constexpr double kNsPerMs = 1e6;

struct Op {
  bool forward;
  int mb;
};

// Megatron/DeepSpeed per-stage op order: GPipe runs every forward then every backward; 1F1B runs
// (pp - s - 1) warm-up forwards, then alternates one forward and one backward, then drains the backwards.
std::vector<Op> stage_ops(const JobSpec& j, int s) {
  std::vector<Op> ops;
  if (!j.one_f_one_b) {
    for (int i = 0; i < j.micro_batches; ++i) ops.push_back({true, i});
    for (int i = 0; i < j.micro_batches; ++i) ops.push_back({false, i});
    return ops;
  }
  int warm = std::min(j.pp - s - 1, j.micro_batches);
  for (int i = 0; i < warm; ++i) ops.push_back({true, i});
  for (int i = 0; i < j.micro_batches - warm; ++i) {
    ops.push_back({true, warm + i});
    ops.push_back({false, i});
  }
  for (int i = j.micro_batches - warm; i < j.micro_batches; ++i) ops.push_back({false, i});
  return ops;
}

class JobSim {
 public:
  JobSim(const ClusterSpec& c, const JobSpec& j, int job_index, int base, std::mt19937_64& rng)
      : c_(c), j_(j), job_(job_index), rng_(rng) {
    // Node placement is shuffled so nothing downstream can read the layout off address order.
    std::vector<int> nodes(j.dp * j.pp);
    std::iota(nodes.begin(), nodes.end(), base);
    std::shuffle(nodes.begin(), nodes.end(), rng_);
    at_.assign(j.dp, std::vector<int>(j.pp));
    for (int d = 0; d < j.dp; ++d)
      for (int s = 0; s < j.pp; ++s) at_[d][s] = nodes[d * j.pp + s];
    local_base_ = base;
  }

  void run(std::vector<Transfer>& out, nlohmann::json& truth) {
    uint64_t t = c_.t0_ns + static_cast<uint64_t>(j_.start_offset_ms * kNsPerMs);
    auto iters = nlohmann::json::array();
    uint64_t hang_ns = 0;
    for (int it = 0; it < j_.iterations; ++it) {
      const FaultSpec* hang = fault("hang", it);
      uint64_t end = iteration(it, t, out, hang, hang_ns);
      if (hang) break;
      iters.push_back({{"index", it}, {"start_ns", t}, {"end_ns", end}, {"duration_ns", end - t}});
      // The next iteration starts right after the optimizer step; the truth's boundary is the end of the DP
      // synchronisation, so consecutive truth iterations are adjacent.
      t = end;
    }
    auto faults = nlohmann::json::array();
    for (const auto& f : j_.faults) {
      nlohmann::json e = {{"kind", f.kind},
                          {"node", node_name(local_base_ + f.node)},
                          {"from_iteration", f.from_iteration},
                          {"factor", f.factor}};
      if (f.peer >= 0) e["peer"] = node_name(local_base_ + f.peer);
      if (f.kind == "hang") e["start_ns"] = hang_ns;
      faults.push_back(e);
    }
    auto stages = nlohmann::json::array(), groups = nlohmann::json::array(), all = nlohmann::json::array();
    for (int s = 0; s < j_.pp; ++s) {
      auto st = nlohmann::json::array();
      for (int d = 0; d < j_.dp; ++d) st.push_back(node_name(at_[d][s]));
      stages.push_back(st);
      if (j_.dp > 1) groups.push_back(st);
    }
    std::vector<std::string> names;
    for (int n = 0; n < j_.dp * j_.pp; ++n) names.push_back(node_name(local_base_ + n));
    truth["jobs"].push_back({{"id", fmt::format("job-{}", job_)},
                             {"nodes", names},
                             {"dp", j_.dp},
                             {"pp", j_.pp},
                             {"tp", j_.tp},
                             {"ep", j_.ep},
                             {"schedule", j_.one_f_one_b ? "1f1b" : "gpipe"},
                             {"micro_batches", j_.micro_batches},
                             {"dp_groups", groups},
                             {"stages", stages},
                             {"iterations", iters},
                             {"faults", faults}});
  }

 private:
  const FaultSpec* fault(const char* kind, int it, int node = -1) const {
    for (const auto& f : j_.faults)
      if (f.kind == kind && it >= f.from_iteration && (node < 0 || local_base_ + f.node == node)) return &f;
    return nullptr;
  }

  double compute_ms(double base, int node, int it) {
    std::normal_distribution<double> n(1.0, j_.jitter);
    double v = base * std::max(0.5, n(rng_));
    if (const auto* f = fault("straggler", it, node)) v *= f->factor;
    return v;
  }

  uint64_t transfer_ns(int src, int dst, double bytes, int it) const {
    double factor = 1;
    for (const auto& f : j_.faults) {
      if (f.kind != "slow_link" || it < f.from_iteration) continue;
      int a = local_base_ + f.node, b = f.peer >= 0 ? local_base_ + f.peer : -1;
      if ((src == a || dst == a) && (b < 0 || src == b || dst == b)) factor = std::max(factor, f.factor);
    }
    return static_cast<uint64_t>(bytes * 8 / (c_.link_gbps * 1e9) * 1e9 * factor) + 5'000;  // + 5 us latency
  }

  uint64_t send(std::vector<Transfer>& out, int src, int dst, uint64_t at, double bytes, int it) {
    uint64_t dur = transfer_ns(src, dst, bytes, it);
    if (!(hang_cut_ && at >= hang_cut_)) {
      out.push_back({src, dst, static_cast<uint32_t>(0x100 + ((src * 7919u + dst) & 0xfffff)), at, at + dur,
                     static_cast<uint64_t>(bytes)});
    }
    return at + dur;
  }

  // Simulates one iteration from `start`; returns the end of its last DP synchronisation.
  uint64_t iteration(int it, uint64_t start, std::vector<Transfer>& out, const FaultSpec* hang,
                     uint64_t& hang_ns) {
    const int P = j_.pp, D = j_.dp, M = j_.micro_batches;
    const double act = j_.activation_mb * 1e6;
    if (hang) {
      // The hung node stops a little into the iteration; every transfer after that never happens, and the
      // rest of the job blocks on it (the network goes quiet while connections stay open).
      hang_cut_ = start + static_cast<uint64_t>(j_.fwd_ms * kNsPerMs * 1.5);
      hang_ns = hang_cut_;
    }
    std::vector<uint64_t> stage_done(P);
    std::vector<std::vector<uint64_t>> ready(D, std::vector<uint64_t>(P));
    for (int d = 0; d < D; ++d) {
      const uint64_t unset = std::numeric_limits<uint64_t>::max();
      std::vector<std::vector<uint64_t>> f_end(P, std::vector<uint64_t>(M, unset)), b_end = f_end;
      std::vector<std::vector<uint64_t>> act_arrive = f_end, grad_arrive = f_end;
      std::vector<std::vector<Op>> ops(P);
      std::vector<size_t> next(P, 0);
      std::vector<uint64_t> free_at(P, start);
      for (int s = 0; s < P; ++s) ops[s] = stage_ops(j_, s);
      for (bool progress = true; progress;) {
        progress = false;
        for (int s = 0; s < P; ++s) {
          while (next[s] < ops[s].size()) {
            const Op op = ops[s][next[s]];
            uint64_t dep = op.forward ? (s == 0 ? start : act_arrive[s][op.mb])
                                      : (s == P - 1 ? f_end[s][op.mb] : grad_arrive[s][op.mb]);
            if (dep == unset) break;
            int node = at_[d][s];
            uint64_t begin = std::max(dep, free_at[s]);
            uint64_t end =
                begin + static_cast<uint64_t>(compute_ms(op.forward ? j_.fwd_ms : 2 * j_.fwd_ms, node, it) *
                                              kNsPerMs);
            free_at[s] = end;
            if (op.forward) {
              f_end[s][op.mb] = end;
              if (s + 1 < P) act_arrive[s + 1][op.mb] = send(out, node, at_[d][s + 1], end, act, it);
              expert_all_to_all(out, d, s, end, act, it);
            } else {
              b_end[s][op.mb] = end;
              if (s > 0) grad_arrive[s - 1][op.mb] = send(out, node, at_[d][s - 1], end, act, it);
            }
            ++next[s];
            progress = true;
          }
        }
      }
      for (int s = 0; s < P; ++s) ready[d][s] = free_at[s];
    }
    uint64_t end = start;
    for (int s = 0; s < P; ++s) {
      uint64_t last = 0;
      for (int d = 0; d < D; ++d) last = std::max(last, ready[d][s]);
      uint64_t sync_end = last;
      if (D > 1) {
        // Ring all-reduce: each member sends its first chunk as soon as it joins; the ring can only complete
        // once the last member has joined, so the bulk (2(D-1)/D of the gradient, minus that chunk) follows.
        const double grad = j_.grad_mb * 1e6, chunk = grad / D, bulk = 2.0 * (D - 1) / D * grad - chunk;
        for (int d = 0; d < D; ++d) {
          int src = at_[d][s], dst = at_[(d + 1) % D][s];
          send(out, src, dst, ready[d][s], chunk, it);
          uint64_t bulk_start = last + transfer_ns(src, dst, chunk, it);
          sync_end = std::max(sync_end, send(out, src, dst, bulk_start, bulk, it));
        }
      }
      end = std::max(end, sync_end);
    }
    std::normal_distribution<double> n(1.0, j_.jitter);
    return end + static_cast<uint64_t>(j_.optimizer_ms * std::max(0.5, n(rng_)) * kNsPerMs);
  }

  // Expert parallelism: after each forward, the DP replicas of one EP group exchange tokens all-to-all.
  void expert_all_to_all(std::vector<Transfer>& out, int d, int s, uint64_t at, double act, int it) {
    if (j_.ep <= 1) return;
    int g0 = d / j_.ep * j_.ep;
    for (int k = g0; k < std::min(g0 + j_.ep, j_.dp); ++k)
      if (k != d) send(out, at_[d][s], at_[k][s], at, act / j_.ep, it);
  }

  const ClusterSpec& c_;
  const JobSpec& j_;
  int job_;
  std::mt19937_64& rng_;
  std::vector<std::vector<int>> at_;  // [dp replica][stage] -> global node
  int local_base_ = 0;
  uint64_t hang_cut_ = 0;
};

}  // namespace

std::string node_name(int i) {
  return fmt::format("node-{:04d}", i);
}

std::string node_addr(int i) {
  return fmt::format("10.{}.{}.{}", 64 + (i >> 16), (i >> 8) & 255, i & 255);
}

uint16_t src_port(int src, int dst) {
  return static_cast<uint16_t>(40000 + ((src * 131 + dst * 17) % 20000));
}

Simulation simulate(const ClusterSpec& spec) {
  Simulation sim;
  sim.truth = {{"nodes", spec.nodes}, {"jobs", nlohmann::json::array()}};
  std::mt19937_64 rng(spec.seed);
  int base = 0;
  for (size_t j = 0; j < spec.jobs.size(); ++j) {
    const auto& js = spec.jobs[j];
    if (base + js.dp * js.pp > spec.nodes) break;  // the cluster is full: the caller sized it wrong
    JobSim(spec, js, static_cast<int>(j), base, rng).run(sim.transfers, sim.truth);
    base += js.dp * js.pp;
  }
  std::sort(sim.transfers.begin(), sim.transfers.end(),
            [](const Transfer& a, const Transfer& b) { return a.start_ns < b.start_ns; });
  return sim;
}

}  // namespace netprism::sim
