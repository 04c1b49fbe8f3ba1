// Timeline, DP synchronisations: when each synchronisation of a DP group ended (sync_ends), and which ends
// belong to one synchronisation stalled into two episodes (merge_stalled).
//
// A synchronisation is found as a cluster of DP transfers in which every DP direction of the group is active
// (every all-reduce algorithm ends with a step that uses all its links; a member that is early alone only
// covers its own link), followed by the long quiet gap of the next forward/backward pass.
#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "debug_log.hpp"
#include "timeline_steps.hpp"

namespace netprism::analysis {

using timeline_steps::is_dp_xfer;
using timeline_steps::is_pp_send;
using timeline_steps::kGapClassRatio;

namespace {

// Transfers of one DP exchange that follow each other within 1 ms belong to the same burst of activity:
// the same idle-gap rule the probe uses to cut flowlets.
constexpr uint64_t kClusterGapNs = 1'000'000;
// A receiver's clock may run behind its sender's: an arrival is taken to begin up to 2 ms before its send.
// Agents' clocks disagree by up to about a millisecond: NTP on a LAN keeps each under one; the soft-RoCE
// VMs' clocks, set to 0.01-0.1 ms, were 0-1.08 ms apart at the end of 12 runs of ~100 s. Read without
// it, a member's arrival of the next synchronisation's first piece, stamped 49 us before the other member
// sent it, ended the previous synchronisation 640 ms late and two iterations read as one.
constexpr uint64_t kArrivalSkewNs = 2'000'000;
// A direction of a DP edge counts towards "full coverage" when it carries at least 10 % of the group's
// busiest direction: ring and pairwise algorithms load every used direction about equally, and pure-ACK or
// leftover directions carry far less.
constexpr double kSignificantDirection = 0.10;
// Gaps between iterations: one per iteration; three is the fewest that makes a timeline (see job_grouping).
constexpr size_t kMinInterGaps = 3;
// A burst of DP traffic under 4 KiB (a memory page) carries no gradient data: connection wire-up, barrier
// and finalize tokens (48-356 B on soft-RoCE with OpenMPI + UCX: its wire-up exchange before the first
// iteration read as a synchronisation, and the finalize messages 90-115 ms after the last all-reduce, within
// the gap a 300 ms straggler's waits set, ended it late). Such a burst joins its episode, but neither makes
// it a synchronisation nor ends one, and its arrival extends none (extend_by_arrivals).
constexpr uint64_t kMinDataBurstBytes = 4096;

// Otsu split of log-gaps; returns the threshold (ns) above which a gap separates iterations.
double inter_gap_threshold(std::vector<double> gaps) {
  if (gaps.size() < 2) return 0;
  for (double& g : gaps) g = std::log(std::max(g, 1.0));
  std::sort(gaps.begin(), gaps.end());
  size_t n = gaps.size();
  const OtsuSplit o = otsu_split(gaps);
  const size_t cut = o.cut;
  double m0 = o.lower_mean(), m1 = o.upper_mean();
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

// The group's DP transfers (sender views, in time order) and its significant directions, numbered.
struct DpTraffic {
  std::vector<const Xfer*> xfers;
  std::map<std::pair<uint32_t, uint32_t>, size_t> dir_idx;
};
DpTraffic significant_directions(const JobSlice& job, const Structure& s, int group) {
  DpTraffic dp;
  std::map<std::pair<uint32_t, uint32_t>, uint64_t> dir_bytes;
  for (const Xfer& x : job.xfers)
    if (is_dp_xfer(s, x, group)) {
      dp.xfers.push_back(&x);
      dir_bytes[{x.src, x.dst}] += x.bytes;
    }
  uint64_t top = 0;
  for (auto& [k, b] : dir_bytes) top = std::max(top, b);
  for (auto& [k, b] : dir_bytes)
    if (static_cast<double>(b) >= kSignificantDirection * static_cast<double>(top))
      dp.dir_idx.emplace(k, dp.dir_idx.size());
  return dp;
}

// Bursts: transfers within 1 ms of each other. Each remembers which significant directions it used.
struct Burst {
  uint64_t start, end;
  std::vector<char> used;
  uint64_t bytes = 0;
};
std::vector<Burst> bursts(const DpTraffic& dp) {
  std::vector<Burst> cl;
  for (const Xfer* x : dp.xfers) {
    if (cl.empty() || x->t0 > cl.back().end + kClusterGapNs)
      cl.push_back({x->t0, x->t1, std::vector<char>(dp.dir_idx.size(), 0)});
    cl.back().end = std::max(cl.back().end, x->t1);
    cl.back().bytes += x->bytes;
    auto it = dp.dir_idx.find({x->src, x->dst});
    if (it != dp.dir_idx.end()) cl.back().used[it->second] = 1;
  }
  return cl;
}

// Episodes: bursts joined across gaps up to `thr` (inside one all-reduce) as opposed to the longer ones
// (compute between iterations). A synchronisation is an episode that used every significant direction.
struct Episodes {
  std::vector<uint64_t> ends;    // the synchronisations' ends
  std::vector<uint64_t> starts;  // every episode's start, complete or not
  std::vector<long> end_index;   // per episode: the index of its end in `ends`; -1: not complete
};
Episodes episodes(const std::vector<Burst>& cl, size_t dirs, double thr) {
  Episodes ep;
  std::vector<char> used(dirs, 0);
  uint64_t start = 0, data_end = 0;
  bool open = false;
  for (size_t i = 0; i < cl.size(); ++i) {
    if (!open) start = cl[i].start, data_end = 0;  // each episode ends at its own data
    open = true;
    if (cl[i].bytes >= kMinDataBurstBytes) {
      for (size_t d = 0; d < used.size(); ++d) used[d] |= cl[i].used[d];
      data_end = std::max(data_end, cl[i].end);
    }
    bool last = i + 1 == cl.size();
    if (!last && static_cast<double>(cl[i + 1].start - cl[i].end) <= thr) continue;
    ep.starts.push_back(start);
    ep.end_index.push_back(-1);
    if (std::all_of(used.begin(), used.end(), [](char c) { return c != 0; })) {
      ep.end_index.back() = static_cast<long>(ep.ends.size());
      ep.ends.push_back(data_end);
    }
    std::fill(used.begin(), used.end(), 0);
    open = false;
  }
  return ep;
}

// The synchronisations among the bursts, with the gap threshold that separates them (`thr`, 0: every gap
// separates). The threshold is the split of the gaps into two classes when there are two: a gap inside one
// synchronisation is far shorter than a step. When the split found is not (a long pause among otherwise
// single-burst synchronisations makes the steps themselves look "short"), there is only one class of gaps.
// Half a step: the split sits at the geometric middle of the two classes, so for real
// intra-synchronisation gaps (milliseconds) it is far below it.
Episodes synchronisations(const std::vector<Burst>& cl, size_t dirs, double& thr) {
  std::vector<double> gaps;
  for (size_t i = 0; i + 1 < cl.size(); ++i) gaps.push_back(static_cast<double>(cl[i + 1].start - cl[i].end));
  thr = inter_gap_threshold(gaps);
  Episodes ep = episodes(cl, dirs, thr);
  std::vector<double> spacing = spacings(ep.ends);
  if (thr > 0 && (spacing.size() < 2 || thr > 0.5 * median(spacing))) {
    thr = 0;
    ep = episodes(cl, dirs, thr);
  }
  return ep;
}

// A synchronisation ends at its members when the last data arrives, which the sender's view misses on a
// shaped or congested link (the data leaves at once and queues on the way). Where the receivers' own views
// exist (agents' ingress), each arrival extends the synchronisation that was under way when it began
// arriving: the latest episode started at or before it, provided no later episode had started (its data
// cannot arrive before it was sent, up to the clocks' disagreement, kArrivalSkewNs, and an episode's data
// arrives before the next one begins). Returns how many ends it moved.
size_t extend_by_arrivals(Episodes& ep, const JobSlice& job, const Structure& s, int group) {
  size_t extended = 0;
  for (const Xfer& a : job.arrivals) {
    if (!is_dp_xfer(s, a, group) || a.bytes < kMinDataBurstBytes) continue;
    auto it = std::upper_bound(ep.starts.begin(), ep.starts.end(), a.t0 + kArrivalSkewNs);
    if (it == ep.starts.begin()) continue;
    long e = ep.end_index[static_cast<size_t>(it - ep.starts.begin()) - 1];
    if (e < 0) continue;
    uint64_t& end = ep.ends[static_cast<size_t>(e)];
    if (a.t1 > end) {
      end = a.t1;
      ++extended;
    }
  }
  return extended;
}

}  // namespace

// Ends of each synchronisation of one DP group, in time order.
std::vector<uint64_t> sync_ends(const JobSlice& job, const Structure& s, int group) {
  DpTraffic dp = significant_directions(job, s, group);
  if (dp.xfers.empty()) return {};
  std::vector<Burst> cl = bursts(dp);
  double thr = 0;
  Episodes ep = synchronisations(cl, dp.dir_idx.size(), thr);
  size_t extended = extend_by_arrivals(ep, job, s, group);
  // An extension never passes the next episode's start, but keep order.
  std::sort(ep.ends.begin(), ep.ends.end());
  ep.ends = iteration_ends(dp.xfers, ep.ends);  // bucketed synchronisations: one end per iteration
  if (debug::lines_on()) {
    std::string l;
    debug::appendf(l, "group %d: %zu dirs, %zu bursts, thr %.1f ms, %zu syncs, %zu ends extended by arrivals",
                   group, dp.dir_idx.size(), cl.size(), thr / 1e6, ep.ends.size(), extended);
    debug::line(l);
  }
  return std::move(ep.ends);
}

namespace timeline_steps {

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
  return merge_ends(ends, [&](uint64_t prev, uint64_t e) {
    return std::upper_bound(pp_sends.begin(), pp_sends.end(), prev) ==
           std::lower_bound(pp_sends.begin(), pp_sends.end(), e);
  });
}

}  // namespace timeline_steps
}  // namespace netprism::analysis
