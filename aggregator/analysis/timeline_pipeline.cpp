// Timeline, pipelines without DP: iteration boundaries from the pipeline's drain points (pipeline_drains).
//
// The drain is the end of the gradient transfer that brings the first stage's outstanding activation volume
// back to zero (every micro-batch of the iteration has come back). Activations count when they start,
// gradients when they end (causal order); the balance restarts from zero at every drain, so a lost or
// repeated packet cannot drift it beyond one iteration. The boundary is the first activation the first stage
// sends after the drain: the end of its transfer, and with several ranks per stage (tensor parallelism) the
// latest rank's.
#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <utility>

#include "timeline_steps.hpp"

namespace netprism::analysis::timeline_steps {
namespace {

// The drain-to-next-activation gap of an iteration is compared with the median of the gaps of its
// neighbours (3 on each side: an isolated disturbance stands out against 6 undisturbed neighbours, while a
// lasting change such as a straggler shifts the neighbours with it).
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
// sees the same 12 as an analysis of the whole run -- unless the job is so large that 16 iterations exceed
// kTailBudgetXfers (tens of nodes or more), when its tail keeps fewer.
constexpr size_t kLastDelays = 12;
// A transfer record carries one activation when it is at most 1.5 x the typical activation (messages of
// one pipeline edge have one size; two merged ones are 2x).
constexpr double kOneMessage = 1.5;

// The busiest first-stage -> second-stage edge (upstream, downstream node); none without such traffic.
std::optional<std::pair<uint32_t, uint32_t>> busiest_first_edge(const JobSlice& job, const Structure& s) {
  std::map<std::pair<uint32_t, uint32_t>, uint64_t> vol;
  for (const Xfer& x : job.xfers)
    if (s.stage_of[x.src] == 0 && s.stage_of[x.dst] == 1) vol[{x.src, x.dst}] += x.bytes;
  if (vol.empty()) return std::nullopt;
  auto best = std::max_element(vol.begin(), vol.end(), [](auto& a, auto& b) { return a.second < b.second; });
  return best->first;
}

// The edge's activations and gradients in causal order.
struct Ev {
  uint64_t t;     // activations: start; gradients: end (causal order)
  double b;       // +bytes activation, -bytes gradient
  uint64_t t1;    // the transfer's end
  uint32_t conn;  // connection (one per rank pair: several with tensor parallelism)
  bool operator<(const Ev& o) const { return std::tie(t, b, t1, conn) < std::tie(o.t, o.b, o.t1, o.conn); }
};
struct EdgeEvents {
  std::vector<Ev> ev;
  double typical = 0;  // typical activation transfer (bytes)
};
EdgeEvents edge_events(const JobSlice& job, uint32_t u, uint32_t v) {
  EdgeEvents out;
  std::vector<double> a_sizes;
  for (const Xfer& x : job.xfers) {
    if (x.src == u && x.dst == v) {
      out.ev.push_back({x.t0, static_cast<double>(x.bytes), x.t1, x.conn});
      a_sizes.push_back(static_cast<double>(x.bytes));
    }
    if (x.src == v && x.dst == u) out.ev.push_back({x.t1, -static_cast<double>(x.bytes), x.t1, x.conn});
  }
  std::sort(out.ev.begin(), out.ev.end());
  out.typical = typical_size(a_sizes);
  return out;
}

// The drains of the activation balance and the first activation after each.
struct Drains {
  std::vector<uint64_t> drains;
  std::vector<uint64_t> starts;  // starts[k]: first activation after drains[k] (none yet: not there)
  std::vector<double> seg_vol;   // per drain: the activation volume sent since the previous drain
};
// `eps`: half of a typical activation transfer; below it the pipeline holds no micro-batch.
Drains drain_points(const EdgeEvents& edge, double eps) {
  Drains d;
  double out = 0;
  bool drained = true;
  // Connections whose first activation after the last drain was seen; open while only activations have
  // followed the drain (the first micro-batch leaves every rank of the first stage before any gradient
  // comes back).
  std::set<uint32_t> first_seen;
  bool first_open = false;
  double seg = 0;
  for (const Ev& e : edge.ev) {
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
      uint64_t at = e.b <= kOneMessage * edge.typical ? e.t1 : e.t;
      if (drained && !d.drains.empty() && d.starts.size() < d.drains.size()) {
        d.starts.push_back(at);
        first_seen = {e.conn};
        first_open = true;
      } else if (first_open && first_seen.insert(e.conn).second) {
        // With tensor parallelism every rank of the first stage sends its own first activation, each when
        // that rank is done with its optimizer step and first forward pass; the ranks leave the previous
        // iteration at different times (ms apart), and the iteration is over when the last one does, so
        // the latest of the ranks' first activations is the one that follows the boundary.
        d.starts.back() = std::max(d.starts.back(), at);
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
        d.drains.push_back(e.t);
        d.seg_vol.push_back(seg);
        seg = 0;
      }
    }
  }
  return d;
}

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
void drop_crossings(Drains& d, double eps) {
  if (d.seg_vol.empty()) return;
  double whole = *std::max_element(d.seg_vol.begin(), d.seg_vol.end()) - eps;
  std::vector<double> sure;
  for (size_t k = 0; k < d.starts.size(); ++k)
    if (d.seg_vol[k] >= whole) sure.push_back(static_cast<double>(d.starts[k] - d.drains[k]));
  if (sure.empty()) return;
  double quiet = median(sure) / kGapClassRatio;
  std::vector<uint64_t> kept_d, kept_s;
  for (size_t k = 0; k < d.drains.size(); ++k) {
    if (k < d.starts.size() && static_cast<double>(d.starts[k] - d.drains[k]) < quiet) continue;
    kept_d.push_back(d.drains[k]);
    if (k < d.starts.size()) kept_s.push_back(d.starts[k]);
  }
  d.drains = std::move(kept_d);
  d.starts = std::move(kept_s);
}

// Each drain-to-start gap ("delay"), the median of its neighbours' gaps, and its deviation from it.
struct Delays {
  std::vector<double> delay, local, dev;
};
Delays drain_to_start_delays(const Drains& d) {
  Delays g;
  for (size_t k = 0; k < d.starts.size(); ++k)
    g.delay.push_back(static_cast<double>(d.starts[k] - d.drains[k]));
  g.local.assign(g.delay.size(), median(g.delay));
  g.dev.assign(g.delay.size(), 0);
  for (size_t k = 0; k < g.delay.size(); ++k) {
    std::vector<double> nb;
    for (size_t j = k >= kGapNeighbours ? k - kGapNeighbours : 0;
         j < g.delay.size() && j <= k + kGapNeighbours; ++j)
      if (j != k) nb.push_back(g.delay[j]);
    if (!nb.empty()) g.local[k] = median(nb);
    g.dev[k] = g.delay[k] - g.local[k];
  }
  return g;
}

// Which side moved: the anchor displaced from the midpoint of its own previous and next occurrence is the
// disturbed one (steps change smoothly from one iteration to the next); see kDisplacedRatio.
double displaced(const std::vector<uint64_t>& v, size_t k) {
  return std::fabs(static_cast<double>(v[k]) -
                   (static_cast<double>(v[k - 1]) + static_cast<double>(v[k + 1])) / 2);
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
std::vector<uint64_t> boundaries_after_drains(const Drains& d) {
  const std::vector<uint64_t>& drains = d.drains;
  const std::vector<uint64_t>& starts = d.starts;
  Delays g = drain_to_start_delays(d);
  double sigma = robust_sigma(g.dev, median(g.dev));
  double tol = std::max(kGapOutlierSigmas * sigma, kGapOutlierMinShare * median(spacings(starts)));
  // The last iteration's delay: the median of the last kLastDelays gaps rather than of all, so that the
  // daemon's analysis of its recent tail gives the same end as the analysis of the whole run.
  double d_last = median(std::vector<double>(
      g.delay.end() - static_cast<long>(std::min(g.delay.size(), kLastDelays)), g.delay.end()));
  std::vector<uint64_t> out_b;
  for (size_t k = 0; k < drains.size(); ++k) {
    if (k >= starts.size())
      out_b.push_back(drains[k] + static_cast<uint64_t>(d_last));
    else if (std::fabs(g.dev[k]) > tol && g.delay.size() > 2 * kGapNeighbours && k > 0 &&
             k + 1 < starts.size() && displaced(starts, k) > kDisplacedRatio * displaced(drains, k))
      out_b.push_back(drains[k] + static_cast<uint64_t>(g.local[k]));
    else
      out_b.push_back(starts[k]);
  }
  return out_b;
}

}  // namespace

PipelineBoundaries pipeline_drains(const JobSlice& job, const Structure& s) {
  if (s.stages.size() < 2) return {};
  auto edge = busiest_first_edge(job, s);
  if (!edge) return {};
  EdgeEvents ev = edge_events(job, edge->first, edge->second);
  Drains d = drain_points(ev, 0.5 * ev.typical);
  drop_crossings(d, 0.5 * ev.typical);
  std::vector<uint64_t> boundaries = boundaries_after_drains(d);
  return {std::move(boundaries), std::move(d.drains)};
}

}  // namespace netprism::analysis::timeline_steps
