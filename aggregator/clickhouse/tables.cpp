#include "tables.hpp"

#include <type_traits>

namespace netprism::clickhouse {

namespace {

// Calls fn(name, clickhouse_type) for every flowlet field, in flowlet.h order.
template <class Fn>
void each_field_type(Fn&& fn) {
  Flowlet probe{};
  for_each_flowlet_field([&](auto info, auto get) {
    using T = std::remove_cvref_t<decltype(get(probe))>;
    if constexpr (decltype(info)::kind == FieldKind::kAddr) {
      fn(decltype(info)::name, std::string("FixedString(") + std::to_string(sizeof(T)) + ")");
    } else if constexpr (decltype(info)::kind == FieldKind::kVec) {
      fn(decltype(info)::name, "Array(UInt" + std::to_string(8 * sizeof(std::remove_extent_t<T>)) + ")");
    } else {
      fn(decltype(info)::name, "UInt" + std::to_string(8 * sizeof(T)));
    }
  });
}

struct TableDef {
  const char* name;
  std::string columns;
  std::string engine;  // ENGINE = ... with its keys
  const char* shard_key;
};

std::vector<TableDef> tables() {
  std::string flow = "node String, epoch UInt64, seq UInt64, idx UInt32, received_ns UInt64";
  each_field_type([&](const char* n, const std::string& t) { flow += std::string(", ") + n + " " + t; });
  return {
      {"flowlets", flow,
       "ReplacingMergeTree() PARTITION BY intDiv(first_ns, 86400000000000) "
       "ORDER BY (node, first_ns, epoch, seq, idx)",
       "cityHash64(node)"},
      {"nodes", "node String, epoch UInt64, registered_ns UInt64, addrs Array(String), aggregator String",
       "ReplacingMergeTree(registered_ns) ORDER BY node", "cityHash64(node)"},
      {"own_ports", "aggregator String, port UInt16", "ReplacingMergeTree() ORDER BY (aggregator, port)",
       "cityHash64(aggregator)"},
  };
}

}  // namespace

std::string table(const Url& url, std::string_view name) {
  return url.database + "." + std::string(name);
}

std::string local_table(const Url& url, std::string_view name) {
  return table(url, name) + (url.cluster.empty() ? "" : "_local");
}

std::vector<std::string> schema_ddl(const Url& url) {
  std::vector<std::string> out{"CREATE DATABASE IF NOT EXISTS " + url.database};
  for (const auto& t : tables()) {
    out.push_back("CREATE TABLE IF NOT EXISTS " + local_table(url, t.name) + " (" + t.columns +
                  ") ENGINE = " + t.engine);
    if (!url.cluster.empty())
      out.push_back("CREATE TABLE IF NOT EXISTS " + table(url, t.name) + " AS " + local_table(url, t.name) +
                    " ENGINE = Distributed(" + url.cluster + ", " + url.database + ", " + t.name +
                    "_local, " + t.shard_key + ")");
  }
  return out;
}

std::string flowlet_columns() {
  std::string out;
  each_field_type(
      [&](const char* n, const std::string&) { out += (out.empty() ? "" : ", ") + std::string(n); });
  return out;
}

void append_flowlet_rows(const Batch& b, uint64_t received_ns, std::string& out) {
  RowWriter w(out);
  uint32_t idx = 0;
  for (const auto& f : b.flowlets) {
    w.string(b.node);
    w.uint(b.epoch);
    w.uint(b.seq);
    w.uint(idx++);
    w.uint(received_ns);
    for_each_flowlet_field([&](auto info, auto get) {
      const auto& v = get(f);
      if constexpr (decltype(info)::kind == FieldKind::kAddr) {
        w.fixed(v, sizeof v);
      } else if constexpr (decltype(info)::kind == FieldKind::kVec) {
        w.varint(std::extent_v<std::remove_cvref_t<decltype(v)>>);
        for (auto x : v) w.uint(x);
      } else {
        w.uint(v);
      }
    });
  }
}

bool read_flowlet_row(RowReader& r, FlowletRow& row) {
  if (r.at_end()) return false;
  row.node = r.string();
  row.epoch = r.uint<uint64_t>();
  row.seq = r.uint<uint64_t>();
  row.idx = r.uint<uint32_t>();
  row.received_ns = r.uint<uint64_t>();
  row.f = Flowlet{};
  for_each_flowlet_field([&](auto info, auto get) {
    auto& v = get(row.f);
    using T = std::remove_cvref_t<decltype(v)>;
    if constexpr (decltype(info)::kind == FieldKind::kAddr) {
      r.fixed(v, sizeof v);
    } else if constexpr (decltype(info)::kind == FieldKind::kVec) {
      const uint64_t n = r.varint();
      for (uint64_t i = 0; i < n; ++i) {
        auto x = r.uint<std::remove_extent_t<T>>();
        if (i < std::extent_v<T>) v[i] = x;
      }
    } else {
      v = r.uint<T>();
    }
  });
  return r.ok();
}

std::string sql_quote(std::string_view text) {
  std::string out = "'";
  for (char c : text) {
    if (c == '\'' || c == '\\') out += '\\';
    out += c;
  }
  return out + "'";
}

}  // namespace netprism::clickhouse
