#include "store.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <limits>

#include "netprism/wire.hpp"
#include "batch_codec.hpp"
#include "job_history.hpp"
#include "write_coalescing_vfs.hpp"

namespace netprism::store {

namespace {
constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS nodes(
  node TEXT PRIMARY KEY, epoch INTEGER NOT NULL, hello BLOB NOT NULL, registered_ns INTEGER NOT NULL,
  last_seen_ns INTEGER NOT NULL, records INTEGER NOT NULL DEFAULT 0, counters TEXT NOT NULL DEFAULT '{}',
  clock_offset_ns INTEGER);
CREATE TABLE IF NOT EXISTS epochs(
  node TEXT NOT NULL, epoch INTEGER NOT NULL, registered_ns INTEGER NOT NULL, PRIMARY KEY(node, epoch))
  WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS batches(
  id INTEGER PRIMARY KEY, node TEXT NOT NULL, epoch INTEGER NOT NULL, seq INTEGER NOT NULL,
  received_ns INTEGER NOT NULL, first_ns INTEGER NOT NULL, last_ns INTEGER NOT NULL,
  records INTEGER NOT NULL, raw_bytes INTEGER NOT NULL, data BLOB NOT NULL, seg INTEGER, seg_off INTEGER,
  seg_len INTEGER, UNIQUE(node, epoch, seq));
CREATE TABLE IF NOT EXISTS segments(seg INTEGER PRIMARY KEY, first_id INTEGER NOT NULL, created_ns INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS batches_node_time ON batches(node, last_ns);
CREATE INDEX IF NOT EXISTS batches_time ON batches(last_ns);
CREATE TABLE IF NOT EXISTS jobs(
  id TEXT PRIMARY KEY, state TEXT NOT NULL, nodes TEXT NOT NULL, step_time_ms REAL NOT NULL,
  doc TEXT NOT NULL, updated_ns INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS iterations(
  job TEXT NOT NULL, idx INTEGER NOT NULL, start_ns INTEGER NOT NULL, end_ns INTEGER NOT NULL,
  duration_ns INTEGER NOT NULL, PRIMARY KEY(job, idx)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS findings(
  job TEXT NOT NULL, kind TEXT NOT NULL, subject TEXT NOT NULL, first_iteration INTEGER NOT NULL,
  start_ns INTEGER NOT NULL, severity REAL NOT NULL, evidence TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS findings_job ON findings(job);
CREATE TABLE IF NOT EXISTS retired_seqs(
  node TEXT NOT NULL, epoch INTEGER NOT NULL, lo INTEGER NOT NULL, hi INTEGER NOT NULL,
  PRIMARY KEY(node, epoch, lo)) WITHOUT ROWID;
)sql";

// A segment holds at most this much: retention hands space back to the file system a segment at a time,
// and 64 MiB is a few seconds of a 1,000-node cluster's batches, or minutes of a small one.
constexpr uint64_t kSegmentBytes = 64u << 20;
constexpr const char* kSegmentHighWater = "segment_high_water";  // meta key: the highest number ever used

// A scan's segment descriptors are not kept open after it (also when it throws): an open descriptor would
// hold the space of a segment retention deleted.
struct CloseReaders {
  SegmentLog& log;
  ~CloseReaders() { log.close_readers(); }
};

bool is_dir(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}
}  // namespace

BatchSpan span_of(const Batch& b) {
  BatchSpan s{std::numeric_limits<uint64_t>::max(), 0, 0};
  auto add = [&](uint64_t first, uint64_t last) {
    s.first_ns = std::min(s.first_ns, first);
    s.last_ns = std::max(s.last_ns, last);
  };
  for (const auto& f : b.flowlets) add(f.first_ns, f.last_ns);
  for (const auto& r : b.rdma_bursts) add(r.first_ns, r.last_ns);
  for (const auto& r : b.rdma_samples) add(r.ts_ns, r.ts_ns);
  s.records = b.flowlets.size() + b.rdma_bursts.size() + b.rdma_samples.size();
  if (s.last_ns == 0) s.first_ns = s.last_ns = b.sent_ns;  // only counters/QPs: place it at send time
  return s;
}

std::string Store::resolve(const std::string& path) {
  return is_dir(path) ? path + "/" + kDbFile : path;
}

Store::Store(const std::string& path, Db::Mode mode, int zstd_level, bool durable_commits)
    // Writers write through the write-coalescing VFS (write_coalescing_vfs.hpp: it requires what this
    // constructor sets, synchronous=FULL).
    : db_(resolve(path), mode,
          mode == Db::Mode::kReadWrite && durable_commits ? write_coalescing_vfs() : nullptr),
      zstd_level_(zstd_level),
      segs_(SegmentLog::dir_for(resolve(path)), kSegmentBytes) {
  durable_ = durable_commits;
  if (mode == Db::Mode::kReadWrite) {
    // auto_vacuum must be chosen before the first table exists: it lets retention hand pages back to the
    // file system (incremental_vacuum) instead of only reusing them.
    db_.exec("PRAGMA auto_vacuum=INCREMENTAL");
    db_.exec("PRAGMA journal_mode=WAL");
    // FULL: the WAL is fsynced at every commit, so an ACK (sent after commit) survives power loss too, not
    // only a crash of this process. Group commit keeps the cost to one fsync per drained burst.
    db_.exec(durable_ ? "PRAGMA synchronous=FULL" : "PRAGMA synchronous=NORMAL");
    // Every batch inserts into the table and indexes keyed by node, so with a thousand nodes the touched
    // pages are spread over the whole index; SQLite's default 2 MiB page cache then re-reads them from the
    // OS on every commit (pread copies were a fifth of the commit thread in the 1,000-agent load test, 159 k
    // records/s). The hot set is each node's append point in the two node-keyed indexes, ~8 KiB a node:
    // 16 MiB holds it for 2,000 nodes. It is a bound that fills: at 64 MiB (before) the cache was still
    // filling 30-45 s into the load test, the aggregator's RSS grew 24 % in its second half with the
    // analysis off (its plateau check failed on that alone); at 16 MiB +12 %, and ingest still keeps up
    // (199,829 records/s for 200,000 offered; bench/README.md).
    db_.exec("PRAGMA cache_size=-16384");
    create_schema();
    ins_batch_ = db_.prepare(
        "INSERT OR IGNORE INTO batches(node,epoch,seq,received_ns,first_ns,last_ns,records,raw_bytes,data) "
        "VALUES(?,?,?,?,?,?,?,?,?)");
    touch_ = db_.prepare(
        "UPDATE nodes SET last_seen_ns=max(last_seen_ns,?2), records=records+?3, "
        "clock_offset_ns=coalesce(?4,clock_offset_ns) WHERE node=?1");
    touch_counters_ = db_.prepare("UPDATE nodes SET counters=?2 WHERE node=?1");
    // The interval of deleted seqs at or below seq (the primary key's order): one index probe per batch.
    retired_q_ = db_.prepare(
        "SELECT hi FROM retired_seqs WHERE node=?1 AND epoch=?2 AND lo <= ?3 ORDER BY lo DESC LIMIT 1");
  }
  // Read-only openers of a store from before segments (or of anything else) must still read it.
  seg_columns_ = has_seg_columns();
}

void Store::create_schema() {
  db_.exec(kSchema);
  // A store written by a build from before segments: its batches table gains the (nullable) columns. Checked
  // under the write lock, so that two writers opening the store at once cannot both add them.
  Transaction tx(db_);
  if (!has_seg_columns())
    for (const char* c : {"seg", "seg_off", "seg_len"})
      db_.exec(std::string("ALTER TABLE batches ADD COLUMN ") + c + " INTEGER");
  tx.commit();
  JobHistory::create_schema(db_);
}

bool Store::has_seg_columns() {
  return db_.prepare("SELECT 1 FROM pragma_table_info('batches') WHERE name='seg'").step();
}

std::string Store::seg_cols() const {
  return seg_columns_ ? "seg,seg_off,seg_len" : "NULL,NULL,NULL";
}

std::string Store::bytes_expr() const {
  return seg_columns_ ? "coalesce(seg_len,length(data))" : "length(data)";
}

void Store::enable_segments(uint64_t segment_bytes) {
  segs_ = SegmentLog(segs_.dir(), segment_bytes);
  std::set<uint64_t> known;
  int64_t max_first = 0;
  {
    auto q = db_.prepare("SELECT seg, first_id FROM segments");
    while (q.step()) {
      known.insert(static_cast<uint64_t>(q.i64(0)));
      max_first = std::max(max_first, q.i64(1));
    }
  }
  uint64_t last = known.empty() ? 0 : *known.rbegin();
  // Numbers are never used twice, even after retention freed every segment: a reader's old snapshot must
  // not find another segment's bytes under a number it knows.
  if (auto hw = meta(kSegmentHighWater))
    last = std::max<uint64_t>(last, std::strtoull(hw->c_str(), nullptr, 10));
  // Files no committed row names: a crash between a segment's write and its transaction's commit, or
  // between retention's commit and its unlink.
  for (uint64_t f : segs_.files()) {
    last = std::max(last, f);
    if (!known.count(f)) ::unlink(segs_.path_of(f).c_str());
  }
  auto q = db_.prepare("SELECT coalesce(max(id),0) FROM batches");
  next_id_ = std::max(q.step() ? q.i64(0) : 0, max_first) + 1;
  segs_.start_after(last);
  ins_seg_batch_ = db_.prepare(
      "INSERT INTO batches(id,node,epoch,seq,received_ns,first_ns,last_ns,records,raw_bytes,data,seg,seg_off,"
      "seg_len) VALUES(?,?,?,?,?,?,?,?,?,X'',?,?,?) ON CONFLICT(node,epoch,seq) DO NOTHING");
  reg_segment_ = db_.prepare("INSERT OR IGNORE INTO segments(seg,first_id,created_ns) VALUES(?,?,?)");
  // A transaction that would commit rows naming unwritten segment bytes is turned into a rollback (a commit
  // that bypassed commit(); inserts outside a transaction are refused in insert_compressed()); a rollback,
  // however it happens, forgets what it staged.
  sqlite3_commit_hook(
      db_.get(), [](void* self) { return static_cast<Store*>(self)->segs_.flushed() ? 0 : 1; }, this);
  sqlite3_rollback_hook(
      db_.get(), [](void* self) { static_cast<Store*>(self)->segs_.rolled_back(); }, this);
  seg_writer_ = true;
  free_segments();
}

void Store::commit(Transaction& tx) {
  std::string err;
  if (seg_writer_ && !segs_.flush(err)) throw SqliteError("storing batch bytes: " + err);
  try {
    tx.commit();
  } catch (...) {
    segs_.rolled_back();
    throw;
  }
  segs_.committed();
}

void Store::register_node(const Hello& h, uint64_t now_ns) {
  std::string wire_hello = wire::encode(h);
  db_.prepare(
         "INSERT INTO nodes(node,epoch,hello,registered_ns,last_seen_ns) VALUES(?1,?2,?3,?4,?4) "
         "ON CONFLICT(node) DO UPDATE SET epoch=?2, hello=?3, registered_ns=?4, last_seen_ns=?4")
      .bind(1, h.node)
      .bind(2, h.epoch)
      .bind_blob(3, wire_hello.data(), wire_hello.size())
      .bind(4, now_ns)
      .run();
  db_.prepare("INSERT OR IGNORE INTO epochs(node,epoch,registered_ns) VALUES(?,?,?)")
      .bind(1, h.node)
      .bind(2, h.epoch)
      .bind(3, now_ns)
      .run();
}

bool Store::insert_batch(const Batch& b, std::string_view wire_bytes, uint64_t received_ns) {
  std::string& z = zbuf_;
  // Keep the buffer's capacity across batches: resize within capacity does not touch the allocator.
  z.resize(z.capacity());
  if (!compress_stored(b, zstd_level_, z, scratch_)) throw SqliteError("zstd compression failed");
  return insert_compressed(b, z, wire_bytes.size(), received_ns);
}

bool Store::insert_compressed(const Batch& b, std::string_view z, std::size_t raw_bytes,
                              uint64_t received_ns) {
  return insert_compressed(b, span_of(b), z, raw_bytes, received_ns);
}

bool Store::insert_compressed(const Batch& b, const BatchSpan& s, std::string_view z, std::size_t raw_bytes,
                              uint64_t received_ns) {
  // The columns both forms share, from parameter `at` on: node .. raw_bytes.
  auto bind_row = [&](Stmt& st, int at) {
    st.bind(at, b.node)
        .bind(at + 1, b.epoch)
        .bind(at + 2, b.seq)
        .bind(at + 3, received_ns)
        .bind(at + 4, s.first_ns)
        .bind(at + 5, s.last_ns)
        .bind(at + 6, s.records)
        .bind(at + 7, static_cast<uint64_t>(raw_bytes));
  };
  // Stored once and deleted by retention since: still a duplicate (the agent resent an old batch).
  if (retired(b.node, b.epoch, b.seq)) return false;
  if (seg_writer_) {
    // In autocommit mode the row would be committed by the INSERT itself, before its bytes are written.
    if (sqlite3_get_autocommit(db_.get()))
      throw SqliteError("a segment writer stores batches only inside a transaction (Store::commit())");
    const SegmentLog::Place p = segs_.place(z.size());
    ins_seg_batch_.bind(1, next_id_);
    bind_row(ins_seg_batch_, 2);
    ins_seg_batch_.bind(10, p.seg).bind(11, p.off).bind(12, static_cast<uint64_t>(z.size()));
    ins_seg_batch_.run();
    if (db_.changes() != 1) return false;  // (node, epoch, seq) is stored already
    if (p.first_in_seg) {
      reg_segment_.bind(1, p.seg).bind(2, next_id_).bind(3, received_ns).run();
      set_meta(kSegmentHighWater, std::to_string(p.seg));
    }
    segs_.stage(z);
    ++next_id_;
    return true;
  }
  bind_row(ins_batch_, 1);
  ins_batch_.bind_blob(9, z.data(), z.size());
  ins_batch_.run();
  return db_.changes() == 1;
}

void Store::touch_node(const std::string& node, uint64_t last_seen_ns, uint64_t add_records,
                       const Counters* counters, std::optional<int64_t> clock_offset_ns) {
  touch_.bind(1, node).bind(2, last_seen_ns).bind(3, add_records);
  if (clock_offset_ns)
    touch_.bind(4, *clock_offset_ns);
  else
    touch_.bind_null(4);
  touch_.run();
  if (counters) {
    touch_counters_.bind(1, node).bind(2, nlohmann::json(*counters).dump());
    touch_counters_.run();
  }
}

void Store::set_meta(const std::string& key, const std::string& value) {
  db_.prepare("INSERT INTO meta(key,value) VALUES(?,?) ON CONFLICT(key) DO UPDATE SET value=excluded.value")
      .bind(1, key)
      .bind(2, value)
      .run();
}

std::vector<NodeRow> Store::nodes() {
  std::vector<NodeRow> out;
  auto s = db_.prepare(
      "SELECT node,epoch,hello,registered_ns,last_seen_ns,records,counters,clock_offset_ns FROM nodes "
      "ORDER BY node");
  while (s.step()) {
    NodeRow n;
    n.node = s.text(0);
    n.epoch = static_cast<uint64_t>(s.i64(1));
    if (auto d = wire::decode(s.blob(2)); d && d.message->type == MsgType::kHello)
      n.hello = std::get<Hello>(d.message->body);
    n.hello.node = n.node;
    n.registered_ns = static_cast<uint64_t>(s.i64(3));
    n.last_seen_ns = static_cast<uint64_t>(s.i64(4));
    n.records = static_cast<uint64_t>(s.i64(5));
    auto c = nlohmann::json::parse(s.text(6), nullptr, false);
    if (c.is_object())
      for (auto& [k, v] : c.items())
        if (v.is_number_unsigned()) n.counters[k] = v.get<uint64_t>();
    if (!s.is_null(7)) n.clock_offset_ns = s.i64(7);
    out.push_back(std::move(n));
  }
  return out;
}

std::set<std::pair<std::string, uint64_t>> Store::epochs() {
  std::set<std::pair<std::string, uint64_t>> out;
  auto s = db_.prepare("SELECT node,epoch FROM epochs");
  while (s.step()) out.emplace(s.text(0), static_cast<uint64_t>(s.i64(1)));
  return out;
}

std::optional<std::string> Store::meta(const std::string& key) {
  auto s = db_.prepare("SELECT value FROM meta WHERE key=?");
  s.bind(1, key);
  if (s.step()) return s.text(0);
  return std::nullopt;
}

uint64_t Store::stored_bytes() {
  auto s = db_.prepare("SELECT coalesce(sum(" + bytes_expr() + "),0) FROM batches");
  return s.step() ? static_cast<uint64_t>(s.i64(0)) : 0;
}

uint64_t Store::batch_count() {
  auto s = db_.prepare("SELECT count(*) FROM batches");
  return s.step() ? static_cast<uint64_t>(s.i64(0)) : 0;
}

void Store::scan_batches(const std::optional<std::string>& node, uint64_t since, uint64_t until,
                         const std::function<void(const Batch&, uint64_t)>& fn,
                         const std::function<void(const std::string&)>& on_error) {
  // Batches are short (the agent cuts them every ~100 ms), so "last_ns >= since AND first_ns <= until" on
  // the (node, last_ns) / (last_ns) indexes touches only rows near the range.
  std::string sql =
      "SELECT received_ns,id,data," + seg_cols() + " FROM batches WHERE last_ns >= ?1 AND first_ns <= ?2";
  if (node) sql += " AND node = ?3";
  sql += " ORDER BY first_ns, id";
  auto s = db_.prepare(sql);
  s.bind(1, std::min<uint64_t>(since, std::numeric_limits<int64_t>::max()))
      .bind(2, std::min<uint64_t>(until, std::numeric_limits<int64_t>::max()));
  if (node) s.bind(3, *node);
  std::string buf;
  CloseReaders close_readers{segs_};
  while (s.step()) {
    std::string err;
    if (auto blob = row_blob(s, 2, buf, err))
      if (auto b = decompress_stored(*blob, err)) {
        fn(*b, static_cast<uint64_t>(s.i64(0)));
        continue;
      }
    if (on_error) on_error("batch row " + std::to_string(s.i64(1)) + ": " + err);
  }
}

std::vector<Store::RawRow> Store::raw_batches(int64_t after_id, uint64_t since, uint64_t until,
                                              std::size_t max_bytes, uint64_t max_records) {
  std::vector<RawRow> out;
  auto s = db_.prepare("SELECT id,node,epoch,seq,received_ns,first_ns,last_ns,records,raw_bytes,data," +
                       seg_cols() +
                       " FROM batches WHERE id > ?1 AND last_ns >= ?2 AND first_ns <= ?3 ORDER BY id");
  s.bind(1, after_id)
      .bind(2, std::min<uint64_t>(since, std::numeric_limits<int64_t>::max()))
      .bind(3, std::min<uint64_t>(until, std::numeric_limits<int64_t>::max()));
  std::size_t total = 0;
  uint64_t records = 0;
  std::string buf;
  CloseReaders close_readers{segs_};
  while (s.step()) {
    std::string err;
    auto blob = row_blob(s, 9, buf, err);
    if (!blob) throw SqliteError("batch row " + std::to_string(s.i64(0)) + ": " + err);
    RawRow r{s.i64(0),
             s.text(1),
             static_cast<uint64_t>(s.i64(2)),
             static_cast<uint64_t>(s.i64(3)),
             static_cast<uint64_t>(s.i64(4)),
             static_cast<uint64_t>(s.i64(5)),
             static_cast<uint64_t>(s.i64(6)),
             static_cast<uint64_t>(s.i64(7)),
             static_cast<uint64_t>(s.i64(8)),
             std::string(*blob)};
    total += r.data.size();
    records += r.records;
    out.push_back(std::move(r));
    if (total >= max_bytes || (max_records > 0 && records >= max_records)) break;
  }
  return out;
}

std::optional<std::string_view> Store::row_blob(const Stmt& s, int data_col, std::string& buf,
                                                std::string& err) {
  if (s.is_null(data_col + 1)) return s.blob(data_col);
  if (!segs_.read(static_cast<uint64_t>(s.i64(data_col + 1)), static_cast<uint64_t>(s.i64(data_col + 2)),
                  static_cast<uint64_t>(s.i64(data_col + 3)), buf, err))
    return std::nullopt;
  return std::string_view(buf);
}

void Store::insert_raw(const RawRow& r) {
  db_.prepare(
         "INSERT OR IGNORE INTO batches(node,epoch,seq,received_ns,first_ns,last_ns,records,raw_bytes,data) "
         "VALUES(?,?,?,?,?,?,?,?,?)")
      .bind(1, r.node)
      .bind(2, r.epoch)
      .bind(3, r.seq)
      .bind(4, r.received_ns)
      .bind(5, r.first_ns)
      .bind(6, r.last_ns)
      .bind(7, r.records)
      .bind(8, r.raw_bytes)
      .bind_blob(9, r.data.data(), r.data.size())
      .run();
}

void Store::put_node_row(const NodeRow& n) {
  register_node(n.hello, n.registered_ns);
  touch_node(n.node, n.last_seen_ns, n.records, &n.counters, n.clock_offset_ns);
}

}  // namespace netprism::store
