// Iterations among a DP group's synchronisations, by the volume each iteration synchronises.
//
// A training loop that all-reduces its gradients in one call ends every iteration with one synchronisation,
// and every complete-looking episode of DP traffic is an iteration's end. Frameworks that overlap
// communication with the backward pass (PyTorch DDP, Horovod, Megatron's overlapped grad reduce, ZeRO-2's
// bucketed reduce-scatter) synchronise in buckets instead: one collective per bucket as soon as its layers'
// gradients are ready, each using every link of the group, with the backward compute of the next bucket in
// between. Each bucket then looks like a synchronisation of its own (in an OpenMPI Horovod-style run of the
// testbed, 26 episodes in 14 iterations, read as steps of 20-600 ms instead of 285 ms).
//
// What holds for every data-parallel job, whatever the algorithm and the bucketing: each iteration
// synchronises the whole gradient, so the DP volume between two iteration ends is the same every iteration
// (measured: within 2 % in that run; a retransmission or a piece of a bucket finishing after a rank's end
// moves it by less than a bucket), and the forward pass, during which no gradient is ready, is the longest
// DP-quiet stretch of an iteration. So the iteration ends are also read from the DP bursts themselves (an
// iteration's last bucket need not look complete when its ranks are skewed): the ends after which the same
// volume has been synchronised again, placed at the longest quiets (see longest_quiets and reading). One end
// too many splits an iteration in two parts that cannot both carry the full volume, one too few merges two
// into twice the volume. The episodes stay the iterations unless that reading's iterations carry 1.5 times
// an episode or more: one synchronisation per iteration keeps exactly its episode ends.
#include <algorithm>
#include <deque>
#include <numeric>
#include <string>

#include "debug_log.hpp"
#include "iteration_period.hpp"
#include "stages.hpp"

namespace netprism::analysis {
namespace {

// The iterations of one reading carry the same volume: the largest at most 1.5 times the smallest. Measured
// variation: 2 %; the nearest wrong readings are off by a factor 2 or more (a split iteration's two parts sum
// to the full volume, so one is at most half of it; two merged iterations carry twice it).
constexpr double kMaxVolumeSpread = 1.5;
// A reading needs at least two iterations whose volumes agree (three ends), so that a recording of three
// iterations (issue 17) is read: with the stretch before the first end and after the last also bounded by one
// iteration's volume, and the reading used only when its iterations carry 1.5x an episode or more, a chance
// agreement of two stretches does not suffice.
constexpr size_t kMinIterations = 2;
// Transfers of DP traffic that carry under 1/64 of a typical transfer are control messages (rendezvous
// headers, notifications: ~100 bytes beside OpenMPI's 64 KiB+ fragments or a ring chunk): they may fall in
// the middle of the forward pass (a rank announcing its first bucket while others still compute) and must
// not break its quiet.
constexpr double kControlShare = 1.0 / 64;
// The quiet closing an iteration (its forward pass plus the first bucket's backward) is at least 1.5 times
// any quiet inside it (one bucket's backward: with the backward about twice the forward, the ratio is
// 1 + B/2 for B buckets); the quiet closing two merged iterations and the forward pass inside them are alike
// (ratio about 1). 1.25 lies between.
constexpr double kClosingRatio = 1.25;
// ... in two of three stretches at least: a reading of twice the volume holds in about half of its
// stretches (its closing quiet and the forward pass inside are alike), the true one in 71-100 % of them
// (measured on the testbed at load 9-14 on 2 cores, where a descheduled rank can stretch a bucket's backward;
// 10 of 14 in a straggler run).
constexpr double kOrderedShare = 2.0 / 3;
// Candidate counts of longest quiets (see longest_quiets) grow by a factor sqrt(2): V is the median volume
// between the chosen quiets, so a count within that factor of the right one already gives it (most of its
// stretches are single iterations); about 2 log2(n) candidates, each an O(n) reading.
constexpr double kLadder = 1.41421356;
// The period of the quiets (iteration_period.cpp) replaces a longest-quiet reading of a finer volume only
// when that reading's lag is no period by the period search's own rule (below its need) and is far from the
// best lag: half its hits or twice its misses. If the reading's lag were the period, its quiets would recur
// about as reliably as at its multiples, the best lag among them; under FSDP the per-collective lag misses at
// every switch between forward and backward units, whatever the host's load. And the clock keeps 80 % of its
// ticks, with 4 ends (3 periods) at least. Measured (hits / misses against the best lag): the FSDP
// recording 0.44 / 2.7x (load 11; live passes 0.45-0.56 / 2.6-4.4x), fresh FSDP runs on a quiet host
// 0.57-0.64 / 10x to every miss; readings that are right but have a 2x lag recurring more (loaded DDP,
// straggler, slow link, fabric recordings) 0.62-0.75 / 1.25-1.51x. Over the live engine's passes of kept
// recordings and a synthetic DP2 x PP2 long run, the true iteration volume recurred 0.50-0.60 of a 2-30x
// coarser lag, whose clocks kept 12 of 34, 8 of 22 ticks.
constexpr double kReplaceShare = 0.5;
// ... unless the reading's own ends recur: four in five of the quiets it ends iterations at have a like
// quiet one iteration later. Inside the iterations the quiets may alternate (soft-RoCE DP2 with a 300 ms
// straggler: its waits alternated 194-383 ms with the ranks' own lateness, 0.74 of all quiets recurred at
// the step against 1.00 at two steps), but iterations end after the same compute every time: 0.93 of its
// ends recurred (0.92 in ddp4_loaded). FSDP's wrong readings end at forward and backward units in turn, 2x
// apart in length: 0.54 and 0.67 of their ends recurred (mpi_dp4_zero3, mpi_dp4_zero3_quiet).
constexpr double kOwnEnds = 0.8;
constexpr double kKeptTicks = 0.8;
constexpr size_t kMinPeriodicEnds = 4;
// Transfers within 1 ms of each other are one burst (the probe's flowlet gap; timeline.cpp's cluster gap).
constexpr uint64_t kBurstGapNs = 1'000'000;

struct Burst {
  uint64_t start, end;
};

std::vector<Burst> bursts(const std::vector<const Xfer*>& xs) {
  std::vector<double> sizes;
  for (const Xfer* x : xs) sizes.push_back(static_cast<double>(x->bytes));
  double floor = kControlShare * typical_size(sizes);
  std::vector<Burst> b;
  for (const Xfer* x : xs) {
    if (static_cast<double>(x->bytes) < floor) continue;
    if (b.empty() || x->t0 > b.back().end + kBurstGapNs)
      b.push_back({x->t0, x->t1});
    else
      b.back().end = std::max(b.back().end, x->t1);
  }
  return b;
}

// One reading of the bursts for an iteration volume V: the iteration ends (burst indices) that maximise the
// total quiet after them, such that every iteration between two of them carries V within kMaxVolumeSpread,
// and the stretches before the first and after the last hold at most that. Dynamic programming over the
// bursts (their cumulative volume grows, so the admissible predecessors of a burst are a sliding window):
// O(n). Empty when no reading fits.
std::vector<size_t> reading(const std::vector<double>& cum, const std::vector<double>& quiet, double V) {
  size_t n = cum.size();
  // Every iteration within sqrt(kMaxVolumeSpread) of V, so that the largest is at most kMaxVolumeSpread times
  // the smallest: a window of V / 1.5 .. 1.5 V held one and two iterations at once (8 and 16 MB under a
  // 12 MB candidate in an OpenMPI DP2 run with a straggler: 10 ends read for 15).
  const double spread = std::sqrt(kMaxVolumeSpread);
  double lo = V / spread, hi = V * spread, total = cum.back();
  constexpr double kNone = -1;
  std::vector<double> best(n, kNone);
  std::vector<size_t> prev(n, SIZE_MAX);
  std::deque<size_t> win;  // admissible predecessors, best[] decreasing
  size_t add = 0;
  for (size_t j = 0; j < n; ++j) {
    while (add < j && cum[j] - cum[add] >= lo) {
      if (best[add] >= 0) {
        while (!win.empty() && best[win.back()] <= best[add]) win.pop_back();
        win.push_back(add);
      }
      ++add;
    }
    while (!win.empty() && cum[j] - cum[win.front()] > hi) win.pop_front();
    // j as the first end: the stretch before it is one iteration at most (with its set-up traffic: the first
    // all-reduce of an OpenMPI job carries more than the later ones, so the wider bound).
    double from = cum[j] <= V * kMaxVolumeSpread ? 0 : kNone;
    if (!win.empty() && best[win.front()] > from) {
      from = best[win.front()];
      prev[j] = win.front();
    } else if (from < 0) {
      continue;
    }
    best[j] = from + quiet[j];
  }
  // The last burst has no quiet after it in view, but when the volume since an end before it is a whole
  // iteration's, it closes that iteration (the job's last, or one that just ended); otherwise the reading
  // with the most quiet that leaves at most an iteration after its last end.
  size_t end = best[n - 1] >= 0 ? n - 1 : SIZE_MAX;
  for (size_t j = 0; j < n && end != n - 1; ++j)
    if (best[j] >= 0 && total - cum[j] <= hi && (end == SIZE_MAX || best[j] > best[end])) end = j;
  std::vector<size_t> out;
  for (size_t j = end; j != SIZE_MAX; j = prev[j]) out.push_back(j);
  std::reverse(out.begin(), out.end());
  return out;
}

// How many stretches of reading `r` are judged, and how many of them are closed by their longest quiet
// (kClosingRatio times every quiet inside). Judged: every stretch whose closing quiet is in view, the one
// before the first end included (a partial iteration is closed by its forward pass too). But a partial
// first stretch (less than a whole iteration's volume) holds only part of an iteration's quiets, often a
// single burst with none at all, so it is "closed by its longest quiet" whatever V is, and the reading may
// place its end at any quiet of the prefix. It is evidence only when its closing quiet also lasts about as
// long as the whole iterations' (at least 1/kClosingRatio of their median): were the reading right, each
// of these quiets is a forward pass, and forward passes take about the same time. Otherwise it is not
// judged at all. Without this, a benign pause halfway through a run passed as the forward pass of
// iterations six times too long: the first synchronisation alone before the first end and the six
// iterations before the pause (closed by the pause, four times the quiet closing the first) made two of
// two, and e2e_live_pause read 11 iterations as one (AnalysisTimeline.PauseHalfway...).
std::pair<size_t, size_t> closed_stretches(const std::vector<size_t>& r, const std::vector<double>& cum,
                                           const std::vector<double>& quiet, double V) {
  std::vector<double> whole_closing;
  for (size_t i = 1; i < r.size(); ++i)
    if (r[i] + 1 < quiet.size()) whole_closing.push_back(quiet[r[i]]);
  size_t judged = 0, ordered = 0;
  for (size_t i = 0; i < r.size(); ++i) {
    if (r[i] + 1 == quiet.size()) continue;  // the last burst's quiet is not in view
    double inside = 0;
    for (size_t k = i == 0 ? 0 : r[i - 1] + 1; k < r[i]; ++k) inside = std::max(inside, quiet[k]);
    if (i == 0 && cum[r[0]] < V / kMaxVolumeSpread && !whole_closing.empty() &&
        kClosingRatio * quiet[r[0]] < median(whole_closing))
      continue;  // a partial first stretch not closed like a whole iteration: no evidence either way
    ++judged;
    ordered += quiet[r[i]] >= kClosingRatio * inside ? 1 : 0;
  }
  return {judged, ordered};
}

// The iteration ends among the bursts' ends. The iteration volume V is not known: candidates are the median
// volumes between the ends of the m longest quiets, for m on a geometric ladder (the right m, one quiet per
// iteration, gives V itself). A candidate's reading holds when the forward pass closes its iterations: in
// at least kOrderedShare of them the quiet after the end is kClosingRatio times the longest quiet inside.
// Twice V leaves a forward pass inside every iteration (the closing and the inside quiet are then alike, the
// ratio about 1); a fraction of V also holds (its iterations hold no quiet longer than the one closing
// them), so of the readings that hold the coarsest is taken. Empty when none holds.
template <class Upto>
std::vector<uint64_t> longest_quiets(const std::vector<Burst>& b, const Upto& upto) {
  size_t n = b.size();
  std::vector<double> cum(n), quiet(n, 0);
  for (size_t j = 0; j < n; ++j) {
    cum[j] = upto(b[j].end);
    if (j + 1 < n) quiet[j] = static_cast<double>(b[j + 1].start - b[j].end);
  }
  double total = upto(UINT64_MAX);
  cum.back() = std::max(cum.back(), total);
  std::vector<size_t> order(n - 1);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return quiet[x] > quiet[y]; });
  std::vector<size_t> best;
  double best_vol = 0;
  for (double mf = kMinIterations; mf <= static_cast<double>(n - 1); mf *= kLadder) {
    std::vector<size_t> sel(order.begin(), order.begin() + static_cast<long>(mf));
    std::sort(sel.begin(), sel.end());
    std::vector<double> v;
    for (size_t i = 0; i + 1 < sel.size(); ++i) v.push_back(cum[sel[i + 1]] - cum[sel[i]]);
    double V = median(v);
    if (V <= 0) continue;
    std::vector<size_t> r = reading(cum, quiet, V);

    if (r.size() < kMinIterations + 1) continue;
    auto [judged, ordered] = closed_stretches(r, cum, quiet, V);
    std::vector<double> vr;
    for (size_t i = 1; i < r.size(); ++i) vr.push_back(cum[r[i]] - cum[r[i - 1]]);
    if (debug::lines_on()) {
      std::string l;
      debug::appendf(l,
                     "  reading for %.0f bytes: %zu ends, %zu of %zu stretches closed by their longest quiet",
                     V, r.size(), ordered, judged);
      debug::line(l);
    }
    // ... and at least one stretch more than half, what a reading of twice the volume gets by chance (two of
    // three stretches of a coarse reading held on a loaded straggler run).
    double o = static_cast<double>(ordered), jd = static_cast<double>(judged);
    if (judged < kMinIterations || o < kOrderedShare * jd || o < jd / 2 + 1) continue;
    double vol = median(std::move(vr));
    if (vol > best_vol) {
      best_vol = vol;
      best = std::move(r);
    }
  }
  std::vector<uint64_t> out;
  for (size_t j : best) out.push_back(b[j].end);
  return out;
}

// Whether most ends of a reading (burst indices) are not ends of `out` (times).
bool other_phase(const std::vector<size_t>& ends, const std::vector<Burst>& b,
                 const std::vector<uint64_t>& out) {
  size_t same = 0;
  for (size_t j : ends) same += std::binary_search(out.begin(), out.end(), b[j].end) ? 1 : 0;
  return 2 * same < ends.size();
}

// The iteration ends read from the period of the bursts' quiets in volume (iteration_period.cpp), unless the
// reading by the longest quiets (`out`) is a period of the traffic itself: its iterations'
// volume is a lag at which the quiets recur as well as at the period found (a bucketed all-reduce's forward
// pass and buckets recur every iteration), or the period found is not clearly coarser. Under FSDP / ZeRO-3
// the longest-quiet reading holds at one or two collectives (every quiet after a unit's compute closes a
// "stretch"), a lag at which the quiets do not recur (forward and backward units alternate: 0.33 against 0.67
// at the period in a real run): the period replaces it. Or it holds at the right volume but at the longest
// quiet, a backward unit's compute (a fresh FSDP run at load 17: 13 ends of 36.07 MB, none within a quarter
// step of the iteration's last reduce-scatter): when the volume clock from the group's first DP burst closes
// on its last one (the whole job in view), the clock's phase replaces it.
template <class Upto>
std::vector<uint64_t> periodic_ends(const std::vector<Burst>& b, const Upto& upto,
                                    std::vector<uint64_t> out) {
  size_t n = b.size();
  std::vector<double> cum(n), quiet(n, 0);
  for (size_t j = 0; j < n; ++j) {
    cum[j] = upto(b[j].end);
    if (j + 1 < n) quiet[j] = static_cast<double>(b[j + 1].start - b[j].end);
  }
  cum.back() = std::max(cum.back(), upto(UINT64_MAX));
  std::vector<iteration_period::Quiet> s = iteration_period::significant_quiets(cum, quiet);
  std::vector<double> vol;
  for (size_t i = 0; i + 1 < out.size(); ++i) vol.push_back(upto(out[i + 1]) - upto(out[i]));
  double V = median(vol), share = iteration_period::recurring(s, V);
  // The quiets the reading ends its iterations at: each recurring one iteration later is a period of the
  // traffic at the reading's own boundaries, whatever the quiets inside its iterations do (see kOwnEnds).
  std::vector<iteration_period::Quiet> own;
  for (const auto& q : s)
    if (std::binary_search(out.begin(), out.end(), b[q.burst].end)) own.push_back(q);
  const double own_share = iteration_period::recurring(own, V);
  double c0 = b.front().start > 0 ? upto(b.front().start - 1) : 0;
  iteration_period::Reading r = iteration_period::periodic_reading(s, cum, c0);
  const double periods = (cum.back() - c0) / std::max(r.period, 1.0);  // periods in view (none: r.period 0)
  if (debug::lines_on()) {
    std::string l;
    debug::appendf(
        l,
        "periodic reading: %zu ends of %.0f bytes (need %.2f); longest-quiet reading %zu ends of %.0f "
        "(%.2f recur, its ends %.2f) best %.2f periods %.2f",
        r.ends.size(), r.period, r.need, out.size(), V, share, own_share, r.best, periods);
    debug::line(l);
  }
  if (r.ends.size() < kMinPeriodicEnds) return out;
  // No longest-quiet reading at all (ZeRO-3 over two ranks: the optimizer's quiet is shorter than a backward
  // unit's, and no quiet closes two thirds of any candidate's stretches): the period stands alone when its
  // clock keeps its ticks.
  if (out.size() < kMinIterations + 1) {
    if (static_cast<double>(r.ends.size()) < kKeptTicks * periods) return out;
    out.clear();
    for (size_t j : r.ends) out.push_back(b[j].end);
    return out;
  }
  // A coarser period replaces the reading when the reading's lag is no period (below the need) and far from
  // the best lag (half its hits or twice its misses), and the clock keeps its ticks (as many ends as periods
  // in view: a lag that recurs only by chance loses most of them).
  bool far = share <= kReplaceShare * r.best || 1 - share >= (1 - r.best) / kReplaceShare;
  bool coarser = share < r.need && own_share < kOwnEnds && far && r.period >= kMaxVolumeSpread * V &&
                 static_cast<double>(r.ends.size()) >= kKeptTicks * periods;
  // The same period at another phase: the longest quiets are a backward unit's compute (FSDP), not the
  // forward pass. The volume clock's phase holds when the group's whole DP traffic is in view (closed).
  // ... and only a clock that keeps every iteration the reading has (one that lost ticks is no phase).
  bool rephased = r.closed && r.period < kMaxVolumeSpread * V && V < kMaxVolumeSpread * r.period &&
                  r.ends.size() + 1 >= out.size() && other_phase(r.ends, b, out);
  if (!coarser && !rephased) return out;
  out.clear();
  for (size_t j : r.ends) out.push_back(b[j].end);
  return out;
}

}  // namespace

std::vector<uint64_t> iteration_ends(const std::vector<const Xfer*>& xs, const std::vector<uint64_t>& ends) {
  if (ends.size() < kMinIterations + 1 || xs.empty()) return ends;
  // The reading rests on the quiets between buckets and on equal volumes per iteration. Records coarser
  // than an episode gap (a flow exporter's, or 1:N samples placed in their agent's 1 s flush interval)
  // show neither: buckets within a flush are one record, and sampled volumes scatter far beyond
  // kMaxVolumeSpread (pmacct 1:5 over GSO packets: one DP sync's volume 0.5-1.6x its mean). With most DP
  // bytes in such records the episodes stay the ends (read as wrongly as 2x the step otherwise).
  double coarse_bytes = 0, all_bytes = 0;
  for (const Xfer* x : xs) {
    all_bytes += static_cast<double>(x->bytes);
    if (coarse(*x)) coarse_bytes += static_cast<double>(x->bytes);
  }
  if (2 * coarse_bytes > all_bytes) return ends;
  // DP volume by transfer end, for the volume between two instants in O(log).
  std::vector<std::pair<uint64_t, double>> by_end;
  by_end.reserve(xs.size());
  for (const Xfer* x : xs) by_end.emplace_back(x->t1, static_cast<double>(x->bytes));
  std::sort(by_end.begin(), by_end.end());
  std::vector<double> cum(by_end.size() + 1, 0);
  for (size_t i = 0; i < by_end.size(); ++i) cum[i + 1] = cum[i] + by_end[i].second;
  auto upto = [&](uint64_t t) {  // volume of the transfers ending at or before t
    auto it = std::upper_bound(by_end.begin(), by_end.end(), std::make_pair(t, 1e300));
    return cum[static_cast<size_t>(it - by_end.begin())];
  };
  std::vector<Burst> b = bursts(xs);
  if (b.size() < kMinIterations + 1) return ends;
  // A reading whose stretches are not a period of the traffic (FSDP / ZeRO-3: collectives all through the
  // iteration, every unit's compute a quiet), or no reading, gives way to the period of the quiets in volume.
  std::vector<uint64_t> out = periodic_ends(b, upto, longest_quiets(b, upto));
  if (out.size() < kMinIterations + 1) return ends;
  // The episodes are the iterations unless the reading's iterations carry clearly more than an episode:
  // one synchronisation per iteration keeps its episode ends (with their receivers' arrival times).
  auto volumes = [&](const std::vector<uint64_t>& e) {
    std::vector<double> v;
    for (size_t i = 0; i + 1 < e.size(); ++i) v.push_back(upto(e[i + 1]) - upto(e[i]));
    return v;
  };
  std::vector<double> ev = volumes(ends);
  double V = median(volumes(out)), E = median(ev);
  // ... or unless the episodes carry unequal volumes (some a part of an iteration: a synchronisation split
  // in parts; some several: iterations whose last bucket never looked complete) while the reading's
  // iterations carry the same: the reading is the consistent one.
  auto [lo, hi] = std::minmax_element(ev.begin(), ev.end());
  // A reading finer than every episode (buckets, while the episodes hold one or more iterations) is not.
  bool split = *hi > kMaxVolumeSpread * *lo && V * kMaxVolumeSpread >= *lo;
  if (debug::lines_on()) {
    std::string l;
    debug::appendf(l, "iteration volume: reading %zu ends of %.0f bytes, %zu episodes of %.0f, split %d",
                   out.size(), V, ends.size(), E, split ? 1 : 0);
    debug::line(l);
  }
  if (V < kMaxVolumeSpread * E && !split) return ends;
  return out;
}

}  // namespace netprism::analysis
