#include "tc_qdisc.hpp"

#include <bpf/libbpf.h>
#include <linux/netlink.h>
#include <linux/pkt_cls.h>
#include <linux/pkt_sched.h>
#include <linux/rtnetlink.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <tuple>
#include <vector>

namespace netprism::agent {
namespace {

class RtSocket {
 public:
  RtSocket() : fd_(::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE)) {
    timeval tv{1, 0};  // never let a netlink hiccup stall shutdown
    if (fd_ >= 0) ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  ~RtSocket() {
    if (fd_ >= 0) ::close(fd_);
  }
  RtSocket(const RtSocket&) = delete;
  RtSocket& operator=(const RtSocket&) = delete;

  // Dumps `type` for one tcmsg filter; calls fn(tcmsg, attrs, attrs_len) for each reply of `reply_type`.
  template <class Fn>
  bool dump(uint16_t type, uint16_t reply_type, const tcmsg& filter, Fn&& fn, std::string& err) {
    if (fd_ < 0) {
      err = std::string("rtnetlink socket: ") + std::strerror(errno);
      return false;
    }
    struct {
      nlmsghdr h;
      tcmsg t;
    } req{};
    req.h.nlmsg_len = sizeof req;
    req.h.nlmsg_type = type;
    req.h.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
    req.h.nlmsg_seq = 1;
    req.t = filter;
    if (::send(fd_, &req, sizeof req, 0) < 0) {
      err = std::string("rtnetlink send: ") + std::strerror(errno);
      return false;
    }
    std::vector<char> buf(1 << 16);
    for (;;) {
      ssize_t n = ::recv(fd_, buf.data(), buf.size(), 0);
      if (n < 0) {
        if (errno == EINTR) continue;
        err = std::string("rtnetlink recv: ") + std::strerror(errno);
        return false;
      }
      int len = static_cast<int>(n);
      for (auto* h = reinterpret_cast<nlmsghdr*>(buf.data()); NLMSG_OK(h, len); h = NLMSG_NEXT(h, len)) {
        if (h->nlmsg_type == NLMSG_DONE) return true;
        if (h->nlmsg_type == NLMSG_ERROR) {
          auto* e = static_cast<nlmsgerr*>(NLMSG_DATA(h));
          if (e->error == 0) continue;
          err = std::string("rtnetlink: ") + std::strerror(-e->error);
          return false;
        }
        if (h->nlmsg_type != reply_type || h->nlmsg_len < NLMSG_LENGTH(sizeof(tcmsg))) continue;
        auto* t = static_cast<tcmsg*>(NLMSG_DATA(h));
        fn(*t, reinterpret_cast<rtattr*>(reinterpret_cast<char*>(t) + NLMSG_ALIGN(sizeof(tcmsg))),
           static_cast<int>(h->nlmsg_len - NLMSG_LENGTH(sizeof(tcmsg))));
      }
      if (n == 0) return true;
    }
  }

 private:
  int fd_;
};

}  // namespace

std::optional<bool> has_clsact(int ifindex, std::string& err) {
  RtSocket s;
  tcmsg f{};
  f.tcm_family = AF_UNSPEC;
  f.tcm_ifindex = ifindex;
  bool found = false;
  bool ok = s.dump(
      RTM_GETQDISC, RTM_NEWQDISC, f,
      [&](const tcmsg& t, rtattr* a, int len) {
        if (t.tcm_ifindex != ifindex) return;  // older kernels dump every device
        for (; RTA_OK(a, len); a = RTA_NEXT(a, len))
          if (a->rta_type == TCA_KIND &&
              std::strncmp(static_cast<const char*>(RTA_DATA(a)), "clsact", RTA_PAYLOAD(a)) == 0)
            found = true;
      },
      err);
  if (!ok) return std::nullopt;
  return found;
}

std::optional<std::size_t> clsact_filter_count(int ifindex, std::string& err) {
  std::size_t n = 0;
  for (uint32_t minor : {TC_H_MIN_INGRESS, TC_H_MIN_EGRESS}) {
    RtSocket s;
    tcmsg f{};
    f.tcm_family = AF_UNSPEC;
    f.tcm_ifindex = ifindex;
    f.tcm_parent = TC_H_MAKE(TC_H_CLSACT, minor);
    if (!s.dump(
            RTM_GETTFILTER, RTM_NEWTFILTER, f, [&](const tcmsg&, rtattr*, int) { ++n; }, err))
      return std::nullopt;
  }
  return n;
}

bool remove_clsact_if_unused(int ifindex, std::string& err) {
  auto n = clsact_filter_count(ifindex, err);
  if (!n || *n != 0) return false;
  LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = ifindex,
              .attach_point = static_cast<bpf_tc_attach_point>(BPF_TC_INGRESS | BPF_TC_EGRESS));
  if (int r = bpf_tc_hook_destroy(&hook); r != 0 && r != -ENOENT) {
    err = std::string("cannot delete the clsact qdisc: ") + std::strerror(-r);
    return false;
  }
  return true;
}

std::optional<std::size_t> remove_stale_filters(int ifindex, const std::string& ingress_prog,
                                                const std::string& egress_prog, std::string& err) {
  std::size_t removed = 0;
  for (auto [minor, point, prog] : {std::tuple{TC_H_MIN_INGRESS, BPF_TC_INGRESS, &ingress_prog},
                                    std::tuple{TC_H_MIN_EGRESS, BPF_TC_EGRESS, &egress_prog}}) {
    struct Found {
      uint32_t handle, prio;
    };
    std::vector<Found> stale;
    RtSocket s;
    tcmsg f{};
    f.tcm_family = AF_UNSPEC;
    f.tcm_ifindex = ifindex;
    f.tcm_parent = TC_H_MAKE(TC_H_CLSACT, minor);
    bool ok = s.dump(
        RTM_GETTFILTER, RTM_NEWTFILTER, f,
        [&](const tcmsg& t, rtattr* a, int len) {
          if (t.tcm_handle == 0) return;  // the filter chain's own entry, not a filter
          bool bpf = false;
          std::string name;
          for (; RTA_OK(a, len); a = RTA_NEXT(a, len)) {
            if (a->rta_type == TCA_KIND)
              bpf = std::strncmp(static_cast<const char*>(RTA_DATA(a)), "bpf", RTA_PAYLOAD(a)) == 0;
            if (a->rta_type != TCA_OPTIONS) continue;
            int olen = static_cast<int>(RTA_PAYLOAD(a));
            for (auto* o = static_cast<rtattr*>(RTA_DATA(a)); RTA_OK(o, olen); o = RTA_NEXT(o, olen))
              if (o->rta_type == TCA_BPF_NAME)
                name.assign(static_cast<const char*>(RTA_DATA(o)),
                            strnlen(static_cast<const char*>(RTA_DATA(o)), RTA_PAYLOAD(o)));
          }
          // tc names a filter's program "<name>:[<id>]" (or the object file's section for `tc ... obj`).
          if (bpf && name.rfind(*prog + ":[", 0) == 0)
            stale.push_back({t.tcm_handle, TC_H_MAJ(t.tcm_info) >> 16});
        },
        err);
    if (!ok) return std::nullopt;
    for (const auto& st : stale) {
      LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = ifindex, .attach_point = point);
      LIBBPF_OPTS(bpf_tc_opts, o, .handle = st.handle, .priority = st.prio);
      if (bpf_tc_detach(&hook, &o) == 0) ++removed;
    }
  }
  return removed;
}

}  // namespace netprism::agent
