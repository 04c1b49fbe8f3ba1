#include "reader.hpp"

#include <algorithm>
#include <limits>

namespace netprism::clickhouse {

std::optional<std::map<std::string, std::vector<std::string>>> Reader::node_addrs(std::string& err) const {
  auto reply = server_.query("SELECT node, addrs FROM " + table(server_.url(), "nodes") +
                                 " FINAL ORDER BY node, registered_ns FORMAT RowBinary",
                             err);
  if (!reply) return std::nullopt;
  std::map<std::string, std::vector<std::string>> out;
  RowReader r(*reply);
  while (!r.at_end() && r.ok()) {
    std::string node(r.string());
    std::vector<std::string> addrs(r.varint());
    for (auto& a : addrs) a = r.string();
    out[node] = std::move(addrs);  // the latest registration last
  }
  if (!r.ok()) err = "malformed reply reading nodes";
  return r.ok() ? std::optional(std::move(out)) : std::nullopt;
}

std::optional<std::set<uint16_t>> Reader::own_ports(std::string& err) const {
  auto reply = server_.query(
      "SELECT DISTINCT port FROM " + table(server_.url(), "own_ports") + " FORMAT RowBinary", err);
  if (!reply) return std::nullopt;
  std::set<uint16_t> out;
  RowReader r(*reply);
  while (!r.at_end() && r.ok()) out.insert(r.uint<uint16_t>());
  if (!r.ok()) err = "malformed reply reading own ports";
  return r.ok() ? std::optional(std::move(out)) : std::nullopt;
}

namespace {
std::string window_sql(uint64_t since, uint64_t until) {
  return "last_ns >= " + std::to_string(since) + " AND first_ns <= " + std::to_string(until);
}
}  // namespace

std::optional<std::vector<Reader::Edge>> Reader::edges(uint64_t since, uint64_t until,
                                                       std::string& err) const {
  auto reply =
      server_.query("SELECT node, saddr, daddr FROM " + table(server_.url(), "flowlets") + " WHERE " +
                        window_sql(since, until) + " GROUP BY node, saddr, daddr FORMAT RowBinary",
                    err);
  if (!reply) return std::nullopt;
  std::vector<Edge> out;
  RowReader r(*reply);
  while (!r.at_end() && r.ok()) {
    Edge e;
    e.node = r.string();
    r.fixed(e.saddr.data(), 16);
    r.fixed(e.daddr.data(), 16);
    out.push_back(std::move(e));
  }
  if (!r.ok()) err = "malformed reply reading who talked to whom";
  return r.ok() ? std::optional(std::move(out)) : std::nullopt;
}

bool Reader::scan_rdma(uint64_t since, uint64_t until, const std::function<void(Batch&&)>& fn,
                       std::string& err, const std::vector<std::string>& nodes) const {
  std::string where = window_sql(since, until);
  if (!nodes.empty()) {
    where += " AND node IN (" + sql_quoted_list(nodes) + ")";
  }
  // One read: a row per batch of a counters-only agent (one every 0.1-1 s per node), not per flowlet.
  auto reply = server_.query("SELECT node, epoch, seq, first_ns, last_ns, received_ns, batch FROM " +
                                 table(server_.url(), "rdma") + " FINAL WHERE " + where +
                                 " ORDER BY first_ns, node, epoch, seq FORMAT RowBinary",
                             err);
  if (!reply) return false;
  RowReader r(*reply);
  while (!r.at_end()) {
    auto b = read_rdma_row(r, err);
    if (!b) return false;
    fn(std::move(*b));
  }
  return true;
}

bool Reader::scan(uint64_t since, uint64_t until, const std::function<void(const FlowletRow&)>& fn,
                  std::string& err, const std::vector<std::string>& nodes, uint64_t rows_per_page) const {
  const std::string t = table(server_.url(), "flowlets");
  std::string window = window_sql(since, until);
  if (!nodes.empty()) {
    window += " AND node IN (" + sql_quoted_list(nodes) + ")";
  }
  auto bounds = server_.query(
      "SELECT min(first_ns), max(first_ns), count() FROM " + t + " WHERE " + window + " FORMAT RowBinary",
      err);
  if (!bounds) return false;
  RowReader b(*bounds);
  const uint64_t lo = b.uint<uint64_t>(), hi = b.uint<uint64_t>(), rows = b.uint<uint64_t>();
  if (!b.ok()) {
    err = "malformed reply reading the window's bounds";
    return false;
  }
  if (rows == 0) return true;
  // Pages by first_ns holding rows_per_page rows at the window's average density (at least 1 ms).
  const long double span = static_cast<long double>(hi - lo) + 1;
  const uint64_t step = std::max<uint64_t>(1'000'000, static_cast<uint64_t>(span * rows_per_page / rows));
  for (uint64_t at = lo; at <= hi;) {
    const uint64_t end = hi - at < step ? hi : at + step - 1;
    auto page = server_.query("SELECT node, epoch, seq, idx, received_ns, " + flowlet_columns() + " FROM " +
                                  t + " FINAL WHERE " + window + " AND first_ns >= " + std::to_string(at) +
                                  " AND first_ns <= " + std::to_string(end) +
                                  " ORDER BY node, epoch, seq, idx FORMAT RowBinary",
                              err);
    if (!page) return false;
    RowReader r(*page);
    FlowletRow row;
    while (read_flowlet_row(r, row)) fn(row);
    if (!r.ok()) {
      err = "malformed flowlets page";
      return false;
    }
    if (end == hi) break;
    at = end + 1;
  }
  return true;
}

}  // namespace netprism::clickhouse
