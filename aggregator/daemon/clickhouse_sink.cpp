#include "clickhouse_sink.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <future>
#include <limits>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "batch_codec.hpp"
#include "clickhouse/tables.hpp"
#include "log.hpp"
#include "stoppable_sleep.hpp"

namespace netprism::daemon {

namespace {
// A page of batches per insert: up to 400,000 flowlets (~55 MB as a Native block, already sorted, so
// clickhouse-server holds it without a sorted copy, well inside its default memory limit) or 8 MiB of
// compressed batches. Bounded by records and not only by bytes: a batch of repetitive flowlets compresses to
// almost nothing (netprism-sim's ~0.04 B per record), and 2 MiB of those, 50 M rows, made the insert exceed
// the server's memory limit. ClickHouse wants few large inserts (each is a part: a file per column to
// create, then merges): 400,000 instead of 100,000 rows cut clickhouse-server's CPU per row from ~0.8 to
// ~0.5 us (bench/clickhouse/sink_bench.py's backlog, same load) for ~0.05 us more in the sink (its sort).
// A busy aggregator's 200 ms polls fill a page in a fraction of that; full pages come when catching up, and
// then the sink holds ~200 MB (the decoded page, two blocks); blocks of small pages are given back.
constexpr std::size_t kPageBytes = 8u << 20;
constexpr uint64_t kPageRecords = 400'000;
// Tuples per "which of these are there" query: ~50 bytes each, far below max_query_size (256 KiB).
constexpr std::size_t kCheckChunk = 1000;
constexpr uint64_t kDayNs = 86'400'000'000'000ull;

std::map<std::string, std::string> insert_settings(const clickhouse::Url& u) {
  if (u.cluster.empty()) return {};
  return {{"insert_distributed_sync", "1"}};  // success = on the shards, so present() sees it
}

}  // namespace

ClickHouseSink::ClickHouseSink(const Settings& s, Registry& reg, store::OwnTraffic own)
    : s_(s),
      reg_(reg),
      own_(std::move(own)),
      server_(clickhouse::parse_checked_url(s.clickhouse_url, "--clickhouse")),
      mark_path_(s.data_dir + "/clickhouse.hwm") {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  aggregator_ = std::string(host) + ":" + s.data_dir + ":" + s.listen;
  mark_ = read_pos_ = load_mark(mark_path_);
  reg_.with_counters([&](IngestCounters& c) {
    c.clickhouse.enabled = true;
    c.clickhouse.hwm = mark_;
  });
}

uint64_t ClickHouseSink::load_mark(const std::string& path) {
  std::ifstream in(path);
  uint64_t id = 0;
  return in >> id ? id : 0;
}

bool ClickHouseSink::save_mark(const std::string& path, uint64_t id, std::string& err) {
  const std::string tmp = path + ".tmp", text = std::to_string(id) + "\n";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
  bool ok = fd >= 0 && ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
            ::fsync(fd) == 0;
  if (fd >= 0) ok = ::close(fd) == 0 && ok;
  ok = ok && std::rename(tmp.c_str(), path.c_str()) == 0;
  if (!ok) err = "cannot write " + path;
  return ok;
}

void ClickHouseSink::run(std::stop_token st) {
  ::pthread_setname_np(::pthread_self(), "np-clickhouse");
  std::optional<store::Store> store;
  std::chrono::milliseconds backoff{0};
  while (!st.stop_requested()) {
    std::string err;
    bool moved = false, ok = false;
    try {
      if (!store) store.emplace(s_.data_dir, store::Db::Mode::kReadOnly);
      ok = round(*store, moved, err);
    } catch (const std::exception& e) {  // the store's reads (a corrupt row, a vanished segment)
      err = std::string("reading the store: ") + e.what();
      store.reset();
    }
    if (ok) {
      backoff = std::chrono::milliseconds(0);
      if (!moved) nap(st, std::chrono::milliseconds(200));
      continue;
    }
    on_failure(err);
    backoff = std::clamp(backoff * 2, std::chrono::milliseconds(250), std::chrono::milliseconds(10'000));
    nap(st, backoff);
  }
}

void ClickHouseSink::on_failure(const std::string& err) {
  // What failed, or is still in flight, may have landed: let it finish, forget it (its mark is not saved),
  // re-read from the mark and ask ClickHouse before inserting again.
  if (inflight_.valid()) inflight_.get();
  read_pos_ = mark_;
  verify_ = true;
  if (!failing_)
    log_at(Level::kWarning, "clickhouse: " + err + " (retrying with backoff; the store buffers)");
  failing_ = true;
  reg_.with_counters([&](IngestCounters& c) {
    c.clickhouse.errors++;
    c.clickhouse.last_error = err;
  });
}

bool ClickHouseSink::round(store::Store& st, bool& moved, std::string& err) {
  if (!ensure_schema(err) || !sync_nodes(st, err) || !sink_page(st, moved, err)) return false;
  if (failing_) log_line("clickhouse: " + server_.url().base + " reachable again");
  failing_ = false;
  drop_old_partitions();
  return true;
}

bool ClickHouseSink::ensure_schema(std::string& err) {
  if (schema_ready_) return true;
  for (const auto& ddl : clickhouse::schema_ddl(server_.url()))
    if (!server_.query(ddl, err)) return false;
  const auto alters = clickhouse::schema_migrations(server_, err);
  if (!err.empty()) return false;
  for (const auto& ddl : alters)
    if (!server_.query(ddl, err)) return false;
  std::string rows;
  clickhouse::RowWriter w(rows);
  for (uint16_t p : own_.ports) {
    w.string(aggregator_);
    w.uint(p);
  }
  if (!rows.empty() && !server_.insert(clickhouse::table(server_.url(), "own_ports"), rows, err,
                                       insert_settings(server_.url())))
    return false;
  schema_ready_ = true;
  log_line("clickhouse: storing batches in " + server_.url().base + " " +
           clickhouse::table(server_.url(), "flowlets") + " from batch id " + std::to_string(mark_ + 1));
  return true;
}

bool ClickHouseSink::sync_nodes(store::Store& st, std::string& err) {
  std::string rows;
  clickhouse::RowWriter w(rows);
  std::map<std::string, uint64_t> sent;
  for (const auto& n : st.nodes()) {
    auto it = nodes_sent_.find(n.node);
    if (it != nodes_sent_.end() && it->second == n.registered_ns) continue;
    w.string(n.node);
    w.uint(n.epoch);
    w.uint(n.registered_ns);
    std::size_t addrs = 0;
    for (const auto& i : n.hello.interfaces) addrs += i.addrs.size();
    w.varint(addrs);
    for (const auto& i : n.hello.interfaces)
      for (const auto& a : i.addrs) w.string(a);
    w.string(aggregator_);
    sent[n.node] = n.registered_ns;
  }
  if (sent.empty()) return true;
  if (!server_.insert(clickhouse::table(server_.url(), "nodes"), rows, err, insert_settings(server_.url())))
    return false;
  for (auto& [n, t] : sent) nodes_sent_[n] = t;
  return true;
}

bool ClickHouseSink::sink_page(store::Store& st, bool& moved, std::string& err) {
  const auto raw = st.raw_batches(static_cast<int64_t>(read_pos_), 0, std::numeric_limits<uint64_t>::max(),
                                  kPageBytes, kPageRecords);
  // Batch ids after the mark: ids are consecutive but for retention's deletions at the old end, and the
  // largest id is one b-tree lookup where counting the rows would read the whole backlog every round.
  auto last = st.db().prepare("SELECT max(id) FROM batches");
  const uint64_t newest = last.step() ? static_cast<uint64_t>(last.i64(0)) : 0;
  reg_.with_counters([&](IngestCounters& c) { c.clickhouse.pending = newest > mark_ ? newest - mark_ : 0; });
  if (raw.empty()) return finish_insert(moved, err);  // nothing new: the page in flight, if any, completes
  std::vector<Batch> page;
  std::vector<uint64_t> received;
  for (const auto& r : raw) {
    std::string e;
    auto b = store::decompress_stored(r.data, e);
    if (!b) {  // it can never be sunk; offline readers of the store report it too
      log_at(Level::kError,
             "clickhouse: batch " + std::to_string(r.id) + " of " + r.node + " unreadable: " + e);
      continue;
    }
    b->node = r.node;
    b->epoch = r.epoch;
    b->seq = r.seq;
    page.push_back(std::move(*b));
    received.push_back(r.received_ns);
  }
  std::set<Key> there;
  if (verify_) {  // nothing is in flight here: a failure waited for it (on_failure)
    auto p = present(page, err);
    if (!p) return false;
    there = std::move(*p);
  }
  std::vector<clickhouse::StoredBatch> fresh;
  Page next{static_cast<uint64_t>(raw.back().id), 0, 0, there.size(), raw.size()};
  for (std::size_t i = 0; i < page.size(); ++i) {
    if (page[i].flowlets.empty() || there.count({page[i].node, page[i].epoch, page[i].seq})) continue;
    fresh.push_back({&page[i], received[i]});
    next.rows += page[i].flowlets.size();
  }
  next.batches = fresh.size();
  if (!sink_rdma(page, received, there, err)) return false;
  // Keep asking while pages turn out to be there already: a crash or a failure leaves at most two pages in
  // ClickHouse beyond the mark, but a mark file lost or restored from a backup can lag by any number.
  const bool verify_next = !there.empty();
  std::string& block = blocks_[next_block_];
  block.clear();  // keeps its capacity: no fresh tens of MB (and their page faults) per insert
  if (next.rows < kPageRecords / 4) block.shrink_to_fit();  // caught up: small pages need little
  if (!fresh.empty()) clickhouse::append_flowlet_block(fresh, block);
  // The previous page's insert ran while this one was read and encoded; its mark first (marks in id order).
  if (!finish_insert(moved, err)) return false;
  moved = true;
  read_pos_ = next.last_id;
  verify_ = verify_next;
  if (fresh.empty()) return commit(next, err);
  inflight_page_ = next;
  next_block_ ^= 1;
  inflight_ = std::async(std::launch::async, [this, &block] {
    std::string e;
    const bool ok = server_.insert(clickhouse::table(server_.url(), "flowlets"), block, e,
                                   insert_settings(server_.url()), "Native");
    return ok ? std::string() : (e.empty() ? std::string("insert failed") : e);
  });
  if (verify_) return finish_insert(moved, err);  // catching up after a failure: one page at a time
  return true;
}

bool ClickHouseSink::sink_rdma(const std::vector<Batch>& page, const std::vector<uint64_t>& received,
                               const std::set<Key>& there, std::string& err) {
  // Counters-only agents' RDMA records, a row per batch that has any (most batches have none). Synchronous:
  // small, and before the page's flowlets, so the mark never passes a batch whose RDMA row failed. A batch
  // with no flowlets is not in `there` (present() asks the flowlets table) and may be inserted again after
  // a failure: the rdma table's key makes that one row (tables.hpp).
  std::string rows;
  uint64_t n = 0;
  for (std::size_t i = 0; i < page.size(); ++i)
    if (clickhouse::has_rdma(page[i]) && !there.count({page[i].node, page[i].epoch, page[i].seq})) {
      clickhouse::append_rdma_row(page[i], received[i], rows);
      ++n;
    }
  if (n == 0) return true;
  if (!server_.insert(clickhouse::table(server_.url(), "rdma") +
                          " (node, epoch, seq, first_ns, last_ns, received_ns, batch)",
                      rows, err, insert_settings(server_.url())))
    return false;
  reg_.with_counters([&](IngestCounters& c) { c.clickhouse.rdma_rows += n; });
  return true;
}

bool ClickHouseSink::finish_insert(bool& moved, std::string& err) {
  if (!inflight_.valid()) return true;
  err = inflight_.get();
  if (!err.empty()) return false;  // on_failure() re-reads from the mark and asks what landed
  moved = true;
  return commit(inflight_page_, err);
}

bool ClickHouseSink::commit(const Page& p, std::string& err) {
  if (!save_mark(mark_path_, p.last_id, err)) return false;
  mark_ = p.last_id;
  reg_.with_counters([&](IngestCounters& c) {
    auto& ch = c.clickhouse;
    ch.batches += p.batches;
    ch.rows += p.rows;
    ch.already_there += p.there;
    ch.pending -= std::min<uint64_t>(ch.pending, p.raw);
    ch.hwm = mark_;
    ch.last_success_ns = now_unix_ns();
    ch.last_error.clear();
  });
  return true;
}

std::optional<std::set<ClickHouseSink::Key>> ClickHouseSink::present(const std::vector<Batch>& page,
                                                                     std::string& err) {
  std::set<Key> out;
  for (std::size_t at = 0; at < page.size(); at += kCheckChunk) {
    std::set<std::string> nodes;
    std::string tuples;
    uint64_t lo = std::numeric_limits<uint64_t>::max(), hi = 0;
    for (std::size_t i = at; i < std::min(page.size(), at + kCheckChunk); ++i) {
      const Batch& b = page[i];
      if (b.flowlets.empty()) continue;  // no rows: nothing to insert twice
      nodes.insert(b.node);
      if (!tuples.empty()) tuples += ',';
      tuples += '(';
      tuples += clickhouse::sql_quote(b.node);
      tuples += ',' + std::to_string(b.epoch) + ',' + std::to_string(b.seq) + ')';
      for (const auto& f : b.flowlets) {
        lo = std::min<uint64_t>(lo, f.first_ns);
        hi = std::max<uint64_t>(hi, f.first_ns);
      }
    }
    if (tuples.empty()) continue;
    const std::string sql = "SELECT node, epoch, seq FROM " + clickhouse::table(server_.url(), "flowlets") +
                            " WHERE node IN (" + clickhouse::sql_quoted_list(nodes) +
                            ") AND first_ns >= " + std::to_string(lo) +
                            " AND first_ns <= " + std::to_string(hi) + " AND (node, epoch, seq) IN (" +
                            tuples + ") GROUP BY node, epoch, seq FORMAT RowBinary";
    auto reply = server_.query(sql, err);
    if (!reply) return std::nullopt;
    clickhouse::RowReader r(*reply);
    while (!r.at_end() && r.ok()) {
      std::string node(r.string());
      uint64_t epoch = r.uint<uint64_t>(), seq = r.uint<uint64_t>();
      if (r.ok()) out.insert({std::move(node), epoch, seq});
    }
    if (!r.ok()) {
      err = "malformed reply to the duplicate check";
      return std::nullopt;
    }
  }
  return out;
}

// Retention (ClickHouse 18.16 has no TTL): whole UTC days older than clickhouse_retention_days, on the server
// the URL names (with a cluster: its shard's local table), checked once an hour. Failures only wait for the
// next hour: retention must never hold up the sink.
void ClickHouseSink::drop_old_partitions() {
  const uint64_t now = now_unix_ns();
  if (s_.clickhouse_retention_days <= 0 || now < next_retention_ns_) return;
  next_retention_ns_ = now + 3'600'000'000'000ull;
  const auto days = static_cast<uint64_t>(s_.clickhouse_retention_days);
  if (now / kDayNs < days) return;
  const uint64_t first_kept = now / kDayNs - days;
  const auto local = clickhouse::local_table(server_.url(), "flowlets");
  const std::string name = local.substr(local.find('.') + 1);
  std::string err;
  auto parts = server_.query("SELECT DISTINCT partition FROM system.parts WHERE active AND database = " +
                                 clickhouse::sql_quote(server_.url().database) +
                                 " AND table = " + clickhouse::sql_quote(name) + " FORMAT TabSeparated",
                             err);
  if (!parts) return;
  std::istringstream lines(*parts);
  for (std::string p; std::getline(lines, p);) {
    uint64_t day = 0;
    try {
      day = std::stoull(p);
    } catch (const std::exception&) {
      continue;
    }
    if (day >= first_kept) continue;
    if (server_.query("ALTER TABLE " + local + " DROP PARTITION " + std::to_string(day), err))
      log_line("clickhouse: retention dropped day partition " + std::to_string(day) + " of " + local);
    else
      log_at(Level::kWarning, "clickhouse: retention: " + err);
  }
}

}  // namespace netprism::daemon
