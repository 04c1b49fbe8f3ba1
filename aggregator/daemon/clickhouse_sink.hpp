// The ClickHouse sink (--clickhouse URL, docs/clickhouse.md): a thread of its own that copies every batch the
// ingest committed into ClickHouse's flowlets table, never on the ingest's path (an ACK never waits for it).
//
// The local store is the buffer. The sink reads committed batches in id order (the ingest assigns ids in
// commit order) after a high-water mark -- the last id ClickHouse has -- kept in DATA_DIR/clickhouse.hwm
// (written to a temporary file, fsynced and renamed after each successful insert). A ClickHouse outage is
// ridden out by retrying the same page with backoff (0.25 s doubling to 10 s); batches meanwhile accumulate
// in the store and are shown as pending.
//
// Exactly once by (node, epoch, seq): an insert that failed may have landed anyway (the reply was lost), and
// a crash may come between an insert and the mark's update. So after a start or a failure the sink first asks
// ClickHouse which of the page's batches it holds and inserts only the others (and asks again for the next
// page as long as a page had some: a lost or stale mark file costs a re-read, not duplicates); with a cluster
// the insert is synchronous (insert_distributed_sync=1), so "acknowledged" means on the shard. What could
// still slip through (two sinks inserting the same batch) is one row after merges: ReplacingMergeTree keyed
// by (node, epoch, seq, idx), read with FINAL (clickhouse/tables.hpp).
//
// Local retention deleting batches before they reached ClickHouse loses them there: size retention_bytes
// for the longest outage to ride out (status `pending_batches` shows how far behind the sink is).
#pragma once

#include <cstdint>
#include <map>
#include <future>
#include <optional>
#include <set>
#include <stop_token>
#include <string>
#include <utility>

#include "clickhouse/http.hpp"
#include "flows.hpp"
#include "registry.hpp"
#include "settings.hpp"
#include "store.hpp"

namespace netprism::daemon {

class ClickHouseSink {
 public:
  ClickHouseSink(const Settings& s, Registry& reg, store::OwnTraffic own);
  void run(std::stop_token st);

  // The mark file: the id of the last batch ClickHouse has (0 when the file is missing or unreadable).
  static uint64_t load_mark(const std::string& path);
  static bool save_mark(const std::string& path, uint64_t id, std::string& err);

 private:
  // One round: schema, registrations, one page of batches. false with err on a failure; `moved`: batches
  // were taken care of (the next round need not wait).
  bool round(store::Store& st, bool& moved, std::string& err);
  bool ensure_schema(std::string& err);
  bool sync_nodes(store::Store& st, std::string& err);
  bool sink_page(store::Store& st, bool& moved, std::string& err);
  // A page: the last batch id it covers, what it inserts, what ClickHouse had already, batches read.
  struct Page {
    uint64_t last_id = 0, batches = 0, rows = 0, there = 0, raw = 0;
  };
  bool sink_rdma(const std::vector<Batch>& page, const std::vector<uint64_t>& received,
                 const std::set<std::tuple<std::string, uint64_t, uint64_t>>& there, std::string& err);
  bool finish_insert(bool& moved, std::string& err);  // waits for the insert in flight; its commit()
  bool commit(const Page& p, std::string& err);       // the mark after p, and the counters
  // Of the page's batches, those ClickHouse has already: (node, epoch, seq).
  using Key = std::tuple<std::string, uint64_t, uint64_t>;
  std::optional<std::set<Key>> present(const std::vector<Batch>& page, std::string& err);
  void drop_old_partitions();
  void on_failure(const std::string& err);

  const Settings& s_;
  Registry& reg_;
  store::OwnTraffic own_;
  clickhouse::Server server_;
  std::string mark_path_, aggregator_;
  uint64_t mark_ = 0;
  bool schema_ready_ = false, verify_ = true, failing_ = false;
  std::map<std::string, uint64_t> nodes_sent_;  // node -> registered_ns of the row ClickHouse has
  uint64_t next_retention_ns_ = 0;
  // Pipelined: page N's insert runs on its own thread while page N+1 is read from the store and encoded
  // (the two alternate between the blocks, reused so that no insert allocates tens of MB afresh). Marks are
  // saved in id order, N's before N+1's; read_pos_ is the last batch read (mark_ or one page beyond).
  // Measured: the sink thread and clickhouse-server's insert were each idle while the other worked.
  uint64_t read_pos_ = 0;
  std::string blocks_[2];
  int next_block_ = 0;
  Page inflight_page_;
  std::future<std::string> inflight_;  // "" on success, else the error; after blocks_ (refers to one)
};

}  // namespace netprism::daemon
