// QP tables in the kernel's documented RDMA netlink format, for the analysis tests that take QP rows
// (qp_pairing_fixture_test, qp_teardown_test): a node's table is a RDMA_NLDEV_CMD_RES_QP_GET dump built
// attribute by attribute from <rdma/rdma_netlink.h> (as res_get_common_dumpit + fill_res_qp_entry write it,
// encoded by tests/agent/nl_builder.hpp) and decoded by the agent's own parser, so the rows the analysis
// sees are the ones a live agent would send.
#pragma once

#include <linux/netlink.h>
#include <rdma/rdma_netlink.h>

#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "agent/nl_builder.hpp"
#include "analysis.hpp"
#include "rdma/netlink.hpp"

namespace netprism::test {

// enum ib_qp_state and enum ib_qp_type values, as the kernel reports them.
inline constexpr uint8_t kQpsReset = 0, kQpsRts = 3, kQpsErr = 6;
inline constexpr uint8_t kQptGsi = 1, kQptRc = 2;

// One QP of a fixture table. Every member has a default so that designated initialisers may name only what
// a test varies (-Wmissing-field-initializers).
struct FixtureQp {
  uint32_t lqpn = 0, rqpn = 0;
  uint32_t sq_psn = 0, rq_psn = 0;
  uint8_t state = kQpsRts;
  uint8_t type = kQptRc;
};

// One node's QP table on device rxe0 as the kernel dumps it, decoded by the agent's parser, as analysis rows
// read at `t`. Like fill_res_qp_entry, only connected (RC) QPs carry a remote QPN and a receive PSN.
inline std::vector<analysis::NodeQp> qp_table(const std::string& node, const std::vector<FixtureQp>& qps,
                                              uint64_t t) {
  NlBuilder b;
  b.begin_msg(RDMA_NLDEV_CMD_RES_QP_GET);
  b.u32(RDMA_NLDEV_ATTR_DEV_INDEX, 0);
  b.str(RDMA_NLDEV_ATTR_DEV_NAME, "rxe0");
  b.begin_nest(RDMA_NLDEV_ATTR_RES_QP);
  for (const auto& q : qps) {
    b.begin_nest(RDMA_NLDEV_ATTR_RES_QP_ENTRY);
    b.u32(RDMA_NLDEV_ATTR_PORT_INDEX, 1);
    b.u32(RDMA_NLDEV_ATTR_RES_LQPN, q.lqpn);
    if (q.type == kQptRc) {
      b.u32(RDMA_NLDEV_ATTR_RES_RQPN, q.rqpn);
      b.u32(RDMA_NLDEV_ATTR_RES_RQ_PSN, q.rq_psn);
    }
    b.u32(RDMA_NLDEV_ATTR_RES_SQ_PSN, q.sq_psn);
    b.u8(RDMA_NLDEV_ATTR_RES_TYPE, q.type);
    b.u8(RDMA_NLDEV_ATTR_RES_STATE, q.state);
    b.u32(RDMA_NLDEV_ATTR_RES_PID, 4242);
    b.end_nest();
  }
  b.end_nest();
  b.end_msg();
  b.done();
  std::vector<QpEntry> rows;
  auto r = agent::parse_qp_messages(b.bytes().data(), b.bytes().size(), rows);
  EXPECT_TRUE(r) << r.error;
  std::vector<analysis::NodeQp> out;
  for (auto& q : rows) out.push_back({node, t, q});
  return out;
}

}  // namespace netprism::test
