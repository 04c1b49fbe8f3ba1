// Flow exporters' records that span quiet gaps (IPFIX, NetFlow: a record lasts until the exporter's active or
// inactive timeout), told apart from messages and bursts, and what the analysis can still read from a job
// whose edges come in them: the order of its nodes' synchronisations (stage order) and the time resolution
// its timeline rests on. Issue 22: from pmacct's and softflowd's IPFIX a DP 2 x PP 2 job read as DP 4 until
// pipeline edges were recognised as coarse (docs/formats.md).
#include <algorithm>
#include <cmath>
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

// A node seen mostly (by record count) through coarse records (1:N samples, each spanning its agent's flush
// interval: all but the first flush's records are coarse) has all its records taken as points at their ends
// instead: a flush's arrival. Contiguous flush windows would chain into one episode; points give one episode
// per flush, and the flushes holding a synchronisation carry far more than the ones holding pipeline traffic
// (pmacct 1:5: MBs against tens of KB), whose order between neighbours still shows at the flush's resolution.
std::vector<std::vector<uint64_t>> heavy_episode_ends(const JobSlice& job, size_t N) {
  std::vector<size_t> fine_recs(N, 0), coarse_recs(N, 0);
  for (const Xfer& x : job.xfers)
    for (uint32_t v : {x.src, x.dst}) ++(coarse(x) ? coarse_recs : fine_recs)[v];
  std::vector<char> fine(N, 0);
  for (size_t v = 0; v < N; ++v) fine[v] = fine_recs[v] >= coarse_recs[v];
  std::vector<std::vector<const Xfer*>> of(N);
  for (const Xfer& x : job.xfers)
    if (!coarse(x))
      for (uint32_t v : {x.src, x.dst})
        if (fine[v]) of[v].push_back(&x);
  std::vector<Xfer> points;
  for (const Xfer& x : job.xfers)
    if (!fine[x.src] || !fine[x.dst]) {
      points.push_back(x);
      points.back().t0 = x.t1;
    }
  std::sort(points.begin(), points.end(), [](const Xfer& a, const Xfer& b) { return a.t0 < b.t0; });
  for (const Xfer& x : points)
    for (uint32_t v : {x.src, x.dst})
      if (!fine[v]) of[v].push_back(&x);
  std::vector<std::vector<uint64_t>> ends(N);
  for (size_t v = 0; v < N; ++v) {
    const std::vector<Episode> eps = episodes_of(of[v]);  // sorted by t0
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
  // Counted first, listed only when coarse records carry most of the bytes, and then at their exact count: a
  // list grown by doubling reached 32 MiB in a pass of the 1,000-agent load test (~1.1 million coarse
  // records) and was mapped and unmapped at every pass.
  uint64_t total = 0, in_coarse = 0;
  size_t count = 0;
  for (const Xfer& x : job.xfers)
    if (used.count(std::minmax(x.src, x.dst))) {
      total += x.bytes;
      if (coarse(x)) in_coarse += x.bytes, ++count;
    }
  if (2 * in_coarse <= total) return 0;
  std::vector<std::pair<uint64_t, uint64_t>> coarse_recs;  // duration, bytes
  coarse_recs.reserve(count);
  for (const Xfer& x : job.xfers)
    if (coarse(x) && used.count(std::minmax(x.src, x.dst))) coarse_recs.emplace_back(x.t1 - x.t0, x.bytes);
  std::sort(coarse_recs.begin(), coarse_recs.end());
  uint64_t acc = 0;
  for (auto [dur, bytes] : coarse_recs)
    if ((acc += bytes) * 2 >= in_coarse) return static_cast<double>(dur);
  return static_cast<double>(coarse_recs.back().first);
}

// Boundaries good to a resolution R each put a duration up to R off, so the median of the durations can be
// off by R/2 (the committed sFlow capture: 4250 ms for a 4520 ms step at R = 1 s), and a boundary misplaced
// by a whole iteration (a sync seen only at the next flush) makes one duration long and the next short. The
// step is instead the slope of the iteration ends against their iteration numbers: quantisation errors
// average out over the fit. Each end is numbered from the one before by its gap in units of the median gap
// (a missing end leaves a gap of two, a doubled one a gap of zero), so a step misjudged by a fraction does
// not add up over many iterations.
double coarse_step_ns(const std::vector<Iteration>& its, double resolution_ns, double measured_ns) {
  if (resolution_ns <= 0 || its.size() < 3) return measured_ns;
  std::vector<double> gaps;
  for (size_t i = 1; i < its.size(); ++i)
    gaps.push_back(static_cast<double>(its[i].end_ns) - static_cast<double>(its[i - 1].end_ns));
  double m = median(gaps);
  if (m <= 0) return measured_ns;
  double n = 0, sk = 0, st = 0, skk = 0, skt = 0, k = 0;
  for (size_t i = 0; i < its.size(); ++i) {
    if (i > 0) k += std::round(gaps[i - 1] / m);
    double t = static_cast<double>(its[i].end_ns) - static_cast<double>(its.front().end_ns);
    n += 1;
    sk += k;
    st += t;
    skk += k * k;
    skt += k * t;
  }
  double var = n * skk - sk * sk;
  return var > 0 ? (n * skt - sk * st) / var : measured_ns;
}

}  // namespace netprism::analysis
