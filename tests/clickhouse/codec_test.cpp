// The ClickHouse encoder without a server: RowBinary values, flowlet rows written and read back field for
// field, hostile replies, the URL and the DDL's promises (day partitions, the dedup key, Distributed tables).
#include <gtest/gtest.h>

#include <cstring>
#include <type_traits>
#include <vector>

#include "clickhouse/http.hpp"
#include "clickhouse/rowbinary.hpp"
#include "clickhouse/tables.hpp"

using namespace netprism;
using namespace netprism::clickhouse;

namespace {
Flowlet flowlet(uint64_t first_ns, uint8_t seed) {
  Flowlet f{};
  for (int i = 0; i < 16; ++i) {
    f.key.saddr[i] = static_cast<uint8_t>(seed + i);
    f.key.daddr[i] = static_cast<uint8_t>(seed * 3 + i);
  }
  f.key.ifindex = 0x01020304u + seed;
  f.key.sport = 0xfffe;
  f.key.dport = 29500;
  f.key.qpn = 0xabcdef;
  f.key.proto = NP_PROTO_ROCE;
  f.key.dir = NP_DIR_INGRESS;
  f.key.family = 6;
  f.first_ns = first_ns;
  f.last_ns = first_ns + 12345;
  f.packets = 1ull << 40;
  f.bytes = ~0ull;
  f.payload_bytes = 77;
  for (int i = 0; i < NP_ROCE_CLASSES; ++i) f.roce_ops[i] = 0x10000u * (i + 1) + seed;
  f.last_psn = 0xffffff;
  f.tcp_flags = 0x1ff;
  f.end_reason = NP_END_GAP;
  return f;
}
}  // namespace

TEST(RowBinary, ValuesAreLittleEndianAndVarintsLeb128) {
  std::string out;
  RowWriter w(out);
  w.uint(uint16_t{0x0102});
  w.uint(uint64_t{1});
  w.varint(300);
  w.string("ab");
  EXPECT_EQ(out, std::string("\x02\x01\x01\0\0\0\0\0\0\0\xac\x02\x02"
                             "ab",
                             15));
  RowReader r(out);
  EXPECT_EQ(r.uint<uint16_t>(), 0x0102);
  EXPECT_EQ(r.uint<uint64_t>(), 1u);
  EXPECT_EQ(r.varint(), 300u);
  EXPECT_EQ(r.string(), "ab");
  EXPECT_TRUE(r.ok());
  EXPECT_TRUE(r.at_end());
}

TEST(RowBinary, ShortOrCorruptInputIsAnErrorNotAnOverread) {
  RowReader a(
      std::string_view("\x05"
                       "abc",
                       4));  // string claims 5 bytes, 3 follow
  EXPECT_EQ(a.string(), "");
  EXPECT_FALSE(a.ok());
  RowReader b(std::string_view("\x01\x02", 2));
  EXPECT_EQ(b.uint<uint32_t>(), 0u);
  EXPECT_FALSE(b.ok());
  const std::string eleven(11, '\xff');  // no varint has more than 10 bytes
  RowReader c(eleven);
  c.varint();
  EXPECT_FALSE(c.ok());
}

TEST(FlowletRows, RoundTripEveryField) {
  Batch b;
  b.node = "node-'7'";
  b.epoch = 42;
  b.seq = 9;
  b.flowlets = {flowlet(1'795'000'000'000'000'000ull, 1), flowlet(5, 200)};
  std::string rows;
  append_flowlet_rows(b, 99, rows);
  RowReader r(rows);
  FlowletRow row;
  for (uint32_t i = 0; i < b.flowlets.size(); ++i) {
    ASSERT_TRUE(read_flowlet_row(r, row)) << i;
    EXPECT_EQ(row.node, b.node);
    EXPECT_EQ(row.epoch, 42u);
    EXPECT_EQ(row.seq, 9u);
    EXPECT_EQ(row.idx, i);
    EXPECT_EQ(row.received_ns, 99u);
    EXPECT_TRUE(row.f == b.flowlets[i]) << i;
  }
  EXPECT_FALSE(read_flowlet_row(r, row));
  EXPECT_TRUE(r.ok());
  // Every truncation of the rows is an error, never a crash.
  for (std::size_t n = 1; n < rows.size(); n += 7) {
    RowReader t(std::string_view(rows).substr(0, n));
    while (read_flowlet_row(t, row)) {
    }
    EXPECT_FALSE(t.ok() && !t.at_end()) << n;
  }
}

// Reads a Native block back the way clickhouse-server does (no block info over HTTP; per column name, type,
// values; arrays as end offsets, then elements) and checks every value against the batches.
TEST(FlowletBlock, NativeColumnsHoldEveryFieldOfEveryRow) {
  Batch a, b;
  a.node = "n0";
  a.epoch = 1;
  a.seq = 2;
  a.flowlets = {flowlet(100, 1), flowlet(200, 2)};
  b.node = "node-1";
  b.epoch = 3;
  b.seq = 4;
  b.flowlets = {flowlet(300, 3)};
  std::string block;
  append_flowlet_block({{&a, 10}, {&b, 20}}, block);
  RowReader r(block);
  ASSERT_EQ(r.varint(), 5 + kFlowletFields);
  ASSERT_EQ(r.varint(), 3u);
  const std::vector<std::pair<const Batch*, uint32_t>> rows = {{&a, 0}, {&a, 1}, {&b, 0}};
  EXPECT_EQ(r.string(), "node");
  EXPECT_EQ(r.string(), "String");
  for (const auto& [batch, i] : rows) EXPECT_EQ(r.string(), batch->node);
  for (const char* name : {"epoch", "seq", "idx", "received_ns"}) {
    EXPECT_EQ(r.string(), name);
    const std::string type(r.string());
    for (const auto& [batch, i] : rows) {
      const std::string n = name;
      const uint64_t want = n == "epoch"  ? batch->epoch
                            : n == "seq"  ? batch->seq
                            : n == "idx"  ? i
                            : batch == &a ? 10
                                          : 20;
      EXPECT_EQ(type == "UInt32" ? r.uint<uint32_t>() : r.uint<uint64_t>(), want) << name;
    }
  }
  std::vector<Flowlet> got(rows.size());
  for_each_flowlet_field([&](auto info, auto get) {
    EXPECT_EQ(r.string(), decltype(info)::name);
    const std::string type(r.string());
    using T = std::remove_cvref_t<decltype(get(got[0]))>;
    if constexpr (decltype(info)::kind == FieldKind::kVec) {
      EXPECT_EQ(type, "Array(UInt32)");
      for (uint64_t k = 1; k <= rows.size(); ++k) EXPECT_EQ(r.uint<uint64_t>(), k * std::extent_v<T>);
      for (auto& f : got)
        for (auto& x : get(f)) x = r.uint<std::remove_extent_t<T>>();
    } else if constexpr (decltype(info)::kind == FieldKind::kAddr) {
      EXPECT_EQ(type, "FixedString(16)");
      for (auto& f : got) r.fixed(get(f), sizeof get(f));
    } else {
      EXPECT_EQ(type, "UInt" + std::to_string(8 * sizeof(T)));
      for (auto& f : got) get(f) = r.uint<T>();
    }
  });
  EXPECT_TRUE(r.ok());
  EXPECT_TRUE(r.at_end());
  for (std::size_t k = 0; k < rows.size(); ++k)
    EXPECT_TRUE(got[k] == rows[k].first->flowlets[rows[k].second]) << k;
}

// The block's rows come in the table's key order (node, first_ns, epoch, seq, idx) whatever the batches'
// order, so clickhouse-server need not sort them; idx still names each row's place in its batch.
TEST(FlowletBlock, RowsInSortingKeyOrder) {
  Batch b, a;
  b.node = "b";
  b.epoch = 1;
  b.seq = 7;
  b.flowlets = {flowlet(5, 1), flowlet(1, 2)};
  a.node = "a";
  a.epoch = 2;
  a.seq = 3;
  a.flowlets = {flowlet(3, 3)};
  std::string block;
  append_flowlet_block({{&b, 10}, {&a, 20}}, block);
  RowReader r(block);
  r.varint();
  ASSERT_EQ(r.varint(), 3u);
  r.string();
  r.string();
  EXPECT_EQ(r.string(), "a");
  EXPECT_EQ(r.string(), "b");
  EXPECT_EQ(r.string(), "b");
  std::vector<uint64_t> epoch, seq, idx, received;
  for (auto* col : {&epoch, &seq, &idx, &received}) {
    r.string();
    const std::string type(r.string());
    for (int i = 0; i < 3; ++i) col->push_back(type == "UInt32" ? r.uint<uint32_t>() : r.uint<uint64_t>());
  }
  EXPECT_EQ(epoch, (std::vector<uint64_t>{2, 1, 1}));
  EXPECT_EQ(seq, (std::vector<uint64_t>{3, 7, 7}));
  EXPECT_EQ(idx, (std::vector<uint64_t>{0, 1, 0}));  // b's first_ns 1 (its idx 1) before 5 (idx 0)
  EXPECT_EQ(received, (std::vector<uint64_t>{20, 10, 10}));
  EXPECT_TRUE(r.ok());
}

TEST(Url, DatabaseClusterAndPassedParameters) {
  std::string err;
  auto u = parse_url("http://10.0.0.5:9123/?database=np&cluster=two&user=w&password=a%20b", err);
  ASSERT_TRUE(u) << err;
  EXPECT_EQ(u->base, "http://10.0.0.5:9123");
  EXPECT_EQ(u->database, "np");
  EXPECT_EQ(u->cluster, "two");
  EXPECT_EQ(u->params.at("user"), "w");
  auto d = parse_url("http://ch", err);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->base, "http://ch:8123");
  EXPECT_EQ(d->database, "netprism");
  EXPECT_FALSE(parse_url("https://ch/", err));
  EXPECT_FALSE(parse_url("http:///?database=x", err));
  EXPECT_FALSE(parse_url("http://ch/?database=x;DROP", err));
  EXPECT_NE(err.find("identifier"), std::string::npos);
}

TEST(Schema, DayPartitionsDedupKeyAndDistributedTables) {
  std::string err;
  auto plain = parse_url("http://ch/?database=np", err);
  auto ddl = schema_ddl(*plain);
  ASSERT_EQ(ddl.size(), 5u);  // database + four tables
  EXPECT_NE(ddl[4].find("np.rdma ("), std::string::npos);
  EXPECT_NE(ddl[4].find("ORDER BY (node, first_ns, epoch, seq)"), std::string::npos);
  EXPECT_NE(ddl[1].find("np.flowlets ("), std::string::npos);
  EXPECT_NE(ddl[1].find("ReplacingMergeTree() PARTITION BY intDiv(first_ns, 86400000000000)"),
            std::string::npos);
  EXPECT_NE(ddl[1].find("ORDER BY (node, first_ns, epoch, seq, idx)"), std::string::npos);
  EXPECT_NE(ddl[1].find("saddr FixedString(16)"), std::string::npos);
  EXPECT_NE(ddl[1].find("roce_ops Array(UInt32)"), std::string::npos);
  auto clustered = parse_url("http://ch/?database=np&cluster=c2", err);
  auto cd = schema_ddl(*clustered);
  ASSERT_EQ(cd.size(), 9u);
  EXPECT_NE(cd[1].find("np.flowlets_local ("), std::string::npos);
  EXPECT_NE(cd[2].find("Distributed(c2, np, flowlets_local, cityHash64(node))"), std::string::npos);
  EXPECT_EQ(table(*clustered, "flowlets"), "np.flowlets");
  EXPECT_EQ(local_table(*clustered, "flowlets"), "np.flowlets_local");
}

// The rdma table's row: the batch without its flowlets through the wire codec, its span from its records.
TEST(RdmaRow, RoundTripsTheBatchsRdmaRecordsAndRejectsAGarbledOne) {
  Batch b;
  b.node = "gpu7";
  b.epoch = 3;
  b.seq = 99;
  b.sent_ns = 5'000;
  b.flowlets.resize(2);  // not copied: they have their own table
  b.rdma_bursts.push_back({"rxe0", 1, 1'000, 2'000, 4096, 8192, 3, 5});
  QpEntry q;
  q.device = "rxe0";
  q.lqpn = 17;
  q.rqpn = 18;
  q.type = "RC";
  q.state = "RTS";
  q.ts_ns = 4'000;
  b.qps.push_back(q);
  b.counters["rdma_qp_table_read_ns"] = 4'500;
  b.counters["probe_packets"] = 7;  // agent counters stay in the local store
  EXPECT_TRUE(has_rdma(b));
  std::string rows;
  append_rdma_row(b, 6'000, rows);
  RowReader r(rows);
  std::string err;
  auto back = read_rdma_row(r, err);
  ASSERT_TRUE(back) << err;
  EXPECT_TRUE(r.at_end());
  EXPECT_EQ(back->node, "gpu7");
  EXPECT_EQ(back->seq, 99u);
  EXPECT_TRUE(back->flowlets.empty());
  EXPECT_EQ(back->rdma_bursts, b.rdma_bursts);
  EXPECT_EQ(back->qps, b.qps);
  EXPECT_EQ(back->counters, (Counters{{"rdma_qp_table_read_ns", 4'500}}));
  RowReader span(rows);
  span.string();
  for (uint64_t want : {3ull, 99ull, 1'000ull, 5'000ull, 6'000ull}) EXPECT_EQ(span.uint<uint64_t>(), want);

  Batch plain;
  plain.flowlets.resize(1);
  EXPECT_FALSE(has_rdma(plain));
  std::string bad;
  RowWriter w(bad);
  w.string("gpu7");
  for (int i = 0; i < 5; ++i) w.uint(uint64_t{0});
  w.string("\x93garbage");
  RowReader br(bad);
  EXPECT_FALSE(read_rdma_row(br, err));
  EXPECT_NE(err.find("does not decode"), std::string::npos) << err;
}

TEST(Sql, QuotedStringsCannotEscape) {
  EXPECT_EQ(sql_quote("a'b\\c"), "'a\\'b\\\\c'");
}
