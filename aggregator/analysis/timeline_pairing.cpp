// Timeline, DP groups against the reference: which iteration ("slot" of the reference group's
// synchronisation ends) each group's synchronisation belongs to (pair_group), how late its last data came
// (stretched synchronisations, late tails), and when the last data reached its members (member_ends).
#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "debug_log.hpp"
#include "timeline_steps.hpp"

namespace netprism::analysis::timeline_steps {
namespace {

// The shift that pairs the group's k-th synchronisation with the reference's (k + shift)-th: one per
// iteration each, with the shift that brings them closest (median distance; cost < 0: nothing paired).
// Pairing by order (not by nearest time) keeps a stage whose synchronisation slowed down by half a step (a
// shaped link) in its own iteration.
struct Shift {
  long shift = 0;
  double cost = -1;
};
Shift best_shift(const std::vector<uint64_t>& E, const std::vector<uint64_t>& refb) {
  Shift best;
  for (long sh = -2; sh <= 2; ++sh) {
    std::vector<double> d;
    for (size_t k = 0; k < refb.size(); ++k) {
      long j = static_cast<long>(k) + sh;
      if (j >= 0 && j < static_cast<long>(E.size()))
        d.push_back(std::fabs(static_cast<double>(E[static_cast<size_t>(j)]) - static_cast<double>(refb[k])));
    }
    if (d.size() * 2 < refb.size()) continue;
    double c = median(d);
    if (best.cost < 0 || c < best.cost) {
      best.cost = c;
      best.shift = sh;
    }
  }
  return best;
}

void log_shift(size_t g, const Shift& sh, const std::vector<uint64_t>& E, const std::vector<uint64_t>& refb) {
  std::string l;
  debug::appendf(l, "group %zu: shift %ld (cost %.1f ms), ends:", g, sh.shift, sh.cost / 1e6);
  for (uint64_t e : E)
    debug::appendf(l, " %.1f", (static_cast<double>(e) - static_cast<double>(refb[0])) / 1e6);
  debug::line(l);
}

// The group's ends put in the reference's slots with the shift. The window is three quarters of the step
// around this very slot (the spacing to the neighbouring reference end on the side the group's end lies),
// never less than of the median step. A group's synchronisation of iteration k ends before the reference's
// of iteration k + 1 (every stage's next backward pass waits for its optimizer step), so when a fault
// lengthens the steps the group may lag the reference by more than the median step of a run that was faster
// before: the local step still holds it, and a group end paired one synchronisation off (a step away) still
// falls outside.
std::vector<uint64_t> ends_by_slot(const std::vector<uint64_t>& E, const Reference& ref, long shift) {
  const std::vector<uint64_t>& refb = ref.ends;
  const double T = ref.step;
  auto span = [&](size_t k, bool after) {
    double d = T;
    if (after && k + 1 < refb.size()) d = static_cast<double>(refb[k + 1] - refb[k]);
    if (!after && k > 0) d = static_cast<double>(refb[k] - refb[k - 1]);
    return std::max(d, T);
  };
  std::vector<uint64_t> by_slot(refb.size(), 0);
  for (size_t k = 0; k < refb.size(); ++k) {
    long j = static_cast<long>(k) + shift;
    if (j < 0 || j >= static_cast<long>(E.size())) continue;
    uint64_t e = E[static_cast<size_t>(j)];
    if (std::fabs(static_cast<double>(e) - static_cast<double>(refb[k])) > 0.75 * span(k, e > refb[k]))
      continue;
    by_slot[k] = e;
  }
  return by_slot;
}

// A stretched synchronisation (a shaped link turns it into a trickle of partial bursts) ends with its
// last transfer: within half a step of the reference, the group's latest DP transfer end wins. Sender views
// and, where seen, the receivers' (arrivals on a shaped link come later).
void extend_stretched(std::vector<uint64_t>& by_slot, const JobSlice& job, const Structure& s, int g,
                      const Reference& ref) {
  const std::vector<uint64_t>& refb = ref.ends;
  const double T = ref.step;
  for (const auto* list : {&job.xfers, &job.arrivals})
    for (const Xfer& x : *list) {
      if (!is_dp_xfer(s, x, g)) continue;
      auto it =
          std::lower_bound(refb.begin(), refb.end(),
                           x.t1 > static_cast<uint64_t>(0.5 * T) ? x.t1 - static_cast<uint64_t>(0.5 * T) : 0);
      if (it == refb.end() || static_cast<double>(*it) + 0.5 * T < static_cast<double>(x.t1)) continue;
      size_t k = static_cast<size_t>(it - refb.begin());
      if (x.t1 > by_slot[k]) by_slot[k] = x.t1;
    }
}

// A member on a shaped link can still be receiving the last data of its synchronisation long after its peers
// finished (206 ms in a testbed run, beyond the half step above once the fault had made the steps longer).
// Data for a member belongs to the group's synchronisation that ended before it as long as that member has
// sent no pipeline data since: its next forward/backward pass only starts once its all-reduce returned, and
// its part of the next synchronisation comes after that pass. Without that member's pipeline sends in view
// nothing is extended.
void extend_late_tails(std::vector<uint64_t>& by_slot, const JobSlice& job, const Structure& s, int g) {
  std::map<uint32_t, std::vector<uint64_t>> member_pp;  // member -> starts of its pipeline sends
  for (const Xfer& x : job.xfers)
    if (is_pp_send(s, x, g)) member_pp[x.src].push_back(x.t0);
  std::vector<uint64_t> paired;  // the group's ends so far, in time order, and their slots
  std::vector<size_t> paired_slot;
  for (size_t k = 0; k < by_slot.size(); ++k)
    if (by_slot[k]) {
      paired.push_back(by_slot[k]);
      paired_slot.push_back(k);
    }
  for (const auto* list : {&job.xfers, &job.arrivals})
    for (const Xfer& x : *list) {
      if (!is_dp_xfer(s, x, g)) continue;
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
      uint64_t& ge = by_slot[paired_slot[static_cast<size_t>(it - paired.begin()) - 1]];
      ge = std::max(ge, x.t1);
    }
}

}  // namespace

GroupEnds pair_group(const JobSlice& job, const Structure& s, size_t group, const Reference& ref) {
  const int g = static_cast<int>(group);
  const bool is_ref = g == ref.group;
  // A synchronisation stretched by a slow link can break into several complete-looking episodes; two ends
  // closer than half a step belong to one synchronisation (keep the later).
  std::vector<uint64_t> E =
      is_ref ? ref.ends : merge_close(merge_stalled(sync_ends(job, s, g), job, s, g), 0.5 * ref.step);
  Shift sh = best_shift(E, ref.ends);
  if (debug::lines_on() && !ref.ends.empty()) log_shift(group, sh, E, ref.ends);
  GroupEnds out{ends_by_slot(E, ref, sh.shift), std::move(E)};
  if (!is_ref) {
    extend_stretched(out.by_slot, job, s, g, ref);
    extend_late_tails(out.by_slot, job, s, g);
    out.in_order.clear();
    for (uint64_t e : out.by_slot)
      if (e) out.in_order.push_back(e);
  }
  return out;
}

// Each group's end as a boundary is the median over its members of when the last data for each member
// arrived (the receivers' own views where seen, else the senders'): the members of one synchronisation
// agree on its end up to their links' delivery, and one member on a slow link finishes later than the
// group as a whole (the testbed's truth reads the group's end the same way). The window reaches back to
// the group's previous end, and at least half a step before its last transfer (a stretched
// synchronisation and its late tail stay inside it, see above). GroupEnds::by_slot itself (the last
// transfer) stays the synchronisation's end for the phases and the diagnosis.
std::vector<uint64_t> member_ends(const JobSlice& job, const Structure& s, size_t group, const GroupEnds& ge,
                                  const Reference& ref) {
  const int g = static_cast<int>(group);
  std::vector<uint64_t> ends;  // slots with an end, in time order, and their slot index
  std::vector<size_t> slots;
  for (size_t k = 0; k < ge.by_slot.size(); ++k)
    if (ge.by_slot[k]) {
      ends.push_back(ge.by_slot[k]);
      slots.push_back(k);
    }
  std::vector<std::map<uint32_t, uint64_t>> last(ends.size());
  for (const auto* list : {&job.xfers, &job.arrivals})
    for (const Xfer& x : *list) {
      if (!is_dp_xfer(s, x, g)) continue;
      // The synchronisation under way when the transfer began: one that ends after the group's end (data
      // still arriving when the senders were done) is that synchronisation's tail, not the next one's
      // (soft-RoCE: the last 71 KB of an all-reduce reached its member 40 ms after the sender's end, and
      // were read as the next synchronisation's, so this one ended at an earlier piece, 72 ms early).
      auto it = std::lower_bound(ends.begin(), ends.end(), x.t0);
      if (it == ends.end()) continue;
      // Since the group's previous end (every transfer after it is this synchronisation's, its tail
      // included, see above), and at least the half step before its end.
      uint64_t from = it == ends.begin() ? 0 : *(it - 1);
      if (static_cast<double>(*it) - static_cast<double>(x.t1) > 0.5 * ref.step && x.t1 <= from) continue;
      uint64_t& l = last[static_cast<size_t>(it - ends.begin())][x.dst];
      l = std::max(l, x.t1);
    }
  std::vector<uint64_t> out(ge.by_slot.size(), 0);
  for (size_t i = 0; i < ends.size(); ++i) {
    std::vector<double> m;
    for (auto& [node, tl] : last[i]) m.push_back(static_cast<double>(tl));
    out[slots[i]] = m.empty() ? ends[i] : static_cast<uint64_t>(median(std::move(m)));
  }
  return out;
}

}  // namespace netprism::analysis::timeline_steps
