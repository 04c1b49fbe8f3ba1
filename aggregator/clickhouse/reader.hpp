// Reading netprism's tables back (`netprism analyze --clickhouse`): the flowlets of a window page by page,
// deduplicated (FINAL: a row inserted twice is read once, also before ClickHouse merged the copies), and the
// registrations and own ports every aggregator wrote.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "http.hpp"
#include "netprism/addr.hpp"
#include "tables.hpp"

namespace netprism::clickhouse {

class Reader {
 public:
  explicit Reader(Url url) : server_(std::move(url), std::chrono::minutes(10)) {}
  // node -> the addresses of its latest registration.
  std::optional<std::map<std::string, std::vector<std::string>>> node_addrs(std::string& err) const;
  // Every aggregator's own ports.
  std::optional<std::set<uint16_t>> own_ports(std::string& err) const;
  // fn(row) for every flowlet overlapping [since, until] (last_ns >= since, first_ns <= until), in pages of
  // about rows_per_page rows by first_ns (so memory is bounded by a page on both sides), ordered by
  // (node, epoch, seq, idx) within a page. false with err.
  // nodes: only these observers' flowlets (a key-prefix read); empty: all.
  bool scan(uint64_t since, uint64_t until, const std::function<void(const FlowletRow&)>& fn,
            std::string& err, const std::vector<std::string>& nodes = {},
            uint64_t rows_per_page = 1'000'000) const;
  // fn(batch) for every row of the rdma table (tables.hpp) overlapping [since, until], in time order: the
  // RDMA port bursts, QP table rows and table reads of counters-only agents, flowlets empty. false with err.
  bool scan_rdma(uint64_t since, uint64_t until, const std::function<void(Batch&&)>& fn, std::string& err,
                 const std::vector<std::string>& nodes = {}) const;
  // Who talked to whom in the window: every distinct (observer, saddr, daddr), aggregated by the server.
  struct Edge {
    std::string node;
    Addr16 saddr, daddr;
  };
  std::optional<std::vector<Edge>> edges(uint64_t since, uint64_t until, std::string& err) const;

 private:
  Server server_;
};

}  // namespace netprism::clickhouse
