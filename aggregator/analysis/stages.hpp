// Internal records and stage functions of the analysis pipeline. Each stage is a pure function from the
// previous stage's records to its own, so the unit tests drive them one by one on synthetic data.
//
//   normalize (node mapping, observer dedupe, data/ACK split)
//     -> job_grouping (training-connection filter, time-aware union-find)
//     -> parallelism (edge roles, DP groups, pipeline order)
//     -> timeline (iteration boundaries, per-node phases)
//     -> diagnosis (straggler, slow_link, slow_iteration, hang) and job state
//
// Debug output (each DP group's synchronisation detection, each job's transfers and arrivals with the stages
// of their ends) goes through debug_log.hpp: NP_ANALYSIS_DEBUG=1 / NP_ANALYSIS_DUMP=PREFIX when the binary
// starts, or a sink the binary installs. (parallelism.cpp still prints each edge's role evidence to stderr
// under NP_ANALYSIS_DEBUG itself.)
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "analysis.hpp"
#include "stats.hpp"

namespace netprism::analysis {

// Flow and connection keys over interned strings (addresses, observers; normalize() and the streaming
// engine share them): one hash lookup per string per event, then small
// fixed-size keys, so a fleet's worth of events (millions) normalizes in about a second.
struct FlowKey {
  uint32_t src, dst;
  uint16_t sport, dport;
  uint32_t qpn;
  uint8_t proto;
  bool operator==(const FlowKey&) const = default;
};
// Both directions of a connection share one key: endpoints in a fixed order, QPN left out (RoCE names the
// destination QP, which differs per direction).
struct ConnKey {
  uint32_t a, b;
  uint16_t pa, pb;
  uint8_t proto;
  bool operator==(const ConnKey&) const = default;
};
struct KeyHash {
  static uint64_t mix(uint64_t h, uint64_t v) { return (h ^ v) * 0x100000001b3ull + (h >> 29); }
  size_t operator()(const FlowKey& k) const {
    uint64_t h = 1469598103934665603ull;
    for (uint64_t v : {uint64_t{k.src}, uint64_t{k.dst}, uint64_t{k.sport}, uint64_t{k.dport},
                       uint64_t{k.qpn}, uint64_t{k.proto}})
      h = mix(h, v);
    return h;
  }
  size_t operator()(const ConnKey& k) const {
    uint64_t h = 1469598103934665603ull;
    for (uint64_t v : {uint64_t{k.a}, uint64_t{k.b}, uint64_t{k.pa}, uint64_t{k.pb}, uint64_t{k.proto}})
      h = mix(h, v);
    return h;
  }
};

// Data bytes of one event: its payload when the observer counted it; for an agent flowlet without payload
// (dir known) none (pure ACKs / handshakes); for a CSV row without payload counts its IP bytes, unless they
// fit pure ACKs. The ACK ceiling per packet is the largest header of a pure ACK: 20 (IPv4) or 40 (IPv6) bytes
// of IP plus 60 of TCP with every option (timestamps, SACK blocks). Anything above carries payload, even a
// few bytes: small messages matter too (a collective's "ready to receive" notification tells when a member
// joined). normalize() and the streaming engine share it, so live and offline agree.
inline uint64_t data_bytes(uint64_t payload_bytes, int8_t dir, bool v6, uint64_t packets, uint64_t bytes) {
  constexpr uint64_t kAckOnlyBytesPerPacketV4 = 80;
  constexpr uint64_t kAckOnlyBytesPerPacketV6 = 100;
  if (payload_bytes > 0) return payload_bytes;
  if (dir >= 0) return 0;
  uint64_t hdr = v6 ? kAckOnlyBytesPerPacketV6 : kAckOnlyBytesPerPacketV4;
  if (packets > 0 && bytes <= packets * hdr) return 0;
  return bytes;
}

// One data-carrying transfer (flowlet / CSV row) after node mapping and observer dedupe.
struct Xfer {
  uint32_t src = 0;   // node index
  uint32_t dst = 0;   // node index
  uint32_t conn = 0;  // connection index (both directions of one 5-tuple share it)
  // Packets the record counted (0: not known, as for CSV rows). With t0/t1 it tells a message or burst
  // from a flow exporter's record that spans quiet gaps (see coarse()).
  uint32_t packets = 0;
  uint64_t t0 = 0;
  uint64_t t1 = 0;
  uint64_t bytes = 0;
};

// An event's packet count as Xfer keeps it, for coarse(): saturating (a record of 4 billion packets is coarse
// anyway), and 0 for a transfer made from RDMA port counters, whose count is a counter delta over a sampling
// interval, not a record's packet train. normalize() and the streaming engine share it.
// A 1:N packet sample (sFlow) is one packet taken anywhere in its window (first_ns..last_ns: the agent's
// flush interval, flowin/sflow.cpp): as far as timing goes, a train of two packets at the window's ends.
inline uint32_t record_packets(const EventFields& e) {
  if (e.from_counters) return 0;
  if (e.sampled_1_in > 0) return 2;
  return e.packets > UINT32_MAX ? UINT32_MAX : static_cast<uint32_t>(e.packets);
}

// Quiet gap that separates episodes of one edge: longer than the spacing of packets and chunks inside one
// message or one all-reduce (sub-millisecond to a few ms), shorter than any compute between messages.
inline constexpr uint64_t kEpisodeGapNs = 5'000'000;

// Episodes of time-sorted transfers: runs split where a transfer starts more than kEpisodeGapNs after every
// earlier one ended. Each with the index of its first transfer, its end and its bytes (parallelism.cpp).
struct Episode {
  size_t first = 0;
  uint64_t end = 0;
  double bytes = 0;
};
std::vector<Episode> episodes_of(const std::vector<const Xfer*>& xs);
// The causality balance of orientation u of an edge's time-sorted transfers and their episodes_of()
// (edge_balance.cpp): the share of the edge's time it is below -eps, and how many times it went below -eps
// and above eps.
struct EdgeBalance {
  double negative_share = 0;
  size_t below = 0, above = 0;
  // Rises from below -eps to above eps at one transfer: u sent, in one message, more than it owed (see
  // parallelism.cpp, kSampledCrossShare).
  size_t crossing_above = 0;
};
EdgeBalance edge_balance(const std::vector<const Xfer*>& xs, const std::vector<Episode>& episodes, uint32_t u,
                         double eps);
// Volume drift of an edge's time-sorted transfers and their episodes_of() (edge_drift.cpp): |per-byte excess
// of u's direction over the other's|, what is in flight at the window's ends averaged out; ~0 for a pipeline.
double drift_share(const std::vector<const Xfer*>& xs, const std::vector<Episode>& episodes, uint32_t u);
// Whether that drift rules out a pipeline edge (one direction carries more than the other every iteration).
bool volume_drifts(const std::vector<const Xfer*>& xs, const std::vector<Episode>& episodes, uint32_t u);

// Flow exporters' coarse records (coarse_records.cpp). coarse(): the record spans quiet gaps (its packets
// are spaced wider than kEpisodeGapNs on average), so it carries no message order.
bool coarse(const Xfer& x);

// One connection (undirected 5-tuple) with its totals; a < b by node index, or by address on ties.
struct Conn {
  uint32_t a = 0;  // node index
  uint32_t b = 0;
  uint64_t bytes_ab = 0;
  uint64_t bytes_ba = 0;
  uint64_t xfers = 0;
  uint64_t first_ns = UINT64_MAX;  // any packet, data or not
  uint64_t last_ns = 0;
  bool closed = false;         // FIN or RST seen in either direction by any observer
  uint32_t sampled_1_in = 0;   // its events are 1:N packet samples: the largest N (0: every packet seen)
  bool from_counters = false;  // its transfers were made from RDMA port counters (counters_source.cpp)
  uint16_t counters_interval_ms = 0;  // and the largest sampling interval of their series (EventFields)
  std::string label;                  // "src:port<->dst:port" for evidence text
  // The endpoint pair regardless of ports: interned address ids in ConnKey order, and the protocol. The
  // short connections of one pair (one record per message: a QP or source port per RDMA message, NCCL's
  // several QPs per peer) are one grouping unit (see job_grouping.cpp).
  uint32_t addr_a = 0, addr_b = 0;
  uint8_t proto = 0;
};

// A connection's totals taken from one of its events: normalize()'s Conn and the streaming engine's own
// connection record carry the same fields, and both fold every event in alike.
template <class C>
void add_to_conn(C& c, const EventFields& e) {
  constexpr uint16_t kFinOrRst = 0x01 | 0x04;
  c.first_ns = std::min(c.first_ns, e.first_ns);
  c.last_ns = std::max(c.last_ns, e.last_ns);
  if (e.tcp_flags & kFinOrRst) c.closed = true;
  if (e.from_counters) c.from_counters = true;
  c.counters_interval_ms = std::max(c.counters_interval_ms, e.counters_interval_ms);
  c.sampled_1_in = std::max(c.sampled_1_in, e.sampled_1_in);
}

struct Normalized {
  std::vector<std::string> nodes;  // index -> name
  std::vector<Conn> conns;
  std::vector<Xfer> xfers;  // sorted by t0
  // The receiver's own view (agents' ingress) of directions whose transfers come from the sender's view:
  // when the data arrived, which is later than when it left on a shaped or congested link. Kept apart from
  // `xfers` (volumes and causality use one view per direction); used for when a synchronisation ended at
  // its receiving members. Empty for sender-only captures (CSV). Sorted by t0.
  std::vector<Xfer> arrivals;
  uint64_t now_ns = 0;
  bool offline = false;
};

// Node mapping, observer dedupe (one observer per flow direction: the sender's own egress view when it
// exists), data vs. pure-ACK split. Never drops an event silently: events with no data still count in their
// connection's first/last/closed.
Normalized normalize(const Input& in);

// A job candidate: its connections (training only), nodes and transfers.
struct JobSlice {
  std::vector<uint32_t> nodes;  // node indices, sorted by name
  std::vector<uint32_t> conns;  // training connections
  // Aligned with conns: the connection that stands for each one's grouping unit (itself for a long-lived
  // connection; one connection of the pool for the short connections of one endpoint pair). Transfers carry
  // it as their `conn`, so "one connection per rank pair" holds for message-per-record data as well.
  std::vector<uint32_t> unit;
  std::vector<Xfer> xfers;     // transfers on those connections, sorted by t0
  std::vector<Xfer> arrivals;  // the receivers' views of those transfers where seen (Normalized::arrivals)
  uint64_t first_ns = 0;
  uint64_t last_ns = 0;
  // Empty, unless another job on the same nodes started in the same millisecond (tenants of shared servers
  // started together, as a simulator starts every job at 0): then the job's smallest address, which its id
  // hashes too (see salt_shared_ids).
  std::string id_salt;
};

// Grouping unit of every connection (see job_grouping.cpp): the index of the connection standing for it.
std::vector<uint32_t> grouping_units(const Normalized& n);
// True when a connection carries training traffic by volume (see job_grouping.cpp for the thresholds).
std::vector<bool> training_connections(const Normalized& n);
// Time intervals [start, end] in ns.
using Intervals = std::vector<std::pair<uint64_t, uint64_t>>;
// Appends the [t0, t1] of every transfer of connection `conn` (index into Normalized::conns) that ends at or
// after from_ns to `out`. The streaming engine, whose connection table carries no transfers, hands
// group_jobs() its own.
using ConnActivity = std::function<void(uint32_t conn, uint64_t from_ns, Intervals& out)>;
// Without `activity`, the transfers are read from n.xfers.
std::vector<JobSlice> group_jobs(const Normalized& n, const ConnActivity& activity = {});
// Bursts of activity (intervals closer than 1 ms merged), sorted; and the phi coefficient of two such
// activities over the time both are seen, its last max_window_ns at most (1: busy and idle together; 0:
// independent). activity_coupling.cpp.
Intervals busy_intervals(Intervals xs);
double activity_coupling(const Intervals& xs, const Intervals& ys, uint64_t max_window_ns);
// Sets id_salt of the jobs that would otherwise share an id (same nodes, same first millisecond); clears the
// others'. group_jobs() calls it; a caller that changes first_ns afterwards calls it again.
void salt_shared_ids(const Normalized& n, std::vector<JobSlice>& jobs);
std::string job_id(const std::vector<std::string>& sorted_nodes, uint64_t first_ns,
                   const std::string& salt = "");

// Node-level undirected edge of a job with its role.
enum class EdgeRole { dp, pp };
struct Edge {
  uint32_t u = 0, v = 0;  // node indices; for pp edges u is upstream (closer to the first stage)
  EdgeRole role = EdgeRole::dp;
  uint64_t bytes_uv = 0, bytes_vu = 0;
};

struct Structure {
  std::vector<Edge> edges;
  std::vector<std::vector<uint32_t>> dp_groups;  // node indices, each group sorted
  std::vector<std::vector<uint32_t>> stages;     // first stage first
  std::vector<int> stage_of;                     // per node index (-1: not in job)
  std::vector<int> group_of;                     // per node index: dp group or -1
  int ep = 0;  // expert-parallel group size when an all-to-all pattern is seen among DP peers, else 0
  // Tensor parallelism across servers (parallelism.cpp): the groups of nodes whose frequent small
  // collectives run inside every micro-batch's compute; empty when TP stays inside the servers.
  std::vector<std::vector<uint32_t>> tp_groups;
  // Two-way edges whose records were too coarse to order messages (flow exporters' records spanning quiet
  // gaps): their roles came from volume, and the order of stages joined only by them is not known.
  size_t coarse_edges = 0;
};
Structure infer_structure(const Normalized& n, const JobSlice& job);
// Per node (index), the ends of its synchronisations: its heavy episodes among fine (not coarse())
// transfers, in time order.
std::vector<std::vector<uint64_t>> heavy_episode_ends(const JobSlice& job, size_t N);
// Which of two neighbours' synchronisations follow the other's closely, in [-1, 1]: > 0 when u's follow
// v's (u upstream in a pipeline, see parallelism.cpp), 0 when unknown.
double sync_order(const std::vector<uint64_t>& ends_u, const std::vector<uint64_t>& ends_v);
// When the transfers the timeline rests on (the DP edges', or the pipeline's without DP) come mostly in
// coarse() records: their bytes-weighted median duration, the resolution of the job's iteration times;
// 0 otherwise.
double coarse_resolution_ns(const JobSlice& job, const Structure& s);
// The step of a job whose iteration times rest on coarse records (resolution_ns > 0): the slope of its
// iteration ends against their numbers; else, or with fewer than three ends, `measured_ns`
// (coarse_records.cpp).
double coarse_step_ns(const std::vector<Iteration>& its, double resolution_ns, double measured_ns);

// Iteration boundaries plus per-node phases of each iteration.
struct Timeline {
  std::vector<uint64_t> boundaries;  // iteration i = [boundaries[i], boundaries[i+1]]
  // Per boundary: the time from which the transfers of the iteration that begins there were used. The
  // boundary itself, except for pipelines without DP, whose boundary is the end of the first stage's first
  // activation (started earlier): there the drain before it. An analysis of the data from this time on
  // (the daemon's tail) sees that iteration whole.
  std::vector<uint64_t> data_from;
  double step_ns = 0;  // median iteration duration
  // Per iteration, per dp group: join time of each member (first DP send), sync end; 0 = not seen.
  struct GroupSync {
    std::vector<uint64_t> join;  // aligned with Structure::dp_groups[g]
    uint64_t start = 0, end = 0;
  };
  std::vector<std::vector<GroupSync>> syncs;  // [iteration][group]
};
// The iteration ends among a DP group's synchronisation ends (iteration_volume.cpp): all of them when each
// iteration synchronises once; with bucketed synchronisations overlapping the backward pass, the ones after
// which the same gradient volume has been synchronised again. xs: the group's DP transfers, sorted by t0.
std::vector<uint64_t> iteration_ends(const std::vector<const Xfer*>& xs, const std::vector<uint64_t>& ends);
// Ends of each iteration's synchronisation of DP group `group` (index into Structure::dp_groups), in time
// order.
std::vector<uint64_t> sync_ends(const JobSlice& job, const Structure& s, int group);
Timeline build_timeline(const Normalized& n, const JobSlice& job, const Structure& s);

// Phases of every node per iteration (pipeline window, DP sync window), for export and diagnosis.
std::vector<Phase> node_phases(const Normalized& n, const JobSlice& job, const Structure& s,
                               const Timeline& t, size_t iteration);

// The `parallelism` document of a job and its iterations (with phases and bubble share) from the stages
// records: shared by analyze() and the daemon's streaming analysis (incremental.hpp), so both report alike.
Parallelism parallelism_of(const Normalized& n, const JobSlice& slice, const Structure& s);
std::vector<Iteration> iterations_of(const Normalized& n, const JobSlice& slice, const Structure& s,
                                     const Timeline& t);

std::vector<Finding> diagnose(const Normalized& n, const JobSlice& job, const Structure& s, const Timeline& t,
                              const std::vector<Iteration>& its, const std::string& state, uint64_t now_ns,
                              const std::string& job_id);

// One direction between two nodes of a job as the slow-link step measured it (diagnosis_link.cpp): onset -1
// when it never ran below its threshold for the consecutive iterations a slow link needs; ratio: its median
// rate over its comparable links' (from the onset on, or over every measured iteration).
struct DirectionState {
  std::string src, dst;  // node names
  int onset = -1;
  size_t measured = 0;  // iterations from the warm-up on with a rate and a reference
  double ratio = 1;
  uint64_t start_ns = 0;              // the onset iteration's start
  std::vector<uint64_t> measured_at;  // start times of the measured iterations
};
struct JobDirections {
  std::string job_id;
  std::vector<DirectionState> dirs;
};
std::vector<DirectionState> direction_states(const Normalized& n, const JobSlice& job, const Structure& s,
                                             const Timeline& t, size_t iters);

// Fabric diagnosis (diagnosis_fabric.cpp): per job (aligned with `jobs`), the `fabric` findings of the
// fabric links or switches that the slow directions of every job crossing them explain (tomography over the
// jobs' traffic, with the topology file's links and paths).
std::vector<std::vector<Finding>> fabric_findings(const Fabric& f, const std::vector<JobDirections>& jobs);
std::string job_state(const Normalized& n, const JobSlice& job, double step_ns, size_t iterations);

}  // namespace netprism::analysis
