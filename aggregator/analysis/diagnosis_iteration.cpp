// Diagnosis, slow iteration: an iteration far above the job's robust baseline whose extra time one rank or
// one link accounts for.
//
// What tells a fault from a benign stretch: a checkpoint, an evaluation pass, data loading or a host whose
// CPU is short for every rank stretch the iteration for every rank and link alike (every rank idle longer
// together; every transfer slower together), and then the job resumes its usual pattern. A fault has a place:
// one member joins its synchronisation late while its peers wait (a stalled rank), or one direction's
// transfers take longer than they usually do while the others' do not (a link). So the iteration's excess
// over the baseline is split into what each member's lateness and each direction's transfer time grew beyond
// their own usual values and beyond the iteration's typical growth; a slow_iteration is raised when one of
// them accounts for at least half of the excess, and its evidence names it. Limit: a slowdown that hits every
// link of the job alike (fabric-wide congestion) reads as job-wide and is not raised (docs/analysis.md).
#include <algorithm>
#include <cmath>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "diagnosis_steps.hpp"

namespace netprism::analysis::diagnosis_steps {
namespace {

// Robust z-score with k = 5 on median/MAD (1.4826 MAD estimates sigma for Gaussian noise; k = 5 gives ~3e-7
// false alarms per healthy iteration) and at least 50 % above the median: a steady job's sub-percent MAD
// would otherwise turn a 2 % wobble into a finding, and on shared hosts a healthy step stretches by a third
// from scheduling alone (measured on the testbed: +37 % once in a healthy PP4 run), so "far above its
// baseline" starts at 1.5x.
constexpr double kSlowIterK = 5.0;
constexpr double kSlowIterMinExcess = 0.5;
// One rank or link accounts for at least half of the excess: then it is the place of the delay. Measured: in
// the alarms campaign (tests/e2e/alarms.py) and the kept samples, the 10 iterations above the threshold (8
// pauses of every rank of 1-3 s, an evaluation pass, a host hiccup) had no member's or direction's own
// growth above 2 % of their excess; a one-iteration glitch of one link or a stall of one rank (the generator,
// diagnosis_test.cpp) accounts for 100 %.
constexpr double kLocalShare = 0.5;

// An iteration carrying at least 1.5x the job's median volume per iteration holds more than one iteration's
// traffic: a boundary was missed (two iterations read as one take twice the time and carry twice the bytes),
// not a slow iteration. What a fault stretches keeps its volume: a stalled rank or a slow link moves the same
// gradients and activations later (retransmissions add a few percent). 1.5 is halfway between one
// iteration's volume and two. Seen at a 1:5 sFlow source's 1 s resolution: 9.0 s of a 4.5 s step, carrying
// two iterations' bytes, with the next boundary three iterations on read 1 s early.
constexpr double kMergedVolume = 1.5;

// Per iteration: the bytes of the job's transfers in it, a transfer's bytes split by the share of its span
// inside (a record spanning a boundary, as a flow exporter's 1 s record does, counts on both sides).
std::vector<double> iteration_volume(const JobSlice& job, const std::vector<Iteration>& its) {
  std::vector<double> vol(its.size(), 0);
  size_t first = 0;  // transfers come sorted by t0: iterations ended before one's start end before the next's
  for (const Xfer& x : job.xfers) {
    while (first < its.size() && its[first].start_ns + its[first].duration_ns <= x.t0) ++first;
    for (size_t i = first; i < its.size() && its[i].start_ns <= std::max(x.t0, x.t1); ++i) {
      uint64_t from = its[i].start_ns, to = from + its[i].duration_ns;
      if (x.t1 <= x.t0) {  // a point in time (a packet sample, a one-packet message)
        if (x.t0 >= from) vol[i] += static_cast<double>(x.bytes);
        continue;
      }
      uint64_t a = std::max(x.t0, from), b = std::min(x.t1, to);
      if (b > a)
        vol[i] +=
            static_cast<double>(x.bytes) * static_cast<double>(b - a) / static_cast<double>(x.t1 - x.t0);
    }
  }
  return vol;
}

// Per direction (src << 32 | dst) and iteration: the time its transfers were in flight (union of their
// spans), in the view its timing is read from (the receiver's where seen, as for slow_link).
using Key = uint64_t;
std::map<Key, std::vector<double>> transfer_time(const JobSlice& job, const std::vector<Iteration>& its) {
  std::unordered_set<Key> arriving;
  auto key = [](const Xfer& x) { return Key{x.src} << 32 | x.dst; };
  for (const Xfer& x : job.arrivals) arriving.insert(key(x));
  std::unordered_map<Key, std::vector<std::pair<uint64_t, uint64_t>>> spans;
  for (const auto* list : {&job.arrivals, &job.xfers})
    for (const Xfer& x : *list)
      if ((list == &job.arrivals) == (arriving.count(key(x)) > 0)) spans[key(x)].emplace_back(x.t0, x.t1);
  std::map<Key, std::vector<double>> out;
  for (auto& [k, v] : spans) {
    std::sort(v.begin(), v.end());
    std::vector<double> per(its.size(), 0);
    size_t j = 0;
    for (size_t i = 0; i < its.size(); ++i) {
      uint64_t from = its[i].start_ns, to = from + its[i].duration_ns, reach = from;
      while (j < v.size() && v[j].second <= from) ++j;
      for (size_t m = j; m < v.size() && v[m].first < to; ++m) {
        uint64_t a = std::max(v[m].first, reach), b = std::min(v[m].second, to);
        if (b > a) per[i] += static_cast<double>(b - a);
        reach = std::max(reach, b);
      }
    }
    out.emplace(k, std::move(per));
  }
  return out;
}

// Per DP member (group, index) and iteration: how long after the median of its group it joined; NaN unseen.
std::vector<std::vector<double>> join_lateness(const Timeline& t, size_t iters, std::vector<uint32_t>& who,
                                               const Structure& s) {
  std::vector<std::vector<double>> out;
  for (size_t g = 0; g < s.dp_groups.size(); ++g)
    for (size_t m = 0; m < s.dp_groups[g].size(); ++m) {
      who.push_back(s.dp_groups[g][m]);
      std::vector<double> lat(iters, std::nan(""));
      for (size_t i = 0; i < iters && i < t.syncs.size(); ++i) {
        const auto& gs = t.syncs[i][g];
        if (gs.join.empty() || std::count(gs.join.begin(), gs.join.end(), 0u)) continue;
        std::vector<double> all(gs.join.begin(), gs.join.end());
        lat[i] = static_cast<double>(gs.join[m]) - median(all);
      }
      out.push_back(std::move(lat));
    }
  return out;
}

// Growth of each series in iteration i over its own median from kWarmup on, less the median growth of all
// series in that iteration (what grew alike is job-wide). Returns the largest and its index.
std::pair<double, size_t> local_growth(const std::vector<std::vector<double>>& series, size_t i) {
  std::vector<double> growth(series.size(), 0), all;
  for (size_t k = 0; k < series.size(); ++k) {
    std::vector<double> own;
    for (size_t j = kWarmup; j < series[k].size(); ++j)
      if (!std::isnan(series[k][j])) own.push_back(series[k][j]);
    if (std::isnan(series[k][i]) || own.empty()) continue;
    growth[k] = series[k][i] - median(own);
    all.push_back(growth[k]);
  }
  double typical = median(all);
  std::pair<double, size_t> best{0, 0};
  for (size_t k = 0; k < series.size(); ++k)
    if (growth[k] - typical > best.first) best = {growth[k] - typical, k};
  return best;
}

}  // namespace

void slow_iteration_findings(const Normalized& n, const JobSlice& job, const Structure& s, const Timeline& t,
                             const std::vector<Iteration>& its, const std::string& job_id,
                             std::vector<Finding>& out) {
  size_t iters = its.size();
  std::vector<double> d;
  for (size_t i = kWarmup; i < iters; ++i) d.push_back(static_cast<double>(its[i].duration_ns));
  double med = median(d), sig = robust_sigma(d, med);
  double thr = med + std::max(kSlowIterK * sig, kSlowIterMinExcess * med);
  auto times = transfer_time(job, its);
  std::vector<std::vector<double>> links;
  std::vector<Key> link_of;
  for (auto& [k, v] : times) {
    link_of.push_back(k);
    links.push_back(v);
  }
  std::vector<uint32_t> member_of;
  auto late = join_lateness(t, iters, member_of, s);
  // A long iteration next to one short by at least half its excess is a boundary read in the wrong place
  // (the two together take their usual time), not a slow iteration: a pause or a late rank delays what
  // follows, it is not made up by a faster next iteration. At a 1:N sample source's 1 s resolution the
  // timeline now and then takes one group's synchronisation for the next iteration's (pmacct 1:5: 9.0 s,
  // then 0 s, of a 4.5 s step).
  auto compensated = [&](size_t i, double excess) {
    for (size_t k : {i - 1, i + 1})
      if (k < iters && med - static_cast<double>(its[k].duration_ns) >= kLocalShare * excess) return true;
    return false;
  };
  std::vector<double> vol;  // per iteration, computed once an iteration is long (most passes have none)
  double med_vol = 0;
  auto merged = [&](size_t i) {
    if (vol.empty()) {
      vol = iteration_volume(job, its);
      med_vol = median(std::vector<double>(vol.begin() + static_cast<std::ptrdiff_t>(kWarmup), vol.end()));
    }
    return med_vol > 0 && vol[i] >= kMergedVolume * med_vol;
  };
  int run = 0;
  for (size_t i = kWarmup; i < iters; ++i) {
    double dur = static_cast<double>(its[i].duration_ns);
    if (dur <= thr || compensated(i, dur - med) || merged(i)) continue;
    auto [link_extra, lk] = local_growth(links, i);
    auto [late_extra, mk] = local_growth(late, i);
    double excess = dur - med;
    std::string place;
    if (late_extra >= link_extra && late_extra >= kLocalShare * excess)
      place = n.nodes[member_of[mk]] + " joined its DP synchronisation " + ms(late_extra) +
              " later than usual against its peers";
    else if (link_extra > late_extra && link_extra >= kLocalShare * excess)
      place = n.nodes[static_cast<uint32_t>(link_of[lk] >> 32)] + "->" +
              n.nodes[static_cast<uint32_t>(link_of[lk])] + "'s transfers were in flight " + ms(link_extra) +
              " longer than usual, beyond the other links' growth";
    if (place.empty()) continue;  // spread over every rank and link alike: a job-wide phase, not a fault
    if (!out.empty() && out.back().kind == "slow_iteration" &&
        out.back().first_iteration + run == static_cast<int>(i)) {
      ++run;  // consecutive slow iterations are one finding
      out.back().severity = std::max(out.back().severity, dur / med);
      out.back().evidence += "; iteration " + std::to_string(i) + ": " + ms(dur) + ", " + place;
      continue;
    }
    run = 1;
    Finding f;
    f.kind = "slow_iteration";
    f.subject = job_id;
    f.first_iteration = static_cast<int>(i);
    f.start_ns = its[i].start_ns;
    f.severity = dur / med;
    f.evidence = "iteration " + std::to_string(i) + ": " + ms(dur) + " vs median " + ms(med) +
                 " (MAD sigma " + ms(sig) + "; threshold " + ms(thr) + " = median + max(5 sigma, 50 %)); " +
                 place + " (" + fmt("%.0f", 100 * std::max(late_extra, link_extra) / excess) +
                 " % of the excess; a stretch shared by every rank and link is not counted)";
    out.push_back(std::move(f));
  }
}

}  // namespace netprism::analysis::diagnosis_steps
