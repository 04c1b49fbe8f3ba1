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
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <numeric>
#include <vector>

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

// Expert-parallel exchange on an edge (see expert_parallel): volume floors of its lighter direction.
constexpr uint64_t kMinExchangeBytes = 64 * 1024;
constexpr double kExchangeShare = 0.01;
// Global role search (see assign_roles): the two-way edges whose evidence lies closest to the threshold may
// be relabelled, at most kMaxFlips of the kFlipCandidates least certain ones. A DP x PP job's wrong reading
// comes from one or two distorted edges (a DP pair whose member waits for a straggler every iteration, a
// shaped link); 3 flips of 12 candidates is at most 299 structures to check, microseconds each, for any
// 16-node job.
constexpr size_t kFlipCandidates = 12;
constexpr size_t kMaxFlips = 3;
// A pipeline edge's reverse orientation (the one below zero while the downstream stages compute) never rises
// above zero: the downstream node sends no more than it has received (a gradient starts after its activation
// ended, and has its shape). A DP pair whose member is late every iteration is one-sided for the wait, as
// long as a share of the step as the lateness, and reads as pipeline by that share alone (soft-RoCE DP2, one
// rank 300 ms late in 0.95 s steps: 0.205); but the late member then sends its own contribution, more than
// the early one's outstanding half, so the same orientation rises above zero once per exchange. Measured on
// every kept sample (tests/e2e/samples, 2026-11-29): 0 rises on all 36 pipeline edges (12-96 falls each);
// on the two-way DP edges with a share of 0.05 or more, 1.2-22 rises per fall (roce_mpi_dp2 16 / 13,
// mpi_dp4_zero3 121 / 41, ddp2_straggler 45 / 2), and 16 / 10 on the soft-RoCE straggler. So an orientation
// that rises at least as often as it falls, 3 times at least (3 iterations), is not a pipeline's reverse
// (one fall fewer allowed: a window that ends inside an exchange holds its fall, not its rise).
// Other traffic on a pipeline edge could rise it: Megatron's tied-embedding all-reduce between the first and
// last stage shares the edge at pp 2, once per iteration, against one fall per micro-batch in 1F1B (6 per
// iteration in pp2_1f1b); GPipe at pp 2 with tied embeddings (one fall per iteration) would read as DP.
constexpr size_t kMinRises = 3;
// On transfers made from counters (sampled every interval, counters_source.cpp) the order within an interval
// is lost: a gradient can be placed before its activation's placed end, and a pipeline's reverse then rises
// above zero, from zero (the gradient placed early, its activation not yet counted), so rises prove nothing
// there. What a pipeline's downstream node does not do is send, in one message, more than it owes: a rise
// from below -eps to above eps at one transfer. A late DP member does, every time it sends its reduce-scatter
// and all-gather halves back to back. Measured: 0.35-1.0 such crossings per fall on the late member's side in
// ten soft-RoCE counters-only runs (DP2, 300 ms straggler, rcc1-rcc11; 0.11 in rbc6, sampled at 20-80 ms by
// an agent before its sampling-cadence fix), 1 in 28 and 1 in 52 falls on the two pipeline edges of the
// counters-derived DP2 x PP2 straggler recording. A fifth sits between.
constexpr double kSampledCrossShare = 0.2;
// Floor of the negative share in the log-odds cost: a share of 0.001 (one millisecond per second of
// traffic) is "no evidence of a pipeline" already; below it the logarithm would only amplify noise.
constexpr double kMinShare = 1e-3;
// Tensor parallelism across servers (see tensor_parallel): the same-stage edges of a job split into two
// kinds when their episode counts differ by 3x or more at the widest gap between them. A TP group
// all-reduces 2 to 4 times per layer and micro-batch (Megatron's f and g operators, forward and backward), a
// DP group once per iteration or per gradient bucket: 4 L M / B times fewer for L layers, M micro-batches and
// B buckets (tens to hundreds in real jobs); 5.5x in the testbed's DP2 x TP2 run (2 blocks, 4 micro-batches,
// one all-reduce per iteration; TP calls closer than the episode gap merge). Edges of one kind stay within
// 1.4x of each other on every kept recording (ring neighbours, buckets, a 2x slow link), so 3 sits between.
constexpr double kTpEpisodeRatio = 3.0;
// ... and the rarer kind repeats: 3 episodes at least (a synchronisation per iteration, 3 iterations), unlike
// the edges of a ring all-reduce's non-neighbours (2 episodes in a DDP run: set-up only).
constexpr double kMinDpEpisodes = 3;

// Records too coarse to order messages (flow exporters' records, see coarse()): an edge whose bytes come
// mostly in them has no causality evidence, and its role is read from its volume instead. Per iteration a
// DP edge carries the stage's gradient (2 (d-1)/d of its parameters' bytes), a pipeline edge 2 M
// activations of one micro-batch; for transformer training the ratio is about 12 (L/p) h / (M s b) (L/p
// layers of hidden size h per stage, M micro-batches of b sequences of s tokens): 70 for a GPT-3-sized
// stage (h 12288, 12 layers, M 8, s 2048) and still 2 for a small model with long sequences (h 1024, 12
// layers, s 8192, M 8); 30 in the testbed's DP 2 x PP 2 job. A two-way coarse edge lighter than a quarter
// of the job's heaviest two-way edge reads as pipeline, with log-odds ln(heaviest / (4 bytes)) like the
// timing evidence's, so the structure search (assign_roles) can still overrule a single edge.
constexpr double kCoarseVolumeRatio = 4.0;

// Union-find over node indices 0..n-1, with path halving. unite(a, b) hangs a's root under b's: callers key
// components by root (a std::map), so the roots, and with them the order of the components, follow from
// the order of the unions.
class DisjointSets {
 public:
  explicit DisjointSets(size_t n) : parent_(n) { std::iota(parent_.begin(), parent_.end(), 0u); }
  uint32_t find(uint32_t x) {
    while (parent_[x] != x) x = parent_[x] = parent_[parent_[x]];
    return x;
  }
  void unite(uint32_t a, uint32_t b) { parent_[find(a)] = find(b); }

 private:
  std::vector<uint32_t> parent_;
};

struct EdgeData {
  Edge e;
  double confidence = 0;       // pipeline edges: |negative share forward - reverse|
  double fwd = 0, rev = 0;     // negative share with the lower node index (fwd) or the other (rev) upstream
  bool two_way = false;        // both directions carry data (not a ring all-reduce neighbour)
  bool tp = false;             // a tensor-parallel edge (see tensor_parallel)
  bool coarse = false;         // most of its bytes in coarse() records: no causality evidence
  double volume_evidence = 0;  // coarse edges: pipeline log-odds from volume (kCoarseVolumeRatio)
  std::vector<const Xfer*> xs;
};

// Orientation of a coarse pipeline candidate (u, v) from the two nodes' synchronisations, since its own
// records carry no order: in every pipeline schedule the first stage finishes its backward pass last (the
// last micro-batch's gradient reaches it last), so an upstream node's synchronisation follows its
// downstream neighbour's closely (by the upstream stages' last backward steps) and the downstream one
// follows the upstream one by nearly a whole step (sync_order()). Writes fwd/rev as edge_balance() would
// (rev > fwd: u upstream).
void orient_by_syncs(EdgeData& d, const std::vector<std::vector<uint64_t>>& ends) {
  double w = sync_order(ends[d.e.u], ends[d.e.v]);
  d.fwd = std::max(0.0, -w);
  d.rev = std::max(0.0, w);
}

// Expert parallelism: an all-to-all among DP peers. Inside a DP group of three or more nodes the gradient
// all-reduce is a ring (each member sends to one neighbour: every edge one-way, as on every testbed
// recording), so edges that carry data both ways are another exchange among the peers. Tokens dispatched
// all-to-all make those two-way edges cliques: each member exchanges with every other member of its expert
// group. The EP size is the clique size when every clique found has the same one; 0 otherwise (a dp = 2
// group cannot tell: its all-reduce is two-way already).
int expert_parallel(const Structure& s, const std::map<std::pair<uint32_t, uint32_t>, EdgeData>& edges) {
  auto in_group = [&](const EdgeData& d) {
    return d.e.role == EdgeRole::dp && s.group_of[d.e.u] >= 0 && s.group_of[d.e.u] == s.group_of[d.e.v] &&
           s.dp_groups[static_cast<size_t>(s.group_of[d.e.u])].size() >= 3;
  };
  auto lighter = [](const EdgeData& d) { return static_cast<double>(std::min(d.e.bytes_uv, d.e.bytes_vu)); };
  std::vector<double> top_lo(s.dp_groups.size(), 0);
  for (const auto& [key, d] : edges)
    if (in_group(d)) {
      double& t = top_lo[static_cast<size_t>(s.group_of[d.e.u])];
      t = std::max(t, lighter(d));
    }
  std::map<uint32_t, std::vector<uint32_t>> two_way;
  for (const auto& [key, d] : edges) {
    if (!in_group(d)) continue;
    double hi = static_cast<double>(std::max(d.e.bytes_uv, d.e.bytes_vu)), lo = lighter(d);
    // The exchange rides on ring edges too, where the gradient dwarfs it: an edge takes part when its
    // lighter direction carries data (at least 64 KiB, the training floor, and 1 % of the heavier one:
    // a ring edge's way back carries only ACKs and notifications, far less) in the amount the group's
    // exchange edges do (uniform all-to-all: at least half of the largest).
    if (lo < static_cast<double>(kMinExchangeBytes) || lo < kExchangeShare * hi ||
        lo < 0.5 * top_lo[static_cast<size_t>(s.group_of[d.e.u])])
      continue;
    two_way[d.e.u].push_back(d.e.v);
    two_way[d.e.v].push_back(d.e.u);
  }
  if (two_way.empty()) return 0;
  int size = 0;
  for (auto& [v, nb] : two_way) {
    std::vector<uint32_t> set = nb;
    set.push_back(v);
    std::sort(set.begin(), set.end());
    for (uint32_t w : nb) {  // a clique: every member sees the same set
      std::vector<uint32_t> other = two_way[w];
      other.push_back(w);
      std::sort(other.begin(), other.end());
      if (other != set) return 0;
    }
    if (size && static_cast<int>(set.size()) != size) return 0;
    size = static_cast<int>(set.size());
  }
  return size;
}

// Whether a labelling (pp[i]: edge i is a pipeline edge) makes a DP x PP structure (see assign_roles); writes
// each job node's stage.
bool structure(const std::vector<EdgeData*>& all, const std::vector<uint32_t>& nodes, size_t N,
               const std::vector<char>& pp, std::vector<int>& stage) {
  DisjointSets sets(N);
  for (size_t i = 0; i < all.size(); ++i)
    if (!pp[i]) sets.unite(all[i]->e.u, all[i]->e.v);
  std::map<uint32_t, size_t> gsize;
  for (uint32_t v : nodes) gsize[sets.find(v)]++;
  for (auto& [g, c] : gsize)
    if (c != gsize.begin()->second) return false;
  // Votes per ordered group pair (lower root first): positive = the lower root's group is upstream.
  std::map<std::pair<uint32_t, uint32_t>, double> vote;
  for (size_t i = 0; i < all.size(); ++i) {
    if (!pp[i]) continue;
    const EdgeData& d = *all[i];
    uint32_t gu = sets.find(d.e.u), gv = sets.find(d.e.v);
    if (gu == gv) return false;
    double w = d.rev - d.fwd;  // > 0: e.u is upstream
    if (gu < gv)
      vote[{gu, gv}] += w;
    else
      vote[{gv, gu}] -= w;
  }
  std::vector<std::pair<uint32_t, uint32_t>> arcs;  // upstream group -> downstream group
  for (auto& [k, w] : vote) arcs.push_back(w >= 0 ? k : std::make_pair(k.second, k.first));
  std::map<uint32_t, int> depth;
  for (auto& [g, c] : gsize) depth[g] = 0;
  bool changed = true;
  for (size_t round = 0; changed; ++round) {
    if (round > gsize.size()) return false;  // still growing after |groups| rounds: a cycle
    changed = false;
    for (auto [a, b] : arcs)
      if (depth[b] < depth[a] + 1) {
        depth[b] = depth[a] + 1;
        changed = true;
      }
  }
  for (uint32_t v : nodes) stage[v] = depth[sets.find(v)];
  std::map<int, size_t> per_stage;
  for (uint32_t v : nodes) per_stage[stage[v]]++;
  for (auto& [st, c] : per_stage)
    if (c != per_stage.begin()->second) return false;
  int last = per_stage.rbegin()->first;
  std::vector<char> down(N, 0), up(N, 0);
  for (size_t i = 0; i < all.size(); ++i) {
    if (!pp[i]) continue;
    uint32_t a = all[i]->e.u, b = all[i]->e.v;
    if (stage[a] > stage[b]) std::swap(a, b);
    if (stage[b] != stage[a] + 1) return false;
    down[a] = up[b] = 1;
  }
  for (uint32_t v : nodes)
    if ((stage[v] < last && !down[v]) || (stage[v] > 0 && !up[v])) return false;
  return true;
}

// Roles of a job's edges as one structure rather than edge by edge. Each two-way edge's evidence is the
// larger of its two negative shares, x; taken alone it reads as pipeline when x >= kPipelineNegativeShare.
// Timing noise can push single edges across that line: a DP pair whose member waits for a straggler every
// iteration is one-sided for the length of the wait (a large share of a step under a 1.3x straggler on a
// loaded host), and a pipeline edge whose stages finish close together can look two-sided. So the labelling
// is chosen among those that make a DP x PP structure, at the lowest cost, where relabelling an edge costs
// how far its evidence lies on the other side of the threshold, |ln(x / threshold)| (a share twice or half
// the threshold costs the same): a consistent structure that needs no relabelling wins outright, and one
// noisy edge is outvoted by the rest of the structure.
//
// A labelling makes a structure when (structure()):
//  - DP groups (components of DP edges, a node without DP edges alone) all have the same size;
//  - pipeline edges join different groups, and every pair of groups joined by pipeline edges is oriented one
//    way by the sum of its edges' evidence (fwd - rev, from each edge's own causality): all the pipeline
//    edges between two DP groups carry one stage boundary, so they vote on its direction;
//  - the oriented group graph has no cycle; a group's stage is its longest path from a first-stage group;
//  - every pipeline edge joins adjacent stages, every stage holds the same number of nodes, and every node
//    of a stage other than the last has a pipeline edge to the next stage (each rank sends its activations
//    downstream), every node of a stage other than the first one from the previous stage.
// Writes the stage of every job node into stage_of; returns the role per edge (1 = pipeline).
std::vector<char> assign_roles(const std::vector<EdgeData*>& all, const std::vector<uint32_t>& nodes,
                               size_t N, std::vector<int>& stage_of) {
  auto share = [](double x) { return std::max(x, kMinShare); };
  auto evidence = [&](const EdgeData& d) {
    if (d.coarse) return d.volume_evidence;
    return std::log(share(std::max(d.fwd, d.rev)) / kPipelineNegativeShare);
  };
  std::vector<char> base(all.size(), 0);
  for (size_t i = 0; i < all.size(); ++i) base[i] = all[i]->two_way && evidence(*all[i]) >= 0;

  auto structure = [&](const std::vector<char>& pp, std::vector<int>& stage) {
    return analysis::structure(all, nodes, N, pp, stage);
  };
  // Candidates for relabelling: the two-way edges closest to the threshold.
  std::vector<size_t> cand;
  for (size_t i = 0; i < all.size(); ++i)
    if (all[i]->two_way) cand.push_back(i);
  std::sort(cand.begin(), cand.end(),
            [&](size_t a, size_t b) { return std::fabs(evidence(*all[a])) < std::fabs(evidence(*all[b])); });
  if (cand.size() > kFlipCandidates) cand.resize(kFlipCandidates);
  std::vector<char> best = base, trial;
  std::vector<int> stage(N, -1), best_stage;
  double best_cost = -1;
  auto consider = [&](const std::vector<size_t>& flips) {
    double cost = 0;
    trial = base;
    for (size_t i : flips) {
      trial[i] = !trial[i];
      cost += std::fabs(evidence(*all[i]));
    }
    if (best_cost >= 0 && cost >= best_cost) return;
    for (uint32_t v : nodes) stage[v] = 0;
    if (!structure(trial, stage)) return;
    best_cost = cost;
    best = trial;
    best_stage = stage;
  };
  consider({});
  size_t C = cand.size();
  if (best_cost < 0 || best_cost > 0) {
    for (size_t a = 0; a < C; ++a) {
      consider({cand[a]});
      if (kMaxFlips < 2) continue;
      for (size_t b = a + 1; b < C; ++b) {
        consider({cand[a], cand[b]});
        if (kMaxFlips < 3) continue;
        for (size_t c = b + 1; c < C; ++c) consider({cand[a], cand[b], cand[c]});
      }
    }
  }
  if (best_cost < 0) {
    // No labelling within kMaxFlips makes a structure (many distorted edges, or a job seen for too short a
    // time): take pipeline readings back as DP one at a time, the least certain (smallest |fwd - rev|)
    // first, until the rest make a structure; with none left the job is one stage.
    best = base;
    for (;;) {
      for (uint32_t v : nodes) stage[v] = 0;
      if (structure(best, stage)) break;
      size_t weakest = all.size();
      for (size_t i = 0; i < all.size(); ++i)
        if (best[i] && (weakest == all.size() || std::fabs(all[i]->fwd - all[i]->rev) <
                                                     std::fabs(all[weakest]->fwd - all[weakest]->rev)))
          weakest = i;
      if (weakest == all.size()) {
        for (uint32_t v : nodes) stage[v] = 0;
        break;
      }
      best[weakest] = 0;
    }
    best_stage = stage;
  }
  for (uint32_t v : nodes) stage_of[v] = best_stage[v] >= 0 ? best_stage[v] : 0;
  return best;
}

// Components of the edges for which `use` holds, over the job's nodes (a node without such an edge alone).
template <class Use>
std::vector<std::vector<uint32_t>> components(const std::vector<EdgeData*>& all,
                                              const std::vector<uint32_t>& nodes, size_t N, Use use) {
  DisjointSets sets(N);
  for (size_t i = 0; i < all.size(); ++i)
    if (use(i)) sets.unite(all[i]->e.u, all[i]->e.v);
  std::map<uint32_t, std::vector<uint32_t>> comp;
  for (uint32_t v : nodes) comp[sets.find(v)].push_back(v);
  std::vector<std::vector<uint32_t>> out;
  for (auto& [root, members] : comp) out.push_back(std::move(members));
  return out;
}

// Tensor parallelism larger than a server: TP groups span nodes, and their all-reduces (every layer, every
// micro-batch, forward and backward) cross the network beside the DP synchronisation (once per iteration or
// bucket) between the same stage's nodes. Both are same-stage, DP-like exchanges; they differ in how often
// they happen (kTpEpisodeRatio). The frequent edges are TP when they make a TP x DP grid: TP groups
// (components of the frequent edges) of one size >= 2 covering every node, DP groups (components of the
// other same-stage edges) of one size, and no TP group meeting a DP group in more than one node (a DP group
// holds the same shard of every replica, one node of each TP group). Marks the TP edges; returns the TP
// groups (empty: none).
std::vector<std::vector<uint32_t>> tensor_parallel(const std::vector<EdgeData*>& all,
                                                   const std::vector<char>& pp,
                                                   const std::vector<uint32_t>& nodes, size_t N) {
  std::vector<std::pair<double, size_t>> count;  // episodes, edge index
  for (size_t i = 0; i < all.size(); ++i)
    if (!pp[i]) count.emplace_back(static_cast<double>(episodes_of(all[i]->xs).size()), i);
  if (count.size() < 2) return {};
  std::sort(count.begin(), count.end());
  size_t cut = 0;
  double widest = 0;
  for (size_t k = 1; k < count.size(); ++k) {
    double r = count[k].first / std::max(count[k - 1].first, 1.0);
    if (r > widest) {
      widest = r;
      cut = k;
    }
  }
  if (std::getenv("NP_ANALYSIS_DEBUG"))
    std::fprintf(stderr, "tp: %zu same-stage edges, episodes %.0f..%.0f, widest ratio %.1f at %.0f\n",
                 count.size(), count.front().first, count.back().first, widest, count[cut].first);
  if (widest < kTpEpisodeRatio || count.front().first < kMinDpEpisodes) return {};
  std::vector<char> tp(all.size(), 0);
  for (size_t k = cut; k < count.size(); ++k) tp[count[k].second] = 1;
  auto tp_groups = components(all, nodes, N, [&](size_t i) { return tp[i] != 0; });
  auto dp_groups = components(all, nodes, N, [&](size_t i) { return !pp[i] && !tp[i]; });
  auto same_size = [](const std::vector<std::vector<uint32_t>>& g) {
    return std::all_of(g.begin(), g.end(), [&](const auto& x) { return x.size() == g[0].size(); });
  };
  if (tp_groups[0].size() < 2 || !same_size(tp_groups) || !same_size(dp_groups)) return {};
  std::vector<int> tp_of(N, -1);
  for (size_t g = 0; g < tp_groups.size(); ++g)
    for (uint32_t v : tp_groups[g]) tp_of[v] = static_cast<int>(g);
  // Every member of a DP group both sends and receives gradient data inside it (a two-member all-reduce is
  // two-way; a ring's members each send to one neighbour and receive from the other). Expert parallelism's
  // all-to-all on ring edges makes a grid too (its pairs frequent, the other ring edges rare), but those rare
  // edges are one-way: not a synchronisation of their own.
  std::vector<char> sends(N, 0), receives(N, 0);
  for (size_t i = 0; i < all.size(); ++i) {
    if (pp[i] || tp[i]) continue;
    const Edge& e = all[i]->e;
    double hi = static_cast<double>(std::max(e.bytes_uv, e.bytes_vu));
    if (static_cast<double>(e.bytes_uv) >= kOneWayRatio * hi) sends[e.u] = receives[e.v] = 1;
    if (static_cast<double>(e.bytes_vu) >= kOneWayRatio * hi) sends[e.v] = receives[e.u] = 1;
  }
  for (const auto& d : dp_groups)
    for (uint32_t v : d)
      if (d.size() > 1 && (!sends[v] || !receives[v])) return {};
  for (const auto& d : dp_groups) {
    std::vector<int> seen;
    for (uint32_t v : d) seen.push_back(tp_of[v]);
    std::sort(seen.begin(), seen.end());
    if (std::adjacent_find(seen.begin(), seen.end()) != seen.end()) return {};
  }
  for (size_t i = 0; i < all.size(); ++i) all[i]->tp = tp[i] != 0;
  return tp_groups;
}

using EdgeMap = std::map<std::pair<uint32_t, uint32_t>, EdgeData>;

// Each edge's role evidence: one-way or two-way; for two-way edges the causality shares (fwd, rev) from
// their transfers, or, when their records are coarse, volume evidence and the synchronisations' order.
// Returns the number of coarse edges.
size_t edge_evidence(const Normalized& n, const JobSlice& job, EdgeMap& edges) {
  double heaviest = 0;  // bytes of the job's heaviest two-way edge
  for (auto& [key, d] : edges) {
    double hi = static_cast<double>(std::max(d.e.bytes_uv, d.e.bytes_vu));
    double lo = static_cast<double>(std::min(d.e.bytes_uv, d.e.bytes_vu));
    d.e.role = EdgeRole::dp;
    if (lo < kOneWayRatio * hi) continue;
    d.two_way = true;
    heaviest = std::max(heaviest, hi + lo);
    uint64_t coarse_bytes = 0;
    for (const Xfer* x : d.xs)
      if (coarse(*x)) coarse_bytes += x->bytes;
    d.coarse = 2 * coarse_bytes > d.e.bytes_uv + d.e.bytes_vu;
    if (d.coarse) continue;  // fwd = rev = 0: the records carry no order
    std::vector<double> sizes;
    for (const Xfer* x : d.xs) sizes.push_back(static_cast<double>(x->bytes));
    double eps = 0.5 * typical_size(sizes);
    const std::vector<Episode> episodes = episodes_of(d.xs);  // d.xs is sorted by t0; one pass for all three
    const bool sampled_times = std::any_of(d.xs.begin(), d.xs.end(), [&](const Xfer* x) {
      return n.conns[x->conn].from_counters;  // times on the sampling grid: order within an interval unknown
    });
    const EdgeBalance bu = edge_balance(d.xs, episodes, d.e.u, eps);
    const EdgeBalance bv = edge_balance(d.xs, episodes, d.e.v, eps);
    d.fwd = bu.negative_share;
    d.rev = bv.negative_share;
    const EdgeBalance& reverse = d.fwd >= d.rev ? bu : bv;  // below zero longer: a pipeline's reverse
    // A late DP member's contribution; the recording's end may cut one exchange after its fall.
    const double falls = static_cast<double>(reverse.below);
    const bool late_member =
        sampled_times ? reverse.crossing_above >= kMinRises &&
                            static_cast<double>(reverse.crossing_above) >= kSampledCrossShare * falls
                      : reverse.above >= kMinRises && reverse.above + 1 >= reverse.below;
    if (late_member) d.fwd = d.rev = 0;
    if (std::getenv("NP_ANALYSIS_DEBUG"))
      std::fprintf(stderr,
                   "edge %s-%s excursions u: below %zu above %zu (crossing %zu); v: below %zu above %zu "
                   "(crossing %zu)\n",
                   n.nodes[d.e.u].c_str(), n.nodes[d.e.v].c_str(), bu.below, bu.above, bu.crossing_above,
                   bv.below, bv.above, bv.crossing_above);
    if (volume_drifts(d.xs, episodes, d.e.u)) d.fwd = d.rev = 0;  // one way carries more (edge_drift.cpp)
    if (std::getenv("NP_ANALYSIS_DEBUG"))
      std::fprintf(stderr, "edge %s-%s bytes %llu/%llu neg fwd %.3f rev %.3f\n", n.nodes[d.e.u].c_str(),
                   n.nodes[d.e.v].c_str(), static_cast<unsigned long long>(d.e.bytes_uv),
                   static_cast<unsigned long long>(d.e.bytes_vu), d.fwd, d.rev);
  }

  std::vector<std::vector<uint64_t>> sync_ends;
  size_t coarse_edges = 0;
  for (auto& [key, d] : edges)
    if (d.coarse) {
      double bytes = static_cast<double>(d.e.bytes_uv + d.e.bytes_vu);
      d.volume_evidence = std::log(heaviest / (kCoarseVolumeRatio * bytes));
      if (sync_ends.empty()) sync_ends = heavy_episode_ends(job, n.nodes.size());
      orient_by_syncs(d, sync_ends);
      ++coarse_edges;
      if (std::getenv("NP_ANALYSIS_DEBUG"))
        std::fprintf(stderr, "edge %s-%s coarse, bytes %llu/%llu, volume evidence %.2f, sync order %.3f\n",
                     n.nodes[d.e.u].c_str(), n.nodes[d.e.v].c_str(),
                     static_cast<unsigned long long>(d.e.bytes_uv),
                     static_cast<unsigned long long>(d.e.bytes_vu), d.volume_evidence, d.rev - d.fwd);
    }

  return coarse_edges;
}

}  // namespace

std::vector<Episode> episodes_of(const std::vector<const Xfer*>& xs) {
  std::vector<Episode> out;
  for (size_t i = 0; i < xs.size(); ++i) {
    if (out.empty() || xs[i]->t0 > out.back().end + kEpisodeGapNs) out.push_back({i, xs[i]->t1, 0});
    out.back().end = std::max(out.back().end, xs[i]->t1);
    out.back().bytes += static_cast<double>(xs[i]->bytes);
  }
  return out;
}

Structure infer_structure(const Normalized& n, const JobSlice& job) {
  Structure s;
  EdgeMap edges;
  for (const Xfer& x : job.xfers) {
    auto key = std::minmax(x.src, x.dst);
    EdgeData& d = edges[{key.first, key.second}];
    d.e.u = key.first;
    d.e.v = key.second;
    (x.src == key.first ? d.e.bytes_uv : d.e.bytes_vu) += x.bytes;
    d.xs.push_back(&x);
  }

  s.coarse_edges = edge_evidence(n, job, edges);

  size_t N = n.nodes.size();
  s.stage_of.assign(N, -1);
  s.group_of.assign(N, -1);
  std::vector<EdgeData*> all;
  for (auto& [key, d] : edges) all.push_back(&d);
  std::vector<char> best = assign_roles(all, job.nodes, N, s.stage_of);
  for (size_t i = 0; i < all.size(); ++i) {
    EdgeData& d = *all[i];
    d.e.role = best[i] ? EdgeRole::pp : EdgeRole::dp;
    d.confidence = std::fabs(d.fwd - d.rev);
    // Orientation: the stage order decided for the whole structure (upstream = lower stage).
    if (best[i] && s.stage_of[d.e.u] > s.stage_of[d.e.v]) {
      std::swap(d.e.u, d.e.v);
      std::swap(d.e.bytes_uv, d.e.bytes_vu);
    }
  }

  std::vector<std::vector<uint32_t>> tp_groups = tensor_parallel(all, best, job.nodes, N);
  for (auto& g : tp_groups) {
    std::sort(g.begin(), g.end(), [&](uint32_t a, uint32_t b) { return n.nodes[a] < n.nodes[b]; });
    s.tp_groups.push_back(g);
  }
  // By stage, then first member name, as the DP groups below (deterministic, readable output).
  std::sort(s.tp_groups.begin(), s.tp_groups.end(), [&](const auto& a, const auto& b) {
    return std::make_pair(s.stage_of[a[0]], n.nodes[a[0]]) < std::make_pair(s.stage_of[b[0]], n.nodes[b[0]]);
  });

  // DP groups: connected components of DP edges (TP edges across servers excluded).
  DisjointSets sets(N);
  for (auto& [key, d] : edges)
    if (d.e.role == EdgeRole::dp && !d.tp) sets.unite(d.e.u, d.e.v);
  std::map<uint32_t, std::vector<uint32_t>> comps;
  for (auto& [key, d] : edges)
    if (d.e.role == EdgeRole::dp && !d.tp) {
      comps[sets.find(d.e.u)];
    }
  for (uint32_t v : job.nodes)
    if (comps.count(sets.find(v))) comps[sets.find(v)].push_back(v);
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

  s.ep = expert_parallel(s, edges);

  int depth = 0;
  for (uint32_t v : job.nodes) depth = std::max(depth, s.stage_of[v]);
  s.stages.assign(static_cast<size_t>(depth) + 1, {});
  for (uint32_t v : job.nodes) s.stages[static_cast<size_t>(s.stage_of[v])].push_back(v);
  for (auto& [key, d] : edges) s.edges.push_back(d.e);
  return s;
}

}  // namespace netprism::analysis
