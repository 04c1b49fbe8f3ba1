// The clsact qdisc on the agent's interfaces: tc filters need one, and the agent removes the one it added
// when it exits -- but only when no filter of anyone else is left on it (deleting a clsact qdisc deletes
// every filter under it). The probe attaches and detaches the filters (agent/probe); this is the qdisc
// bookkeeping around that, over rtnetlink.
#pragma once

#include <optional>
#include <string>

namespace netprism::agent {

// Whether the interface has a clsact qdisc; nullopt + err when rtnetlink cannot be asked.
std::optional<bool> has_clsact(int ifindex, std::string& err);

// Number of tc filters under the interface's clsact ingress and egress hooks.
std::optional<std::size_t> clsact_filter_count(int ifindex, std::string& err);

// Deletes the interface's clsact qdisc if no filters remain under it. Returns true when it was deleted.
bool remove_clsact_if_unused(int ifindex, std::string& err);

// Deletes the tc BPF filters under the clsact hooks whose program is named `ingress_prog` (ingress hook) or
// `egress_prog` (egress hook): filters a crashed run left behind. The names come from the filter dump
// (TCA_BPF_NAME, "name:[id]"), which needs only CAP_NET_ADMIN -- unlike reading a program by id
// (bpf_prog_get_fd_by_id needs CAP_SYS_ADMIN, which the packaged non-root unit does not have). Returns the
// number deleted; nullopt + err on a netlink failure.
std::optional<std::size_t> remove_stale_filters(int ifindex, const std::string& ingress_prog,
                                                const std::string& egress_prog, std::string& err);

}  // namespace netprism::agent
