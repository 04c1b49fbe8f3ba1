// netprism's tables in ClickHouse (docs/clickhouse.md has the schema and why it is so), their DDL and the
// RowBinary rows of the flowlets table.
//
//  flowlets   one row per stored flowlet: node, epoch, seq (the batch), idx (its place in the batch),
//             received_ns, then the flowlet's fields in flowlet.h order (addresses FixedString(16), numbers
//             UIntN of their C width, roce_ops Array(UInt32)). ReplacingMergeTree ordered by
//             (node, first_ns, epoch, seq, idx): per-node and per-job (a job is a set of nodes and a window)
//             reads are key-range reads, and since first_ns is a function of (node, epoch, seq, idx) the
//             key identifies a row, so a row inserted twice is one row after merges (reads use FINAL).
//             Partitioned by UTC day (intDiv(first_ns, 86400e9)): retention drops whole days (ClickHouse
//             18.16, Debian 12's, has no TTL clause).
//  nodes      the latest HELLO's addresses of every node (ReplacingMergeTree(registered_ns) by node): the
//             address -> node map of the analysis.
//  own_ports  each aggregator's own ports (netprism's traffic, left out of the analysis).
//  rdma       one row per batch carrying RDMA port bursts, QP table rows or a QP table read (counters-only
//             agents on NICs whose RDMA bypasses the probe): the batch without its flowlets as a wire message
//             (wire.hpp: the one codec of those records, as the store keeps them), with the time span it
//             covers. ReplacingMergeTree by (node, first_ns, epoch, seq), partitioned by day like flowlets.
// With a cluster (`&cluster=NAME` in the URL) each is a *_local table on the server the URL names and a
// Distributed table over the cluster, sharded by cityHash64(node) (own_ports: by aggregator), so all rows of
// a node -- and so every copy of a row -- live on one shard, where ReplacingMergeTree can merge them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "http.hpp"
#include "netprism/records.hpp"
#include "rowbinary.hpp"

namespace netprism::clickhouse {

// CREATE DATABASE / TABLE IF NOT EXISTS statements for url's database (and cluster), in order.
std::vector<std::string> schema_ddl(const Url& url);
// The flowlets' last column: when the row was inserted, stamped by the server that took the insert (the
// sink's Native blocks leave it out, so the server fills it in). Readers that follow the table as it grows
// (follower.hpp) ask for the rows inserted since they last looked; no column of the flowlet orders rows by
// arrival (first_ns does not: aggregators insert late, after an outage by hours).
inline constexpr const char* kInsertedColumn = "inserted DateTime DEFAULT now()";
// ALTERs adding `inserted` to flowlets tables on the url's server created before it existed (after
// schema_ddl); empty when none is needed, or on an error (err set).
std::vector<std::string> schema_migrations(const Server& server, std::string& err);
// The table inserts and reads go to: "db.name" (the Distributed one with a cluster).
std::string table(const Url& url, std::string_view name);
// The table holding the rows on the server url names: "db.name_local" with a cluster, else table().
std::string local_table(const Url& url, std::string_view name);

// The flowlets columns after node, epoch, seq, idx, received_ns: "saddr, daddr, ...".
std::string flowlet_columns();
// Appends one row per flowlet of b (RowBinary).
void append_flowlet_rows(const Batch& b, uint64_t received_ns, std::string& out);
// The same rows of several batches as one block of ClickHouse's Native format (the insert's body with FORMAT
// Native): column by column -- varint column and row counts, then per column its name, its type and its
// values (numbers as in RowBinary back to back, Array(T) as the UInt64 end offsets then every element). The
// server parses a column with one copy instead of a call per value: measured, it costs clickhouse-server less
// than half the CPU per row of RowBinary (bench/clickhouse/sink_bench.py).
struct StoredBatch {
  const Batch* batch;
  uint64_t received_ns;
};
void append_flowlet_block(const std::vector<StoredBatch>& batches, std::string& out);

// The agents' counter that marks a QP table read (also one that listed nothing), in a batch's counters.
inline constexpr const char* kQpTableReadCounter = "rdma_qp_table_read_ns";
// Whether b has anything for the rdma table; its row (RowBinary: node, epoch, seq, first_ns, last_ns,
// received_ns, batch).
bool has_rdma(const Batch& b);
void append_rdma_row(const Batch& b, uint64_t received_ns, std::string& out);
// A row SELECTed as "node, epoch, seq, first_ns, last_ns, received_ns, batch": the batch (flowlets empty,
// node set), or nullopt with err.
std::optional<Batch> read_rdma_row(RowReader& r, std::string& err);

// A flowlets row as SELECTed with "node, epoch, seq, idx, received_ns, " + flowlet_columns().
struct FlowletRow {
  std::string_view node;  // into the reply
  uint64_t epoch = 0, seq = 0;
  uint32_t idx = 0;
  uint64_t received_ns = 0;
  Flowlet f{};
};
// false at the end of the reply or when it is malformed (r.ok() tells which).
bool read_flowlet_row(RowReader& r, FlowletRow& row);

// 'text' as a ClickHouse string literal.
std::string sql_quote(std::string_view text);

// 'a','b',... for an IN (...) list. Built by appends: GCC 12 -O2 -Werror=restrict rejects the
// `(c ? "" : ",") + std::string` idiom inlined in a loop (a false positive that failed a CI build).
template <class Range>
std::string sql_quoted_list(const Range& values) {
  std::string out;
  for (const auto& v : values) {
    if (!out.empty()) out += ',';
    out += sql_quote(v);
  }
  return out;
}

}  // namespace netprism::clickhouse
