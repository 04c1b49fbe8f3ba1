// The analysis pipeline's typed boundary: what the daemon and `netprism analyze` hand in, what comes out.
// Stages (job grouping -> parallelism -> timeline -> diagnosis) are pure functions over these types, so every
// stage runs the same live and offline and is testable from a recorded file.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "netprism/records.hpp"

namespace netprism::analysis {

// What every form of an observed event carries besides its names (observer and addresses): FlowEvent holds
// the names as text, StreamingAnalysis::Event as interned ids. One struct, so that a conversion between the
// forms (analysis/feed.hpp) copies it whole instead of listing its fields again.
struct EventFields {
  uint16_t src_port = 0;
  uint16_t dst_port = 0;
  uint32_t qpn = 0;
  uint8_t proto = 0;           // enum np_proto
  bool from_counters = false;  // made from RDMA port counters + QP table (counters_source.cpp), not observed
  int8_t dir = -1;             // enum np_direction, or -1 when unknown (CSV)
  uint16_t tcp_flags = 0;      // OR of flags seen (FIN 0x01, SYN 0x02, RST 0x04)
  // Made from RDMA port counters: the sampling interval of the series it came from (ms; 0 otherwise). A
  // transfer shorter than two of them carries no rate (see counters_source.cpp). In padding: no growth.
  uint16_t counters_interval_ms = 0;
  uint32_t sampled_1_in = 0;  // one 1:N packet sample (sFlow): N; 0 when every packet was seen
  uint64_t first_ns = 0;
  uint64_t last_ns = 0;
  uint64_t bytes = 0;
  uint64_t payload_bytes = 0;
  uint64_t packets = 0;
  bool operator==(const EventFields&) const = default;
};

// Events are queued by the thousand in the live engine: the counters' interval took padding, not room.
static_assert(sizeof(EventFields) == 64);

// One flowlet (agent) or one transfer row (CSV import), as observed.
struct FlowEvent : EventFields {
  std::string observer;  // node whose agent saw it; "" for CSV rows without a node column
  std::string src;       // textual address (dotted quad / RFC 5952)
  std::string dst;
};

// Whether a textual address (FlowEvent::src) is IPv6: RFC 5952 text has colons, a dotted quad none (an
// IPv4-mapped address prints as a dotted quad). The one test of the address family, offline and live.
inline bool is_v6(std::string_view addr) {
  return addr.find(':') != std::string_view::npos;
}

// The fabric the topology file's switch lines describe (docs/formats.md): switches, the links between nodes
// and switches, and the path a node pair's traffic takes where the file knows it. Empty without such lines.
struct Fabric {
  std::map<std::string, std::string> switches;             // switch name -> role (leaf, spine, ...)
  std::vector<std::pair<std::string, std::string>> links;  // undirected, node or switch names
  // (source node, destination node) -> the switches its traffic crosses, in order (ECMP's choice).
  std::map<std::pair<std::string, std::string>, std::vector<std::string>> paths;
  bool empty() const { return switches.empty(); }
};

// What an agent reads of RDMA traffic its probe cannot see (hardware RoCE bypasses tc/XDP): one port's
// activity burst (counter deltas; in counters-only mode one per active sampling interval, i.e. the port's
// byte series) and one row of a node's QP table with the time it was read (counters_source.cpp).
struct NodePortBurst {
  std::string node;
  RdmaPortBurst burst;
};
struct NodeQp {
  std::string node;
  uint64_t seen_ns = 0;  // when the agent read the table holding this row
  QpEntry qp;
};

struct Input {
  std::vector<FlowEvent> events;
  // RDMA counters source (empty without RDMA counters): per-port bursts, QP table rows, and per node the last
  // time its QP table was read (a QP absent from that read is gone: its connection closed).
  std::vector<NodePortBurst> rdma_bursts;
  std::vector<NodeQp> qps;
  std::map<std::string, uint64_t> qp_read_ns;
  std::map<std::string, std::string> addr_node;  // address -> node name (agent HELLOs or a topology file)
  Fabric fabric;                                 // the topology file's switch lines (fabric diagnosis)
  uint64_t now_ns = 0;  // "now" for live state (hung/idle); offline: the last event's time
  // A recording (CSV import, stored file) rather than a live feed: how long the capture went on after its
  // last packet is unknown, so a job whose traffic stops without tearing its connections down is taken
  // for hung rather than measured against now_ns.
  bool offline = false;
};

// A window of one node's activity inside an iteration: "pipeline" (its first to last pipeline transfer),
// "dp_sync" (its first DP send to the end of its group's synchronisation), "compute" (gaps between them).
struct Phase {
  std::string node;
  std::string name;
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
};

// An iteration's per-node phases, immutable once made and shared by every copy of the iteration. The live
// aggregator holds a job's iterations in the engine's history, in each pass' result and in the snapshot
// queries read; each copied the phases (up to kMaxPhases, ~80 B each, per job), and in a 30-minute target
// run those copies were most of its memory, growing with the ended and hung jobs the window still held.
class Phases {
 public:
  Phases() = default;
  Phases(std::vector<Phase> v)  // NOLINT(google-explicit-constructor): assigned from node_phases()
      : p_(v.empty() ? nullptr : std::make_shared<const std::vector<Phase>>(std::move(v))) {}
  std::vector<Phase>::const_iterator begin() const { return list().begin(); }
  std::vector<Phase>::const_iterator end() const { return list().end(); }
  size_t size() const { return p_ ? p_->size() : 0; }
  bool empty() const { return size() == 0; }
  const Phase& operator[](size_t i) const { return list()[i]; }
  void clear() { p_.reset(); }

 private:
  const std::vector<Phase>& list() const {
    static const std::vector<Phase> none;
    return p_ ? *p_ : none;
  }
  std::shared_ptr<const std::vector<Phase>> p_;
};

struct Iteration {
  int index = 0;
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
  uint64_t duration_ns = 0;
  Phases phases;  // per node; empty when not computed
  double bubble_share =
      0;  // pipeline jobs: share of the iteration the average stage spends without transfers
};

struct Finding {
  std::string kind;  // straggler | slow_link | slow_iteration | hang | fabric
  std::string subject;
  int first_iteration = 0;
  uint64_t start_ns = 0;
  double severity = 0;
  std::string evidence;
  std::optional<double> whatif_step_time_ms;
};

struct Parallelism {
  int dp = 1;
  int pp = 1;
  std::vector<std::vector<std::string>> dp_groups;
  std::vector<std::vector<std::string>> stages;
  // Extra: ranks per node (tensor parallelism inside a node), inferred from the number of parallel training
  // connections between two nodes (every rank of a node talks to its counterpart on the peer node over its
  // own connection); 0 when not inferable.
  int tp_hint = 0;
  // Extra: expert parallelism (all-to-all among DP peers, see parallelism.cpp); 0 when not seen.
  int ep = 0;
  // Extra: tensor parallelism across servers (TP groups larger than a server, see parallelism.cpp): the
  // nodes of each TP group and their number; empty / 0 when TP stays inside the servers (not on the network).
  std::vector<std::vector<std::string>> tp_groups;
  int tp = 0;
  // Extra: two-way edges whose records were too coarse to order messages (flow exporters' records
  // spanning quiet gaps): their roles came from volume, their stage order from the order of the nodes'
  // synchronisations (parallelism.cpp). 0, and absent from the JSON, otherwise.
  int coarse_edges = 0;
};

struct Job {
  std::string id;
  // Where the job's transfers came from: "probe" (observed flowlets / imported flows) or "counters" (RDMA
  // port counter series attributed to peers through the QP table). Empty (and absent from the JSON documents,
  // so outputs of inputs without RDMA counters stay as they were) when the input held no RDMA counters.
  std::string source;
  std::vector<std::string> nodes;
  std::string state = "running";  // running | idle | hung | ended
  double step_time_ms = 0;
  // Extra: when the records the timeline rests on are coarse (flow exporters' records spanning quiet gaps),
  // their typical duration: iteration times are good to about this much, and step_time_ms is an estimate
  // (JSON: step_time_estimated). 0, and absent from the JSON, otherwise.
  double time_resolution_ms = 0;
  Parallelism parallelism;
  std::vector<Iteration> iterations;
  std::vector<Finding> findings;
  uint64_t first_ns = 0;  // first and last training transfer seen
  uint64_t last_ns = 0;
};

struct Result {
  std::vector<Job> jobs;
};

Result analyze(const Input& in);

// JSON documents of contracts.md. job_summary: the `jobs` entry; job_detail: `job ID`; timeline: `timeline
// ID`; diagnosis: `diagnose ID`; full: the `analyze` entry (summary + parallelism + iterations + findings).
nlohmann::json job_summary(const Job& j);
nlohmann::json job_detail(const Job& j);
nlohmann::json timeline(const Job& j);
nlohmann::json diagnosis(const Job& j);
nlohmann::json full(const Job& j);
// A Job back from its `full` document (as the daemon stores it in the jobs table); fields by name, so a
// document of an older or newer Job (more or fewer fields) still reads.
Job job_from_json(const nlohmann::json& doc);
// `netprism report` (contracts.md): the fleet view, one row per job with the time it lost and why. now_ns:
// the end of observation (live: the query time; a recording: its last event), which bounds how long a hung
// job has been hung.
nlohmann::json fleet_report(const std::vector<Job>& jobs, uint64_t now_ns);
// Chrome/Perfetto trace-event JSON: one track per node, slices per iteration and phase, finding markers.
nlohmann::json perfetto(const Job& j);

// Flow CSV import of contracts.md (+ optional topology file "IP NODE" per line). nullopt and a one-line
// reason (with the line number) on bad input.
std::optional<Input> load_csv(const std::string& path, const std::string& topology_path, std::string& err);
// RDMA counters recording (docs/formats.md: per-node port bursts, QP rows, QP table read times) as input.
std::optional<Input> load_rdma_counters(const std::string& path, const std::string& topology_path,
                                        std::string& err);

}  // namespace netprism::analysis
