// `netprism report`: a fleet view, one row per job (nodes, hours observed, iterations, median step time, time
// lost, stragglers, slow links, hangs, fabric elements), in the spirit of the Acme characterisation of LLM
// training clusters. Computed from analysed jobs: by the aggregator for its live view (query "report") and by
// the CLI itself for a recording (`netprism report --input FILE`), so both print the same document.
#include "analysis.hpp"

#include <algorithm>
#include <set>

namespace netprism::analysis {

namespace {
double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  std::size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

// Slow iterations run on from a `slow_iteration` finding's first iteration while they stay above 1.5 x the
// median step: the detector's threshold is median + max(5 sigma, 50 %), so every iteration it flags is above
// 1.5 x median and the run covers the finding's whole range (it can add an adjacent iteration between 1.5 x
// median and the detector's threshold, which is slow by any reading).
constexpr double kSlowRunFactor = 1.5;
}  // namespace

// Time lost, per job, in seconds of the job's wall time (multiply by the node count for node-hours):
//  - slow iterations: sum over the iterations of every slow_iteration run of (duration - median step). The
//    median is the job's own baseline (robust to the slow iterations themselves), so this is the time the
//    job would have saved had those iterations been ordinary ones.
//  - stragglers and slow links: for each such finding with a what-if step time W (the step time without
//    that node's slowness or that link's), the sum over iterations from its first_iteration on of
//    max(0, duration - W). A straggler persists once it starts (the finding has no end), so every later
//    iteration is affected; iterations already counted as slow iterations are left out (their excess is
//    counted once), and where several findings cover an iteration the largest saving is taken: removing one
//    cause does not remove the others, and the savings of removing several are not additive.
//  - hang: while hung, the time since the hang began (the job makes no progress at all).
//  - a fabric finding (a switch or switch link slowing this job's directions) has no time of its own: the
//    job's slow_link findings of the directions it explains stay beside it, and their time is under
//    slow_links (counting it again under the fabric would count one slowdown twice).
// total = the sum of the three; share = total / observed time. Observed time runs from the job's first
// training transfer to its last one, or to now while it is hung.
nlohmann::json fleet_report(const std::vector<Job>& jobs, uint64_t now_ns) {
  auto rows = nlohmann::json::array();
  std::set<std::string> fleet_nodes;
  double fleet_node_h = 0, fleet_lost_node_h = 0;
  int n_stragglers = 0, n_slow_links = 0, n_hangs = 0;
  // A fabric element (a switch or a link between switches) slows every job crossing it and is reported in
  // each of them: the fleet counts it once, by subject.
  std::set<std::string> fleet_fabric;
  for (const auto& j : jobs) {
    const std::size_t n = j.iterations.size();
    std::vector<double> d(n);
    for (std::size_t i = 0; i < n; ++i) d[i] = static_cast<double>(j.iterations[i].duration_ns);
    const double med = median(d);

    std::vector<bool> slow(n, false);
    double lost_slow = 0;
    for (const auto& f : j.findings) {
      if (f.kind != "slow_iteration" || f.first_iteration < 0) continue;
      for (auto i = static_cast<std::size_t>(f.first_iteration); i < n && d[i] > kSlowRunFactor * med; ++i)
        if (!slow[i]) {
          slow[i] = true;
          lost_slow += d[i] - med;
        }
    }
    std::vector<double> save_straggler(n, 0), save_link(n, 0);
    nlohmann::json stragglers = nlohmann::json::array(), links = nlohmann::json::array(),
                   hangs = nlohmann::json::array(), fabric = nlohmann::json::array();
    uint64_t hang_start = 0;
    for (const auto& f : j.findings) {
      if (f.kind == "straggler") stragglers.push_back(f.subject);
      if (f.kind == "slow_link") links.push_back(f.subject);
      if (f.kind == "fabric") fabric.push_back(f.subject), fleet_fabric.insert(f.subject);
      if (f.kind == "hang") {
        hangs.push_back(f.subject);
        if (f.start_ns && (!hang_start || f.start_ns < hang_start)) hang_start = f.start_ns;
      }
      if ((f.kind != "straggler" && f.kind != "slow_link") || !f.whatif_step_time_ms || f.first_iteration < 0)
        continue;
      auto& save = f.kind == "straggler" ? save_straggler : save_link;
      const double w = *f.whatif_step_time_ms * 1e6;
      for (auto i = static_cast<std::size_t>(f.first_iteration); i < n; ++i)
        if (!slow[i]) save[i] = std::max(save[i], d[i] - w);
    }
    // One iteration's saving is the largest over all its causes (straggler and link alike).
    double lost_straggler = 0, lost_link = 0;
    for (std::size_t i = 0; i < n; ++i) {
      if (save_straggler[i] <= 0 && save_link[i] <= 0) continue;
      if (save_straggler[i] >= save_link[i])
        lost_straggler += save_straggler[i];
      else
        lost_link += save_link[i];
    }
    const bool hung = j.state == "hung";
    const double lost_hang =
        hung && hang_start && now_ns > hang_start ? static_cast<double>(now_ns - hang_start) : 0;
    const uint64_t end = hung ? std::max(now_ns, j.last_ns) : j.last_ns;
    const double observed = end > j.first_ns ? static_cast<double>(end - j.first_ns) : 0;
    const double lost = lost_slow + lost_straggler + lost_link + lost_hang;

    for (const auto& node : j.nodes) fleet_nodes.insert(node);
    const double nodes = static_cast<double>(j.nodes.size());
    fleet_node_h += nodes * observed / 3.6e12;
    fleet_lost_node_h += nodes * lost / 3.6e12;
    n_stragglers += static_cast<int>(stragglers.size());
    n_slow_links += static_cast<int>(links.size());
    n_hangs += static_cast<int>(hangs.size());
    rows.push_back({{"id", j.id},
                    {"state", j.state},
                    {"nodes", j.nodes},
                    {"first_ns", j.first_ns},
                    {"last_ns", j.last_ns},
                    {"hours_observed", observed / 3.6e12},
                    {"node_hours", nodes * observed / 3.6e12},
                    {"iterations", n},
                    {"median_step_ms", med / 1e6},
                    {"slow_iterations", std::count(slow.begin(), slow.end(), true)},
                    {"time_lost_s",
                     {{"slow_iterations", lost_slow / 1e9},
                      {"stragglers", lost_straggler / 1e9},
                      {"slow_links", lost_link / 1e9},
                      {"hang", lost_hang / 1e9},
                      {"total", lost / 1e9}}},
                    {"time_lost_share", observed > 0 ? std::min(1.0, lost / observed) : 0.0},
                    {"stragglers", stragglers},
                    {"slow_links", links},
                    {"hangs", hangs},
                    {"fabric", fabric}});
  }
  return {{"jobs", rows},
          {"fleet",
           {{"jobs", jobs.size()},
            {"nodes", fleet_nodes.size()},
            {"node_hours", fleet_node_h},
            {"node_hours_lost", fleet_lost_node_h},
            {"stragglers", n_stragglers},
            {"slow_links", n_slow_links},
            {"hangs", n_hangs},
            {"fabric", fleet_fabric.size()}}},
          {"now_ns", now_ns}};
}

}  // namespace netprism::analysis
