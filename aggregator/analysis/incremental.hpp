// Streaming form of analyze() for the daemon: events are added as they arrive and each pass costs in
// proportion to new data plus a bounded tail per job, never to the whole history or window.
//
// What is kept, and why it gives the offline answer:
//  - Strings (addresses, observers, node names) are interned once; events are stored as ids.
//  - normalize() is done incrementally: per flow direction the observer choice (the sender's own view, else
//    the smallest name) and per-observer totals, per connection its first/last/closed. The connection table
//    a pass hands to group_jobs()/job_state() is therefore the one normalize() would build from every event
//    seen (not a window's), which is what `netprism analyze` sees over the same recording.
//  - Transfers are kept per flow (32 bytes each, tagged with their observer so a late change of the chosen
//    observer stays exact) only as far back as a job's tail needs them.
//  - Per job: its iterations so far (history) and a structure cache. While a job is young (its whole
//    history fits in the tail) every pass re-analyses all of it: the result is exactly analyze()'s. Later a
//    pass re-analyses only the tail (at least kTailIterations iterations and kTailNs of traffic) and
//    stitches it onto the settled history at a boundary both agree on.
//  - Hard bounds (connections, transfers) with counted overflow, never a silent drop.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "analysis.hpp"
#include "flat_index.hpp"
#include "record_ring.hpp"
#include "stages.hpp"

namespace netprism::analysis {

class StreamingAnalysis {
 public:
  struct Limits {
    uint64_t window_ns = 600'000'000'000ull;  // a connection silent for this long is forgotten
    size_t max_xfers = 2'000'000;             // transfers kept for the tails (32 B each)
    size_t max_conns = 200'000;               // connections tracked (a few hundred bytes each)
    // CPU time a pass may spend re-analysing jobs (0: no limit, as offline and in the golden replays).
    // Jobs deferred by the last pass go first, then the cheapest; once the budget is spent the others
    // keep their last result until the next pass (counted: Stats::deferred), so one huge job delays the
    // rest by at most a pass and never starves them.
    uint64_t pass_budget_ns = 0;
  };
  // One observed event with interned strings (intern()); analysis/feed.hpp builds these from flowlets
  // without formatting text, and from FlowEvents.
  struct Event : EventFields {
    uint32_t observer = 0, src = 0, dst = 0;
  };
  struct Stats {
    uint64_t events = 0;            // events added in total
    uint64_t conns = 0;             // connections tracked now
    uint64_t flows = 0;             // flow directions tracked now (a connection has one or two)
    uint64_t xfer_slots = 0;        // room the flows' transfer lists hold now (>= xfers; 32 B each)
    uint64_t iterations = 0;        // iterations the jobs' histories hold now
    uint64_t phases = 0;            // per-node phases they hold now (kMaxPhases a job; ~80 B each)
    uint64_t xfers = 0;             // transfers kept now
    uint64_t tail_xfers = 0;        // transfers re-analysed by the last pass
    uint64_t reanalysed_xfers = 0;  // transfers re-analysed in total: over events, what the tails cost
    uint64_t dropped_events = 0;    // events refused because the connection table was full
    uint64_t dropped_xfers = 0;     // transfers evicted early because the transfer bound was reached
    uint64_t restitched = 0;        // tails that did not meet their job's history at a known boundary
    uint64_t structure_runs = 0;    // structure inferences run (the cache avoids most)
    uint64_t analysed = 0;          // job re-analyses run in total
    uint64_t reused = 0;    // jobs whose last result stood because nothing was due (see kReuseMinXfers)
    uint64_t deferred = 0;  // jobs due but left to a later pass because the pass budget was spent
  };

  explicit StreamingAnalysis(Limits l);
  StreamingAnalysis() : StreamingAnalysis(Limits{}) {}

  uint32_t intern(std::string_view s);
  // Changes when interned ids are renumbered (compaction): callers caching ids must drop their caches.
  uint64_t generation() const { return generation_; }
  void add(const Event& e);
  // The same as add() of each in order; faster on a run of events (a stored batch's): the flow and
  // connection records that later events of the run need are fetched from memory while earlier ones are
  // added (at a million events/s, each add() waited on ~3 cache misses in a row).
  void add(std::span<const Event> events);
  void set_addr_nodes(const std::map<std::string, std::string>& m);
  // Analyses what changed; jobs currently seen (history included), sorted by first transfer.
  Result pass(uint64_t now_ns);
  // A recording rather than a live feed (Input::offline): `netprism analyze` streaming a data dir sets it
  // before its last pass, so states are judged as analyze() judges them.
  void set_offline(bool offline) { offline_ = offline; }
  // The topology file's fabric (switch, link and path lines): with one, every pass adds the `fabric`
  // findings over all jobs' directions (diagnosis_fabric.cpp), as analyze() does.
  void set_fabric(Fabric f) { fabric_ = std::move(f); }
  // The feed carries RDMA counters or QP tables (analyze()'s test for tagging jobs): every job then says
  // where its transfers came from (Job::source: "counters" or "probe").
  void set_rdma_sources(bool on) { rdma_sources_ = on; }
  const Stats& stats() const { return stats_; }
  // The daemon sets each pass' budget from the CPU its pacing has left (live_analysis.cpp).
  void set_pass_budget(uint64_t ns) { lim_.pass_budget_ns = ns; }

  // A job's tail covers at least this many iterations: the timeline's robust statistics (medians, the
  // Otsu split of gaps) need a dozen periods to be stable; 16 leaves margin.
  static constexpr size_t kTailIterations = 16;
  // ... and at least this much of the job's traffic: testbed runs (tens of seconds) are then analysed whole
  // every pass, exactly as offline, and 30 s is still cheap to redo each second for a 16-node job.
  static constexpr uint64_t kTailNs = 30'000'000'000ull;
  // ... as long as that stays under this many transfers; beyond, kTailIterations only. Testbed-sized jobs
  // (4-16 nodes, hundreds to a few thousand transfers in a whole run) are far below it. At 250,000 (before
  // issue 20) a fast-stepping job re-read 30 s of its traffic every pass: live_curves measured an 8-node job
  // with 40 ms steps at ~40,000 tail transfers a pass for ~1,000 new ones.
  static constexpr size_t kTailMaxXfers = 20'000;
  // A job so large that kTailIterations of it hold more than kTailBudgetXfers transfers keeps fewer, down to
  // kMinTailIterations, and leaves its young phase (whole history re-read every analysis) as soon as that is
  // over the budget. A re-analysis costs ~1 us of CPU per tail transfer and a periodic job is re-analysed
  // once or twice an iteration, so a k-iteration tail re-reads each transfer 1.5 k times: at the target
  // cluster's rate (36,000 transfers/s) the analysis' third of a core affords ~6 on average. At 200,000 (the
  // first budget) a 6-minute target run (bench/README.md) spent 44 % of the analysis' CPU on jobs of 17-256
  // nodes re-reading 16 iterations (38,000-98,000 transfers each time) and 24 % more on their young phase
  // (their whole history until 16 iterations); the budget is now kTailMaxXfers, the size below which a tail
  // may grow to kTailNs. Testbed-sized jobs and the SimAI sample (a few thousand transfers in a whole
  // recording) are far below it: analysed live exactly as offline.
  static constexpr size_t kTailBudgetXfers = kTailMaxXfers;
  // Diagnosis skips a tail's first kWarmup (2) iterations and then needs more than kPersist (3) for a
  // straggler and kLinkPersist (4) measured ones for a slow link (diagnosis.cpp: iters > kWarmup +
  // kPersist): 6 iterations and the anchor's before them give it 7. At 4 (the first budget) a large job's
  // 5-iteration tails could name neither. Also above the period search's minimum of 3
  // (iteration_period.cpp kMinPeriods).
  static constexpr size_t kMinTailIterations = 6;
  // A job whose last tail held more than kReuseMinXfers transfers is re-analysed only when something can
  // have changed: a periodic one once its data passes the next expected boundary (last boundary + 0.95
  // step; then every second of data until the boundary shows), an aperiodic one once it has an iteration's
  // worth of new transfers (its tail / the iterations in it), and any of them when its last analysis is
  // kStaleNs old (its state, e.g. a hang, must still be noticed when nothing new arrives). So a job costs
  // one or two tail re-reads per iteration, not one per pass: live_curves measured a 1,000-node job's pass
  // at 16 tail re-reads per new transfer before (a 16-iteration tail redone every second). Testbed-sized
  // jobs (hundreds to a few thousand transfers in all) stay below the threshold and are re-analysed every
  // pass while they have no period yet or are silent; once periodic, while their data flows, they are due
  // as a large one: in a 6-minute target run (bench/README.md) small jobs' every-pass re-analyses that
  // found no new boundary were a fifth of all transfers re-read (30 minutes: deferrals 2,351 -> 716). Without
  // a pass budget (offline, the golden replays) a small job keeps no last result and is re-analysed every
  // pass.
  static constexpr size_t kReuseMinXfers = 20'000;
  static constexpr uint64_t kStaleNs = 5'000'000'000ull;
  // A periodic job whose next boundary did not show yet is tried again this much later (or a quarter step,
  // if shorter): with 1 s passes, half a second keeps an iteration's appearance within ~1.5 s of its end
  // (the 1,250-node live_scale run: p95 2.1 s at 1 s retries) for one or two more tail re-reads an
  // iteration.
  static constexpr double kRetryNs = 0.5e9;
  // A settled job (hung, idle or ended at its last analysis) with no new transfers since can still change
  // only through other connections (its bootstrap connections' teardown turns a hang into an end) and the
  // age its hang finding states: it is re-analysed when it has been silent a quarter longer than when last
  // analysed (at least kStaleNs later), so those are at most ~25 % stale. Jobs that ended stay in the
  // analysis for its window (10 minutes): the 1,250-node live_scale run spent half of the analysis' CPU
  // (28 of 58 s in 5 minutes) re-analysing them every pass or every kStaleNs; this needs ~20 passes per job.
  static constexpr uint64_t kSettledRecheckDivisor = 4;
  // A job with no period in its last million transfers (seconds of a 1,000-node job's traffic, hours of a
  // 16-node one's) is re-examined over its last million only: bounds the pass of a large aperiodic "job"
  // (bulk transfers, a load generator) in time and memory.
  static constexpr size_t kAperiodicMaxXfers = 4 * kTailMaxXfers;
  // Per-node phases kept over all iterations of a job (a Phase is ~80 bytes): recent iterations keep them,
  // older ones keep start/end/duration; a 512-node job keeps ~100 iterations' worth, a 16-node one 3,000.
  // A job's document was copied into every pass' result and snapshot: at 200,000 (16 MB a job) live_curves
  // measured a pass of an 8-node job growing from 11 ms at 1,000 iterations to 42 ms at 80,000. The copies
  // now share each iteration's phases (Phases), so this bounds the one copy: ~4 MB a job.
  static constexpr size_t kMaxPhases = 50'000;

 private:
  static FlowKey flow_key(const Event& e);
  void add(const Event& e, uint64_t flow_hash);  // add(e) with hash_of(flow_key(e)) already computed
  uint64_t data_bytes_of(const Event& e) const;
  struct ObsStat {
    uint32_t obs;
    uint64_t bytes = 0, xfers = 0, first_t0 = UINT64_MAX, last_t1 = 0;
  };
  struct XRec {
    uint32_t obs;
    uint32_t packets;  // Xfer::packets (fits the padding: still 32 bytes)
    uint64_t t0, t1, bytes;
  };
  // Millions of these per aggregator (one per live transfer): packets must ride in obs's padding.
  static_assert(sizeof(XRec) == 32);
  struct FlowSt {
    FlowKey key;
    uint32_t chosen;
    uint32_t conn;
    bool fwd;
    std::vector<ObsStat> obs;  // usually one or two observers
    RecordRing<XRec> xs;       // live transfers in arrival order
  };
  struct ConnSt {
    ConnKey key;
    uint64_t uid;  // never reused: names the connection across compactions (structure cache keys)
    uint64_t first_ns = UINT64_MAX, last_ns = 0;
    bool closed = false;
    bool from_counters = false;         // made from RDMA port counters (Conn::from_counters)
    uint16_t counters_interval_ms = 0;  // Conn::counters_interval_ms
    uint32_t sampled_1_in = 0;          // Conn::sampled_1_in
    uint64_t fresh = 0;                 // transfers stored since its job was last analysed
    std::string label;
    std::vector<uint32_t> flows;
  };
  struct History {
    std::vector<uint64_t> boundaries;  // all iteration boundaries so far (stitched)
    std::vector<Iteration> iterations;
    std::vector<Finding> findings;
    uint64_t tail_from = 0;  // transfers before this are settled (0: the whole history is re-analysed)
    size_t anchor = 0;       // boundary index the next tail must reproduce (meaningful when tail_from > 0)
    std::vector<uint64_t> structure_key;  // sorted connection uids + node ids the cache was built for
    Structure structure;
    uint64_t structure_ns = 0;  // when (data time) it was inferred
    bool has_structure = false;
    uint64_t first_ns = 0;
    uint64_t last_ns = 0;  // its last transfer as of the latest pass (expire(): which connections stay)
    bool settled = false;  // its last analysis found it hung, idle or ended (expire() keeps it whole)
    std::vector<std::string> nodes;
    bool seen = false;  // present in the current pass
    // The last result, reused while a large job has nothing due (see kReuseMinXfers); its iterations and
    // findings are the history's own (not copied twice).
    Job last;
    bool has_last = false;
    size_t last_tail = 0;        // transfers that analysis looked at
    size_t last_conns = 0;       // connections the job had then
    size_t tail_iterations = 0;  // iterations in that tail
    uint64_t analysed_ns = 0;
    bool deferred = false;     // the last pass left it due (pass budget spent): first in the next
    uint64_t next_due_ns = 0;  // data time from which a periodic job is due again (kReuseMinXfers)
    // Sorted durations of iterations [0, settled_n): the step time's median over all iterations without
    // re-reading them every pass.
    std::vector<uint64_t> settled_durations;
    size_t settled_n = 0;
    size_t phases_from = 0;  // iterations below this index keep no phases (bound_phases)
    // With a fabric: per direction (src, dst node), the start times of iterations in which its rate was
    // measured, up to kFabricMeasured (enough to call it healthy; incremental_fabric.cpp).
    std::map<std::pair<std::string, std::string>, std::set<uint64_t>> measured;
  };

  uint32_t node_of_addr(uint32_t addr);
  uint32_t node_index(const std::string& name);
  uint32_t node_sid(uint32_t node);  // string id of node `node`'s name
  // String id of the node name an address maps to, without numbering a node (normalize() numbers nodes
  // by first appearance as a sender; a receiver must not take an index early).
  uint32_t name_sid_of_addr(uint32_t addr);
  void expire(uint64_t now_ns);
  void compact();
  void enforce_xfer_bound();
  void prune(const std::vector<uint64_t>& keep_from_conn, uint64_t now_ns);
  // A pass, step by step (incremental_job.cpp).
  Normalized connection_table(uint64_t now_ns);  // what normalize() would give, without transfers
  std::vector<JobSlice> job_slices(const Normalized& n) const;  // group_jobs(), with first/last transfer
  std::string job_id_of(const JobSlice& sl, const std::vector<std::string>& names) const;  // kept if known
  // The job's last result while it is large and has little new data (kTailMaxXfers), else analyse_job().
  Job current_job(const Normalized& n, JobSlice& sl, History& h, const std::string& id,
                  std::vector<std::string> names, uint64_t now_ns);
  static Job last_result(const History& h);  // h.last with the history's iterations and findings
  bool due(const JobSlice& sl, const History& h, uint64_t now_ns) const;  // see kReuseMinXfers
  void set_next_due(History& h, const JobSlice& sl, const Timeline& t);
  static double step_median(History& h, size_t prefix);  // median iteration duration, ns
  Job analyse_job(const Normalized& n, JobSlice& slice, History& h, const std::string& id);
  void collect_tail(const Normalized& n, JobSlice& sl, const History& h);  // the tail's transfers, sorted
  // visit(chosen, src, dst, unit, x) for each transfer of the job's tail: the chosen view's (chosen) and the
  // receiver's arrivals (!chosen).
  template <class Visit>
  void for_tail_xfers(const Normalized& n, const JobSlice& sl, const History& h, Visit&& visit);
  Structure& cached_structure(const Normalized& n, const JobSlice& sl, History& h, bool young);
  // The tail's boundaries onto the settled ones; how many of the history's were kept.
  size_t stitch_boundaries(History& h, const Timeline& t, bool young);
  static void settle_iterations(History& h, const std::vector<Iteration>& local, size_t keep);
  static void bound_phases(History& h);  // phases of the latest iterations only (kMaxPhases)
  static void merge_findings(History& h, std::vector<Finding> fs, const std::vector<Iteration>& local,
                             bool young);
  // Where the next pass' tail starts: kTailIterations / kTailNs back, or for a job without a period yet its
  // last kTailNs.
  static void move_tail(History& h, const JobSlice& sl, const Timeline& t);
  static void move_periodic_tail(History& h, const JobSlice& sl, const Timeline& t);
  static void move_aperiodic_tail(History& h, const JobSlice& sl);
  // Fabric (incremental_fabric.cpp): a tail's measured directions into the history; the fabric findings of
  // the pass over every job (hs aligned with r.jobs).
  static void note_directions(History& h, const std::vector<DirectionState>& dirs);
  void add_fabric_findings(Result& r, const std::vector<const History*>& hs) const;

  Limits lim_;
  bool offline_ = false;
  Fabric fabric_;
  bool rdma_sources_ = false;
  Stats stats_;
  // The largest tail's transfer lists, kept (cleared) for the next pass instead of freed, and released when a
  // pass needs under a quarter of them: a large job's tail is mostly its new data since the last pass, and
  // a list over 32 MiB (glibc's largest mmap threshold) was mapped and unmapped at every pass, a sawtooth of
  // ~45 MB in the aggregator's RSS in the 1,000-agent load test (~1.1 million transfers a pass).
  std::vector<Xfer> spare_xfers_, spare_arrivals_;
  size_t tail_need_ = 0;  // this pass' largest tail list
  uint64_t generation_ = 0;
  std::unordered_map<std::string, uint32_t> str_idx_;
  std::vector<std::string> strs_;
  std::map<std::string, std::string> addr_node_;
  std::vector<uint32_t> addr_node_id_;   // string id -> node index (UINT32_MAX: not resolved yet)
  std::vector<uint32_t> node_sid_;       // node index -> string id of its name (UINT32_MAX: not yet)
  std::vector<uint32_t> addr_name_sid_;  // string id of an address -> string id of its node's name
  std::unordered_map<std::string, uint32_t> node_idx_;
  std::vector<std::string> nodes_;
  // key -> index into flows_ / conns_ (flat_index.hpp: one lookup per event, the hot path under load)
  FlatIndex flow_idx_;
  FlatIndex conn_idx_;
  std::vector<FlowSt> flows_;
  std::vector<ConnSt> conns_;
  uint64_t next_uid_ = 1;
  uint64_t total_xfers_ = 0;
  std::map<std::string, History> hist_;
  std::unordered_map<uint64_t, std::string> job_of_uid_;  // previous pass: connection uid -> job id
};

}  // namespace netprism::analysis
