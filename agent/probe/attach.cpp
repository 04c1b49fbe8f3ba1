// Attaching the probe: tc clsact ingress+egress filters (libbpf 1.1 bpf_tc_* API, no tcx) or XDP ingress.
// Rules: never replace or remove a program this probe did not install; replace what a previous (crashed)
// netprism run left behind, recognised by program name at our fixed tc slot or as the interface's XDP
// program.
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/if_link.h>
#include <net/if.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "netprism/fd.hpp"
#include "probe_impl.hpp"

namespace netprism::agent {
namespace {

std::string errstr(int e) {
  return std::strerror(e < 0 ? -e : e);
}

const char* point_name(bpf_tc_attach_point p) {
  return p == BPF_TC_INGRESS ? "ingress" : "egress";
}

}  // namespace

uint32_t prog_id_of(int prog_fd) {
  bpf_prog_info info{};
  uint32_t len = sizeof info;
  if (bpf_obj_get_info_by_fd(prog_fd, &info, &len) != 0) return 0;
  return info.id;
}

std::string prog_name_of_id(uint32_t id) {
  Fd fd(bpf_prog_get_fd_by_id(id));
  if (fd.get() < 0) return {};
  bpf_prog_info info{};
  uint32_t len = sizeof info;
  if (bpf_obj_get_info_by_fd(fd.get(), &info, &len) != 0) return {};
  return std::string(info.name, strnlen(info.name, sizeof info.name));
}

namespace {

void tc_detach_one(const TcAttachment& a) {
  LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = a.ifindex, .attach_point = a.point);
  LIBBPF_OPTS(bpf_tc_opts, q, .handle = kTcHandle, .priority = kTcPriority);
  // Only remove the filter if it still runs our program: someone may have replaced it since.
  if (bpf_tc_query(&hook, &q) != 0 || q.prog_id != a.prog_id) return;
  LIBBPF_OPTS(bpf_tc_opts, d, .handle = kTcHandle, .priority = kTcPriority);
  bpf_tc_detach(&hook, &d);
  // The clsact qdisc stays: destroying it would remove every other tool's filters too.
}

void xdp_detach_one(const XdpAttachment& a, int our_fd) {
  // XDP_FLAGS_REPLACE + old_prog_fd: the kernel detaches only if our program is still the attached one.
  LIBBPF_OPTS(bpf_xdp_attach_opts, o, .old_prog_fd = our_fd);
  bpf_xdp_detach(a.ifindex, a.flags | XDP_FLAGS_REPLACE, &o);
}

}  // namespace

bool Probe::attach(const std::string& ifname, AttachMode mode, std::string& err) {
  QuietLibbpf quiet;  // "no filter here" / "qdisc exists" are expected answers, not news for stderr
  int ifindex = static_cast<int>(if_nametoindex(ifname.c_str()));
  if (ifindex == 0) {
    err = "no interface named '" + ifname + "'";
    return false;
  }
  auto& s = *impl_->skel;
  if (mode == AttachMode::kXdp) {
    int fd = bpf_program__fd(s.progs.np_xdp);
    uint32_t cur = 0;
    if (int r = bpf_xdp_query_id(ifindex, 0, &cur); r != 0) {
      err = "cannot query XDP on " + ifname + ": " + errstr(r);
      return false;
    }
    int r;
    if (cur != 0) {
      std::string name = prog_name_of_id(cur);
      if (name != bpf_program__name(s.progs.np_xdp)) {
        err = "XDP program '" + name + "' (id " + std::to_string(cur) + ") already attached to " + ifname +
              "; refusing to replace it (use --mode tc, or detach it)";
        return false;
      }
      // Our own program from an earlier run: replace it atomically, and only if it is still that one.
      Fd old(bpf_prog_get_fd_by_id(cur));
      LIBBPF_OPTS(bpf_xdp_attach_opts, o, .old_prog_fd = old.get());
      r = bpf_xdp_attach(ifindex, fd, XDP_FLAGS_REPLACE, &o);
    } else {
      // UPDATE_IF_NOEXIST: if another program appeared since the query, the kernel refuses (EBUSY).
      r = bpf_xdp_attach(ifindex, fd, XDP_FLAGS_UPDATE_IF_NOEXIST, nullptr);
    }
    if (r != 0) {
      err = "cannot attach XDP to " + ifname + ": " + errstr(r);
      return false;
    }
    impl_->xdp.push_back({ifindex, 0, prog_id_of(fd)});
    return true;
  }

  LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = ifindex, .attach_point = BPF_TC_INGRESS);
  hook.attach_point = static_cast<bpf_tc_attach_point>(BPF_TC_INGRESS | BPF_TC_EGRESS);
  int r = bpf_tc_hook_create(&hook);
  bool created = r == 0;
  if (r != 0 && r != -EEXIST) {
    err = "cannot create the clsact qdisc on " + ifname + ": " + errstr(r);
    return false;
  }
  std::vector<TcAttachment> done;
  for (auto [point, prog] :
       {std::pair{BPF_TC_INGRESS, s.progs.np_tc_ingress}, std::pair{BPF_TC_EGRESS, s.progs.np_tc_egress}}) {
    hook.attach_point = point;
    LIBBPF_OPTS(bpf_tc_opts, q, .handle = kTcHandle, .priority = kTcPriority);
    uint32_t flags = 0;
    r = bpf_tc_query(&hook, &q);
    if (r == 0) {
      std::string name = prog_name_of_id(q.prog_id);
      if (name != bpf_program__name(prog)) {
        err = std::string("tc ") + point_name(point) + " filter handle 0x4e50 prio 0xff4e on " + ifname +
              " runs '" + name + "', not netprism's; refusing to replace it";
        for (const auto& a : done) tc_detach_one(a);
        return false;
      }
      flags = BPF_TC_F_REPLACE;  // a stale filter of ours
    } else if (r != -ENOENT && r != -EINVAL) {
      err = std::string("cannot query tc ") + point_name(point) + " filters on " + ifname + ": " + errstr(r);
      for (const auto& a : done) tc_detach_one(a);
      return false;
    }
    LIBBPF_OPTS(bpf_tc_opts, o, .prog_fd = bpf_program__fd(prog), .flags = flags, .handle = kTcHandle,
                .priority = kTcPriority);
    r = bpf_tc_attach(&hook, &o);
    if (r != 0) {
      err = std::string("cannot attach tc ") + point_name(point) + " on " + ifname + ": " + errstr(r);
      for (const auto& a : done) tc_detach_one(a);
      return false;
    }
    done.push_back({ifindex, point, o.prog_id, created});
  }
  impl_->tc.insert(impl_->tc.end(), done.begin(), done.end());
  return true;
}

void Probe::detach_all() {
  if (!impl_ || !impl_->skel) return;
  QuietLibbpf quiet;
  for (const auto& a : impl_->tc) tc_detach_one(a);
  impl_->tc.clear();
  for (const auto& a : impl_->xdp) xdp_detach_one(a, bpf_program__fd(impl_->skel->progs.np_xdp));
  impl_->xdp.clear();
}

}  // namespace netprism::agent
