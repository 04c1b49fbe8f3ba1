#include "live_analysis.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <chrono>
#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>
#include <thread>
#include <ctime>

#include "batch_codec.hpp"
#include "cpu_share.hpp"
#include "log.hpp"

namespace netprism::daemon {

const analysis::Job* Snapshot::find(const std::string& id) const {
  auto it = std::lower_bound(jobs.begin(), jobs.end(), id,
                             [](const analysis::Job& j, const std::string& v) { return j.id < v; });
  return it != jobs.end() && it->id == id ? &*it : nullptr;
}

namespace {

analysis::StreamingAnalysis::Limits limits(const Settings& s) {
  analysis::StreamingAnalysis::Limits l;
  l.window_ns = static_cast<uint64_t>(s.analysis_window_s) * 1000000000ull;
  // analysis_max_events bounds the analysis' memory: the engine keeps transfers (32 B) instead of events
  // (~200 B), so the same setting now costs a fraction of what it did.
  l.max_xfers = static_cast<size_t>(s.analysis_max_events);
  // A connection costs a few hundred bytes with its flows; a tenth of the transfer bound (200,000 by
  // default) is far above a cluster's training connections (a 1,000-node job has tens of thousands).
  l.max_conns = std::max<size_t>(1024, static_cast<size_t>(s.analysis_max_events) / 10);
  // Re-analysis per pass: see pass_budget(); this is its floor until the first pass sets it.
  l.pass_budget_ns = static_cast<uint64_t>(s.analysis_interval_ms) * 400'000ull;
  return l;
}

// CPU a pass may spend re-analysing jobs before the rest wait for the next pass (deferred, counted). Jobs go
// cheapest first, so the budget never delays a small job behind a large one; it bounds how long a pass (and
// so every job analysed in it) takes. At least 0.4 of the interval; more, up to one interval, while the
// pacing's bank holds it (cpu_share.hpp): a deferral is then shedding for lack of CPU, not a fixed slice.
// At a fixed 0.4 interval (400 ms) a 30-minute target run deferred two re-analyses when two of its largest
// jobs (~0.45 s each) were due in one pass, while the analysis used 0.22 of a core against its third.
uint64_t pass_budget(const Settings& s, std::chrono::nanoseconds credit) {
  const uint64_t interval = static_cast<uint64_t>(s.analysis_interval_ms) * 1'000'000ull;
  const uint64_t left = credit.count() > 0 ? static_cast<uint64_t>(credit.count()) : 0;
  return std::clamp(left, interval * 2 / 5, interval);
}

// Running jobs are written at most this often (a write is the job's head row and its new or changed
// iterations and findings, job_records.hpp); a restart recomputes the recent past from the stored batches
// anyway, so at most the last few seconds of a job are stale in the store meanwhile. Jobs that leave the
// analysis are written at once.
constexpr uint64_t kPersistEveryNs = 5'000'000'000ull;

std::string signature(const analysis::Job& j) {
  // Appended piece by piece (GCC 12's -Wrestrict misfires on chains of string operator+).
  std::string sig = j.state;
  for (uint64_t v : {uint64_t{j.iterations.size()}, uint64_t{j.findings.size()}, uint64_t{j.nodes.size()},
                     static_cast<uint64_t>(j.parallelism.dp), static_cast<uint64_t>(j.parallelism.pp),
                     static_cast<uint64_t>(j.step_time_ms * 1000),
                     j.iterations.empty() ? 0 : j.iterations.back().end_ns}) {
    sig += '|';
    sig += std::to_string(v);
  }
  return sig;
}

std::chrono::nanoseconds thread_cpu() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec);
}

}  // namespace

LiveAnalysis::LiveAnalysis(const Settings& s, store::OwnTraffic own, AddrNodes addr_nodes)
    : s_(s),
      own_(std::move(own)),
      addr_nodes_(std::move(addr_nodes)),
      latest_(std::make_shared<Snapshot>()),
      engine_(limits(s)) {}

void LiveAnalysis::preload() {
  store::Store reader(s_.data_dir, store::Db::Mode::kReadOnly);
  uint64_t now = now_unix_ns();
  uint64_t window = static_cast<uint64_t>(s_.analysis_window_s) * 1000000000ull;
  uint64_t since = now > window ? now - window : 0;
  engine_.set_addr_nodes(addr_nodes_());
  uint64_t events = 0;
  reader.scan_batches(
      std::nullopt, since, UINT64_MAX,
      [&](const Batch& b, uint64_t) {
        events += feed_.add(b.node, b.flowlets,
                            [&](const Flowlet& f) { return f.last_ns < since || own_.matches(f); });
        note_qp_tables(b);
      },
      [](const std::string& e) { log_line("preload: " + e); });
  // Only the ids of the jobs that were live when the daemon stopped: their histories stay in the store
  // (queries read them there) and the first pass decides which go on (the engine reports them again from
  // the window just loaded) and which are retired.
  store::JobHistory jobs(reader.db());
  for (const auto& h : jobs.heads(false, SIZE_MAX)) unclaimed_.push_back(h.id);
  if (events || !unclaimed_.empty())
    log_line("reloaded " + std::to_string(events) + " recent flow events; " +
             std::to_string(unclaimed_.size()) + " jobs were live");
}

void LiveAnalysis::feed(std::string&& stored, std::size_t flowlets) {
  std::lock_guard lk(mu_);
  // Half the analysis' transfer bound: a backlog of that size means the analysis is many passes behind
  // anyway (a pending flowlet costs ~18 bytes as stored, a kept transfer 32).
  if (pending_events_ + flowlets > static_cast<std::size_t>(s_.analysis_max_events) / 2) {
    dropped_.queue_full +=
        flowlets;  // the analysis is far behind: bound memory; the store still has everything
    return;
  }
  pending_events_ += flowlets;
  pending_.emplace_back(std::move(stored), flowlets);
}

bool LiveAnalysis::feed_flowlets(const std::string& node, std::vector<Flowlet>& flowlets) {
  std::lock_guard lk(mu_);
  if (pending_events_ &&
      pending_events_ + flowlets.size() > static_cast<std::size_t>(s_.analysis_max_events) / 2)
    return false;
  pending_events_ += flowlets.size();
  pending_rows_.emplace_back(node, std::move(flowlets));
  flowlets.clear();
  return true;
}

void LiveAnalysis::feed_rdma(std::vector<Batch>&& batches) {
  std::lock_guard lk(mu_);  // a row per table read or counter burst of a node: small, not bounded by events
  std::move(batches.begin(), batches.end(), std::back_inserter(pending_rdma_));
}

std::shared_ptr<const Snapshot> LiveAnalysis::latest() const {
  std::lock_guard lk(mu_);
  return latest_;
}

LiveAnalysis::Dropped LiveAnalysis::dropped_by_cause() const {
  std::lock_guard lk(mu_);
  Dropped d = dropped_;
  d.conn_table_full = engine_stats_.dropped_events;
  d.xfer_bound = engine_stats_.dropped_xfers;
  return d;
}

uint64_t LiveAnalysis::dropped() const {
  return dropped_by_cause().total();
}

uint64_t LiveAnalysis::deferred() const {
  std::lock_guard lk(mu_);
  return engine_stats_.deferred;
}

analysis::StreamingAnalysis::Stats LiveAnalysis::engine_stats() const {
  std::lock_guard lk(mu_);
  return engine_stats_;
}

void LiveAnalysis::run(std::stop_token stop) {
  // Named so that its CPU time can be told apart from ingest's (bench/scale/run_load.sh reads it).
  pthread_setname_np(pthread_self(), "np-analysis");
  // Durable ingest comes first (agents wait for its acknowledgements; a backlog there is what loses data),
  // the live view second: the analysis thread runs at nice 10 (about a tenth of a nice-0 thread's share when
  // both want the CPU, all of an idle core otherwise). When it falls behind, its pending queue fills and
  // what does not fit is counted (dropped_events), never silently lost; the store still has everything.
  if (setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), 10) != 0)
    log_line("analysis: could not lower its priority; it competes with ingest for the CPU");
  std::unique_ptr<store::Store> writer;
  try {
    writer = std::make_unique<store::Store>(s_.data_dir, store::Db::Mode::kReadWrite,
                                            static_cast<int>(s_.zstd_level));
  } catch (const std::exception& e) {
    log_line(std::string("analysis cannot open the store, results will not be persisted: ") + e.what());
  }
  auto next = std::chrono::steady_clock::now();
  // A third of a core; a 3 s bank covers the longest single re-analysis measured at the target cluster
  // (~1.1 s of CPU) plus the passes after it at the normal interval.
  CpuShare pace(1.0 / 3, std::chrono::seconds(3));
  while (!stop.stop_requested()) {
    if (std::chrono::steady_clock::now() < next) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    auto t0 = std::chrono::steady_clock::now();
    const auto cpu0 = thread_cpu();
    try {
      engine_.set_pass_budget(pass_budget(s_, pace.credit()));
      pass(writer.get());
    } catch (const std::exception& e) {
      log_line(std::string("analysis pass failed: ") + e.what());
    }
    // At least the configured interval, and at most a third of a core on average whatever the load (ingest
    // shares the machine; cpu_share.hpp). CPU time, not wall: when other processes hold the cores, a pass'
    // wall time stretches (10x at load 17 on 2 cores) without it using more.
    next = pace.after_pass(t0, thread_cpu() - cpu0, std::chrono::milliseconds(s_.analysis_interval_ms));
  }
}

void LiveAnalysis::pass(store::Store* writer) {
  auto t0 = std::chrono::steady_clock::now();
  const uint64_t now = now_unix_ns();
  const uint64_t window = static_cast<uint64_t>(s_.analysis_window_s) * 1000000000ull;
  const uint64_t since = now > window ? now - window : 0;
  add_pending();
  // RoCE flows whose QPs the tables show torn down end as a FIN ends a TCP connection (qp_teardown.cpp).
  for (const auto& e : teardowns_.take(addr_node_, since)) analysis::add_event(engine_, e);
  // RDMA port counters (counters-only agents: hardware RoCE bypasses the probe) as transfers, segment by
  // settled segment (counters_live.cpp), as `netprism analyze` makes them of a recording.
  if (!counters_.empty())
    for (const auto& e : counters_.take(now, addr_node_)) analysis::add_event(engine_, e);
  retain(engine_.pass(now), since);
  if (writer) persist(*writer, now);
  publish(now, t0);
}

void LiveAnalysis::add_pending() {
  std::vector<std::pair<std::string, std::size_t>> fresh;
  std::vector<std::pair<std::string, std::vector<Flowlet>>> rows;
  std::vector<Batch> rdma;
  {
    std::lock_guard lk(mu_);
    fresh.swap(pending_);
    rows.swap(pending_rows_);
    rdma.swap(pending_rdma_);
    pending_events_ = 0;
  }
  addr_node_ = addr_nodes_();
  engine_.set_addr_nodes(addr_node_);
  // New data only: each stored batch's flowlets become compact events of interned ids, added as a run.
  for (const auto& [stored, flowlets] : fresh) {
    std::string err;
    std::optional<Batch> batch = store::decompress_stored(stored, err);
    if (!batch) {  // cannot happen (ingest encoded it just now); counted and logged, never silent
      log_line("analysis: a fed batch does not decode: " + err);
      std::lock_guard lk(mu_);
      dropped_.undecodable += flowlets;
      continue;
    }
    feed_.add(batch->node, batch->flowlets, [&](const Flowlet& f) { return own_.matches(f); });
    note_qp_tables(*batch);
  }
  // The analysis role's: RDMA records first (a RoCE flow's end is read against the tables), then flowlets.
  for (const auto& b : rdma) note_rdma(b);
  for (const auto& [node, flowlets] : rows) {
    feed_.add(node, flowlets, [&](const Flowlet& f) { return own_.matches(f); });
    note_roce_flows(node, flowlets);
  }
}

void LiveAnalysis::note_qp_tables(const Batch& b) {
  note_rdma(b);
  note_roce_flows(b.node, b.flowlets);
}

void LiveAnalysis::note_rdma(const Batch& b) {
  // The batch's table rows (read at their ts_ns), then the last read (also one that listed nothing):
  // one read's rows all ship in one batch (the agent adds them between two seals).
  for (const auto& q : b.qps) {
    teardowns_.qp_row(b.node, q.ts_ns ? q.ts_ns : b.sent_ns, q);
    counters_.qp_row(b.node, q.ts_ns ? q.ts_ns : b.sent_ns, q);
  }
  if (auto it = b.counters.find("rdma_qp_table_read_ns"); it != b.counters.end()) {
    teardowns_.table_read(b.node, it->second);
    counters_.table_read(b.node, it->second);
    rdma_seen_ = true;
  }
  for (const auto& r : b.rdma_bursts) counters_.burst(b.node, r);
  if (!b.qps.empty() || !b.rdma_bursts.empty()) {
    engine_.set_rdma_sources(true);
    rdma_seen_ = true;
  }
}

void LiveAnalysis::note_roce_flows(const std::string& node, const std::vector<Flowlet>& flowlets) {
  if (!rdma_seen_) return;  // no table or counter yet that a flow's end could be read against
  for (const auto& f : flowlets)
    if (f.key.proto == NP_PROTO_ROCE && !own_.matches(f)) {
      const analysis::FlowEvent e = analysis::flow_event(node, f);
      teardowns_.flow(e);
      counters_.probe_flow(e);
    }
}

void LiveAnalysis::retain(analysis::Result r, uint64_t since) {
  // Jobs of this pass replace earlier versions. An earlier job that is absent now left the analysis (its
  // last iteration ended before the window starts, or it had ended) and is retired: written to the store
  // and dropped from memory. One still inside the window but gone was superseded (the analysis regrouped
  // it), so it is deleted.
  // What the last persist() did not take (no store to write to) is not kept: memory stays bounded.
  retiring_.clear();
  superseded_.clear();
  auto next = std::make_shared<Snapshot>();
  next->jobs = std::move(r.jobs);
  // By id; of two with one id (not expected) the later stands, as a map assignment kept it.
  std::stable_sort(next->jobs.begin(), next->jobs.end(),
                   [](const auto& a, const auto& b) { return a.id < b.id; });
  auto dup = [](const analysis::Job& a, const analysis::Job& b) { return a.id == b.id; };
  next->jobs.erase(next->jobs.begin(), std::unique(next->jobs.rbegin(), next->jobs.rend(), dup).base());
  // The last pass' jobs are published (queries may hold them): a retiring one is copied, which is rare.
  for (const auto& j : retained_->jobs) {
    if (const auto* now = next->find(j.id)) {
      // A job's iterations only grow, but for its last one or two, which a tail may revise: more lost at
      // once is worth an operator's (and a developer's) look, with what the job was.
      if (now->iterations.size() + 2 < j.iterations.size())
        log_line(fmt::format("analysis: job {} on {} nodes went from {} to {} iterations", j.id,
                             j.nodes.size(), j.iterations.size(), now->iterations.size()));
      continue;
    }
    uint64_t last_end = j.iterations.empty() ? 0 : j.iterations.back().end_ns;
    bool left_window = j.iterations.empty() ? j.state == "ended" : last_end < since;
    // A regrouped job of up to 3 iterations (the period search's minimum) is a start-up fragment: a job's
    // connections seen apart for a pass or two, ~60 when a 512-node job starts, 2,083 lines in a 30-minute
    // target run, none with more than 3 iterations. A job regrouped away with more is worth a line.
    if (left_window || j.iterations.size() > 3)
      log_line(fmt::format("analysis: job {} ({}, {} iterations on {} nodes, first {}) {}", j.id, j.state,
                           j.iterations.size(), j.nodes.size(), j.nodes.empty() ? "-" : j.nodes.front(),
                           left_window ? "left the window: retired" : "regrouped: deleted"));
    if (left_window)
      retiring_.push_back(j);
    else
      superseded_.push_back(j.id);
  }
  retained_ = std::move(next);
}

void LiveAnalysis::persist(store::Store& writer, uint64_t now) {
  for (const auto& j : retiring_) {
    writer_.write(writer, j, now, true);
    persisted_.erase(j.id);
  }
  retiring_.clear();
  for (const auto& id : superseded_) {
    writer_.remove(writer, id);
    persisted_.erase(id);
  }
  superseded_.clear();
  for (const auto& j : retained_->jobs) {
    auto sig = signature(j);
    auto& p = persisted_[j.id];
    if (p.signature == sig) continue;
    if (!p.signature.empty() && now < p.saved_ns + kPersistEveryNs && j.state == "running") continue;
    writer_.write(writer, j, now, false);
    p = {std::move(sig), now};
  }
  // Jobs live before a restart that the first pass did not report again ended meanwhile.
  if (!unclaimed_.empty()) {
    store::JobHistory h(writer.db());
    store::Transaction tx(writer.db());
    for (const auto& id : unclaimed_)
      if (!retained_->find(id)) h.set_retired(id, true);
    tx.commit();
    unclaimed_.clear();
  }
}

void LiveAnalysis::publish(uint64_t now, std::chrono::steady_clock::time_point started) {
  // The jobs retain() kept become the published snapshot as they are (not copied); the next pass builds a
  // new one, so a published snapshot is never written again.
  std::shared_ptr<Snapshot> snap = retained_;
  snap->computed_ns = now;
  snap->took_ns = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - started)
          .count());
  snap->events = engine_.stats().xfers;
  const auto& st = engine_.stats();
  std::lock_guard lk(mu_);
  engine_stats_ = st;
  latest_ = std::move(snap);
}

}  // namespace netprism::daemon
