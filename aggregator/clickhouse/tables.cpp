#include "tables.hpp"

#include <algorithm>
#include <tuple>
#include <type_traits>
#include <utility>

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
  flow += std::string(", ") + kInsertedColumn;
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

std::vector<std::string> schema_migrations(const Server& server, std::string& err) {
  const Url& url = server.url();
  std::vector<std::string> out;
  std::vector<std::string> names{local_table(url, "flowlets")};
  if (!url.cluster.empty()) names.push_back(table(url, "flowlets"));
  for (const auto& t : names) {
    const std::string name = t.substr(t.find('.') + 1);
    // 18.16 has no ADD COLUMN IF NOT EXISTS: ask system.columns.
    auto reply =
        server.query("SELECT count() FROM system.columns WHERE database = " + sql_quote(url.database) +
                         " AND table = " + sql_quote(name) + " AND name = 'inserted' FORMAT TabSeparated",
                     err);
    if (!reply) return {};
    if (reply->rfind("0", 0) == 0) out.push_back("ALTER TABLE " + t + " ADD COLUMN " + kInsertedColumn);
  }
  err.clear();
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

namespace {
struct RowRef {
  const StoredBatch* sb;
  uint32_t i;
};

// The block's rows in the table's sorting key order (node, first_ns, epoch, seq, idx). clickhouse-server
// (18.16 too) checks whether an inserted block is sorted already (isAlreadySorted) and then skips sorting it
// and permuting every column: with the block in arrival order that sort -- string compares of node, then
// first_ns -- was the largest part of the server's insert CPU in perf. Nodes are ranked once, so the sort
// compares integers.
std::vector<RowRef> sorted_rows(const std::vector<StoredBatch>& batches) {
  std::vector<std::string_view> names;
  for (const auto& sb : batches) names.push_back(sb.batch->node);
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  struct Key {
    uint32_t rank;
    uint64_t first_ns, epoch, seq;
    uint32_t idx;
    RowRef ref;
  };
  std::vector<Key> keys;
  for (const auto& sb : batches) {
    const auto rank =
        static_cast<uint32_t>(std::lower_bound(names.begin(), names.end(), sb.batch->node) - names.begin());
    for (uint32_t i = 0; i < sb.batch->flowlets.size(); ++i)
      keys.push_back({rank, sb.batch->flowlets[i].first_ns, sb.batch->epoch, sb.batch->seq, i, {&sb, i}});
  }
  std::sort(keys.begin(), keys.end(), [](const Key& a, const Key& b) {
    return std::tie(a.rank, a.first_ns, a.epoch, a.seq, a.idx) <
           std::tie(b.rank, b.first_ns, b.epoch, b.seq, b.idx);
  });
  std::vector<RowRef> out;
  out.reserve(keys.size());
  for (const auto& k : keys) out.push_back(k.ref);
  return out;
}

// Bytes of a row in a Native block but its node's text: the fixed-width columns, the node's length byte
// (names under 128 bytes), the arrays' offsets and elements.
std::size_t native_row_bytes() {
  std::size_t n = 1 + 8 + 8 + 4 + 8;
  for_each_flowlet_field([&](auto info, auto get) {
    n += sizeof(get(std::declval<const Flowlet&>()));
    if constexpr (decltype(info)::kind == FieldKind::kVec) n += 8;
  });
  return n;
}
}  // namespace

void append_flowlet_block(const std::vector<StoredBatch>& batches, std::string& out) {
  const std::vector<RowRef> order = sorted_rows(batches);
  const std::size_t rows = order.size();
  std::size_t bytes = 256 + 64 * (5 + kFlowletFields);  // counts, names and types
  for (const auto& sb : batches)
    bytes += sb.batch->flowlets.size() * (native_row_bytes() + sb.batch->node.size());
  out.reserve(out.size() + bytes);  // once: growing a block of tens of MB step by step copied it repeatedly
  // The rows in key order: fn(batch, idx, flowlet).
  auto each_row = [&order](auto&& fn) {
    for (const auto& r : order) fn(*r.sb, r.i, r.sb->batch->flowlets[r.i]);
  };
  RowWriter w(out);
  w.varint(5 + kFlowletFields);
  w.varint(rows);
  auto column = [&](std::string_view name, std::string_view type) {
    w.string(name);
    w.string(type);
  };
  column("node", "String");
  each_row([&](const StoredBatch& sb, uint32_t, const Flowlet&) { w.string(sb.batch->node); });
  column("epoch", "UInt64");
  each_row([&](const StoredBatch& sb, uint32_t, const Flowlet&) { w.uint(sb.batch->epoch); });
  column("seq", "UInt64");
  each_row([&](const StoredBatch& sb, uint32_t, const Flowlet&) { w.uint(sb.batch->seq); });
  column("idx", "UInt32");
  each_row([&](const StoredBatch&, uint32_t i, const Flowlet&) { w.uint(i); });
  column("received_ns", "UInt64");
  each_row([&](const StoredBatch& sb, uint32_t, const Flowlet&) { w.uint(sb.received_ns); });
  std::vector<std::string> types;
  each_field_type([&](const char*, const std::string& t) { types.push_back(t); });
  std::size_t field = 0;
  for_each_flowlet_field([&](auto info, auto get) {
    column(decltype(info)::name, types[field++]);
    if constexpr (decltype(info)::kind == FieldKind::kVec) {
      using T = std::remove_cvref_t<decltype(get(std::declval<const Flowlet&>()))>;
      for (uint64_t end = 0, r = 0; r < rows; ++r) w.uint(end += std::extent_v<T>);
      each_row([&](const StoredBatch&, uint32_t, const Flowlet& f) {
        for (auto x : get(f)) w.uint(x);
      });
    } else if constexpr (decltype(info)::kind == FieldKind::kAddr) {
      each_row([&](const StoredBatch&, uint32_t, const Flowlet& f) { w.fixed(get(f), sizeof get(f)); });
    } else {
      each_row([&](const StoredBatch&, uint32_t, const Flowlet& f) { w.uint(get(f)); });
    }
  });
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
