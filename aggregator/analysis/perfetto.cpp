// Chrome/Perfetto trace-event JSON of one job: process = the job, one thread (track) per node, complete
// ("X") slices per iteration and per phase, instant ("i") markers for findings. Times are microseconds from
// the job's first iteration so the viewer opens at the interesting part.
#include <map>

#include "analysis.hpp"

namespace netprism::analysis {

nlohmann::json perfetto(const Job& j) {
  auto ev = nlohmann::json::array();
  uint64_t origin = j.iterations.empty() ? j.first_ns : j.iterations.front().start_ns;
  auto us = [&](uint64_t ns) {
    return ns >= origin ? static_cast<double>(ns - origin) / 1e3 : -static_cast<double>(origin - ns) / 1e3;
  };
  ev.push_back(
      {{"ph", "M"}, {"pid", 1}, {"tid", 0}, {"name", "process_name"}, {"args", {{"name", "job " + j.id}}}});
  std::map<std::string, int> tid;
  for (const auto& node : j.nodes) {
    int t = static_cast<int>(tid.size()) + 1;
    tid[node] = t;
    ev.push_back({{"ph", "M"}, {"pid", 1}, {"tid", t}, {"name", "thread_name"}, {"args", {{"name", node}}}});
    ev.push_back(
        {{"ph", "M"}, {"pid", 1}, {"tid", t}, {"name", "thread_sort_index"}, {"args", {{"sort_index", t}}}});
  }
  for (const auto& it : j.iterations) {
    for (const auto& node : j.nodes)
      ev.push_back(
          {{"ph", "X"},
           {"pid", 1},
           {"tid", tid[node]},
           {"cat", "iteration"},
           {"name", "iteration " + std::to_string(it.index)},
           {"ts", us(it.start_ns)},
           {"dur", static_cast<double>(it.duration_ns) / 1e3},
           {"args", {{"index", it.index}, {"duration_ms", static_cast<double>(it.duration_ns) / 1e6}}}});
    for (const auto& p : it.phases) {
      auto t = tid.find(p.node);
      if (t == tid.end() || p.end_ns < p.start_ns) continue;
      ev.push_back({{"ph", "X"},
                    {"pid", 1},
                    {"tid", t->second},
                    {"cat", "phase"},
                    {"name", p.name},
                    {"ts", us(p.start_ns)},
                    {"dur", static_cast<double>(p.end_ns - p.start_ns) / 1e3},
                    {"args", {{"iteration", it.index}}}});
    }
  }
  for (const auto& f : j.findings) {
    auto t = tid.find(f.subject);
    nlohmann::json e = {{"ph", "i"},
                        {"pid", 1},
                        {"tid", t == tid.end() ? 0 : t->second},
                        {"s", t == tid.end() ? "p" : "t"},
                        {"cat", "finding"},
                        {"name", f.kind + ": " + f.subject},
                        {"ts", us(f.start_ns)},
                        {"args",
                         {{"kind", f.kind},
                          {"subject", f.subject},
                          {"first_iteration", f.first_iteration},
                          {"severity", f.severity},
                          {"evidence", f.evidence}}}};
    if (f.whatif_step_time_ms) e["args"]["whatif_step_time_ms"] = *f.whatif_step_time_ms;
    ev.push_back(std::move(e));
  }
  return {{"traceEvents", ev}, {"displayTimeUnit", "ms"}, {"otherData", {{"job", j.id}}}};
}

}  // namespace netprism::analysis
