// Netlink messages built byte by byte from <rdma/rdma_netlink.h> as the kernel's nldev code emits them (the
// RDMA fixture tests and the fuzzers' seed corpus use them).
#pragma once

#include <arpa/inet.h>
#include <linux/netlink.h>
#include <netinet/in.h>
#include <rdma/rdma_netlink.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace netprism::test {

// Builds netlink messages the way the kernel lays them out (4-byte aligned attributes, nested tables).
class NlBuilder {
 public:
  void begin_msg(uint16_t cmd) {
    msg_ = buf_.size();
    nlmsghdr h{};
    h.nlmsg_type = RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, cmd);
    h.nlmsg_flags = NLM_F_MULTI;
    append(&h, sizeof h);
  }
  void end_msg() { patch_len32(msg_, buf_.size() - msg_); }
  void u32(uint16_t type, uint32_t v) { attr(type, &v, 4); }
  void u8(uint16_t type, uint8_t v) { attr(type, &v, 1); }
  void str(uint16_t type, const std::string& s) { attr(type, s.c_str(), s.size() + 1); }
  void attr(uint16_t type, const void* p, std::size_t n) {
    nlattr a{static_cast<uint16_t>(sizeof(nlattr) + n), type};
    append(&a, sizeof a);
    append(p, n);
    pad();
  }
  void begin_nest(uint16_t type) {
    nests_.push_back(buf_.size());
    nlattr a{0, static_cast<uint16_t>(type | NLA_F_NESTED)};
    append(&a, sizeof a);
  }
  void end_nest() {
    std::size_t at = nests_.back();
    nests_.pop_back();
    uint16_t len = static_cast<uint16_t>(buf_.size() - at);
    std::memcpy(buf_.data() + at, &len, 2);
  }
  void done() {
    nlmsghdr h{};
    h.nlmsg_len = sizeof(nlmsghdr) + sizeof(int);
    h.nlmsg_type = NLMSG_DONE;
    append(&h, sizeof h);
    int zero = 0;
    append(&zero, sizeof zero);
  }
  void error(int err) {
    nlmsghdr h{};
    h.nlmsg_len = sizeof(nlmsghdr) + sizeof(nlmsgerr);
    h.nlmsg_type = NLMSG_ERROR;
    append(&h, sizeof h);
    nlmsgerr e{};
    e.error = err;
    append(&e, sizeof e);
  }
  std::vector<uint8_t>& bytes() { return buf_; }

 private:
  void append(const void* p, std::size_t n) {
    auto* b = static_cast<const uint8_t*>(p);
    buf_.insert(buf_.end(), b, b + n);
  }
  void pad() {
    while (buf_.size() % 4) buf_.push_back(0);
  }
  void patch_len32(std::size_t at, std::size_t len) {
    uint32_t l = static_cast<uint32_t>(len);
    std::memcpy(buf_.data() + at, &l, 4);
  }
  std::vector<uint8_t> buf_;
  std::size_t msg_ = 0;
  std::vector<std::size_t> nests_;
};

// One RES_QP_GET reply for device `dev`, as res_get_common_dumpit + fill_res_qp_entry write it.
inline void qp_message(NlBuilder& b, uint32_t dev_index, const std::string& dev) {
  b.begin_msg(RDMA_NLDEV_CMD_RES_QP_GET);
  b.u32(RDMA_NLDEV_ATTR_DEV_INDEX, dev_index);
  b.str(RDMA_NLDEV_ATTR_DEV_NAME, dev);
  b.begin_nest(RDMA_NLDEV_ATTR_RES_QP);
  // A user RC QP in RTS owned by pid 4242 (the kernel reports no comm for user QPs).
  b.begin_nest(RDMA_NLDEV_ATTR_RES_QP_ENTRY);
  b.u32(RDMA_NLDEV_ATTR_PORT_INDEX, 1);
  b.u32(RDMA_NLDEV_ATTR_RES_LQPN, 0x1a2);
  b.u32(RDMA_NLDEV_ATTR_RES_RQPN, 0x3b4);
  b.u32(RDMA_NLDEV_ATTR_RES_RQ_PSN, 77);
  b.u32(RDMA_NLDEV_ATTR_RES_SQ_PSN, 88);
  b.u8(RDMA_NLDEV_ATTR_RES_TYPE, 2);   // IB_QPT_RC
  b.u8(RDMA_NLDEV_ATTR_RES_STATE, 3);  // IB_QPS_RTS
  b.u32(RDMA_NLDEV_ATTR_RES_PID, 4242);
  b.end_nest();
  // The GSI QP 1 of the kernel's MAD layer.
  b.begin_nest(RDMA_NLDEV_ATTR_RES_QP_ENTRY);
  b.u32(RDMA_NLDEV_ATTR_PORT_INDEX, 1);
  b.u32(RDMA_NLDEV_ATTR_RES_LQPN, 1);
  b.u8(RDMA_NLDEV_ATTR_RES_TYPE, 1);  // IB_QPT_GSI
  b.u8(RDMA_NLDEV_ATTR_RES_STATE, 3);
  b.str(RDMA_NLDEV_ATTR_RES_KERN_NAME, "ib_core");
  b.end_nest();
  b.end_nest();
  b.end_msg();
}

inline void sockaddr_attr(NlBuilder& b, uint16_t type, const char* ip) {
  __kernel_sockaddr_storage ss{};
  if (std::strchr(ip, ':')) {
    sockaddr_in6 s6{};
    s6.sin6_family = AF_INET6;
    inet_pton(AF_INET6, ip, &s6.sin6_addr);
    std::memcpy(&ss, &s6, sizeof s6);
  } else {
    sockaddr_in s4{};
    s4.sin_family = AF_INET;
    inet_pton(AF_INET, ip, &s4.sin_addr);
    std::memcpy(&ss, &s4, sizeof s4);
  }
  b.attr(type, &ss, sizeof ss);
}

}  // namespace netprism::test
