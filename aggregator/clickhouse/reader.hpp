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
  bool scan(uint64_t since, uint64_t until, const std::function<void(const FlowletRow&)>& fn,
            std::string& err, uint64_t rows_per_page = 1'000'000) const;

 private:
  Server server_;
};

}  // namespace netprism::clickhouse
