// The streaming engine's fabric step (incremental.hpp): the same tomography as analyze()
// (diagnosis_fabric.cpp) over what the passes have gathered. A pass sees a job's tail only, so a job's
// directions are taken from its history: the slow ones from its settled slow_link findings (iterations
// already mapped to the job's own), the healthy ones from the iterations in which each direction's rate was
// measured, counted over the tails by iteration start (tails overlap; a start is counted once).
#include <algorithm>

#include "incremental.hpp"

namespace netprism::analysis {
namespace {

// As many measured iterations as a healthy direction needs (diagnosis_fabric.cpp, kHealthyMeasured); the
// history keeps no more per direction.
constexpr size_t kFabricMeasured = 4;

// The directions of a slow_link subject: "A->B", or "A<->B" for both.
std::vector<std::pair<std::string, std::string>> subject_directions(const std::string& subject) {
  if (auto p = subject.find("<->"); p != std::string::npos)
    return {{subject.substr(0, p), subject.substr(p + 3)}, {subject.substr(p + 3), subject.substr(0, p)}};
  if (auto p = subject.find("->"); p != std::string::npos)
    return {{subject.substr(0, p), subject.substr(p + 2)}};
  return {};
}

}  // namespace

void StreamingAnalysis::note_directions(History& h, const std::vector<DirectionState>& dirs) {
  for (const DirectionState& d : dirs) {
    auto& at = h.measured[{d.src, d.dst}];
    for (uint64_t t : d.measured_at) {
      if (at.size() >= kFabricMeasured) break;
      at.insert(t);
    }
  }
}

void StreamingAnalysis::add_fabric_findings(Result& r, const std::vector<const History*>& hs) const {
  std::vector<JobDirections> jobs;
  for (size_t k = 0; k < r.jobs.size(); ++k) {
    JobDirections jd{r.jobs[k].id, {}};
    std::set<std::pair<std::string, std::string>> slow;
    for (const Finding& f : r.jobs[k].findings) {
      if (f.kind != "slow_link") continue;
      for (auto& [a, b] : subject_directions(f.subject)) {
        DirectionState d;
        d.src = a;
        d.dst = b;
        d.onset = f.first_iteration;
        d.measured = kFabricMeasured;
        d.ratio = 1.0 / std::max(f.severity, 1e-6);
        d.start_ns = f.start_ns;
        slow.insert({a, b});
        jd.dirs.push_back(std::move(d));
      }
    }
    for (const auto& [dir, at] : hs[k]->measured)
      if (!slow.count(dir)) {
        DirectionState d;
        d.src = dir.first;
        d.dst = dir.second;
        d.measured = at.size();
        jd.dirs.push_back(std::move(d));
      }
    jobs.push_back(std::move(jd));
  }
  auto found = fabric_findings(fabric_, jobs);
  for (size_t k = 0; k < found.size(); ++k)
    for (Finding& f : found[k]) r.jobs[k].findings.push_back(std::move(f));
}

}  // namespace netprism::analysis
