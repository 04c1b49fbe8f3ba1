// The analysis running inside the daemon: analysis::StreamingAnalysis (incremental.hpp) fed with every
// stored batch and run periodically. It runs the same stages as `netprism analyze`, but a pass costs in
// proportion to new data plus a bounded tail per job (not the window): on a 2-core machine ingest needs
// the CPU. Queries read the latest snapshot, so results are available while jobs run. Jobs are persisted
// incrementally to the store's derived tables (jobs/iterations/findings, job_records.hpp); a job that left
// the analysis is retired there and dropped from memory (queries read it from the store), and a restart
// loads no job history, only the window of batches the engine needs.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <stop_token>
#include <string>
#include <unordered_map>
#include <vector>

#include "analysis.hpp"
#include "counters.hpp"
#include "feed.hpp"
#include "incremental.hpp"
#include "flows.hpp"
#include "job_records.hpp"
#include "settings.hpp"

namespace netprism::daemon {

struct Snapshot {
  std::vector<analysis::Job> jobs;  // the live view (the last pass' jobs), sorted by id
  uint64_t computed_ns = 0;         // when this snapshot was made (0: no analysis has run yet)
  uint64_t took_ns = 0;
  uint64_t events = 0;  // transfers the analysis keeps (its bounded memory of recent traffic)
  const analysis::Job* find(const std::string& id) const;
};

class LiveAnalysis {
 public:
  using AddrNodes = std::function<std::map<std::string, std::string>()>;
  LiveAnalysis(const Settings& s, store::OwnTraffic own, AddrNodes addr_nodes);

  // Fills the window from the store and reloads persisted jobs (call once before run()).
  void preload();
  // The topology file's fabric (its switch lines), before the analysis starts: fabric findings live.
  void set_fabric(analysis::Fabric f) { engine_.set_fabric(std::move(f)); }
  // Called by ingest after a batch is committed, with the batch as stored (zstd of its column encoding,
  // batch_codec.hpp) and its flowlet count.
  void feed(std::string&& stored, std::size_t flowlets);
  // The analysis role reading ClickHouse (clickhouse_analyzer.hpp): flowlets one node observed, decoded
  // (~112 B each while pending). false (nothing taken) while the pending queue is at feed()'s bound: the
  // caller waits instead of dropping (ClickHouse, not the ingest, is the buffer).
  bool feed_flowlets(const std::string& node, std::vector<Flowlet>& flowlets);
  // The analysis role: a counters-only agent's RDMA records (a batch of ClickHouse's rdma table: port
  // bursts, QP table rows, table reads; no flowlets), taken at the next pass as a fed batch's are. All of a
  // poll at once: a pass takes all or none of them.
  void feed_rdma(std::vector<Batch>&& batches);
  void run(std::stop_token stop);
  std::shared_ptr<const Snapshot> latest() const;
  // What the live view shed, by cause (`netprism status`: analysis.dropped_by_cause; /metrics:
  // netprism_analysis_dropped_events_by_cause_total{cause}), so an operator can tell why it shed work.
  struct Dropped {
    uint64_t queue_full = 0;       // flowlets refused by feed(): the pending queue was at its bound
    uint64_t conn_table_full = 0;  // events the engine refused: its connection table was full
    uint64_t xfer_bound = 0;       // transfers the engine evicted early at its transfer bound
    uint64_t undecodable = 0;      // flowlets of a fed batch that did not decode (cannot happen)
    uint64_t total() const { return queue_full + conn_table_full + xfer_bound + undecodable; }
  };
  Dropped dropped_by_cause() const;
  // Their sum (`netprism status`: dropped_events): counted, never silent.
  uint64_t dropped() const;
  // Job re-analyses put off to a later pass because a pass' budget was spent (`netprism status`:
  // deferred_jobs): nothing is lost, the job's new iterations show up a pass later.
  uint64_t deferred() const;
  // The engine's work counters as of the last pass (`netprism status`: analysis.work): how many job
  // re-analyses ran, stood on their last result or were deferred, and how many transfers they re-read.
  analysis::StreamingAnalysis::Stats engine_stats() const;

 private:
  void pass(store::Store* writer);  // null: results are not persisted
  // pass(), step by step: the fed batches into the engine (with the current address -> node names); its jobs
  // replace earlier ones (those that left the window stay); changed jobs written to the store; the snapshot
  // queries read.
  void add_pending();
  void note_qp_tables(const Batch& b);  // a fed batch's QP table rows and RoCE flows into teardowns_
  void note_rdma(const Batch& b);       // its QP table rows, table read and port bursts
  void note_roce_flows(const std::string& node, const std::vector<Flowlet>& flowlets);
  void retain(analysis::Result r, uint64_t since);
  void persist(store::Store& writer, uint64_t now);
  void publish(uint64_t now, std::chrono::steady_clock::time_point started);
  const Settings& s_;
  store::OwnTraffic own_;
  // An agent has shipped a QP table read or RDMA counters: only then do RoCE flowlets need noting for
  // teardowns and counters (each costs a FlowEvent with formatted addresses: 22 % of the analysis thread in
  // the 1,000-agent load test, whose RoCE records come without either).
  bool rdma_seen_ = false;
  AddrNodes addr_nodes_;

  mutable std::mutex mu_;
  // Fed, not yet in the window: whole batches moved in (O(1) per batch on the ingest thread), as stored
  // (~18 B per flowlet; decompressed and decoded by the analysis thread).
  std::vector<std::pair<std::string, std::size_t>> pending_;                // stored bytes, flowlets
  std::vector<std::pair<std::string, std::vector<Flowlet>>> pending_rows_;  // node, flowlets (feed_flowlets)
  std::vector<Batch> pending_rdma_;                                         // feed_rdma
  std::size_t pending_events_ = 0;
  Dropped dropped_;  // queue_full and undecodable counted here; the engine's two read from engine_stats_
  std::shared_ptr<const Snapshot> latest_;

  analysis::StreamingAnalysis::Stats engine_stats_;  // the engine's, published for deferred(), engine_stats()

  // Owned by the analysis thread.
  analysis::StreamingAnalysis engine_;
  // The jobs of the last pass (the live view), sorted by id: the snapshot publish() hands to queries, so a
  // job's document is held once, not once here and once published (a job keeps up to kMaxPhases phases,
  // ~4 MB; the copy also cost a pass the time to make it).
  std::shared_ptr<Snapshot> retained_ = std::make_shared<Snapshot>();
  std::vector<analysis::Job> retiring_;  // left the analysis: written as retired, then dropped
  std::vector<std::string> superseded_;  // regrouped by the analysis: deleted from the store
  std::vector<std::string> unclaimed_;   // live in the store at start, not seen by a pass yet
  JobWriter writer_;
  struct Persisted {
    std::string signature;  // what changed since the last write (cheap to compare, unlike the document)
    uint64_t saved_ns = 0;
  };
  std::map<std::string, Persisted> persisted_;
  analysis::FlowletFeed feed_{engine_};  // flowlets -> engine_ (after engine_: it refers to it)
  analysis::QpTeardowns teardowns_;      // RoCE flows' ends from the agents' QP tables (counters.hpp)
  analysis::LiveCounters counters_;      // RDMA port counters + QP tables as transfers (counters.hpp)
  std::map<std::string, std::string> addr_node_;  // the last pass' address -> node names
};

}  // namespace netprism::daemon
