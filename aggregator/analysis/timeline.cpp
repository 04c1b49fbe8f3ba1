// Stage 4: iteration boundaries and per-iteration synchronisation details.
//
// With data parallelism the boundary is the end of the first stage's DP synchronisation (the first stage
// finishes its backward pass last, so its synchronisation closes the iteration). A synchronisation is found
// as a cluster of DP transfers in which every DP direction of the group is active (every all-reduce
// algorithm ends with a step that uses all its links; a member that is early alone only covers its own
// link), followed by the long quiet gap of the next forward/backward pass.
// Without data parallelism the boundary is the first activation the first stage sends after all the
// previous iteration's micro-batches returned (outstanding activation volume back to zero): the end of its
// transfer, and with several ranks per stage (tensor parallelism) the latest rank's (see pipeline_drains).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <tuple>

#include "stages.hpp"

namespace netprism::analysis {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  size_t m = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<long>(m), v.end());
  double hi = v[m];
  if (v.size() % 2) return hi;
  double lo = *std::max_element(v.begin(), v.begin() + static_cast<long>(m));
  return (lo + hi) / 2;
}

// Typical size of the messages in `sizes`: the median over those of at least a tenth of the largest, so
// that small control messages (notifications, barriers) riding the same connection do not drag it down.
double typical_size(std::vector<double> sizes) {
  if (sizes.empty()) return 0;
  double top = *std::max_element(sizes.begin(), sizes.end());
  std::erase_if(sizes, [&](double x) { return x < 0.1 * top; });
  return median(std::move(sizes));
}

double mad(const std::vector<double>& v, double med) {
  std::vector<double> d;
  d.reserve(v.size());
  for (double x : v) d.push_back(std::fabs(x - med));
  return median(std::move(d));
}

namespace {

// Transfers of one DP exchange that follow each other within 1 ms belong to the same burst of activity:
// the same idle-gap rule the probe uses to cut flowlets.
constexpr uint64_t kClusterGapNs = 1'000'000;
// A direction of a DP edge counts towards "full coverage" when it carries at least 10 % of the group's
// busiest direction: ring and pairwise algorithms load every used direction about equally, and pure-ACK or
// leftover directions carry far less.
constexpr double kSignificantDirection = 0.10;
// Two classes of gaps after a full-coverage cluster: inside one synchronisation (network latency and
// reductions, milliseconds) and between iterations (a forward/backward pass). Only when the classes differ
// by more than 8x in their geometric means are they treated as two; otherwise every gap is between
// iterations. Measured on the testbed: intra-synchronisation gaps are 0.1-10 ms, steps 0.25-0.7 s (> 40x); a
// benign pause of a few steps among single-burst synchronisations is < 8x and must not look like a class.
constexpr double kGapClassRatio = 8.0;
// Gaps between iterations: one per iteration; three is the fewest that makes a timeline (see job_grouping).
constexpr size_t kMinInterGaps = 3;
// Leading boundaries that make an iteration shorter than half the median come from starting to watch in the
// middle of an iteration; they are dropped (a real iteration never runs at twice the speed of its peers).
constexpr double kShortLeadingIteration = 0.5;
// Pipelines without DP (see pipeline_drains): the drain-to-next-activation gap of an iteration is compared
// with the median of the gaps of its neighbours (3 on each side: an isolated disturbance stands out against
// 6 undisturbed neighbours, while a lasting change such as a straggler shifts the neighbours with it).
constexpr size_t kGapNeighbours = 3;
// A gap further from its neighbours' median than 3 robust standard deviations (1.4826 x MAD) of all gaps'
// deviations is a disturbance rather than jitter (3 sigma: about 1 in 400 undisturbed gaps is flagged).
constexpr double kGapOutlierSigmas = 3.0;
// ... and at least 1 % of the step apart: the duration error allowed per iteration is of that order, so a
// smaller disagreement is not worth trading one estimate for the other.
constexpr double kGapOutlierMinShare = 0.01;
// A gap outlier is put on the first activation alone (the boundary then follows the drain) only when the
// starts moved at least 4x as far from their neighbours' midpoint as the drains did. When the first
// activation moved alone (the iterations after it kept their pace), the drains stay on their line and their
// displacement is step-to-step jitter, a fraction of the outlier that triggered the check (>= 3 sigma). A
// disturbance of the first stage's compute (its last backward pass before the boundary, or its optimizer
// step and first forward pass after it) delays everything that follows, so both series move by about half
// of it, and the network cannot tell on which side of the boundary it happened: the start stays then (the
// backward pass, twice a forward pass, is the larger share of that stretch). Measured: a heavily loaded
// testbed run (3 CPU burners beside the ranks) whose last backward pass overran by 17 ms: ratio 3.7; the
// two_jobs sample's first activation that came 7 ms late on its own: ratio 26.
constexpr double kDisplacedRatio = 4.0;
// The last iteration of a pipeline without DP ends at its drain plus the median of the last 12 drain-to-start
// gaps: the daemon re-analyses a tail of at least 16 iterations (incremental.hpp, kTailIterations), so it
// sees the same 12 as an analysis of the whole run.
constexpr size_t kLastDelays = 12;
// A transfer record carries one activation when it is at most 1.5 x the typical activation (messages of
// one pipeline edge have one size; two merged ones are 2x).
constexpr double kOneMessage = 1.5;

// Otsu split of log-gaps; returns the threshold (ns) above which a gap separates iterations.
double inter_gap_threshold(std::vector<double> gaps) {
  if (gaps.size() < 2) return 0;
  for (double& g : gaps) g = std::log(std::max(g, 1.0));
  std::sort(gaps.begin(), gaps.end());
  size_t n = gaps.size();
  std::vector<double> pre(n + 1, 0);
  for (size_t i = 0; i < n; ++i) pre[i + 1] = pre[i] + gaps[i];
  double best = -1;
  size_t cut = 0;
  for (size_t k = 1; k < n; ++k) {
    double m0 = pre[k] / static_cast<double>(k), m1 = (pre[n] - pre[k]) / static_cast<double>(n - k);
    double w = static_cast<double>(k) * static_cast<double>(n - k) * (m1 - m0) * (m1 - m0);
    if (w > best) {
      best = w;
      cut = k;
    }
  }
  double m0 = pre[cut] / static_cast<double>(cut), m1 = (pre[n] - pre[cut]) / static_cast<double>(n - cut);
  if (m1 - m0 < std::log(kGapClassRatio)) return 0;
  // Otsu weighs classes by their size: many sub-millisecond gaps (the chunks of a ring all-reduce) pull
  // its cut into the upper tail of the intra-synchronisation gaps (the tens of ms a shaped link leaves
  // between the last pieces of one synchronisation). The boundary between the classes is the widest empty
  // stretch of log-gaps at or above Otsu's cut, keeping at least kMinInterGaps gaps above it (a class of
  // iteration gaps has one per iteration; a pause or two alone is not one).
  size_t best_k = cut;
  for (size_t k = cut + 1; k + kMinInterGaps <= n; ++k)
    if (gaps[k] - gaps[k - 1] > gaps[best_k] - gaps[best_k - 1]) best_k = k;
  return std::exp((gaps[best_k - 1] + gaps[best_k]) / 2);
}

bool is_dp_xfer(const Structure& s, const Xfer& x, int group) {
  return s.group_of[x.src] == group && s.group_of[x.dst] == group && s.stage_of[x.src] == s.stage_of[x.dst];
}

// A pipeline send of one of the group's members: to a node of another stage.
bool is_pp_send(const Structure& s, const Xfer& x, int group) {
  return s.group_of[x.src] == group && s.stage_of[x.dst] >= 0 && s.stage_of[x.dst] != s.stage_of[x.src];
}

// Between two synchronisations of its DP group a stage runs a forward/backward pass and sends its pipeline
// neighbours data (activations downstream, gradients upstream); during one it sends them nothing new (a
// training loop waits for its pipeline sends before the all-reduce; one that overlaps the all-reduce with
// the backward pass sends inside it, and then nothing is merged, as before). A synchronisation stalled on
// a shaped link (a retransmission timeout after the shaper's drops leaves a gap as long as the compute
// between iterations: 380 ms in a testbed run with 700 ms steps) splits into two complete-looking episodes
// with no pipeline send of the group's members starting between their ends: one synchronisation, the
// later end kept. The spacing rules of build_timeline miss it (the first end is not close to the second),
// and pairing by order would put every later synchronisation of the group one iteration early. Only where
// the members' pipeline sends were seen at all: a job without pipeline stages, or whose pipeline sends
// were not captured, keeps every end.
std::vector<uint64_t> merge_stalled(const std::vector<uint64_t>& ends, const JobSlice& job,
                                    const Structure& s, int group) {
  std::vector<uint64_t> pp_sends;  // start of each pipeline send of a member, in time order
  for (const Xfer& x : job.xfers)
    if (is_pp_send(s, x, group)) pp_sends.push_back(x.t0);
  if (pp_sends.empty()) return ends;
  std::vector<uint64_t> merged;
  for (uint64_t e : ends) {
    if (!merged.empty() && std::upper_bound(pp_sends.begin(), pp_sends.end(), merged.back()) ==
                               std::lower_bound(pp_sends.begin(), pp_sends.end(), e))
      merged.back() = e;
    else
      merged.push_back(e);
  }
  return merged;
}

}  // namespace

// Ends of each synchronisation of one DP group, in time order.
std::vector<uint64_t> sync_ends(const JobSlice& job, const Structure& s, int group) {
  std::map<std::pair<uint32_t, uint32_t>, uint64_t> dir_bytes;
  std::vector<const Xfer*> xs;
  for (const Xfer& x : job.xfers)
    if (is_dp_xfer(s, x, group)) {
      xs.push_back(&x);
      dir_bytes[{x.src, x.dst}] += x.bytes;
    }
  if (xs.empty()) return {};
  uint64_t top = 0;
  for (auto& [k, b] : dir_bytes) top = std::max(top, b);
  std::map<std::pair<uint32_t, uint32_t>, size_t> dir_idx;
  for (auto& [k, b] : dir_bytes)
    if (static_cast<double>(b) >= kSignificantDirection * static_cast<double>(top))
      dir_idx.emplace(k, dir_idx.size());

  // Bursts: transfers within 1 ms of each other. Each remembers which significant directions it used.
  struct Burst {
    uint64_t start, end;
    std::vector<char> used;
  };
  std::vector<Burst> cl;
  for (const Xfer* x : xs) {
    if (cl.empty() || x->t0 > cl.back().end + kClusterGapNs)
      cl.push_back({x->t0, x->t1, std::vector<char>(dir_idx.size(), 0)});
    cl.back().end = std::max(cl.back().end, x->t1);
    auto it = dir_idx.find({x->src, x->dst});
    if (it != dir_idx.end()) cl.back().used[it->second] = 1;
  }
  // Synchronisations: bursts joined across the short gaps (inside one all-reduce) as opposed to the long
  // ones (compute between iterations); a synchronisation counts when it used every significant direction.
  std::vector<double> gaps;
  for (size_t i = 0; i + 1 < cl.size(); ++i) gaps.push_back(static_cast<double>(cl[i + 1].start - cl[i].end));
  // Every episode's start (complete or not) and, for complete ones, the index of their end in `ends`.
  std::vector<uint64_t> ep_start;
  std::vector<long> ep_end;
  auto episodes = [&](double thr) {
    std::vector<uint64_t> ends;
    std::vector<char> used(dir_idx.size(), 0);
    ep_start.clear();
    ep_end.clear();
    uint64_t start = 0;
    bool open = false;
    for (size_t i = 0; i < cl.size(); ++i) {
      if (!open) start = cl[i].start;
      open = true;
      for (size_t d = 0; d < used.size(); ++d) used[d] |= cl[i].used[d];
      bool last = i + 1 == cl.size();
      if (!last && static_cast<double>(cl[i + 1].start - cl[i].end) <= thr) continue;
      ep_start.push_back(start);
      ep_end.push_back(-1);
      if (std::all_of(used.begin(), used.end(), [](char c) { return c != 0; })) {
        ep_end.back() = static_cast<long>(ends.size());
        ends.push_back(cl[i].end);
      }
      std::fill(used.begin(), used.end(), 0);
      open = false;
    }
    return ends;
  };
  double thr = inter_gap_threshold(gaps);
  std::vector<uint64_t> ends = episodes(thr);
  // A gap inside one synchronisation is far shorter than a step. When the split found is not (a long pause
  // among otherwise single-burst synchronisations makes the steps themselves look "short"), there is only
  // one class of gaps. Half a step: the split sits at the geometric middle of the two classes, so for real
  // intra-synchronisation gaps (milliseconds) it is far below it.
  std::vector<double> spacing;
  for (size_t i = 0; i + 1 < ends.size(); ++i) spacing.push_back(static_cast<double>(ends[i + 1] - ends[i]));
  if (thr > 0 && (spacing.size() < 2 || thr > 0.5 * median(spacing))) {
    thr = 0;
    ends = episodes(thr);
  }
  // A synchronisation ends at its members when the last data arrives, which the sender's view misses on a
  // shaped or congested link (the data leaves at once and queues on the way). Where the receivers' own views
  // exist (agents' ingress), each arrival extends the synchronisation that was under way when it began
  // arriving: the latest episode started at or before it, provided no later episode had started (its data
  // cannot arrive before it was sent, and an episode's data arrives before the next one begins).
  size_t extended = 0;
  for (const Xfer& a : job.arrivals) {
    if (!is_dp_xfer(s, a, group)) continue;
    auto it = std::upper_bound(ep_start.begin(), ep_start.end(), a.t0);
    if (it == ep_start.begin()) continue;
    long e = ep_end[static_cast<size_t>(it - ep_start.begin()) - 1];
    if (e < 0) continue;
    uint64_t& end = ends[static_cast<size_t>(e)];
    if (a.t1 > end) {
      end = a.t1;
      ++extended;
    }
  }
  std::sort(ends.begin(), ends.end());  // an extension never passes the next episode's start, but keep order
  ends = iteration_ends(xs, ends);      // bucketed synchronisations: one end per iteration
  if (std::getenv("NP_ANALYSIS_DEBUG"))
    std::fprintf(stderr,
                 "group %d: %zu dirs, %zu bursts, thr %.1f ms, %zu syncs, %zu ends extended by arrivals\n",
                 group, dir_idx.size(), cl.size(), thr / 1e6, ends.size(), extended);
  return ends;
}

namespace {

// Iteration boundaries of a pipeline without DP, from its drain points: the end of the gradient transfer that
// brings the first stage's outstanding activation volume back to zero (every micro-batch of the iteration has
// come back). Activations count when they start, gradients when they end (causal order); the balance restarts
// from zero at every drain, so a lost or repeated packet cannot drift it beyond one iteration.
struct PipelineBoundaries {
  std::vector<uint64_t> boundaries;
  std::vector<uint64_t> drains;  // per boundary: the drain before it (its iteration's data begins after it)
};
PipelineBoundaries pipeline_drains(const JobSlice& job, const Structure& s) {
  if (s.stages.size() < 2) return {};
  // The busiest first-stage -> second-stage edge.
  std::map<std::pair<uint32_t, uint32_t>, uint64_t> vol;
  for (const Xfer& x : job.xfers)
    if (s.stage_of[x.src] == 0 && s.stage_of[x.dst] == 1) vol[{x.src, x.dst}] += x.bytes;
  if (vol.empty()) return {};
  auto best = std::max_element(vol.begin(), vol.end(), [](auto& a, auto& b) { return a.second < b.second; });
  auto [u, v] = best->first;
  std::vector<double> a_sizes;
  struct Ev {
    uint64_t t;     // activations: start; gradients: end (causal order)
    double b;       // +bytes activation, -bytes gradient
    uint64_t t1;    // the transfer's end
    uint32_t conn;  // connection (one per rank pair: several with tensor parallelism)
    bool operator<(const Ev& o) const { return std::tie(t, b, t1, conn) < std::tie(o.t, o.b, o.t1, o.conn); }
  };
  std::vector<Ev> ev;
  for (const Xfer& x : job.xfers) {
    if (x.src == u && x.dst == v) {
      ev.push_back({x.t0, static_cast<double>(x.bytes), x.t1, x.conn});
      a_sizes.push_back(static_cast<double>(x.bytes));
    }
    if (x.src == v && x.dst == u) ev.push_back({x.t1, -static_cast<double>(x.bytes), x.t1, x.conn});
  }
  std::sort(ev.begin(), ev.end());
  // Half of a typical activation transfer: below it the pipeline holds no micro-batch.
  double typical = typical_size(a_sizes), eps = 0.5 * typical;
  std::vector<uint64_t> drains, starts;  // starts[k]: first activation after drains[k] (0: none yet)
  double out = 0;
  bool drained = true;
  // Connections whose first activation after the last drain was seen; open while only activations have
  // followed the drain (the first micro-batch leaves every rank of the first stage before any gradient
  // comes back).
  std::set<uint32_t> first_seen;
  bool first_open = false;
  // Activation volume sent since the previous drain, per drain.
  std::vector<double> seg_vol;
  double seg = 0;
  for (const Ev& e : ev) {
    // Messages far below an activation (barriers, notifications) neither open nor close an iteration.
    if (std::fabs(e.b) < eps) continue;
    if (e.b > 0) {
      // The first activation's time is when its transfer ended: a transfer record (flowlet) starts with
      // whatever packet of that direction came shortly before the data, and a pure ACK often does (the
      // delayed ACK of the second stage's "ready to receive" notification, sent ~40 ms after it, lands a
      // few ms before the first forward pass ends: up to 3.6 ms early with the agents' 4 ms flowlet gap,
      // measured on the live testbed), whereas nothing of the first stage follows it until its next forward
      // pass ends. A record that holds more than one activation (micro-batches quicker than the flowlet
      // gap) ends with a later micro-batch: its start is used then.
      uint64_t at = e.b <= kOneMessage * typical ? e.t1 : e.t;
      if (drained && !drains.empty() && starts.size() < drains.size()) {
        starts.push_back(at);
        first_seen = {e.conn};
        first_open = true;
      } else if (first_open && first_seen.insert(e.conn).second) {
        // With tensor parallelism every rank of the first stage sends its own first activation, each when
        // that rank is done with its optimizer step and first forward pass; the ranks leave the previous
        // iteration at different times (ms apart), and the iteration is over when the last one does, so
        // the latest of the ranks' first activations is the one that follows the boundary.
        starts.back() = std::max(starts.back(), at);
      }
      drained = false;
      out += e.b;
      seg += e.b;
    } else {
      first_open = false;
      if (drained) continue;
      out = std::max(0.0, out + e.b);
      if (out <= eps) {
        out = 0;
        drained = true;
        drains.push_back(e.t);
        seg_vol.push_back(seg);
        seg = 0;
      }
    }
  }
  // The boundary is the first activation of the next iteration: the first stage's own schedule (its
  // optimizer step, then its first forward pass) separates it from the end of the previous iteration by a
  // constant, while the drain inherits the jitter of every downstream stage (measured on the testbed: 0.1 %
  // vs 0.9 % median duration error). The last iteration, with no next activation, ends at its drain plus
  // the median drain-to-start delay.
  //
  // The gap between the drain and the next first activation is a fixed stretch of the first stage's compute
  // (its last backward pass, the optimizer step, its first forward pass), so from iteration to iteration it
  // varies only by compute jitter. When one gap is far off its neighbours (a one-off disturbance of that
  // stretch, e.g. a warm-up allocation or a descheduled rank in the first forward after the optimizer), the
  // start-based boundary would carry the whole disturbance; the boundary is then taken from the drain plus
  // the neighbours' typical gap, which only carries the usual backward-pass jitter when the disturbance came
  // after the boundary (its forward pass) -- and no more than the start-based one would when it came before.
  // A drain ends an iteration only when the first stage then goes quiet on this edge for its last backward
  // pass, optimizer step and first forward pass. In 1F1B with few activations in flight (two stages: one
  // after the warm-up), the outstanding gradient can come back just before the next activation leaves (the
  // frameworks' send and receive cross, e.g. a batched send-activation/receive-gradient): the balance
  // touches zero in the middle of an iteration, and the next activation follows at once. Every iteration
  // sends the same activation volume (its micro-batches, from every rank of the first stage), so a drain
  // after which the largest volume between two drains went out (less half an activation) is surely an
  // iteration's end; the median of those drains' gaps to the next activation is the quiet of a true drain,
  // and a drain followed by an activation within an eighth of it (kGapClassRatio, as for synchronisation
  // gaps) is a crossing, dropped with that activation. A long gap (a pause) leaves the median alone.
  if (!seg_vol.empty()) {
    double whole = *std::max_element(seg_vol.begin(), seg_vol.end()) - eps;
    std::vector<double> sure;
    for (size_t k = 0; k < starts.size(); ++k)
      if (seg_vol[k] >= whole) sure.push_back(static_cast<double>(starts[k] - drains[k]));
    if (!sure.empty()) {
      double quiet = median(sure) / kGapClassRatio;
      std::vector<uint64_t> kept_d, kept_s;
      for (size_t k = 0; k < drains.size(); ++k) {
        if (k < starts.size() && static_cast<double>(starts[k] - drains[k]) < quiet) continue;
        kept_d.push_back(drains[k]);
        if (k < starts.size()) kept_s.push_back(starts[k]);
      }
      drains = std::move(kept_d);
      starts = std::move(kept_s);
    }
  }
  std::vector<double> delay;
  for (size_t k = 0; k < starts.size(); ++k) delay.push_back(static_cast<double>(starts[k] - drains[k]));
  double d = median(delay);
  std::vector<double> local(delay.size(), d), dev(delay.size(), 0);
  for (size_t k = 0; k < delay.size(); ++k) {
    std::vector<double> nb;
    for (size_t j = k >= kGapNeighbours ? k - kGapNeighbours : 0; j < delay.size() && j <= k + kGapNeighbours;
         ++j)
      if (j != k) nb.push_back(delay[j]);
    if (!nb.empty()) local[k] = median(nb);
    dev[k] = delay[k] - local[k];
  }
  double sigma = 1.4826 * mad(dev, median(dev));
  std::vector<double> spacing;
  for (size_t k = 0; k + 1 < starts.size(); ++k)
    spacing.push_back(static_cast<double>(starts[k + 1] - starts[k]));
  double tol = std::max(kGapOutlierSigmas * sigma, kGapOutlierMinShare * median(spacing));
  std::vector<uint64_t> out_b;
  // Which side moved: the anchor displaced from the midpoint of its own previous and next occurrence is the
  // disturbed one (steps change smoothly from one iteration to the next); see kDisplacedRatio.
  auto displaced = [](const std::vector<uint64_t>& v, size_t k) {
    return std::fabs(static_cast<double>(v[k]) -
                     (static_cast<double>(v[k - 1]) + static_cast<double>(v[k + 1])) / 2);
  };
  // The last iteration's delay: the median of the last kLastDelays gaps rather than of all, so that the
  // daemon's analysis of its recent tail gives the same end as the analysis of the whole run.
  double d_last = median(
      std::vector<double>(delay.end() - static_cast<long>(std::min(delay.size(), kLastDelays)), delay.end()));
  for (size_t k = 0; k < drains.size(); ++k) {
    if (k >= starts.size())
      out_b.push_back(drains[k] + static_cast<uint64_t>(d_last));
    else if (std::fabs(dev[k]) > tol && delay.size() > 2 * kGapNeighbours && k > 0 && k + 1 < starts.size() &&
             displaced(starts, k) > kDisplacedRatio * displaced(drains, k))
      out_b.push_back(drains[k] + static_cast<uint64_t>(local[k]));
    else
      out_b.push_back(starts[k]);
  }
  return {std::move(out_b), std::move(drains)};
}

}  // namespace

// The truth of an iteration boundary is the moment the job's ranks come out of their synchronisation; with
// several stages they do so at different times (the last stage first). The boundary is therefore the median,
// over the stages, of each stage's end: its DP group's synchronisation end, or without DP its last gradient
// sent upstream (the first stage: the drain). Iterations are delimited by a reference (the first stage's
// synchronisation or drain) and each stage's end is attached to the nearest reference within
// (-0.6, +0.4] of a step: stages finish before the first one, a faulty one may finish a little after it.
Timeline build_timeline(const Normalized& n, const JobSlice& job, const Structure& s) {
  Timeline t;
  if (const char* dump = std::getenv("NP_ANALYSIS_DUMP"); dump && !job.nodes.empty()) {
    std::string path = std::string(dump) + "." + n.nodes[job.nodes[0]] + ".csv";
    if (FILE* f = std::fopen(path.c_str(), "w")) {
      std::fprintf(f, "kind,src,dst,src_stage,dst_stage,t0,t1,bytes\n");
      for (const auto* list : {&job.xfers, &job.arrivals})
        for (const Xfer& x : *list)
          std::fprintf(f, "%c,%s,%s,%d,%d,%llu,%llu,%llu\n", list == &job.xfers ? 'x' : 'a',
                       n.nodes[x.src].c_str(), n.nodes[x.dst].c_str(), s.stage_of[x.src], s.stage_of[x.dst],
                       static_cast<unsigned long long>(x.t0), static_cast<unsigned long long>(x.t1),
                       static_cast<unsigned long long>(x.bytes));
      std::fclose(f);
    }
  }
  int ref = -1;
  for (size_t g = 0; g < s.dp_groups.size(); ++g)
    if (ref < 0 || s.stage_of[s.dp_groups[g][0]] < s.stage_of[s.dp_groups[static_cast<size_t>(ref)][0]] ||
        (s.stage_of[s.dp_groups[g][0]] == s.stage_of[s.dp_groups[static_cast<size_t>(ref)][0]] &&
         s.dp_groups[g].size() > s.dp_groups[static_cast<size_t>(ref)].size()))
      ref = static_cast<int>(g);
  std::vector<uint64_t> refb, ref_from;  // ref_from: pipelines without DP, where each iteration's data begins
  if (ref >= 0) {
    refb = merge_stalled(sync_ends(job, s, ref), job, s, ref);
  } else {
    PipelineBoundaries pb = pipeline_drains(job, s);
    refb = std::move(pb.boundaries);
    ref_from = std::move(pb.drains);
  }
  std::vector<double> rd;
  for (size_t i = 0; i + 1 < refb.size(); ++i) rd.push_back(static_cast<double>(refb[i + 1] - refb[i]));
  // A synchronisation stretched by a slow link can split into several complete episodes: spacings then
  // alternate short and long. The step is the median of the upper half of the spacings (every spacing when
  // they are all steps; only the long ones otherwise), and reference ends closer than half of it are one
  // synchronisation (the later end kept).
  if (ref >= 0 && rd.size() >= 4) {
    std::vector<double> sorted = rd;
    std::sort(sorted.begin(), sorted.end());
    double step =
        median(std::vector<double>(sorted.begin() + static_cast<long>(sorted.size() / 2), sorted.end()));
    std::vector<uint64_t> merged;
    for (uint64_t e : refb) {
      if (!merged.empty() && static_cast<double>(e - merged.back()) < 0.5 * step)
        merged.back() = e;
      else
        merged.push_back(e);
    }
    refb = std::move(merged);
    rd.clear();
    for (size_t i = 0; i + 1 < refb.size(); ++i) rd.push_back(static_cast<double>(refb[i + 1] - refb[i]));
  }
  double T = median(rd);
  auto slot = [&](uint64_t e) -> int {
    auto it =
        std::lower_bound(refb.begin(), refb.end(), e > 0.4 * T ? e - static_cast<uint64_t>(0.4 * T) : 0);
    if (it == refb.end()) return -1;
    if (static_cast<double>(*it) - 0.6 * T >= static_cast<double>(e)) return -1;
    return static_cast<int>(it - refb.begin());
  };
  std::vector<std::vector<uint64_t>> ends_at(refb.size());
  std::vector<std::vector<uint64_t>> group_end(s.dp_groups.size(), std::vector<uint64_t>(refb.size(), 0));
  std::vector<std::vector<uint64_t>> group_ends(s.dp_groups.size());
  if (ref >= 0) {
    for (size_t g = 0; g < s.dp_groups.size(); ++g) {
      group_ends[g] = static_cast<int>(g) == ref ? refb : sync_ends(job, s, static_cast<int>(g));
      // Pair the group's synchronisations with the reference's in order: one per iteration each, so the
      // k-th of one is the (k + shift)-th of the other, with the shift that brings them closest. Pairing by
      // order (not by nearest time) keeps a stage whose synchronisation slowed down by half a step (a
      // shaped link) in its own iteration.
      // A synchronisation stretched by a slow link can break into several complete-looking episodes; two
      // ends closer than half a step belong to one synchronisation (keep the later).
      auto& E = group_ends[g];
      if (static_cast<int>(g) != ref) {
        std::vector<uint64_t> merged;
        for (uint64_t e : merge_stalled(E, job, s, static_cast<int>(g))) {
          if (!merged.empty() && static_cast<double>(e - merged.back()) < 0.5 * T)
            merged.back() = e;
          else
            merged.push_back(e);
        }
        E = std::move(merged);
      }
      long best_shift = 0;
      double best_cost = -1;
      for (long sh = -2; sh <= 2; ++sh) {
        std::vector<double> d;
        for (size_t k = 0; k < refb.size(); ++k) {
          long j = static_cast<long>(k) + sh;
          if (j >= 0 && j < static_cast<long>(E.size()))
            d.push_back(
                std::fabs(static_cast<double>(E[static_cast<size_t>(j)]) - static_cast<double>(refb[k])));
        }
        if (d.size() * 2 < refb.size()) continue;
        double c = median(d);
        if (best_cost < 0 || c < best_cost) {
          best_cost = c;
          best_shift = sh;
        }
      }
      if (std::getenv("NP_ANALYSIS_DEBUG") && !refb.empty()) {
        std::fprintf(stderr, "group %zu: shift %ld (cost %.1f ms), ends:", g, best_shift, best_cost / 1e6);
        for (uint64_t e : E)
          std::fprintf(stderr, " %.1f", (static_cast<double>(e) - static_cast<double>(refb[0])) / 1e6);
        std::fprintf(stderr, "\n");
      }
      // The window is three quarters of the step around this very slot (the spacing to the neighbouring
      // reference end on the side the group's end lies), never less than of the median step. A group's
      // synchronisation of iteration k ends before the reference's of iteration k + 1 (every stage's next
      // backward pass waits for its optimizer step), so when a fault lengthens the steps the group may lag
      // the reference by more than the median step of a run that was faster before: the local step still
      // holds it, and a group end paired one synchronisation off (a step away) still falls outside.
      auto span = [&](size_t k, bool after) {
        double d = T;
        if (after && k + 1 < refb.size()) d = static_cast<double>(refb[k + 1] - refb[k]);
        if (!after && k > 0) d = static_cast<double>(refb[k] - refb[k - 1]);
        return std::max(d, T);
      };
      for (size_t k = 0; k < refb.size(); ++k) {
        long j = static_cast<long>(k) + best_shift;
        if (j < 0 || j >= static_cast<long>(E.size())) continue;
        uint64_t e = E[static_cast<size_t>(j)];
        if (std::fabs(static_cast<double>(e) - static_cast<double>(refb[k])) > 0.75 * span(k, e > refb[k]))
          continue;
        group_end[g][k] = e;
      }
      // A stretched synchronisation (a shaped link turns it into a trickle of partial bursts) ends with its
      // last transfer: within half a step of the reference, the group's latest DP transfer end wins.
      if (static_cast<int>(g) != ref) {
        auto latest = [&](const Xfer& x) {
          auto it = std::lower_bound(
              refb.begin(), refb.end(),
              x.t1 > static_cast<uint64_t>(0.5 * T) ? x.t1 - static_cast<uint64_t>(0.5 * T) : 0);
          if (it == refb.end() || static_cast<double>(*it) + 0.5 * T < static_cast<double>(x.t1)) return;
          size_t k = static_cast<size_t>(it - refb.begin());
          if (x.t1 > group_end[g][k]) group_end[g][k] = x.t1;
        };
        // Sender views and, where seen, the receivers' (arrivals on a shaped link come later).
        for (const auto* list : {&job.xfers, &job.arrivals})
          for (const Xfer& x : *list)
            if (is_dp_xfer(s, x, static_cast<int>(g))) latest(x);
        // A member on a shaped link can still be receiving the last data of its synchronisation long after
        // its peers finished (206 ms in a testbed run, beyond the half step above once the fault had made
        // the steps longer). Data for a member belongs to the group's synchronisation that ended before it
        // as long as that member has sent no pipeline data since: its next forward/backward pass only
        // starts once its all-reduce returned, and its part of the next synchronisation comes after that
        // pass. Without that member's pipeline sends in view nothing is extended.
        std::map<uint32_t, std::vector<uint64_t>> member_pp;  // member -> starts of its pipeline sends
        for (const Xfer& x : job.xfers)
          if (is_pp_send(s, x, static_cast<int>(g))) member_pp[x.src].push_back(x.t0);
        std::vector<uint64_t> paired;  // the group's ends so far, in time order, and their slots
        std::vector<size_t> paired_slot;
        for (size_t k = 0; k < refb.size(); ++k)
          if (group_end[g][k]) {
            paired.push_back(group_end[g][k]);
            paired_slot.push_back(k);
          }
        for (const auto* list : {&job.xfers, &job.arrivals})
          for (const Xfer& x : *list) {
            if (!is_dp_xfer(s, x, static_cast<int>(g))) continue;
            auto it = std::lower_bound(paired.begin(), paired.end(), x.t1);
            if (it == paired.begin()) continue;
            uint64_t e = *(it - 1);  // the latest end before this transfer's
            // The receiver must also go on to a next pass after it (it could, once its all-reduce had this
            // data): a member that never sends again (hung) is not waiting for a late tail, and what reaches
            // it is a peer's first chunk of the next synchronisation (a peer that joined it sends at once).
            // The sender is not asked: the tail is often its retransmission after the shaper's drops, sent
            // when its own all-reduce had long returned.
            auto rcv = member_pp.find(x.dst);
            if (rcv == member_pp.end()) continue;
            const auto& pp = rcv->second;
            if (x.t0 > e &&
                std::upper_bound(pp.begin(), pp.end(), e) != std::lower_bound(pp.begin(), pp.end(), x.t0))
              continue;
            if (std::upper_bound(pp.begin(), pp.end(), x.t1) == pp.end()) continue;
            uint64_t& ge = group_end[g][paired_slot[static_cast<size_t>(it - paired.begin()) - 1]];
            ge = std::max(ge, x.t1);
          }
        E.clear();
        for (uint64_t e : group_end[g])
          if (e) E.push_back(e);
      }
      for (size_t k = 0; k < refb.size(); ++k)
        if (group_end[g][k]) ends_at[k].push_back(group_end[g][k]);
    }
  }

  // Boundaries: the end of each iteration's last synchronisation over the stages (the DP groups finish one
  // after the other, the first stage usually last; a stage slowed by its links can finish later). Without
  // DP, the drain of the pipeline at the first stage.
  //
  // Each group's end as a boundary is the median over its members of when the last data for each member
  // arrived (the receivers' own views where seen, else the senders'): the members of one synchronisation
  // agree on its end up to their links' delivery, and one member on a slow link finishes later than the
  // group as a whole (the testbed's truth reads the group's end the same way). The window reaches back to
  // the group's previous end, and at least half a step before its last transfer (a stretched
  // synchronisation and its late tail stay inside it, see above). group_end itself (the last transfer)
  // stays the synchronisation's end for the phases and the diagnosis.
  std::vector<std::vector<uint64_t>> member_end(s.dp_groups.size(), std::vector<uint64_t>(refb.size(), 0));
  if (ref >= 0)
    for (size_t g = 0; g < s.dp_groups.size(); ++g) {
      std::vector<uint64_t> ends;  // slots with an end, in time order, and their slot index
      std::vector<size_t> slots;
      for (size_t k = 0; k < refb.size(); ++k)
        if (group_end[g][k]) {
          ends.push_back(group_end[g][k]);
          slots.push_back(k);
        }
      std::vector<std::map<uint32_t, uint64_t>> last(ends.size());
      for (const auto* list : {&job.xfers, &job.arrivals})
        for (const Xfer& x : *list) {
          if (!is_dp_xfer(s, x, static_cast<int>(g))) continue;
          auto it = std::lower_bound(ends.begin(), ends.end(), x.t1);
          if (it == ends.end()) continue;
          // Since the group's previous end (every transfer after it is this synchronisation's, its tail
          // included, see above), and at least the half step before its end.
          uint64_t from = it == ends.begin() ? 0 : *(it - 1);
          if (static_cast<double>(*it - x.t1) > 0.5 * T && x.t1 <= from) continue;
          uint64_t& l = last[static_cast<size_t>(it - ends.begin())][x.dst];
          l = std::max(l, x.t1);
        }
      for (size_t i = 0; i < ends.size(); ++i) {
        std::vector<double> m;
        for (auto& [node, tl] : last[i]) m.push_back(static_cast<double>(tl));
        member_end[g][slots[i]] = m.empty() ? ends[i] : static_cast<uint64_t>(median(std::move(m)));
      }
    }
  if (std::getenv("NP_ANALYSIS_DEBUG") && !refb.empty()) {
    uint64_t o = refb[0];
    auto ms = [&](uint64_t v) { return v ? (static_cast<double>(v) - static_cast<double>(o)) / 1e6 : -1.0; };
    std::fprintf(stderr, "timeline: step %.1f ms; per slot: reference end, then per group: end, member end\n",
                 T / 1e6);
    for (size_t k = 0; k < refb.size(); ++k) {
      std::fprintf(stderr, "  slot %2zu ref %9.1f", k, ms(refb[k]));
      for (size_t g = 0; g < s.dp_groups.size(); ++g)
        std::fprintf(stderr, " | g%zu %9.1f %9.1f", g, ms(group_end[g][k]), ms(member_end[g][k]));
      std::fprintf(stderr, "\n");
    }
  }
  std::vector<size_t> slot_of;  // boundary index -> reference slot
  for (size_t k = 0; k < refb.size(); ++k) {
    uint64_t b = 0;
    if (ref >= 0) {
      for (size_t g = 0; g < s.dp_groups.size(); ++g) b = std::max(b, member_end[g][k]);
      if (b == 0) b = refb[k];
    } else {
      b = refb[k];
    }
    if (!t.boundaries.empty() && b <= t.boundaries.back()) continue;
    t.boundaries.push_back(b);
    t.data_from.push_back(ref >= 0 ? b : ref_from[k]);
    slot_of.push_back(k);
  }

  auto durations = [&]() {
    std::vector<double> d;
    for (size_t i = 0; i + 1 < t.boundaries.size(); ++i)
      d.push_back(static_cast<double>(t.boundaries[i + 1] - t.boundaries[i]));
    return d;
  };
  double med = median(durations());
  while (t.boundaries.size() >= 3 &&
         static_cast<double>(t.boundaries[1] - t.boundaries[0]) < kShortLeadingIteration * med) {
    t.boundaries.erase(t.boundaries.begin());
    t.data_from.erase(t.data_from.begin());
    slot_of.erase(slot_of.begin());
  }
  t.step_ns = median(durations());

  // Per iteration, per group: sync end and each member's join (first DP send after the group's previous
  // synchronisation). Iteration i ends at boundary i + 1.
  size_t iters = t.boundaries.size() > 1 ? t.boundaries.size() - 1 : 0;
  t.syncs.assign(iters, std::vector<Timeline::GroupSync>(s.dp_groups.size()));
  std::vector<int> iter_of_slot(refb.size(), -1);
  for (size_t i = 1; i < slot_of.size(); ++i) iter_of_slot[slot_of[i]] = static_cast<int>(i) - 1;
  std::vector<int> member_pos(s.group_of.size(), -1);  // node -> index in its DP group (no linear search)
  for (const auto& grp : s.dp_groups)
    for (size_t m = 0; m < grp.size(); ++m) member_pos[grp[m]] = static_cast<int>(m);
  for (size_t g = 0; g < s.dp_groups.size(); ++g) {
    const auto& members = s.dp_groups[g];
    for (size_t k = 0; k < refb.size(); ++k)
      if (iter_of_slot[k] >= 0 && group_end[g][k]) {
        auto& gs = t.syncs[static_cast<size_t>(iter_of_slot[k])][g];
        gs.end = group_end[g][k];
        gs.join.assign(members.size(), 0);
      }
    const auto& ends = group_ends[g];
    for (const Xfer& x : job.xfers) {
      if (!is_dp_xfer(s, x, static_cast<int>(g))) continue;
      auto it = std::lower_bound(ends.begin(), ends.end(), x.t0);
      if (it == ends.end()) continue;
      int k = slot(*it);
      if (k < 0 || iter_of_slot[static_cast<size_t>(k)] < 0 || group_end[g][static_cast<size_t>(k)] != *it)
        continue;
      auto& gs = t.syncs[static_cast<size_t>(iter_of_slot[static_cast<size_t>(k)])][g];
      size_t m = member_pos[x.src] >= 0 ? static_cast<size_t>(member_pos[x.src]) : members.size();
      if (m < members.size() && (gs.join[m] == 0 || x.t0 < gs.join[m])) gs.join[m] = x.t0;
      if (gs.start == 0 || x.t0 < gs.start) gs.start = x.t0;
    }
  }
  return t;
}

std::vector<Phase> node_phases(const Normalized& n, const JobSlice& job, const Structure& s,
                               const Timeline& t, size_t i) {
  std::vector<Phase> out;
  if (i + 1 >= t.boundaries.size()) return out;
  uint64_t lo = t.boundaries[i], hi = t.boundaries[i + 1];
  // Pipeline window per node, indexed by node (a map per transfer would cost a log factor on large jobs).
  std::vector<std::pair<uint64_t, uint64_t>> win(n.nodes.size(), {0, 0});
  std::vector<char> seen(n.nodes.size(), 0);
  auto first = std::lower_bound(job.xfers.begin(), job.xfers.end(), lo,
                                [](const Xfer& x, uint64_t v) { return x.t0 < v; });
  for (auto it = first; it != job.xfers.end() && it->t0 < hi; ++it) {
    if (s.stage_of[it->src] == s.stage_of[it->dst]) continue;
    for (uint32_t v : {it->src, it->dst}) {
      if (!seen[v]) {
        seen[v] = 1;
        win[v] = {it->t0, std::min(it->t1, hi)};
      } else {
        win[v].second = std::max(win[v].second, std::min(it->t1, hi));
      }
    }
  }
  for (uint32_t v = 0; v < n.nodes.size(); ++v)
    if (seen[v]) out.push_back({n.nodes[v], "pipeline", win[v].first, win[v].second});
  if (i < t.syncs.size())
    for (size_t g = 0; g < s.dp_groups.size(); ++g) {
      const auto& gs = t.syncs[i][g];
      if (gs.end == 0) continue;
      for (size_t m = 0; m < s.dp_groups[g].size(); ++m)
        if (gs.join[m] && gs.join[m] <= gs.end)
          out.push_back({n.nodes[s.dp_groups[g][m]], "dp_sync", std::max(gs.join[m], lo), gs.end});
    }
  return out;
}

}  // namespace netprism::analysis
