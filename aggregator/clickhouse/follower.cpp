#include "follower.hpp"

#include <algorithm>

#include "rowbinary.hpp"

namespace netprism::clickhouse {

namespace {
// Rows per read: a second's rows are read whole (its count decides whether to read it again), so seconds
// are grouped until about this many rows; ~150 bytes a row in RowBinary, ~150 MB a reply at most.
constexpr uint64_t kReadRows = 1'000'000;

uint64_t mix(uint64_t x) {  // splitmix64's finaliser
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// (node, epoch, seq, idx) -> 64 bits. A band of n rows has n^2/2^65 expected collisions: ~3e-7 for 3M rows
// (a 60 s band of 50,000 rows/s); a collision would drop one row from the analysis, never add one.
uint64_t key_hash(std::string_view node, uint64_t epoch, uint64_t seq, uint32_t idx) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : node) h = (h ^ c) * 1099511628211ull;
  return mix(mix(mix(h ^ epoch) ^ seq) ^ idx);
}

std::optional<uint32_t> server_now(const Server& s, std::string& err) {
  auto reply = s.query("SELECT toUInt32(now()) FORMAT RowBinary", err);
  if (!reply) return std::nullopt;
  RowReader r(*reply);
  const uint32_t now = r.uint<uint32_t>();
  if (!r.ok()) err = "malformed reply to now()";
  return r.ok() ? std::optional(now) : std::nullopt;
}
}  // namespace

Follower::Follower(Url url, Options o) : server_(std::move(url), std::chrono::minutes(2)), o_(o) {}

std::string Follower::where(uint32_t from_s, const std::vector<std::string>& nodes) const {
  const uint64_t from_ns = uint64_t{from_s} * 1'000'000'000ull;
  const uint64_t prune_ns = from_ns > o_.reach_ns ? from_ns - o_.reach_ns : 0;
  // The first_ns bound is implied by the next condition; it is there so the server skips old partitions
  // and, with nodes, reads key ranges (node, first_ns >= ...).
  std::string w = "inserted >= toDateTime(" + std::to_string(from_s) +
                  ") AND first_ns >= " + std::to_string(prune_ns) + " AND first_ns + " +
                  std::to_string(o_.reach_ns) + " >= toUInt64(inserted) * 1000000000";
  if (!nodes.empty()) {
    std::string in;
    for (const auto& n : nodes) {
      if (!in.empty()) in += ',';
      in += sql_quote(n);
    }
    w += " AND node IN (";
    w += in;
    w += ')';
  }
  return w;
}

std::string FlowletRows::columns() const {
  return "node, epoch, seq, idx, received_ns, " + flowlet_columns();
}

bool FlowletRows::next(RowReader& r, uint64_t& key, std::string& err) {
  if (!read_flowlet_row(r, row_)) {
    if (!r.ok()) err = "malformed flowlets reply";
    return false;
  }
  key = key_hash(row_.node, row_.epoch, row_.seq, row_.idx);
  return true;
}

bool RdmaRows::next(RowReader& r, uint64_t& key, std::string& err) {
  auto b = read_rdma_row(r, err);
  if (!b) return false;
  batch_ = std::move(*b);
  key = key_hash(batch_.node, batch_.epoch, batch_.seq, 0);  // a row per batch
  return true;
}

bool Follower::take(uint32_t second, uint64_t h) {
  if (second < band_from_) return true;  // a backfilled row before the band: never read again
  if (!seen_.insert(h).second) return false;
  keys_[second].push_back(h);
  return true;
}

bool Follower::read(const std::string& cond, FollowedRows& rows, std::map<uint32_t, uint64_t>* read,
                    std::string& err) {
  auto reply = server_.query("SELECT toUInt32(inserted), " + rows.columns() + " FROM " +
                                 table(server_.url(), rows.table()) + " WHERE " + cond + " ORDER BY " +
                                 rows.order() + " FORMAT RowBinary",
                             err);
  if (!reply) return false;
  RowReader r(*reply);
  while (!r.at_end()) {
    const uint32_t second = r.uint<uint32_t>();
    uint64_t key = 0;
    if (!r.ok() || !rows.next(r, key, err)) {
      if (err.empty()) err = "malformed " + rows.table() + " reply";
      return false;
    }
    ++stats_.rows_read;
    if (read) ++(*read)[second];
    if (take(second, key)) {
      ++stats_.rows;
      rows.emit();
    }
  }
  return true;
}

void Follower::prune(uint32_t band_from) {
  band_from_ = std::max(band_from_, band_from);
  for (auto it = keys_.begin(); it != keys_.end() && it->first < band_from_; it = keys_.erase(it))
    for (uint64_t h : it->second) seen_.erase(h);
  read_.erase(read_.begin(), read_.lower_bound(band_from_));
  stats_.band_rows = seen_.size();
}

bool Follower::poll(const std::vector<std::string>& nodes, const std::vector<std::string>& added,
                    FollowedRows& rows, std::string& err) {
  auto now = server_now(server_, err);
  if (!now) return false;
  const uint32_t reach_s = static_cast<uint32_t>(o_.reach_ns / 1'000'000'000ull) + 1;
  const uint32_t start = *now > reach_s + o_.lag_s ? *now - reach_s - o_.lag_s : 0;
  if (band_from_ == 0) band_from_ = std::max<uint32_t>(start, 1);  // the first poll reads the whole reach
  // Nodes new to a sharded follower: their rows of the reach (the band's are remembered, so the band's own
  // read below hands none of them out twice).
  if (!added.empty() && !read(where(start, added), rows, nullptr, err)) return false;
  auto counts =
      server_.query("SELECT toUInt32(inserted) AS s, count() FROM " + table(server_.url(), rows.table()) +
                        " WHERE " + where(band_from_, nodes) + " GROUP BY s ORDER BY s FORMAT RowBinary",
                    err);
  if (!counts) return false;
  std::vector<std::pair<uint32_t, uint64_t>> changed;
  RowReader r(*counts);
  while (!r.at_end() && r.ok()) {
    const uint32_t s = r.uint<uint32_t>();
    const uint64_t n = r.uint<uint64_t>();
    if (r.ok() && (!read_.count(s) || read_[s] != n)) changed.emplace_back(s, n);
  }
  if (!r.ok()) {
    err = "malformed reply counting rows per second";
    return false;
  }
  for (std::size_t at = 0; at < changed.size();) {
    std::string list;
    uint64_t count = 0;
    const std::size_t first = at;
    for (; at < changed.size() && (list.empty() || count + changed[at].second <= kReadRows); ++at) {
      if (!list.empty()) list += ',';  // piece by piece: GCC 12's -Wrestrict misfires on chains of +
      list += std::to_string(changed[at].first);
      count += changed[at].second;
    }
    std::map<uint32_t, uint64_t> got;
    if (!read(where(band_from_, nodes) + " AND toUInt32(inserted) IN (" + list + ")", rows, &got, err))
      return false;
    // What each second had when read (a second with none now -- merged away -- is not asked again).
    for (std::size_t i = first; i < at; ++i) read_[changed[i].first] = got[changed[i].first];
  }
  ++stats_.polls;
  stats_.server_now = *now;
  prune(*now > o_.lag_s ? *now - o_.lag_s : 1);
  return true;
}

}  // namespace netprism::clickhouse
