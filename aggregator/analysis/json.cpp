#include "analysis.hpp"

namespace netprism::analysis {

nlohmann::json job_summary(const Job& j) {
  return {{"id", j.id},
          {"nodes", j.nodes},
          {"state", j.state},
          {"iterations", j.iterations.size()},
          {"step_time_ms", j.step_time_ms}};
}

nlohmann::json job_detail(const Job& j) {
  nlohmann::json d = {{"id", j.id},
                      {"nodes", j.nodes},
                      {"state", j.state},
                      {"parallelism",
                       {{"dp", j.parallelism.dp},
                        {"pp", j.parallelism.pp},
                        {"dp_groups", j.parallelism.dp_groups},
                        {"stages", j.parallelism.stages},
                        {"tp_hint", j.parallelism.tp_hint}}}};
  if (j.parallelism.ep > 1) d["parallelism"]["ep"] = j.parallelism.ep;
  return d;
}

nlohmann::json timeline(const Job& j) {
  auto its = nlohmann::json::array();
  for (const auto& it : j.iterations)
    its.push_back({{"index", it.index},
                   {"start_ns", it.start_ns},
                   {"end_ns", it.end_ns},
                   {"duration_ns", it.duration_ns}});
  return {{"job", j.id}, {"iterations", its}};
}

nlohmann::json diagnosis(const Job& j) {
  auto fs = nlohmann::json::array();
  for (const auto& f : j.findings) {
    nlohmann::json e = {
        {"kind", f.kind},         {"subject", f.subject},   {"first_iteration", f.first_iteration},
        {"start_ns", f.start_ns}, {"severity", f.severity}, {"evidence", f.evidence}};
    if (f.whatif_step_time_ms) e["whatif_step_time_ms"] = *f.whatif_step_time_ms;
    fs.push_back(std::move(e));
  }
  return {{"job", j.id}, {"findings", fs}};
}

nlohmann::json full(const Job& j) {
  auto out = job_summary(j);
  out["parallelism"] = job_detail(j)["parallelism"];
  out["iterations"] = timeline(j)["iterations"];
  out["findings"] = diagnosis(j)["findings"];
  return out;
}

}  // namespace netprism::analysis
