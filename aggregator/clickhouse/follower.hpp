// Following the flowlets table as aggregators insert into it (`netprism-aggregator
// --analyze-from-clickhouse`, docs/clickhouse.md): each poll hands out the rows that became visible since the
// last one, each row once.
//
// What orders rows by arrival? Not first_ns: an aggregator inserts minutes late after a busy spell and hours
// late after a ClickHouse outage, so a watermark on first_ns would skip rows for good; and not received_ns:
// aggregators' clocks differ and their sinks lag by as much. So every row carries `inserted` (tables.hpp),
// stamped by the server that took its insert, and the follower asks for rows by it. Two things still make
// "inserted > watermark" wrong: the stamp has 1 s resolution, and a row becomes visible only when its insert
// finished, which can be after rows stamped later became visible (a large insert, a Distributed insert
// waiting on the other shard, servers' clocks). Hence:
//  - a band: every poll looks again at the last `lag_s` seconds of stamps, asking the server how many rows
//    each second has (one small GROUP BY); a second whose count changed since it was read is read again;
//  - dedup: the rows handed out in the band are remembered by a 64-bit hash of (node, epoch, seq, idx) -- the
//    key that identifies a row (tables.hpp) -- so a second read again, or a row inserted twice, is handed out
//    once. Memory: 8-16 bytes per row of the band.
// A row that becomes visible more than lag_s after its stamp is missed (the sink's inserts time out after
// 30 s; the default lag is 60 s). Rows whose first_ns is more than reach_ns before their stamp (an outage
// longer than the analysis window) are not followed either: a live analysis would drop them as too old.
// The reads are key-prefix reads when nodes are given (sharded analysis) and touch only the partitions of
// the reach (first_ns >= band start - reach_ns).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "http.hpp"
#include "rowbinary.hpp"
#include "tables.hpp"

namespace netprism::clickhouse {

// A followed table's rows as the follower reads them: any table with `inserted`, `node` and `first_ns`
// columns (flowlets; rdma, the counters-only agents' records).
class FollowedRows {
 public:
  virtual ~FollowedRows() = default;
  virtual std::string table() const = 0;
  virtual std::string columns() const = 0;  // SELECTed after toUInt32(inserted)
  virtual std::string order() const = 0;    // ORDER BY of a read
  // Reads the next row into this; false at the end or on a malformed row (err set). key: identifies it.
  virtual bool next(RowReader& r, uint64_t& key, std::string& err) = 0;
  virtual void emit() = 0;  // hands the row just read on
};

// The flowlets table, row by row to fn.
class FlowletRows : public FollowedRows {
 public:
  explicit FlowletRows(std::function<void(const FlowletRow&)> fn) : fn_(std::move(fn)) {}
  std::string table() const override { return "flowlets"; }
  std::string columns() const override;
  std::string order() const override { return "node, epoch, seq, idx"; }
  bool next(RowReader& r, uint64_t& key, std::string& err) override;
  void emit() override { fn_(row_); }

 private:
  std::function<void(const FlowletRow&)> fn_;
  FlowletRow row_;
};

// The rdma table (tables.hpp), batch by batch (flowlets empty) to fn.
class RdmaRows : public FollowedRows {
 public:
  explicit RdmaRows(std::function<void(Batch&&)> fn) : fn_(std::move(fn)) {}
  std::string table() const override { return "rdma"; }
  std::string columns() const override { return "node, epoch, seq, first_ns, last_ns, received_ns, batch"; }
  std::string order() const override { return "first_ns, node, epoch, seq"; }
  bool next(RowReader& r, uint64_t& key, std::string& err) override;
  void emit() override { fn_(std::move(batch_)); }

 private:
  std::function<void(Batch&&)> fn_;
  Batch batch_;
};

class Follower {
 public:
  struct Options {
    uint64_t reach_ns = 660'000'000'000ull;  // the analysis window plus slack
    uint32_t lag_s = 60;
  };
  Follower(Url url, Options o);
  // rows.emit() for every row of its table not handed out before, of `nodes`' (empty: every node's).
  // `added`: nodes new in `nodes` since the last poll: their rows of the whole reach are read too. false
  // with err (the next poll picks up where this one left off). One follower follows one table.
  bool poll(const std::vector<std::string>& nodes, const std::vector<std::string>& added, FollowedRows& rows,
            std::string& err);

  struct Stats {
    uint64_t polls = 0;
    uint64_t rows = 0;          // handed out
    uint64_t rows_read = 0;     // read (rows - rows_read: read again in the band, or duplicates)
    uint32_t server_now = 0;    // the server's clock at the last poll (unix s)
    std::size_t band_rows = 0;  // rows remembered for dedup
  };
  const Stats& stats() const { return stats_; }

 private:
  std::string where(uint32_t from_s, const std::vector<std::string>& nodes) const;
  // Reads rows matching cond; hands out the new ones; counts rows per second read into `read`.
  bool read(const std::string& cond, FollowedRows& rows, std::map<uint32_t, uint64_t>* read,
            std::string& err);
  bool take(uint32_t second, uint64_t key);  // true if not handed out before
  void prune(uint32_t band_from);

  Server server_;
  Options o_;
  uint32_t band_from_ = 0;                          // seconds before this are settled (0: not started)
  std::map<uint32_t, uint64_t> read_;               // band second -> rows it had when last read
  std::map<uint32_t, std::vector<uint64_t>> keys_;  // band second -> hashes of the rows handed out
  std::unordered_set<uint64_t> seen_;               // all of keys_
  Stats stats_;
};

}  // namespace netprism::clickhouse
