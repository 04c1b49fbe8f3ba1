// Stage 3: the role of every node-level edge (data-parallel synchronisation or pipeline point-to-point),
// the DP groups, and the pipeline order.
//
// Pipeline edges obey causality: a micro-batch's gradient (downstream -> upstream) can only start after its
// activation (upstream -> downstream) has arrived. Counting activations when they start and gradients when
// they end, the outstanding volume "activations sent minus gradients returned" never goes negative in the
// true orientation, and is negative for most of the forward/backward phase in the reverse one. DP
// exchanges are symmetric (both peers send the same volume in the same window), so neither orientation
// stays negative for long; ring all-reduce among three or more nodes is even one-way per edge.
#include <algorithm>
#include <map>
#include <numeric>

#include "stages.hpp"

namespace netprism::analysis {
namespace {

// An edge whose lighter direction carries under 10 % of the heavier one's data is one-way: a ring
// all-reduce neighbour (pipeline edges always carry equal activation and gradient volumes back).
constexpr double kOneWayRatio = 0.10;
// Share of an edge's active time during which the reverse orientation is more than half a transfer
// negative. A pipeline edge is negative in reverse for its downstream stages' whole forward/backward phase
// (> 40 % of the time for any schedule with at least two micro-batches); a DP exchange only while one peer
// waits for a late peer, a few percent of a healthy run. 0.2 sits between the two with a factor two each
// side.
constexpr double kPipelineNegativeShare = 0.20;

struct EdgeData {
  Edge e;
  std::vector<const Xfer*> xs;
};

// Share of [first, last] during which "u->v sent (counted at start) minus v->u received (counted at end)"
// is below -eps. v->u volumes are scaled to u->v's total so that a size mismatch does not drift.
double negative_share(const std::vector<const Xfer*>& xs, uint32_t u, double scale_vu, double eps) {
  std::vector<std::pair<uint64_t, double>> ev;
  ev.reserve(xs.size());
  uint64_t lo = UINT64_MAX, hi = 0;
  for (const Xfer* x : xs) {
    if (x->src == u)
      ev.emplace_back(x->t0, static_cast<double>(x->bytes));
    else
      ev.emplace_back(x->t1, -static_cast<double>(x->bytes) * scale_vu);
    lo = std::min(lo, x->t0);
    hi = std::max(hi, x->t1);
  }
  if (hi <= lo) return 0;
  std::sort(ev.begin(), ev.end());
  double bal = 0, neg = 0;
  for (size_t i = 0; i < ev.size(); ++i) {
    bal += ev[i].second;
    uint64_t next = i + 1 < ev.size() ? ev[i + 1].first : hi;
    if (bal < -eps) neg += static_cast<double>(next - ev[i].first);
  }
  return neg / static_cast<double>(hi - lo);
}

}  // namespace

Structure infer_structure(const Normalized& n, const JobSlice& job) {
  Structure s;
  std::map<std::pair<uint32_t, uint32_t>, EdgeData> edges;
  for (const Xfer& x : job.xfers) {
    auto key = std::minmax(x.src, x.dst);
    EdgeData& d = edges[{key.first, key.second}];
    d.e.u = key.first;
    d.e.v = key.second;
    (x.src == key.first ? d.e.bytes_uv : d.e.bytes_vu) += x.bytes;
    d.xs.push_back(&x);
  }

  for (auto& [key, d] : edges) {
    double hi = static_cast<double>(std::max(d.e.bytes_uv, d.e.bytes_vu));
    double lo = static_cast<double>(std::min(d.e.bytes_uv, d.e.bytes_vu));
    d.e.role = EdgeRole::dp;
    if (lo < kOneWayRatio * hi) continue;
    std::vector<double> sizes;
    for (const Xfer* x : d.xs) sizes.push_back(static_cast<double>(x->bytes));
    double eps = 0.5 * median(sizes);
    double fwd = negative_share(d.xs, d.e.u,
                                static_cast<double>(d.e.bytes_uv) / static_cast<double>(d.e.bytes_vu), eps);
    double rev = negative_share(d.xs, d.e.v,
                                static_cast<double>(d.e.bytes_vu) / static_cast<double>(d.e.bytes_uv), eps);
    // fwd: share negative when u is taken as upstream. The true orientation stays non-negative.
    if (std::max(fwd, rev) < kPipelineNegativeShare) continue;
    d.e.role = EdgeRole::pp;
    if (fwd > rev) {
      std::swap(d.e.u, d.e.v);
      std::swap(d.e.bytes_uv, d.e.bytes_vu);
    }
  }

  size_t N = n.nodes.size();
  s.stage_of.assign(N, -1);
  s.group_of.assign(N, -1);
  for (uint32_t v : job.nodes) s.stage_of[v] = 0;

  // Pipeline depth: longest path from a source over oriented pipeline edges (Bellman-Ford style relaxation,
  // bounded by the node count so an inconsistent cycle cannot loop forever).
  std::vector<std::pair<uint32_t, uint32_t>> pp;
  for (auto& [key, d] : edges)
    if (d.e.role == EdgeRole::pp) pp.emplace_back(d.e.u, d.e.v);
  for (size_t round = 0; round < job.nodes.size(); ++round) {
    bool changed = false;
    for (auto [u, v] : pp)
      if (s.stage_of[v] < s.stage_of[u] + 1) {
        s.stage_of[v] = s.stage_of[u] + 1;
        changed = true;
      }
    if (!changed) break;
  }

  // DP groups: connected components of DP edges.
  std::vector<uint32_t> parent(N);
  std::iota(parent.begin(), parent.end(), 0u);
  auto find = [&](uint32_t x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  };
  for (auto& [key, d] : edges)
    if (d.e.role == EdgeRole::dp) parent[find(d.e.u)] = find(d.e.v);
  std::map<uint32_t, std::vector<uint32_t>> comps;
  for (auto& [key, d] : edges)
    if (d.e.role == EdgeRole::dp) {
      comps[find(d.e.u)];
    }
  for (uint32_t v : job.nodes)
    if (comps.count(find(v))) comps[find(v)].push_back(v);
  for (auto& [root, members] : comps) {
    std::sort(members.begin(), members.end(),
              [&](uint32_t a, uint32_t b) { return n.nodes[a] < n.nodes[b]; });
    s.dp_groups.push_back(members);
  }
  // Order groups by stage, then by first member name, so output is deterministic.
  std::sort(s.dp_groups.begin(), s.dp_groups.end(), [&](const auto& a, const auto& b) {
    return std::make_pair(s.stage_of[a[0]], n.nodes[a[0]]) < std::make_pair(s.stage_of[b[0]], n.nodes[b[0]]);
  });
  for (size_t g = 0; g < s.dp_groups.size(); ++g)
    for (uint32_t v : s.dp_groups[g]) s.group_of[v] = static_cast<int>(g);

  int depth = 0;
  for (uint32_t v : job.nodes) depth = std::max(depth, s.stage_of[v]);
  s.stages.assign(static_cast<size_t>(depth) + 1, {});
  for (uint32_t v : job.nodes) s.stages[static_cast<size_t>(s.stage_of[v])].push_back(v);
  for (auto& [key, d] : edges) s.edges.push_back(d.e);
  return s;
}

}  // namespace netprism::analysis
