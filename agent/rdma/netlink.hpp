// The RDMA QP table through RDMA netlink (NETLINK_RDMA, client RDMA_NL_NLDEV): what `rdma resource show qp`
// prints -- local/remote QPN, type, state, owning pid and command -- joined with the connection manager's
// table (RDMA_NLDEV_CMD_RES_CM_ID_GET) for the local and peer addresses, so per-QP RoCE traffic can be
// attributed to processes and peers.
//
// The parsers are pure functions over the bytes a netlink socket returns, so they are tested with message
// fixtures built from <rdma/rdma_netlink.h>; they never trust a length they have not bounds-checked.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "netprism/records.hpp"

namespace netprism::agent {

struct NlParseResult {
  bool done = false;  // NLMSG_DONE seen: the dump is complete
  std::string error;  // non-empty: malformed input or a netlink error message (errno text)
  explicit operator bool() const { return error.empty(); }
};

struct RdmaDevice {
  uint32_t index = 0;
  std::string name;
};

struct CmIdEntry {
  std::string device;
  uint32_t port = 0;
  uint32_t lqpn = 0;
  std::string src_addr, dst_addr;
};

// Each parser appends what it finds in one receive buffer (one or more netlink messages).
NlParseResult parse_dev_messages(const uint8_t* buf, std::size_t len, std::vector<RdmaDevice>& out);
NlParseResult parse_qp_messages(const uint8_t* buf, std::size_t len, std::vector<QpEntry>& out);
NlParseResult parse_cm_id_messages(const uint8_t* buf, std::size_t len, std::vector<CmIdEntry>& out);

// Fills src_addr/dst_addr of QPs from the CM table (matched by device and local QPN), and `comm` of user
// QPs from `comm_of(pid)` (the kernel reports only the pid; the rdma tool reads /proc/<pid>/comm too).
void complete_qp_table(std::vector<QpEntry>& qps, const std::vector<CmIdEntry>& cm,
                       const std::function<std::string(uint32_t)>& comm_of);

std::string qp_type_name(uint8_t t);
std::string qp_state_name(uint8_t s);

// Live query: dumps devices, then the QP and CM tables of each. false + reason when RDMA netlink is not
// available (no ib_core, no permission); an empty table with no devices is success.
bool read_qp_table(std::vector<QpEntry>& out, std::string& err);

}  // namespace netprism::agent
