#include "analysis.hpp"

namespace netprism::analysis {

namespace {
// `source` (counters.hpp) only where the input held RDMA counters: other outputs keep their exact form.
nlohmann::json with_source(nlohmann::json d, const Job& j) {
  if (!j.source.empty()) d["source"] = j.source;
  return d;
}
}  // namespace

nlohmann::json job_summary(const Job& j) {
  auto d = with_source({{"id", j.id},
                        {"nodes", j.nodes},
                        {"state", j.state},
                        {"iterations", j.iterations.size()},
                        {"step_time_ms", j.step_time_ms}},
                       j);
  if (j.time_resolution_ms > 0) {  // only for coarse records, so other outputs keep their exact form
    d["step_time_estimated"] = true;
    d["time_resolution_ms"] = j.time_resolution_ms;
  }
  return d;
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
  if (j.parallelism.coarse_edges > 0) d["parallelism"]["coarse_edges"] = j.parallelism.coarse_edges;
  if (!j.parallelism.tp_groups.empty()) {  // only when seen, so other outputs stay as they were
    d["parallelism"]["tp"] = j.parallelism.tp;
    d["parallelism"]["tp_groups"] = j.parallelism.tp_groups;
  }
  return with_source(std::move(d), j);
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
    fs.push_back(with_source(std::move(e), j));
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

Job job_from_json(const nlohmann::json& d) {
  Job j;
  j.id = d.value("id", "");
  j.nodes = d.value("nodes", std::vector<std::string>{});
  j.state = d.value("state", "ended");
  j.source = d.value("source", "");
  j.step_time_ms = d.value("step_time_ms", 0.0);
  j.time_resolution_ms = d.value("time_resolution_ms", 0.0);
  if (auto p = d.find("parallelism"); p != d.end() && p->is_object()) {
    j.parallelism.dp = p->value("dp", 1);
    j.parallelism.pp = p->value("pp", 1);
    j.parallelism.dp_groups = p->value("dp_groups", std::vector<std::vector<std::string>>{});
    j.parallelism.stages = p->value("stages", std::vector<std::vector<std::string>>{});
    j.parallelism.coarse_edges = p->value("coarse_edges", 0);
  }
  if (auto its = d.find("iterations"); its != d.end() && its->is_array())
    for (const auto& i : *its) {
      Iteration it;  // fields by name: the struct grows (phases, ...) without breaking this
      it.index = i.value("index", 0);
      it.start_ns = i.value("start_ns", uint64_t{0});
      it.end_ns = i.value("end_ns", uint64_t{0});
      it.duration_ns = i.value("duration_ns", uint64_t{0});
      j.iterations.push_back(std::move(it));
    }
  if (auto fs = d.find("findings"); fs != d.end() && fs->is_array())
    for (const auto& f : *fs) {
      Finding x;
      x.kind = f.value("kind", "");
      x.subject = f.value("subject", "");
      x.first_iteration = f.value("first_iteration", 0);
      x.start_ns = f.value("start_ns", uint64_t{0});
      x.severity = f.value("severity", 0.0);
      x.evidence = f.value("evidence", "");
      if (auto w = f.find("whatif_step_time_ms"); w != f.end() && w->is_number())
        x.whatif_step_time_ms = w->get<double>();
      j.findings.push_back(std::move(x));
    }
  return j;
}

}  // namespace netprism::analysis
