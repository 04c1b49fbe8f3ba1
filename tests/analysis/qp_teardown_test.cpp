// RoCE job ends from the QP tables (aggregator/analysis/qp_teardown.cpp). RoCE has no FIN: a job that ended
// and a job that hangs both go quiet on the wire; what tells them apart is the QP table the agents read
// over RDMA netlink (QPs destroyed or left in ERR/RESET vs. still connected). The tables here are
// RDMA_NLDEV_CMD_RES_QP_GET dumps built attribute by attribute from <rdma/rdma_netlink.h> and decoded by the
// agent's own parser; the traffic is a synthetic DP2 job re-cut as the probe's per-QP RoCE flowlets.
#include <algorithm>
#include <map>

#include <gtest/gtest.h>

#include "counters.hpp"
#include "feed.hpp"
#include "incremental.hpp"
#include "netprism/flowlet.h"
#include "offline.hpp"
#include "qp_table_fixture.hpp"
#include "store.hpp"
#include "synth.hpp"

using namespace netprism;
using namespace netprism::analysis;
using netprism::test::kQpsErr;
using netprism::test::kQpsReset;
using netprism::test::kQpsRts;
using netprism::test::qp_table;

namespace {

constexpr uint64_t kSec = 1'000'000'000;

FlowEvent roce(const std::string& src, const std::string& dst, uint32_t qpn, uint64_t t0, uint64_t t1) {
  FlowEvent e;
  e.observer = src == "10.0.0.1" ? "n0" : "n1";
  e.src = src;
  e.dst = dst;
  e.src_port = 50000;
  e.dst_port = 4791;
  e.qpn = qpn;
  e.proto = NP_PROTO_ROCE;
  e.dir = NP_DIR_EGRESS;
  e.first_ns = t0;
  e.last_ns = t1;
  e.bytes = e.payload_bytes = 65536;
  e.packets = 16;
  return e;
}

const std::map<std::string, std::string> kAddrNode = {{"10.0.0.1", "n0"}, {"10.0.0.2", "n1"}};

TEST(QpTeardown, FlowEndsWhenItsDestinationQpIsGoneOrFlushed) {
  const uint64_t t = 100 * kSec;
  // n0's QP 17 <-> n1's QP 18; traffic both ways until t + 1 s.
  auto flows = [&](QpTeardowns& td) {
    td.flow(roce("10.0.0.1", "10.0.0.2", 18, t, t + kSec));
    td.flow(roce("10.0.0.2", "10.0.0.1", 17, t, t + kSec));
  };
  auto add = [](QpTeardowns& td, const std::vector<NodeQp>& rows, const std::string& node, uint64_t at) {
    td.table_read(node, at);
    for (const auto& r : rows) td.qp_row(r.node, r.seen_ns, r.qp);
  };
  {  // both tables read after the end list nothing: both flows ended, each once
    QpTeardowns td;
    add(td, qp_table("n0", {{17, 18}}, t), "n0", t);
    add(td, qp_table("n1", {{18, 17}}, t), "n1", t);
    flows(td);
    add(td, {}, "n0", t + 3 * kSec);
    add(td, {}, "n1", t + 3 * kSec);
    auto ends = td.take(kAddrNode, 0);
    ASSERT_EQ(ends.size(), 2u);
    for (const auto& e : ends) {
      EXPECT_EQ(e.tcp_flags & 0x01, 0x01);
      EXPECT_EQ(e.bytes, 0u);
      EXPECT_EQ(e.first_ns, t + kSec);  // at the flow's last packet: the connection's times do not move
      EXPECT_EQ(e.last_ns, t + kSec);
    }
    EXPECT_TRUE(td.take(kAddrNode, 0).empty());
  }
  {  // a hang: the later reads still list both QPs connected
    QpTeardowns td;
    flows(td);
    add(td, qp_table("n0", {{17, 18}}, t + 3 * kSec), "n0", t + 3 * kSec);
    add(td, qp_table("n1", {{18, 17}}, t + 3 * kSec), "n1", t + 3 * kSec);
    EXPECT_TRUE(td.take(kAddrNode, 0).empty());
  }
  {  // flushed to ERR (the peer tore its end down) on n1 and reset on n0: ended
    QpTeardowns td;
    flows(td);
    add(td, qp_table("n0", {{.lqpn = 17, .rqpn = 18, .state = kQpsReset}}, t + 3 * kSec), "n0", t + 3 * kSec);
    add(td, qp_table("n1", {{.lqpn = 18, .rqpn = 17, .state = kQpsErr}}, t + 3 * kSec), "n1", t + 3 * kSec);
    EXPECT_EQ(td.take(kAddrNode, 0).size(), 2u);
  }
  {  // only n1's QP is gone (n0 still lists its end): the flow into n1 ended, the one into n0 not yet
    QpTeardowns td;
    flows(td);
    add(td, qp_table("n0", {{17, 18}}, t + 3 * kSec), "n0", t + 3 * kSec);
    add(td, qp_table("n1", {{18, 17}}, t), "n1", t);
    add(td, {}, "n1", t + 3 * kSec);
    auto ends = td.take(kAddrNode, 0);
    ASSERT_EQ(ends.size(), 1u);
    EXPECT_EQ(ends[0].dst, "10.0.0.2");
  }
  {  // no evidence: the latest read is older than the flow's last packet, or never listed the QP
    QpTeardowns td;
    add(td, qp_table("n1", {{18, 17}}, t), "n1", t);
    td.flow(roce("10.0.0.1", "10.0.0.2", 18, t, t + kSec));
    add(td, {}, "n1", t + kSec / 2);
    td.flow(roce("10.0.0.1", "10.0.0.2", 99, t, t + kSec));
    add(td, {}, "n1", t + kSec / 2);
    EXPECT_TRUE(td.take(kAddrNode, 0).empty());
    add(td, {}, "n1", t + 2 * kSec);  // now read after the last packet: QP 18 ended, 99 never listed
    auto ends = td.take(kAddrNode, 0);
    ASSERT_EQ(ends.size(), 1u);
    EXPECT_EQ(ends[0].qpn, 18u);
  }
}

// A DP2 job over RoCE (synthetic, one QP pair between the nodes), its QP tables read every second while it
// runs; at the end either the QPs are destroyed (a normal end) or still connected (a hang).
struct RoceJob {
  Input in;
  uint64_t last = 0;
};

RoceJob roce_job(bool ended, uint8_t end_state = kQpsRts) {
  synth::Spec s;
  s.dp = 2;
  s.pp = 1;
  s.iters = 12;
  s.teardown = false;
  s.control = false;
  RoceJob j;
  synth::generate(s, j.in);
  uint64_t first = UINT64_MAX;
  for (auto& e : j.in.events) {
    const bool to_n1 = e.dst == synth::node_addr(s, 1);
    e.proto = NP_PROTO_ROCE;
    e.qpn = to_n1 ? 18 : 17;  // the BTH's destination QP: n1's 18 or n0's 17
    e.src_port = to_n1 ? 49170 : 49171;
    e.dst_port = 4791;
    first = std::min(first, e.first_ns);
    j.last = std::max(j.last, e.last_ns);
  }
  for (uint64_t t = first; t <= j.last; t += kSec) {
    for (auto& r : qp_table("n0", {{17, 18}}, t)) j.in.qps.push_back(r);
    for (auto& r : qp_table("n1", {{18, 17}}, t)) j.in.qps.push_back(r);
  }
  const uint64_t read = j.last + 3 * kSec;  // the agents' reads after the job went quiet
  if (!ended || end_state != kQpsRts) {
    for (auto& r : qp_table("n0", {{.lqpn = 17, .rqpn = 18, .state = end_state}}, read))
      j.in.qps.push_back(r);
    for (auto& r : qp_table("n1", {{.lqpn = 18, .rqpn = 17, .state = end_state}}, read))
      j.in.qps.push_back(r);
  }
  j.in.qp_read_ns = {{"n0", read}, {"n1", read}};
  j.in.now_ns = read;
  return j;
}

TEST(QpTeardown, OfflineRoceJobEndsWhenItsQpsAreGoneAndHangsWhileTheyStay) {
  for (bool offline : {true, false}) {
    RoceJob gone = roce_job(true), flushed = roce_job(true, kQpsErr), hung = roce_job(false);
    for (RoceJob* j : {&gone, &flushed, &hung}) j->in.offline = offline;
    Result r = analyze(gone.in);
    ASSERT_EQ(r.jobs.size(), 1u);
    EXPECT_EQ(r.jobs[0].state, "ended") << "offline " << offline;
    EXPECT_TRUE(r.jobs[0].findings.empty());
    EXPECT_GE(r.jobs[0].iterations.size(), 10u);
    Result f = analyze(flushed.in);
    ASSERT_EQ(f.jobs.size(), 1u);
    EXPECT_EQ(f.jobs[0].state, "ended") << "offline " << offline;
    Result h = analyze(hung.in);
    ASSERT_EQ(h.jobs.size(), 1u);
    EXPECT_EQ(h.jobs[0].state, "hung") << "offline " << offline;
    EXPECT_TRUE(std::any_of(h.jobs[0].findings.begin(), h.jobs[0].findings.end(),
                            [](const Finding& x) { return x.kind == "hang"; }));
  }
}

// The daemon's way (live_analysis.cpp): events and table reads arrive over time, QpTeardowns turns the
// tables into teardown events between passes of the streaming engine.
TEST(QpTeardown, LiveRoceJobEndsWhenItsQpsAreGoneAndHangsWhileTheyStay) {
  for (bool ended : {true, false}) {
    RoceJob j = roce_job(ended);
    StreamingAnalysis sa;
    sa.set_addr_nodes(j.in.addr_node);
    QpTeardowns td;
    for (const auto& e : j.in.events) {
      add_event(sa, e);
      td.flow(e);
    }
    for (const auto& q : j.in.qps) td.qp_row(q.node, q.seen_ns, q.qp);
    sa.pass(j.last + kSec);
    for (const auto& [node, ns] : j.in.qp_read_ns) td.table_read(node, ns);
    for (const auto& e : td.take(j.in.addr_node, 0)) add_event(sa, e);
    Result r = sa.pass(j.last + 10 * kSec);
    ASSERT_EQ(r.jobs.size(), 1u);
    EXPECT_EQ(r.jobs[0].state, ended ? "ended" : "hung");
  }
}

}  // namespace

// The soft-RoCE recording (tests/e2e/samples/roce_mpi_dp2: OpenMPI + UCX over rxe in two VMs, the agents'
// own records): after the job, both agents' QP tables no longer list its RC and UD QPs, so it ended. The
// same recording with the tables after the job replaced by the last one read during it (the QPs still
// connected, as in a hang) reads hung.
TEST(QpTeardown, RecordedSoftRoceRunEndsAndAHangWithItsQpsListedStaysHung) {
  store::Store s(std::string(NP_SAMPLES_DIR) + "/roce_mpi_dp2/recording.db", store::Db::Mode::kReadOnly);
  std::vector<std::string> warnings;
  Input in = cli::load_native(s, warnings);
  Result r = analyze(in);
  ASSERT_EQ(r.jobs.size(), 1u);
  EXPECT_EQ(r.jobs[0].state, "ended");
  for (const auto& f : r.jobs[0].findings) EXPECT_NE(f.kind, "hang");
  const uint64_t end = r.jobs[0].last_ns;

  std::map<std::string, uint64_t> last_during;  // per node, its last table read before the job's end
  for (const auto& q : in.qps)
    if (q.seen_ns <= end) last_during[q.node] = std::max(last_during[q.node], q.seen_ns);
  std::vector<NodeQp> hung_rows;
  size_t replaced = 0;
  for (const auto& q : in.qps) {
    if (q.seen_ns <= end) {
      hung_rows.push_back(q);
      continue;
    }
    if (q.qp.type != "GSI") continue;  // one later read per node: the QPs of the last read during the job
    ++replaced;
    for (const auto& p : in.qps)
      if (p.node == q.node && p.seen_ns == last_during[q.node])
        hung_rows.push_back({q.node, q.seen_ns, p.qp});
  }
  ASSERT_GE(replaced, 2u);  // both nodes read their tables after the job
  in.qps = hung_rows;
  Result h = analyze(in);
  ASSERT_EQ(h.jobs.size(), 1u);
  EXPECT_EQ(h.jobs[0].state, "hung");
  EXPECT_TRUE(std::any_of(h.jobs[0].findings.begin(), h.jobs[0].findings.end(),
                          [](const Finding& f) { return f.kind == "hang"; }));
}
