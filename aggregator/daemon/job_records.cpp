#include "job_records.hpp"

#include <algorithm>
#include <set>

namespace netprism::daemon {

namespace {

// The head row's document: the `jobs` entry (iterations: the stored total), parallelism, first/last_ns.
nlohmann::json head_doc(const analysis::Job& j, int64_t iterations, bool retired) {
  auto d = analysis::job_summary(j);
  d["iterations"] = iterations;
  d["parallelism"] = analysis::job_detail(j)["parallelism"];
  d["first_ns"] = j.first_ns;
  d["last_ns"] = j.last_ns;
  // Retired: no traffic any more, so a job still "running" when it left the live view has ended (a hung
  // or idle one keeps its state: that is its diagnosis).
  if (retired && j.state == "running") d["state"] = "ended";
  return d;
}

store::IterationRow row_of(const analysis::Iteration& it, int64_t index) {
  return {index, it.start_ns, it.end_ns, it.duration_ns};
}

}  // namespace

void JobWriter::write(store::Store& st, const analysis::Job& j, uint64_t now_ns, bool retired) {
  store::JobHistory h(st.db());
  store::Transaction tx(st.db());
  Mark& m = marks_[j.id];
  if (!m.loaded) {  // first write of this job by this process: what the store holds already
    auto head = h.head(j.id);
    m.stored = head ? static_cast<int64_t>(head->iterations) : 0;
    m.fresh_from = m.stored;
    m.loaded = true;
  }
  if (!m.based && !j.iterations.empty()) {
    m.base = h.iterations_before(j.id, j.iterations.front().start_ns);
    m.fresh_from = m.base;
    m.based = true;
  }
  write_iterations(h, j, m);
  write_findings(h, j, m);
  const int64_t count = m.based ? m.base + static_cast<int64_t>(j.iterations.size()) : m.stored;
  auto doc = head_doc(j, count, retired);
  std::string dump = doc.dump();
  dump += retired ? "|retired" : "";
  if (dump != m.head) {
    h.put_head({j.id, std::move(doc), static_cast<uint64_t>(count), j.last_ns, retired}, now_ns);
    m.head = std::move(dump);
  }
  tx.commit();
  if (retired) marks_.erase(j.id);
}

void JobWriter::write_iterations(store::JobHistory& h, const analysis::Job& j, Mark& m) {
  if (!m.based) return;
  const int64_t n = static_cast<int64_t>(j.iterations.size());
  const int64_t recheck_from = std::max<int64_t>(0, n - static_cast<int64_t>(kRecheckIterations));
  const int64_t cached_from = m.recent.empty() ? 0 : m.recent.front().index;
  std::vector<store::IterationRow> rows;
  // Rows this process has not written yet, and the recent ones the engine may still have revised.
  for (int64_t p = std::max<int64_t>(0, std::min(recheck_from, m.fresh_from - m.base)); p < n; ++p) {
    const auto row = row_of(j.iterations[static_cast<std::size_t>(p)], m.base + p);
    if (row.index < m.fresh_from) {  // written before: again only when it is recent and changed
      const int64_t c = row.index - cached_from;
      if (c < 0 || c >= static_cast<int64_t>(m.recent.size()) || m.recent[static_cast<std::size_t>(c)] == row)
        continue;
    }
    rows.push_back(row);
  }
  h.put_iterations(j.id, rows);
  // Fewer than before (the engine regrouped the tail, or a restarted analysis ends earlier): the rest goes.
  if (m.stored > m.base + n) h.truncate_iterations(j.id, m.base + n);
  m.stored = m.fresh_from = m.base + n;
  m.recent.clear();
  for (int64_t p = recheck_from; p < n; ++p)
    m.recent.push_back(row_of(j.iterations[static_cast<std::size_t>(p)], m.base + p));
}

void JobWriter::write_findings(store::JobHistory& h, const analysis::Job& j, Mark& m) {
  std::map<FindingKey, store::FindingRow> now;
  for (const auto& f : j.findings) {
    store::FindingRow r{f.kind,     f.subject,  f.first_iteration + m.base, f.start_ns,
                        f.severity, f.evidence, f.whatif_step_time_ms};
    now[{r.kind, r.subject, r.first_iteration}] = std::move(r);
  }
  for (const auto& [k, r] : now)
    if (auto it = m.findings.find(k); it == m.findings.end() || !(it->second == r)) h.put_finding(j.id, r);
  for (const auto& [k, r] : m.findings)
    if (!now.count(k)) h.delete_finding(j.id, r);
  m.findings = std::move(now);
}

void JobWriter::remove(store::Store& st, const std::string& id) {
  store::JobHistory h(st.db());
  store::Transaction tx(st.db());
  h.remove(id);
  tx.commit();
  marks_.erase(id);
}

nlohmann::json jobs_document(const std::vector<analysis::Job>& live, store::Store& reader,
                             std::size_t limit) {
  auto jobs = nlohmann::json::array();
  std::set<std::string> ids;
  for (const auto& j : live) {
    jobs.push_back(analysis::job_summary(j));
    ids.insert(j.id);
  }
  store::JobHistory h(reader.db());
  std::size_t added = 0;
  for (const auto& head : h.heads(std::nullopt, limit + live.size())) {
    if (added == limit) break;
    if (ids.count(head.id)) continue;
    nlohmann::json e = nlohmann::json::object();
    for (const char* k : {"id", "nodes", "state", "iterations", "step_time_ms"})
      if (head.doc.contains(k)) e[k] = head.doc[k];
    jobs.push_back(std::move(e));
    ++added;
  }
  return {{"jobs", jobs}, {"stored_jobs_total", h.count(std::nullopt)}};
}

std::optional<nlohmann::json> stored_job_document(store::Store& reader, const std::string& cmd,
                                                  const std::string& id, int64_t after, std::size_t limit) {
  store::JobHistory h(reader.db());
  auto head = h.head(id);
  if (!head) return std::nullopt;
  if (cmd == "job") {  // job_detail()'s fields, as stored
    nlohmann::json d = nlohmann::json::object();
    for (const char* k : {"id", "nodes", "state", "parallelism"})
      if (head->doc.contains(k)) d[k] = head->doc[k];
    return d;
  }
  analysis::Job j = analysis::job_from_json(head->doc);
  j.id = id;
  j.first_ns = head->doc.value("first_ns", uint64_t{0});
  j.last_ns = head->doc.value("last_ns", uint64_t{0});
  bool more = false;
  if (cmd == "timeline" || cmd == "perfetto") {
    auto rows = h.iterations(id, after, limit + 1);
    more = rows.size() > limit;
    if (more) rows.pop_back();
    for (const auto& r : rows) {
      analysis::Iteration it;
      it.index = static_cast<int>(r.index);
      it.start_ns = r.start_ns;
      it.end_ns = r.end_ns;
      it.duration_ns = r.duration_ns;
      j.iterations.push_back(std::move(it));
    }
  }
  if (cmd == "diagnose" || cmd == "perfetto")
    for (auto& r : h.findings(id, limit))
      j.findings.push_back({std::move(r.kind), std::move(r.subject), static_cast<int>(r.first_iteration),
                            r.start_ns, r.severity, std::move(r.evidence), r.whatif_step_time_ms});
  if (cmd == "timeline") {
    auto doc = analysis::timeline(j);
    if (more) doc["next_from"] = j.iterations.back().index + 1;
    return doc;
  }
  if (cmd == "diagnose") return analysis::diagnosis(j);
  return analysis::perfetto(j);
}

}  // namespace netprism::daemon
