// The aggregator's embedded store: one SQLite database in WAL mode under --data-dir.
//
// Tables: `batches` has a row for every acknowledged batch, zstd-compressed (column-encoded,
// batch_codec.hpp; rows of older builds hold the wire message, and both are read), indexed by (node, time)
// and unique on (node, epoch, seq) -- the duplicate check and the durability point are one INSERT in the
// same transaction as the node's counters. The daemon's ingest keeps the compressed bytes in append-only
// segment files beside the database (segment_log.hpp; the row names segment, offset and length, and
// `segments` the id of each segment's first row); other writers (recordings, tests) keep them inline in
// `data`, as every store before segments did, and readers take either. `nodes`/`epochs` hold registrations
// (reloaded on restart); `jobs`/`iterations`/`findings` hold the analysed jobs, written incrementally
// (job_history.hpp); `retired_seqs` what retention deleted (duplicates stay recognised); `meta` holds small
// settings (the ports whose traffic is netprism's own, so offline analysis can exclude it too).
//
// One writer (the ingest thread) and any number of readers (query thread, analysis, the CLI offline) each
// use their own Store object/connection; WAL lets readers run while the writer commits.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "netprism/records.hpp"
#include "segment_log.hpp"
#include "sqlite.hpp"

namespace netprism::store {

inline constexpr const char* kDbFile = "netprism.db";

struct NodeRow {
  std::string node;
  uint64_t epoch = 0;
  Hello hello;  // latest HELLO (interfaces, clock)
  uint64_t registered_ns = 0;
  uint64_t last_seen_ns = 0;
  uint64_t records = 0;
  Counters counters;  // latest agent counters (from a batch or heartbeat)
  std::optional<int64_t> clock_offset_ns;
};

// Per-batch summary computed at ingest: the time span it covers and how many records it holds.
struct BatchSpan {
  uint64_t first_ns = 0;
  uint64_t last_ns = 0;
  uint64_t records = 0;
};
BatchSpan span_of(const Batch& b);

struct RetentionResult {
  uint64_t deleted_batches = 0;
  uint64_t stored_bytes = 0;  // compressed bytes of the batches left (current_bytes - freed_bytes)
  uint64_t freed_bytes = 0;   // compressed bytes of the batches deleted
};

class Store {
 public:
  // path: a data directory (the database file inside is created) or a database file itself (read-only
  // opening of recordings). zstd_level only matters for writers.
  // durable_commits false (a writer only): commits are not synced (synchronous=NORMAL, without the
  // write-coalescing VFS, which needs FULL): for retention's deletions, which a power loss may undo (they are
  // redone by the next pass) -- except the freeing of segments, synced before their files go.
  Store(const std::string& path, Db::Mode mode, int zstd_level = 1, bool durable_commits = true);
  Store(const Store&) = delete;  // its connection's hooks point at it
  Store& operator=(const Store&) = delete;

  static std::string resolve(const std::string& path);  // data dir -> its database file

  Db& db() { return db_; }

  // The daemon's ingest store: batch bytes go to segment files (at most segment_bytes each) instead of
  // inline. Cleans up what a crash left (segment files no committed row names) and starts a new segment.
  // Only the one ingest writer of a data dir may call it; its transactions must commit through commit().
  void enable_segments(uint64_t segment_bytes);
  // Commits tx after the blobs its inserts staged are written and synced; on any failure nothing of it is
  // stored (throws).
  void commit(Transaction& tx);

  // ---- writes (one writer at a time; wrap in a Transaction for group commit) ----
  void register_node(const Hello& h, uint64_t now_ns);
  // Stores the batch (wire = the exact message bytes received). false: (node, epoch, seq) already stored.
  bool insert_batch(const Batch& b, std::string_view wire, uint64_t received_ns);
  // Same, with the wire bytes already zstd-compressed (ingest compresses in parallel).
  bool insert_compressed(const Batch& b, std::string_view zstd_wire, std::size_t raw_bytes,
                         uint64_t received_ns);
  // Same, with the span already computed (ingest computes it in parallel with the compression).
  bool insert_compressed(const Batch& b, const BatchSpan& span, std::string_view zstd_wire,
                         std::size_t raw_bytes, uint64_t received_ns);
  void touch_node(const std::string& node, uint64_t last_seen_ns, uint64_t add_records,
                  const Counters* counters, std::optional<int64_t> clock_offset_ns);
  // Deletes, in receive order, the batches received (the aggregator's clock when it stored them) before
  // min_received_ns, then the earliest received until at most max_bytes of compressed payload is left.
  // Record times play no part: an agent whose clock is skewed can neither delete nor pin others' data. The
  // (node, epoch, seq) of every deleted batch is remembered (retired_seqs), so a resend of it is still a
  // duplicate. current_bytes: the compressed bytes stored now (the caller's running total);
  // min_received_ns 0 / max_bytes 0 disable that bound.
  RetentionResult apply_retention(uint64_t min_received_ns, uint64_t max_bytes, uint64_t current_bytes);
  // This connection runs retention beside the ingest writer's (another connection of the same data dir,
  // in another thread): it may free segments and delete their files, never the one being written.
  void enable_retention();
  // Deletes the segments (rows and files) no batch row uses any more; returns how many.
  uint64_t free_segments();
  // (node, epoch, seq) was stored once and deleted by retention since.
  bool retired(const std::string& node, uint64_t epoch, uint64_t seq);
  void set_meta(const std::string& key, const std::string& value);

  // ---- reads ----
  std::vector<NodeRow> nodes();
  std::set<std::pair<std::string, uint64_t>> epochs();
  std::optional<std::string> meta(const std::string& key);
  uint64_t stored_bytes();  // full scan: at start-up only
  uint64_t batch_count();   // full scan: at start-up only
  // Decodes every stored batch overlapping [since, until] (optionally of one node), oldest first. Corrupt
  // rows are reported through on_error and skipped (the rest of the store stays readable).
  void scan_batches(const std::optional<std::string>& node, uint64_t since, uint64_t until,
                    const std::function<void(const Batch&, uint64_t received_ns)>& fn,
                    const std::function<void(const std::string&)>& on_error = {});
  // Raw rows (for `netprism record`, the ClickHouse sink): id > after_id, at most max_bytes of payload and,
  // when max_records > 0, at most max_records records (at least one row either way).
  struct RawRow {
    int64_t id;
    std::string node;
    uint64_t epoch, seq, received_ns, first_ns, last_ns, records, raw_bytes;
    std::string data;  // compressed
  };
  std::vector<RawRow> raw_batches(int64_t after_id, uint64_t since, uint64_t until, std::size_t max_bytes,
                                  uint64_t max_records = 0);
  void insert_raw(const RawRow& r);  // copy a row verbatim (recordings)
  void put_node_row(const NodeRow& n);

 private:
  void create_schema();
  // The stored bytes of the row s is on: columns data_col (inline) and data_col + 1.. + 3 (segment, offset,
  // length); empty with err set when they cannot be read.
  std::optional<std::string_view> row_blob(const Stmt& s, int data_col, std::string& buf, std::string& err);
  // Runs sql (one parameter) for each key, in one transaction.
  template <class Key>
  void delete_each(const char* sql, const std::vector<Key>& keys);
  using RetiredSeq = std::tuple<std::string, uint64_t, uint64_t>;  // node, epoch, seq
  // One transaction of retention: at most a chunk of rows; how many it deleted.
  uint64_t drop_oldest(uint64_t min_received_ns, uint64_t max_bytes, RetentionResult& r);
  void note_retired(std::vector<RetiredSeq>& rows);  // merged into retired_seqs (inside the caller's tx)
  void sweep_orphan_files();                         // segment files no row names, unlinked next pass
  bool has_seg_columns();                            // the batches table has seg, seg_off, seg_len
  std::string seg_cols() const;    // "seg,seg_off,seg_len", or NULLs for a store from before segments
  std::string bytes_expr() const;  // a row's stored bytes, inline or in a segment
  Db db_;
  int zstd_level_;
  bool seg_columns_ = false;  // the batches table has the segment columns
  SegmentLog segs_;           // reads (any store); writes once enable_segments() was called
  bool seg_writer_ = false;
  bool retention_conn_ = false;         // enable_retention()
  bool durable_ = true;                 // synchronous=FULL commits (the constructor's durable_commits)
  int64_t next_id_ = 1;                 // batch ids a segment writer assigns: increasing, never reused
  std::vector<uint64_t> unlink_later_;  // segments freed by the last retention pass, files not yet removed
  Stmt ins_batch_, ins_seg_batch_, reg_segment_, touch_, touch_counters_, retired_q_;
  std::string zbuf_;     // compression buffer reused across batches
  std::string scratch_;  // column encoding before compression, reused likewise
};

}  // namespace netprism::store
