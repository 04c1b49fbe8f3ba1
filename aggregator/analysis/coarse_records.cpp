// Flow exporters' records that span quiet gaps (IPFIX, NetFlow: a record lasts until the exporter's active or
// inactive timeout), told apart from messages and bursts, and what the analysis can still read from a job
// whose edges come in them: the order of its nodes' synchronisations (stage order) and the time resolution
// its timeline rests on. Issue 22: from pmacct's and softflowd's IPFIX a DP 2 x PP 2 job read as DP 4 until
// pipeline edges were recognised as coarse (docs/formats.md).
#include <algorithm>
#include <set>
#include <vector>

#include "stages.hpp"

namespace netprism::analysis {

// Whether a record spans quiet gaps: its packets are spaced wider than kEpisodeGapNs on average. A message
// or burst goes out back to back (the agent's probe closes a flowlet after a 4 ms quiet,
// NP_DEFAULT_GAP_NS; DP records from pmacct's nfprobe: 0.2-1.2 ms between packets); a flow exporter's record
// lasts until its active or inactive timeout, spanning every quiet in between (the same capture's pipeline
// edges: 1.5 s records, 6-10 packets 170-300 ms apart). Unknown packet counts (0: CSV) are not coarse.
bool coarse(const Xfer& x) {
  return x.packets >= 2 && x.t1 - x.t0 > static_cast<uint64_t>(x.packets - 1) * kEpisodeGapNs;
}

// A node's synchronisations are its heavy episodes: at least a tenth of its largest one. A DP all-reduce
// moves the stage's gradient every iteration; the set-up messages and a coarse pipeline edge's few fine
// records (pmacct nfprobe: 8 KB against 1 MB DP exchanges) fall far below.
constexpr double kHeavyEpisodeShare = 0.1;

std::vector<std::vector<uint64_t>> heavy_episode_ends(const JobSlice& job, size_t N) {
  std::vector<std::vector<const Xfer*>> of(N);
  for (const Xfer& x : job.xfers)
    if (!coarse(x)) {
      of[x.src].push_back(&x);
      of[x.dst].push_back(&x);
    }
  std::vector<std::vector<uint64_t>> ends(N);
  for (size_t v = 0; v < N; ++v) {
    const std::vector<Episode> eps = episodes_of(of[v]);  // job.xfers are sorted by t0
    double top = 0;
    for (const Episode& e : eps) top = std::max(top, e.bytes);
    for (const Episode& e : eps)
      if (e.bytes >= kHeavyEpisodeShare * top) ends[v].push_back(e.end);
  }
  return ends;
}

namespace {

// Median time from each of a's ends back to the latest of b's ends before it (-1: none).
double median_lag(const std::vector<uint64_t>& a, const std::vector<uint64_t>& b) {
  std::vector<double> lag;
  for (uint64_t t : a) {
    auto it = std::upper_bound(b.begin(), b.end(), t);
    if (it != b.begin()) lag.push_back(static_cast<double>(t - *std::prev(it)));
  }
  if (lag.empty()) return -1;
  std::nth_element(lag.begin(), lag.begin() + static_cast<std::ptrdiff_t>(lag.size() / 2), lag.end());
  return lag[lag.size() / 2];
}

}  // namespace

double sync_order(const std::vector<uint64_t>& ends_u, const std::vector<uint64_t>& ends_v) {
  double uv = median_lag(ends_u, ends_v), vu = median_lag(ends_v, ends_u);
  if (uv < 0 || vu < 0 || uv + vu <= 0) return 0;
  return (vu - uv) / (vu + uv);
}

double coarse_resolution_ns(const JobSlice& job, const Structure& s) {
  // The timeline rests on the DP groups' synchronisations when there are any, else on the pipeline edges.
  bool dp = std::any_of(s.dp_groups.begin(), s.dp_groups.end(), [](const auto& g) { return g.size() > 1; });
  std::set<std::pair<uint32_t, uint32_t>> used;
  for (const Edge& e : s.edges)
    if ((e.role == EdgeRole::dp) == dp) used.insert(std::minmax(e.u, e.v));
  std::vector<std::pair<uint64_t, uint64_t>> coarse_recs;  // duration, bytes
  uint64_t total = 0, in_coarse = 0;
  for (const Xfer& x : job.xfers) {
    if (!used.count(std::minmax(x.src, x.dst))) continue;
    total += x.bytes;
    if (!coarse(x)) continue;
    in_coarse += x.bytes;
    coarse_recs.emplace_back(x.t1 - x.t0, x.bytes);
  }
  if (2 * in_coarse <= total) return 0;
  std::sort(coarse_recs.begin(), coarse_recs.end());
  uint64_t acc = 0;
  for (auto [dur, bytes] : coarse_recs)
    if ((acc += bytes) * 2 >= in_coarse) return static_cast<double>(dur);
  return static_cast<double>(coarse_recs.back().first);
}

}  // namespace netprism::analysis
