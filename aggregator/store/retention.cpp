// Retention (store.hpp: apply_retention, free_segments) and the record of what it deleted that keeps
// duplicate detection exact afterwards (retired_seqs).
//
// In the daemon retention runs on its own connection and thread (enable_retention()), not on the ingest
// committer's: WAL lets it delete while the writer commits, its transactions are short (kChunk rows) so the
// writer's BEGIN IMMEDIATE waits at most one of them, and the committer's ACKs no longer wait for a pass.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <limits>
#include <map>
#include <tuple>

#include "store.hpp"

namespace netprism::store {

namespace {
// Rows deleted per transaction: the ingest writer waits for at most one such transaction (a few ms for 256
// rows and their index entries on this machine), and a pass over a day of a 100-node cluster (~86 M
// batches) is still ~340 k transactions spread over the pass.
constexpr int kChunk = 256;
// Pages handed back per incremental_vacuum step (4 MiB with 4 KiB pages): each step is a write transaction
// the ingest writer may wait for, so the vacuum runs in steps rather than at once.
constexpr int kVacuumPages = 1024;
}  // namespace

template <class Key>
void Store::delete_each(const char* sql, const std::vector<Key>& keys) {
  Transaction tx(db_);
  auto del = db_.prepare(sql);
  for (const Key& k : keys) {
    del.bind(1, k);
    del.run();
  }
  commit(tx);
}

void Store::enable_retention() {
  retention_conn_ = true;
}

uint64_t Store::free_segments() {
  if (!seg_writer_ && !retention_conn_) return 0;
  std::vector<std::pair<uint64_t, int64_t>> segs;  // (seg, first id), in order
  {
    auto q = db_.prepare("SELECT seg, first_id FROM segments ORDER BY seg");
    while (q.step()) segs.emplace_back(static_cast<uint64_t>(q.i64(0)), q.i64(1));
  }
  // The segment being written is never freed: the writer's own, or -- seen from the retention connection --
  // the newest registered one (the writer fills a segment to its end before it registers the next, so all
  // older ones are complete; a newer one it is starting is not registered yet).
  const uint64_t writing = seg_writer_ ? segs_.current_seg() : (segs.empty() ? 0 : segs.back().first);
  // Ids only grow, and a segment is written to the end before the next one starts, so segment i's rows are
  // exactly those with ids in [first_id(i), first_id(i + 1)).
  std::vector<uint64_t> unused;
  auto probe = db_.prepare("SELECT 1 FROM batches WHERE id >= ?1 AND id < ?2 LIMIT 1");
  for (std::size_t i = 0; i < segs.size(); ++i) {
    if (segs[i].first >= writing) break;
    const int64_t hi = i + 1 < segs.size() ? segs[i + 1].second : std::numeric_limits<int64_t>::max();
    probe.bind(1, segs[i].second).bind(2, hi);
    if (!probe.step()) unused.push_back(segs[i].first);
    probe.reset();
  }
  if (unused.empty()) return 0;
  // Synced whatever the connection's setting: the files go next pass, and a power loss must not bring back
  // rows naming them.
  if (!durable_) db_.exec("PRAGMA synchronous=FULL");
  delete_each("DELETE FROM segments WHERE seg = ?", unused);
  if (!durable_) db_.exec("PRAGMA synchronous=NORMAL");
  // The files go one retention pass later: a reader whose snapshot began before this commit may still read
  // these rows now. A crash before then leaves files no row names, which the next start removes.
  unlink_later_.insert(unlink_later_.end(), unused.begin(), unused.end());
  return unused.size();
}

void Store::sweep_orphan_files() {
  // Files below the newest registered segment that no row names: freed by this pass or by the writer at
  // its start. Unlinked next pass (readers' snapshots), like the segments this connection freed itself.
  uint64_t newest = 0;
  std::set<uint64_t> named;
  auto q = db_.prepare("SELECT seg FROM segments");
  while (q.step()) {
    named.insert(static_cast<uint64_t>(q.i64(0)));
    newest = std::max(newest, static_cast<uint64_t>(q.i64(0)));
  }
  for (uint64_t f : segs_.files())
    if (f < newest && !named.count(f) &&
        std::find(unlink_later_.begin(), unlink_later_.end(), f) == unlink_later_.end())
      unlink_later_.push_back(f);
}

bool Store::retired(const std::string& node, uint64_t epoch, uint64_t seq) {
  retired_q_.bind(1, node).bind(2, epoch).bind(3, seq);
  const bool hit = retired_q_.step() && static_cast<uint64_t>(retired_q_.i64(0)) >= seq;
  retired_q_.reset();
  return hit;
}

void Store::note_retired(std::vector<RetiredSeq>& rows) {
  // Per (node, epoch) the deleted seqs become intervals merged with the stored ones: agents number batches
  // consecutively and retention deletes in receive order, so an epoch's deleted seqs are one growing
  // interval in the common case (a handful when batches arrived out of order).
  std::sort(rows.begin(), rows.end());
  auto find = db_.prepare(
      "SELECT lo, hi FROM retired_seqs WHERE node=?1 AND epoch=?2 AND lo <= ?4 + 1 AND hi + 1 >= ?3");
  auto del = db_.prepare("DELETE FROM retired_seqs WHERE node=?1 AND epoch=?2 AND lo=?3");
  auto ins = db_.prepare("INSERT OR REPLACE INTO retired_seqs(node,epoch,lo,hi) VALUES(?,?,?,?)");
  for (std::size_t i = 0; i < rows.size();) {
    const auto& [node, epoch, first] = rows[i];
    uint64_t lo = first, hi = first;
    std::size_t j = i + 1;
    while (j < rows.size() && std::get<0>(rows[j]) == node && std::get<1>(rows[j]) == epoch &&
           std::get<2>(rows[j]) <= hi + 1)
      hi = std::max(hi, std::get<2>(rows[j++]));
    find.bind(1, node).bind(2, epoch).bind(3, lo).bind(4, hi);
    std::vector<uint64_t> merged;
    while (find.step()) {
      merged.push_back(static_cast<uint64_t>(find.i64(0)));
      lo = std::min(lo, static_cast<uint64_t>(find.i64(0)));
      hi = std::max(hi, static_cast<uint64_t>(find.i64(1)));
    }
    find.reset();
    for (uint64_t m : merged) del.bind(1, node).bind(2, epoch).bind(3, m).run();
    ins.bind(1, node).bind(2, epoch).bind(3, lo).bind(4, hi).run();
    i = j;
  }
}

uint64_t Store::drop_oldest(uint64_t min_received_ns, uint64_t max_bytes, RetentionResult& r) {
  // One chunk in receive order (id order: the aggregator assigns ids as it stores, so neither an agent's
  // clock nor its record times matter): rows received before min_received_ns, then rows beyond the size
  // bound. Stops at the first row neither applies to.
  Transaction tx(db_);
  std::vector<int64_t> ids;
  std::vector<RetiredSeq> seqs;
  uint64_t freed = 0;
  {
    auto q = db_.prepare("SELECT id, node, epoch, seq, received_ns, " + bytes_expr() +
                         " FROM batches ORDER BY id LIMIT " + std::to_string(kChunk));
    while (q.step()) {
      const uint64_t left = r.stored_bytes - std::min(r.stored_bytes, freed);
      const bool old = static_cast<uint64_t>(q.i64(4)) < min_received_ns;
      if (!old && !(max_bytes > 0 && left > max_bytes)) break;
      ids.push_back(q.i64(0));
      seqs.emplace_back(q.text(1), static_cast<uint64_t>(q.i64(2)), static_cast<uint64_t>(q.i64(3)));
      freed += static_cast<uint64_t>(q.i64(5));
    }
  }
  if (ids.empty()) return 0;
  auto del = db_.prepare("DELETE FROM batches WHERE id = ?");
  for (int64_t id : ids) del.bind(1, id).run();
  note_retired(seqs);
  commit(tx);
  r.deleted_batches += ids.size();
  r.freed_bytes += freed;
  r.stored_bytes -= std::min(r.stored_bytes, freed);
  return ids.size();
}

RetentionResult Store::apply_retention(uint64_t min_received_ns, uint64_t max_bytes, uint64_t current_bytes) {
  for (uint64_t s : unlink_later_) ::unlink(segs_.path_of(s).c_str());  // freed by the previous pass
  unlink_later_.clear();
  // Works from the caller's running total and the rowid order only: no full-table scan, which would grow
  // with the store (a 100-node cluster adds ~1000 batches/s).
  RetentionResult r;
  r.stored_bytes = current_bytes;
  for (;;) {
    const auto t0 = std::chrono::steady_clock::now();
    if (drop_oldest(min_received_ns, max_bytes, r) == 0) break;
    // Beside the ingest writer: as long again between chunks, so the committer (and the checkpointer its
    // commits trigger) find the write lock and the disk free at least half the time.
    if (retention_conn_) std::this_thread::sleep_for(std::chrono::steady_clock::now() - t0);
  }
  if (r.deleted_batches > 0) {
    // Until nothing is left to hand back (or a step hands back nothing: a store without auto_vacuum).
    for (int64_t before = -1;;) {
      auto q = db_.prepare("PRAGMA freelist_count");
      const int64_t free_pages = q.step() ? q.i64(0) : 0;
      if (free_pages == 0 || free_pages == before) break;
      before = free_pages;
      db_.exec("PRAGMA incremental_vacuum(" + std::to_string(kVacuumPages) + ")");
    }
    free_segments();
  }
  if (retention_conn_) sweep_orphan_files();
  return r;
}

}  // namespace netprism::store
