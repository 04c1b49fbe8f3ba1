#include "live_analysis.hpp"

#include <algorithm>
#include <chrono>
#include <thread>

#include "log.hpp"
#include "netprism/addr.hpp"

namespace netprism::daemon {

const analysis::Job* Snapshot::find(const std::string& id) const {
  for (const auto& j : jobs)
    if (j.id == id) return &j;
  return nullptr;
}

analysis::Job job_from_json(const nlohmann::json& d) {
  analysis::Job j;
  j.id = d.value("id", "");
  j.nodes = d.value("nodes", std::vector<std::string>{});
  j.state = d.value("state", "ended");
  j.step_time_ms = d.value("step_time_ms", 0.0);
  if (auto p = d.find("parallelism"); p != d.end() && p->is_object()) {
    j.parallelism.dp = p->value("dp", 1);
    j.parallelism.pp = p->value("pp", 1);
    j.parallelism.dp_groups = p->value("dp_groups", std::vector<std::vector<std::string>>{});
    j.parallelism.stages = p->value("stages", std::vector<std::vector<std::string>>{});
  }
  if (auto its = d.find("iterations"); its != d.end() && its->is_array())
    for (const auto& i : *its) {
      analysis::Iteration it;  // fields by name: the struct grows (phases, ...) without breaking this
      it.index = i.value("index", 0);
      it.start_ns = i.value("start_ns", uint64_t{0});
      it.end_ns = i.value("end_ns", uint64_t{0});
      it.duration_ns = i.value("duration_ns", uint64_t{0});
      j.iterations.push_back(std::move(it));
    }
  if (auto fs = d.find("findings"); fs != d.end() && fs->is_array())
    for (const auto& f : *fs) {
      analysis::Finding x;
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

LiveAnalysis::LiveAnalysis(const Settings& s, store::OwnTraffic own, AddrNodes addr_nodes)
    : s_(s),
      own_(std::move(own)),
      addr_nodes_(std::move(addr_nodes)),
      latest_(std::make_shared<Snapshot>()) {}

void LiveAnalysis::preload() {
  store::Store reader(s_.data_dir, store::Db::Mode::kReadOnly);
  uint64_t now = now_unix_ns();
  uint64_t window = static_cast<uint64_t>(s_.analysis_window_s) * 1000000000ull;
  uint64_t since = now > window ? now - window : 0;
  reader.scan_batches(
      std::nullopt, since, UINT64_MAX,
      [&](const Batch& b, uint64_t) {
        for (const auto& f : b.flowlets)
          if (f.last_ns >= since && !own_.matches(f)) window_.events.push_back(store::to_event(b.node, f));
      },
      [](const std::string& e) { log_line("preload: " + e); });
  auto snap = std::make_shared<Snapshot>();
  for (const auto& doc : reader.jobs()) {
    auto j = job_from_json(doc);
    persisted_doc_[j.id] = doc.dump();
    retained_[j.id] = j;
    snap->jobs.push_back(std::move(j));
  }
  std::lock_guard lk(mu_);
  latest_ = std::move(snap);
  if (!window_.events.empty() || !retained_.empty())
    log_line("reloaded " + std::to_string(window_.events.size()) + " recent flow events and " +
             std::to_string(retained_.size()) + " jobs from the store");
}

void LiveAnalysis::feed(const std::string& node, std::vector<Flowlet>&& flowlets) {
  std::lock_guard lk(mu_);
  if (pending_events_ + flowlets.size() > static_cast<std::size_t>(s_.analysis_max_events)) {
    dropped_ += flowlets.size();  // the analysis is far behind: bound memory; the store still has everything
    return;
  }
  pending_events_ += flowlets.size();
  pending_.emplace_back(node, std::move(flowlets));
}

std::shared_ptr<const Snapshot> LiveAnalysis::latest() const {
  std::lock_guard lk(mu_);
  return latest_;
}

uint64_t LiveAnalysis::dropped() const {
  std::lock_guard lk(mu_);
  return dropped_;
}

void LiveAnalysis::run(std::stop_token stop) {
  std::unique_ptr<store::Store> writer;
  try {
    writer = std::make_unique<store::Store>(s_.data_dir, store::Db::Mode::kReadWrite,
                                            static_cast<int>(s_.zstd_level));
  } catch (const std::exception& e) {
    log_line(std::string("analysis cannot open the store, results will not be persisted: ") + e.what());
  }
  auto next = std::chrono::steady_clock::now();
  while (!stop.stop_requested()) {
    if (std::chrono::steady_clock::now() < next) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    auto t0 = std::chrono::steady_clock::now();
    try {
      pass(writer.get());
    } catch (const std::exception& e) {
      log_line(std::string("analysis pass failed: ") + e.what());
    }
    auto took = std::chrono::steady_clock::now() - t0;
    next = t0 + std::max<std::chrono::steady_clock::duration>(
                    std::chrono::milliseconds(s_.analysis_interval_ms), 3 * took);
  }
}

void LiveAnalysis::pass(store::Store* writer) {
  const uint64_t now = now_unix_ns();
  const uint64_t window = static_cast<uint64_t>(s_.analysis_window_s) * 1000000000ull;
  const uint64_t since = now > window ? now - window : 0;
  std::vector<std::pair<std::string, std::vector<Flowlet>>> fresh;
  {
    std::lock_guard lk(mu_);
    fresh.swap(pending_);
    pending_events_ = 0;
  }
  // Addresses repeat (a cluster has few), and formatting them dominates conversion: cache the text. The
  // cache is cleared when it gets large (address scans), which bounds it.
  if (addr_text_.size() > 65536) addr_text_.clear();
  auto text = [&](const uint8_t a[16]) -> const std::string& {
    Addr16 key;
    std::memcpy(key.data(), a, 16);
    auto it = addr_text_.find(key);
    if (it == addr_text_.end()) it = addr_text_.emplace(key, format_addr(a)).first;
    return it->second;
  };
  for (const auto& [node, fl] : fresh)
    for (const auto& f : fl) {
      if (own_.matches(f)) continue;
      auto e = store::to_event(node, f, /*with_addrs=*/false);
      e.src = text(f.key.saddr);
      e.dst = text(f.key.daddr);
      window_.events.push_back(std::move(e));
    }
  std::erase_if(window_.events, [&](const analysis::FlowEvent& e) { return e.last_ns < since; });
  // Memory bound: keep the newest events (arrival order approximates time order).
  auto cap = static_cast<std::size_t>(s_.analysis_max_events);
  if (window_.events.size() > cap)
    window_.events.erase(window_.events.begin(), window_.events.begin() + (window_.events.size() - cap));
  window_.addr_node = addr_nodes_();
  window_.now_ns = now;

  auto t0 = std::chrono::steady_clock::now();
  analysis::Result r = analysis::analyze(window_);
  auto took = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0);

  // Jobs of this pass replace earlier versions. An earlier job that is absent now is kept only when it left
  // the window (its last iteration ended before the window starts, or it had ended): that is history. One
  // still inside the window but gone was superseded (the analysis regrouped it), so it is dropped.
  std::map<std::string, analysis::Job> next;
  for (auto& j : r.jobs) next[j.id] = std::move(j);
  for (auto& [id, j] : retained_) {
    if (next.count(id)) continue;
    uint64_t last_end = j.iterations.empty() ? 0 : j.iterations.back().end_ns;
    bool left_window = j.iterations.empty() ? j.state == "ended" : last_end < since;
    if (left_window) next[id] = std::move(j);
  }
  retained_ = next;

  for (const auto& [id, j] : writer ? retained_ : std::map<std::string, analysis::Job>{}) {
    auto doc = analysis::full(j);
    auto text = doc.dump();
    if (persisted_doc_[id] == text) continue;
    writer->save_job(doc, now);
    persisted_doc_[id] = std::move(text);
  }
  for (auto it = persisted_doc_.begin(); writer && it != persisted_doc_.end();) {
    if (retained_.count(it->first)) {
      ++it;
      continue;
    }
    writer->delete_job(it->first);
    it = persisted_doc_.erase(it);
  }

  auto snap = std::make_shared<Snapshot>();
  for (const auto& [_, j] : retained_) snap->jobs.push_back(j);
  snap->computed_ns = now;
  snap->took_ns = static_cast<uint64_t>(took.count());
  snap->events = window_.events.size();
  std::lock_guard lk(mu_);
  latest_ = std::move(snap);
}

}  // namespace netprism::daemon
