#include "tables.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>

#include "netprism/wire.hpp"

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
      {"rdma",
       std::string("node String, epoch UInt64, seq UInt64, first_ns UInt64, last_ns UInt64, ") +
           "received_ns UInt64, batch String, " + kInsertedColumn,
       "ReplacingMergeTree() PARTITION BY intDiv(first_ns, 86400000000000) ORDER BY (node, first_ns, epoch, "
       "seq)",
       "cityHash64(node)"},
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

bool has_rdma(const Batch& b) {
  return !b.rdma_bursts.empty() || !b.qps.empty() || b.counters.contains(kQpTableReadCounter);
}

void append_rdma_row(const Batch& b, uint64_t received_ns, std::string& out) {
  Batch rest = without_flowlets(b);  // as the wire codec writes it (the store keeps it so too)
  rest.counters.clear();             // of the counters, only the QP table read time is RDMA data
  if (auto it = b.counters.find(kQpTableReadCounter); it != b.counters.end()) rest.counters.insert(*it);
  uint64_t lo = b.sent_ns, hi = b.sent_ns;
  auto span = [&](uint64_t t0, uint64_t t1) {
    if (t0) lo = std::min(lo ? lo : t0, t0);
    hi = std::max(hi, t1);
  };
  for (const auto& r : b.rdma_bursts) span(r.first_ns, r.last_ns);
  for (const auto& q : b.qps) span(q.ts_ns, q.ts_ns);
  if (auto it = rest.counters.find(kQpTableReadCounter); it != rest.counters.end())
    span(it->second, it->second);
  RowWriter w(out);
  w.string(b.node);
  w.uint(b.epoch);
  w.uint(b.seq);
  w.uint(lo);
  w.uint(hi);
  w.uint(received_ns);
  w.string(wire::encode(rest));
}

std::optional<Batch> read_rdma_row(RowReader& r, std::string& err) {
  const std::string_view node = r.string();
  r.uint<uint64_t>();  // epoch, seq, first_ns, last_ns, received_ns: also in the batch, or not needed
  r.uint<uint64_t>();
  r.uint<uint64_t>();
  r.uint<uint64_t>();
  r.uint<uint64_t>();
  const std::string_view bytes = r.string();
  if (!r.ok()) {
    err = "malformed rdma row";
    return std::nullopt;
  }
  auto m = wire::decode(bytes);
  auto* b = m ? std::get_if<Batch>(&m.message->body) : nullptr;
  if (!b) {
    err = "rdma row of " + std::string(node) + " does not decode: " + (m ? "not a batch" : m.error);
    return std::nullopt;
  }
  b->node = node;
  return std::move(*b);
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

// One column of the block: its header (name, type), where its values start, bytes per row (0: String).
struct Column {
  std::string name, type;
  std::size_t width = 0, at = 0;
};

std::size_t varint_size(uint64_t v) {
  std::size_t n = 1;
  while (v >= 0x80) v >>= 7, ++n;
  return n;
}
}  // namespace

void append_flowlet_block(const std::vector<StoredBatch>& batches, std::string& out) {
  static_assert(std::endian::native == std::endian::little,
                "Native columns are copied as they are in memory");
  const std::vector<RowRef> order = sorted_rows(batches);
  const std::size_t rows = order.size();
  // The layout first -- every column's size is known: the node strings' from the batches, the rest fixed
  // (Array(T) of a fixed extent: UInt64 end offsets, then the elements) -- then one pass over the rows
  // writing each field at its column's place. Column by column instead read every row once per column: 27
  // passes in key order, i.e. scattered over the batches; perf measured that at a quarter of the sink's CPU.
  std::vector<Column> cols = {{"node", "String"},
                              {"epoch", "UInt64", 8},
                              {"seq", "UInt64", 8},
                              {"idx", "UInt32", 4},
                              {"received_ns", "UInt64", 8}};
  std::size_t node_bytes = 0;
  for (const auto& sb : batches)
    node_bytes += sb.batch->flowlets.size() * (varint_size(sb.batch->node.size()) + sb.batch->node.size());
  each_field_type([&](const char* n, const std::string& t) { cols.push_back({n, t}); });
  std::size_t field = 5;
  for_each_flowlet_field([&](auto info, auto get) {
    using T = std::remove_cvref_t<decltype(get(std::declval<const Flowlet&>()))>;
    cols[field++].width = sizeof(T) + (decltype(info)::kind == FieldKind::kVec ? 8 : 0);
  });
  std::size_t pos = out.size() + varint_size(cols.size()) + varint_size(rows);
  for (auto& c : cols) {
    pos += varint_size(c.name.size()) + c.name.size() + varint_size(c.type.size()) + c.type.size();
    c.at = pos;
    pos += c.width ? c.width * rows : node_bytes;
  }
  std::size_t at = out.size();
  out.resize(pos);  // the block's bytes in one allocation (the caller reuses out)
  char* const base = out.data();
  auto put = [&](const void* p, std::size_t n) {
    std::memcpy(base + at, p, n);
    at += n;
  };
  auto put_varint = [&](uint64_t v) {
    for (; v >= 0x80; v >>= 7) base[at++] = static_cast<char>((v & 0x7f) | 0x80);
    base[at++] = static_cast<char>(v);
  };
  put_varint(cols.size());
  put_varint(rows);
  for (const auto& c : cols) {
    at = c.at - (varint_size(c.name.size()) + c.name.size() + varint_size(c.type.size()) + c.type.size());
    put_varint(c.name.size());
    put(c.name.data(), c.name.size());
    put_varint(c.type.size());
    put(c.type.data(), c.type.size());
  }
  at = cols[0].at;  // the node strings, in row order
  for (std::size_t r = 0; r < rows; ++r) {
    const StoredBatch& sb = *order[r].sb;
    const uint32_t idx = order[r].i;
    const Flowlet& f = sb.batch->flowlets[idx];
    put_varint(sb.batch->node.size());
    put(sb.batch->node.data(), sb.batch->node.size());
    std::memcpy(base + cols[1].at + 8 * r, &sb.batch->epoch, 8);
    std::memcpy(base + cols[2].at + 8 * r, &sb.batch->seq, 8);
    std::memcpy(base + cols[3].at + 4 * r, &idx, 4);
    std::memcpy(base + cols[4].at + 8 * r, &sb.received_ns, 8);
    std::size_t k = 5;
    for_each_flowlet_field([&](auto info, auto get) {
      const auto& v = get(f);
      const Column& c = cols[k++];
      if constexpr (decltype(info)::kind == FieldKind::kVec) {
        using T = std::remove_cvref_t<decltype(v)>;
        const uint64_t end = (r + 1) * std::extent_v<T>;
        std::memcpy(base + c.at + 8 * r, &end, 8);
        std::memcpy(base + c.at + 8 * rows + sizeof v * r, &v, sizeof v);
      } else {
        std::memcpy(base + c.at + sizeof v * r, &v, sizeof v);
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
