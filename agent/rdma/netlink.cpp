#include "netlink.hpp"

#include <linux/netlink.h>
#include <netinet/in.h>
#include <rdma/rdma_netlink.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>

#include "netprism/addr.hpp"

namespace netprism::agent {
namespace {

// One netlink attribute, bounds-checked against its container.
struct Attr {
  uint16_t type = 0;
  const uint8_t* data = nullptr;
  std::size_t len = 0;
};

constexpr std::size_t align4(std::size_t n) {
  return (n + 3) & ~std::size_t{3};
}

// Walks the attributes in [p, p+len). Calls fn for each; false + err on a malformed attribute.
template <class Fn>
bool for_each_attr(const uint8_t* p, std::size_t len, std::string& err, Fn&& fn) {
  std::size_t off = 0;
  while (off + sizeof(nlattr) <= len) {
    nlattr a;
    std::memcpy(&a, p + off, sizeof a);
    if (a.nla_len < sizeof(nlattr) || off + a.nla_len > len) {
      err = "malformed netlink attribute (length " + std::to_string(a.nla_len) + " at offset " +
            std::to_string(off) + ")";
      return false;
    }
    Attr at{static_cast<uint16_t>(a.nla_type & NLA_TYPE_MASK), p + off + sizeof(nlattr),
            a.nla_len - sizeof(nlattr)};
    if (!fn(at)) return false;
    off += align4(a.nla_len);
  }
  return true;
}

bool get_u32(const Attr& a, uint32_t& v) {
  if (a.len < 4) return false;
  std::memcpy(&v, a.data, 4);
  return true;
}
bool get_u8(const Attr& a, uint8_t& v) {
  if (a.len < 1) return false;
  v = a.data[0];
  return true;
}
std::string get_str(const Attr& a) {
  std::size_t n = 0;
  while (n < a.len && a.data[n] != 0) ++n;  // NUL-terminated, but never read past the attribute
  return std::string(reinterpret_cast<const char*>(a.data), n);
}

// __kernel_sockaddr_storage: family first, then the sockaddr_in/in6 body.
std::string get_sockaddr(const Attr& a) {
  if (a.len < 2) return "";
  uint16_t fam;
  std::memcpy(&fam, a.data, 2);
  uint8_t addr[16] = {};
  if (fam == AF_INET && a.len >= sizeof(sockaddr_in)) {
    sockaddr_in sin;
    std::memcpy(&sin, a.data, sizeof sin);
    addr[10] = addr[11] = 0xff;
    std::memcpy(addr + 12, &sin.sin_addr, 4);
    return format_addr(addr);
  }
  if (fam == AF_INET6 && a.len >= sizeof(sockaddr_in6)) {
    sockaddr_in6 sin6;
    std::memcpy(&sin6, a.data, sizeof sin6);
    std::memcpy(addr, &sin6.sin6_addr, 16);
    return format_addr(addr);
  }
  return "";
}

// Walks the netlink messages of a buffer. For each message of `want_cmd` calls fn(attrs, len, err).
template <class Fn>
NlParseResult for_each_msg(const uint8_t* buf, std::size_t len, uint16_t want_cmd, Fn&& fn) {
  NlParseResult r;
  std::size_t off = 0;
  while (off + sizeof(nlmsghdr) <= len) {
    nlmsghdr h;
    std::memcpy(&h, buf + off, sizeof h);
    if (h.nlmsg_len < sizeof(nlmsghdr) || off + h.nlmsg_len > len) {
      r.error = "truncated netlink message (length " + std::to_string(h.nlmsg_len) + ")";
      return r;
    }
    const uint8_t* body = buf + off + sizeof(nlmsghdr);
    std::size_t body_len = h.nlmsg_len - sizeof(nlmsghdr);
    if (h.nlmsg_type == NLMSG_DONE) {
      r.done = true;
      return r;
    }
    if (h.nlmsg_type == NLMSG_ERROR) {
      nlmsgerr e{};
      if (body_len >= sizeof(int)) std::memcpy(&e.error, body, sizeof(int));
      if (e.error != 0) {
        // The kernel sends a negative errno (-1..-4095, the range the kernel's IS_ERR_VALUE reserves).
        // Anything else comes from a broken or hostile peer: name its number, never negate it (INT_MIN).
        bool errno_like = e.error < 0 && e.error > -4096;
        r.error = errno_like ? std::string("RDMA netlink: ") + std::strerror(-e.error)
                             : "RDMA netlink: error code " + std::to_string(e.error) + " is not an errno";
        return r;
      }
    } else if (h.nlmsg_type == RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, want_cmd)) {
      if (!fn(body, body_len, r.error)) return r;
    }
    // Other message types (none expected on this socket) are skipped, not misread.
    off += align4(h.nlmsg_len);
  }
  if (off != len && off < len) r.error = "trailing bytes after the last netlink message";
  return r;
}

struct DevAttrs {
  uint32_t index = 0;
  std::string name;
};

}  // namespace

std::string qp_type_name(uint8_t t) {
  // enum ib_qp_type (include/rdma/ib_verbs.h); names as the rdma tool prints them.
  switch (t) {
    case 0:
      return "SMI";
    case 1:
      return "GSI";
    case 2:
      return "RC";
    case 3:
      return "UC";
    case 4:
      return "UD";
    case 5:
      return "RAW_IPV6";
    case 6:
      return "RAW_ETHERTYPE";
    case 8:
      return "RAW_PACKET";
    case 9:
      return "XRC_INI";
    case 10:
      return "XRC_TGT";
    case 0xff:
      return "DRIVER";
  }
  return "TYPE_" + std::to_string(t);
}

std::string qp_state_name(uint8_t s) {
  static const char* names[] = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"};  // enum ib_qp_state
  return s < 7 ? names[s] : "STATE_" + std::to_string(s);
}

NlParseResult parse_dev_messages(const uint8_t* buf, std::size_t len, std::vector<RdmaDevice>& out) {
  return for_each_msg(buf, len, RDMA_NLDEV_CMD_GET, [&](const uint8_t* p, std::size_t n, std::string& err) {
    RdmaDevice d;
    bool have_index = false;
    bool ok = for_each_attr(p, n, err, [&](const Attr& a) {
      if (a.type == RDMA_NLDEV_ATTR_DEV_INDEX) have_index = get_u32(a, d.index);
      if (a.type == RDMA_NLDEV_ATTR_DEV_NAME) d.name = get_str(a);
      return true;
    });
    if (ok && have_index) out.push_back(d);
    return ok;
  });
}

NlParseResult parse_qp_messages(const uint8_t* buf, std::size_t len, std::vector<QpEntry>& out) {
  return for_each_msg(
      buf, len, RDMA_NLDEV_CMD_RES_QP_GET, [&](const uint8_t* p, std::size_t n, std::string& err) {
        DevAttrs dev;
        uint32_t msg_port = 0;
        std::vector<QpEntry> found;
        auto entry = [&](const Attr& e) {
          QpEntry q;
          q.port = msg_port;
          bool ok = for_each_attr(e.data, e.len, err, [&](const Attr& a) {
            uint8_t u8 = 0;
            switch (a.type) {
              case RDMA_NLDEV_ATTR_PORT_INDEX:
                get_u32(a, q.port);
                break;
              case RDMA_NLDEV_ATTR_RES_LQPN:
                get_u32(a, q.lqpn);
                break;
              case RDMA_NLDEV_ATTR_RES_RQPN:
                get_u32(a, q.rqpn);
                break;
              case RDMA_NLDEV_ATTR_RES_SQ_PSN:
                get_u32(a, q.sq_psn);
                break;
              case RDMA_NLDEV_ATTR_RES_RQ_PSN:
                get_u32(a, q.rq_psn);
                break;
              case RDMA_NLDEV_ATTR_RES_TYPE:
                if (get_u8(a, u8)) q.type = qp_type_name(u8);
                break;
              case RDMA_NLDEV_ATTR_RES_STATE:
                if (get_u8(a, u8)) q.state = qp_state_name(u8);
                break;
              case RDMA_NLDEV_ATTR_RES_PID:
                get_u32(a, q.pid);
                break;
              case RDMA_NLDEV_ATTR_RES_KERN_NAME:
                q.comm = get_str(a);  // a kernel consumer, shown bracketed like ps does
                q.comm.insert(q.comm.begin(), '[');
                q.comm.push_back(']');
                break;
              default:
                break;
            }
            return true;
          });
          if (ok) found.push_back(q);
          return ok;
        };
        bool ok = for_each_attr(p, n, err, [&](const Attr& a) {
          switch (a.type) {
            case RDMA_NLDEV_ATTR_DEV_INDEX:
              get_u32(a, dev.index);
              return true;
            case RDMA_NLDEV_ATTR_DEV_NAME:
              dev.name = get_str(a);
              return true;
            case RDMA_NLDEV_ATTR_PORT_INDEX:
              get_u32(a, msg_port);
              return true;
            case RDMA_NLDEV_ATTR_RES_QP:  // the table: nested RES_QP_ENTRY items
              return for_each_attr(a.data, a.len, err, [&](const Attr& e) {
                return e.type == RDMA_NLDEV_ATTR_RES_QP_ENTRY ? entry(e) : true;
              });
            case RDMA_NLDEV_ATTR_RES_QP_ENTRY:  // some kernels put one entry per message at the top level
              return entry(a);
            default:
              return true;
          }
        });
        for (auto& q : found) q.device = dev.name;
        out.insert(out.end(), found.begin(), found.end());
        return ok;
      });
}

NlParseResult parse_cm_id_messages(const uint8_t* buf, std::size_t len, std::vector<CmIdEntry>& out) {
  return for_each_msg(buf, len, RDMA_NLDEV_CMD_RES_CM_ID_GET,
                      [&](const uint8_t* p, std::size_t n, std::string& err) {
                        std::string dev;
                        std::vector<CmIdEntry> found;
                        auto entry = [&](const Attr& e) {
                          CmIdEntry c;
                          bool ok = for_each_attr(e.data, e.len, err, [&](const Attr& a) {
                            if (a.type == RDMA_NLDEV_ATTR_PORT_INDEX) get_u32(a, c.port);
                            if (a.type == RDMA_NLDEV_ATTR_RES_LQPN) get_u32(a, c.lqpn);
                            if (a.type == RDMA_NLDEV_ATTR_RES_SRC_ADDR) c.src_addr = get_sockaddr(a);
                            if (a.type == RDMA_NLDEV_ATTR_RES_DST_ADDR) c.dst_addr = get_sockaddr(a);
                            return true;
                          });
                          if (ok) found.push_back(c);
                          return ok;
                        };
                        bool ok = for_each_attr(p, n, err, [&](const Attr& a) {
                          if (a.type == RDMA_NLDEV_ATTR_DEV_NAME) dev = get_str(a);
                          if (a.type == RDMA_NLDEV_ATTR_RES_CM_ID)
                            return for_each_attr(a.data, a.len, err, [&](const Attr& e) {
                              return e.type == RDMA_NLDEV_ATTR_RES_CM_ID_ENTRY ? entry(e) : true;
                            });
                          if (a.type == RDMA_NLDEV_ATTR_RES_CM_ID_ENTRY) return entry(a);
                          return true;
                        });
                        for (auto& c : found) c.device = dev;
                        out.insert(out.end(), found.begin(), found.end());
                        return ok;
                      });
}

void complete_qp_table(std::vector<QpEntry>& qps, const std::vector<CmIdEntry>& cm,
                       const std::function<std::string(uint32_t)>& comm_of) {
  std::map<std::pair<std::string, uint32_t>, const CmIdEntry*> by_qpn;
  for (const auto& c : cm)
    if (c.lqpn) by_qpn[{c.device, c.lqpn}] = &c;
  for (auto& q : qps) {
    if (auto it = by_qpn.find({q.device, q.lqpn}); it != by_qpn.end()) {
      q.src_addr = it->second->src_addr;
      q.dst_addr = it->second->dst_addr;
    }
    if (q.comm.empty() && q.pid && comm_of) q.comm = comm_of(q.pid);
  }
}

namespace {

// RAII netlink socket for one dump conversation.
class NlSocket {
 public:
  NlSocket() : fd_(::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_RDMA)) {}
  ~NlSocket() {
    if (fd_ >= 0) ::close(fd_);
  }
  NlSocket(const NlSocket&) = delete;
  NlSocket& operator=(const NlSocket&) = delete;
  int fd() const { return fd_; }

  // Sends a dump request (optionally for one device) and feeds every reply buffer to parse until DONE.
  template <class Parse>
  bool dump(uint16_t cmd, const uint32_t* dev_index, Parse&& parse, std::string& err) {
    struct {
      nlmsghdr h;
      nlattr a;
      uint32_t idx;
    } req{};
    req.h.nlmsg_len = sizeof(nlmsghdr) + (dev_index ? sizeof(nlattr) + sizeof(uint32_t) : 0);
    req.h.nlmsg_type = RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, cmd);
    req.h.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
    req.h.nlmsg_seq = ++seq_;
    if (dev_index) {
      req.a.nla_len = sizeof(nlattr) + sizeof(uint32_t);
      req.a.nla_type = RDMA_NLDEV_ATTR_DEV_INDEX;
      req.idx = *dev_index;
    }
    sockaddr_nl to{};
    to.nl_family = AF_NETLINK;
    if (::sendto(fd_, &req, req.h.nlmsg_len, 0, reinterpret_cast<sockaddr*>(&to), sizeof to) < 0) {
      err = std::string("RDMA netlink send: ") + std::strerror(errno);
      return false;
    }
    std::vector<uint8_t> buf(1 << 16);
    for (;;) {
      ssize_t n = ::recv(fd_, buf.data(), buf.size(), 0);
      if (n < 0) {
        if (errno == EINTR) continue;
        err = std::string("RDMA netlink recv: ") + std::strerror(errno);
        return false;
      }
      NlParseResult r = parse(buf.data(), static_cast<std::size_t>(n));
      if (!r) {
        err = r.error;
        return false;
      }
      if (r.done || n == 0) return true;
    }
  }

 private:
  int fd_;
  uint32_t seq_ = 0;
};

std::string proc_comm(uint32_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/comm");
  std::string s;
  std::getline(f, s);
  return s;
}

}  // namespace

bool read_qp_table(std::vector<QpEntry>& out, std::string& err) {
  NlSocket s;
  if (s.fd() < 0) {
    err = std::string("RDMA netlink unavailable: ") + std::strerror(errno);
    return false;
  }
  // A receive timeout keeps a misbehaving kernel from stalling the agent's loop.
  timeval tv{1, 0};
  ::setsockopt(s.fd(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::vector<RdmaDevice> devs;
  if (!s.dump(
          RDMA_NLDEV_CMD_GET, nullptr,
          [&](const uint8_t* b, std::size_t n) { return parse_dev_messages(b, n, devs); }, err))
    return false;
  std::vector<QpEntry> qps;
  std::vector<CmIdEntry> cm;
  for (const auto& d : devs) {
    if (!s.dump(
            RDMA_NLDEV_CMD_RES_QP_GET, &d.index,
            [&](const uint8_t* b, std::size_t n) { return parse_qp_messages(b, n, qps); }, err))
      return false;
    std::string cm_err;  // the CM table is optional (no rdma_cm users): addresses stay empty then
    s.dump(
        RDMA_NLDEV_CMD_RES_CM_ID_GET, &d.index,
        [&](const uint8_t* b, std::size_t n) { return parse_cm_id_messages(b, n, cm); }, cm_err);
  }
  complete_qp_table(qps, cm, proc_comm);
  out = std::move(qps);
  return true;
}

}  // namespace netprism::agent
