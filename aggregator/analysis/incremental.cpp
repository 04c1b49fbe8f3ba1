// Streaming analysis (see incremental.hpp for what is kept and why it matches analyze()).
#include "incremental.hpp"

#include <algorithm>
#include <tuple>

namespace netprism::analysis {
namespace {

constexpr uint16_t kFin = 0x01, kRst = 0x04;

// A cached structure is re-inferred when the job's connections or nodes change, and otherwise every 10
// minutes of the job's traffic: a job's layout does not change while its connections stay the same, and
// the refresh only guards against a first inference made on an unlucky tail.
constexpr uint64_t kRestructureNs = 600'000'000'000ull;
// A tail boundary matches the settled one when within a quarter step: two different boundaries are a step
// apart, and the same boundary computed from two overlapping ranges moves by at most a few transfers.
constexpr double kStitchTolerance = 0.25;
// When the transfer bound is reached, evict down to 90 % of it, so that a feed steadily above the bound
// does not pay an eviction scan every pass.
constexpr double kEvictTo = 0.9;

// Hashes for the flat indexes: the key's fields packed into words (ids are 32-bit, ports 16).
uint64_t hash_of(const FlowKey& k) {
  return hash_words(uint64_t{k.src} | uint64_t{k.dst} << 32,
                    uint64_t{k.sport} | uint64_t{k.dport} << 16 | uint64_t{k.qpn} << 32, k.proto);
}
uint64_t hash_of(const ConnKey& k) {
  return hash_words(uint64_t{k.a} | uint64_t{k.b} << 32, uint64_t{k.pa} | uint64_t{k.pb} << 16, k.proto);
}

uint64_t data_bytes(const StreamingAnalysis::Event& e) {
  return analysis::data_bytes(e.payload_bytes, e.dir, e.v6, e.packets, e.bytes);
}

}  // namespace

StreamingAnalysis::StreamingAnalysis(Limits l) : lim_(l) {}

uint32_t StreamingAnalysis::intern(std::string_view s) {
  auto [it, inserted] = str_idx_.try_emplace(std::string(s), static_cast<uint32_t>(strs_.size()));
  if (inserted) strs_.emplace_back(s);
  return it->second;
}

uint32_t StreamingAnalysis::node_index(const std::string& name) {
  auto [it, inserted] = node_idx_.try_emplace(name, static_cast<uint32_t>(nodes_.size()));
  if (inserted) nodes_.push_back(name);
  return it->second;
}

uint32_t StreamingAnalysis::node_of_addr(uint32_t addr) {
  if (addr_node_id_.size() <= addr) addr_node_id_.resize(strs_.size(), UINT32_MAX);
  if (addr_node_id_[addr] == UINT32_MAX) {
    auto it = addr_node_.find(strs_[addr]);
    addr_node_id_[addr] = node_index(it == addr_node_.end() ? strs_[addr] : it->second);
  }
  return addr_node_id_[addr];
}

uint32_t StreamingAnalysis::node_sid(uint32_t node) {
  if (node_sid_.size() <= node) node_sid_.resize(nodes_.size(), UINT32_MAX);
  if (node_sid_[node] == UINT32_MAX) node_sid_[node] = intern(nodes_[node]);
  return node_sid_[node];
}

uint32_t StreamingAnalysis::name_sid_of_addr(uint32_t addr) {
  if (addr_name_sid_.size() <= addr) addr_name_sid_.resize(strs_.size(), UINT32_MAX);
  if (addr_name_sid_[addr] == UINT32_MAX) {
    auto it = addr_node_.find(strs_[addr]);
    uint32_t sid = it == addr_node_.end() ? addr : intern(it->second);
    addr_name_sid_[addr] = sid;  // intern() may have grown strs_, never moved addr's entry
  }
  return addr_name_sid_[addr];
}

void StreamingAnalysis::set_addr_nodes(const std::map<std::string, std::string>& m) {
  if (m == addr_node_) return;
  addr_node_ = m;
  addr_node_id_.clear();
  addr_name_sid_.clear();  // re-resolved lazily; node indices of names already known stay the same
}

void StreamingAnalysis::add(const FlowEvent& e) {
  add(event_of(e));
}

StreamingAnalysis::Event StreamingAnalysis::event_of(const FlowEvent& e) {
  Event x;
  x.observer = intern(e.observer);
  x.src = intern(e.src);
  x.dst = intern(e.dst);
  x.src_port = e.src_port;
  x.dst_port = e.dst_port;
  x.qpn = e.qpn;
  x.proto = e.proto;
  x.dir = e.dir;
  x.tcp_flags = e.tcp_flags;
  x.v6 = e.src.find(':') != std::string::npos;
  x.first_ns = e.first_ns;
  x.last_ns = e.last_ns;
  x.bytes = e.bytes;
  x.payload_bytes = e.payload_bytes;
  x.packets = e.packets;
  return x;
}

namespace {
// A record may straddle cache lines (flow and connection records are ~100 bytes): fetch all of them.
template <class T>
void prefetch_lines(const T* p) {
  const auto* b = reinterpret_cast<const char*>(p);
  for (std::size_t off = 0; off < sizeof(T); off += 64) __builtin_prefetch(b + off);
  __builtin_prefetch(b + sizeof(T) - 1);
}
}  // namespace

void StreamingAnalysis::add(std::span<const Event> events) {
  // Software pipelining, prefetches only (every event still goes through add(e, its hash), in order): the
  // index slot of event i + 2D, the flow record of event i + D (its slot has arrived by then), and the
  // connection record and transfer list end of event i + D/2 (its flow record has). A prefetch that turns out
  // wrong (a new flow, a probe past the first slot, the tables changed meanwhile) costs a wasted load,
  // nothing more.
  constexpr std::size_t kD = 8;
  const std::size_t n = events.size();
  thread_local std::vector<uint64_t> hashes;
  hashes.resize(n);
  for (std::size_t i = 0; i < n; ++i) hashes[i] = hash_of(flow_key(events[i]));
  for (std::size_t i = 0; i < n; ++i) {
    if (i + 2 * kD < n) flow_idx_.prefetch(hashes[i + 2 * kD]);
    if (i + kD < n)
      if (uint32_t f = flow_idx_.peek(hashes[i + kD]); f != FlatIndex::npos && f < flows_.size())
        prefetch_lines(&flows_[f]);
    if (i + kD / 2 < n)
      if (uint32_t f = flow_idx_.peek(hashes[i + kD / 2]); f != FlatIndex::npos && f < flows_.size()) {
        const FlowSt& fl = flows_[f];
        if (fl.conn < conns_.size()) prefetch_lines(&conns_[fl.conn]);
        if (!fl.obs.empty()) __builtin_prefetch(fl.obs.data());
        if (fl.xs.size() < fl.xs.capacity()) __builtin_prefetch(fl.xs.data() + fl.xs.size(), 1);
      }
    add(events[i], hashes[i]);
  }
}

FlowKey StreamingAnalysis::flow_key(const Event& e) {
  return FlowKey{e.src, e.dst, e.src_port, e.dst_port, e.qpn, e.proto};
}

void StreamingAnalysis::add(const Event& e) {
  add(e, hash_of(flow_key(e)));
}

void StreamingAnalysis::add(const Event& e, uint64_t fh) {
  ++stats_.events;
  // Nodes are numbered by first appearance as a sender, as normalize() does.
  uint32_t sender_node = node_of_addr(e.src);
  const FlowKey k = flow_key(e);
  uint32_t f = flow_idx_.find(fh, [&](uint32_t i) { return flows_[i].key == k; });
  if (f == FlatIndex::npos) {
    const std::string &sa = strs_[e.src], &da = strs_[e.dst];
    bool fwd = !(std::tie(da, e.dst_port) < std::tie(sa, e.src_port));
    ConnKey ck = fwd ? ConnKey{e.src, e.dst, e.src_port, e.dst_port, e.proto}
                     : ConnKey{e.dst, e.src, e.dst_port, e.src_port, e.proto};
    const uint64_t ch = hash_of(ck);
    uint32_t c = conn_idx_.find(ch, [&](uint32_t i) { return conns_[i].key == ck; });
    if (c == FlatIndex::npos) {
      if (conns_.size() >= lim_.max_conns) {  // hard bound: counted, reported in `netprism status`
        ++stats_.dropped_events;
        return;
      }
      c = static_cast<uint32_t>(conns_.size());
      conn_idx_.insert(ch, c);
      ConnSt cs;
      cs.key = ck;
      cs.uid = next_uid_++;
      std::string s_end = sa + ":" + std::to_string(e.src_port),
                  d_end = da + ":" + std::to_string(e.dst_port);
      cs.label = fwd ? s_end + "<->" + d_end : d_end + "<->" + s_end;
      conns_.push_back(std::move(cs));
    }
    f = static_cast<uint32_t>(flows_.size());
    flow_idx_.insert(fh, f);
    FlowSt fs;
    fs.key = k;
    fs.chosen = e.observer;
    fs.conn = c;
    fs.fwd = fwd;
    flows_.push_back(std::move(fs));
    conns_[c].flows.push_back(f);
  }
  FlowSt& fl = flows_[f];
  // Observer choice of normalize(): the sender's own view when it exists, else the smallest name.
  uint32_t sender = node_sid(sender_node);
  if (fl.chosen != e.observer && fl.chosen != sender &&
      (e.observer == sender || strs_[e.observer] < strs_[fl.chosen]))
    fl.chosen = e.observer;
  ConnSt& c = conns_[fl.conn];
  c.first_ns = std::min(c.first_ns, e.first_ns);
  c.last_ns = std::max(c.last_ns, e.last_ns);
  if (e.tcp_flags & (kFin | kRst)) c.closed = true;
  uint64_t bytes = data_bytes(e);
  if (bytes == 0) return;
  // Once the sender's own view is chosen the choice is final: another observer's transfers are used only
  // when that observer is the receiver (its arrival times, normalize()'s `arrivals`).
  if (fl.chosen == sender && e.observer != sender && e.observer != name_sid_of_addr(fl.key.dst)) return;
  auto os = std::find_if(fl.obs.begin(), fl.obs.end(), [&](const ObsStat& o) { return o.obs == e.observer; });
  if (os == fl.obs.end()) os = fl.obs.insert(fl.obs.end(), ObsStat{e.observer});
  uint64_t t1 = std::max(e.first_ns, e.last_ns);
  os->bytes += bytes;
  os->xfers++;
  os->first_t0 = std::min(os->first_t0, e.first_ns);
  os->last_t1 = std::max(os->last_t1, t1);
  fl.xs.push_back({e.observer, e.first_ns, t1, bytes});
  ++total_xfers_;
  ++c.fresh;
}

void StreamingAnalysis::expire(uint64_t now_ns) {
  if (now_ns <= lim_.window_ns) return;
  uint64_t since = now_ns - lim_.window_ns;
  if (std::none_of(conns_.begin(), conns_.end(), [&](const ConnSt& c) { return c.last_ns < since; })) return;
  std::vector<uint32_t> conn_map(conns_.size(), UINT32_MAX);
  std::vector<ConnSt> conns;
  for (uint32_t c = 0; c < conns_.size(); ++c)
    if (conns_[c].last_ns >= since) {
      conn_map[c] = static_cast<uint32_t>(conns.size());
      conns.push_back(std::move(conns_[c]));
    }
  std::vector<FlowSt> flows;
  for (auto& fl : flows_) {
    if (conn_map[fl.conn] == UINT32_MAX) {
      total_xfers_ -= fl.xs.size() - fl.head;
      continue;
    }
    fl.conn = conn_map[fl.conn];
    flows.push_back(std::move(fl));
  }
  conns_ = std::move(conns);
  flows_ = std::move(flows);
  compact();
}

// Rebuilds the id maps after connections were dropped; renumbers strings and nodes when most are unused
// (an address scan would otherwise grow them forever).
void StreamingAnalysis::compact() {
  bool strings = strs_.size() > 4096 + 8 * conns_.size();
  if (strings) {
    std::vector<uint32_t> smap(strs_.size(), UINT32_MAX);
    std::vector<std::string> strs;
    auto keep = [&](uint32_t& id) {
      if (smap[id] == UINT32_MAX) {
        smap[id] = static_cast<uint32_t>(strs.size());
        strs.push_back(std::move(strs_[id]));
      }
      id = smap[id];
    };
    for (auto& fl : flows_) {
      keep(fl.key.src);
      keep(fl.key.dst);
      keep(fl.chosen);
      for (auto& o : fl.obs) keep(o.obs);
      for (size_t i = fl.head; i < fl.xs.size(); ++i) keep(fl.xs[i].obs);
    }
    for (auto& c : conns_) {
      keep(c.key.a);
      keep(c.key.b);
    }
    strs_ = std::move(strs);
    str_idx_.clear();
    for (uint32_t i = 0; i < strs_.size(); ++i) str_idx_.emplace(strs_[i], i);
    addr_node_id_.clear();
    node_sid_.clear();
    addr_name_sid_.clear();
    ++generation_;
    // Node indices are kept only for names still in use; cached structures refer to them.
    node_idx_.clear();
    nodes_.clear();
    for (auto& [id, h] : hist_) h.has_structure = false;
  }
  flow_idx_.clear();
  flow_idx_.reserve(flows_.size());
  for (uint32_t f = 0; f < flows_.size(); ++f) flow_idx_.insert(hash_of(flows_[f].key), f);
  conn_idx_.clear();
  conn_idx_.reserve(conns_.size());
  for (uint32_t c = 0; c < conns_.size(); ++c) {
    conn_idx_.insert(hash_of(conns_[c].key), c);
    conns_[c].flows.clear();
  }
  for (uint32_t f = 0; f < flows_.size(); ++f) conns_[flows_[f].conn].flows.push_back(f);
  if (strings)
    for (auto& fl : flows_) node_of_addr(fl.key.src);  // renumber nodes in flow order (first sender first)
}

void StreamingAnalysis::prune(const std::vector<uint64_t>& keep_from_conn, uint64_t) {
  for (auto& fl : flows_) {
    uint64_t from = keep_from_conn[fl.conn];
    // Arrival order is close to time order (agents send batches as flowlets end); stop at the first
    // transfer still needed, so a late one only delays eviction of the few behind it.
    size_t h = fl.head;
    while (h < fl.xs.size() && fl.xs[h].t1 < from) ++h;
    total_xfers_ -= h - fl.head;
    fl.head = h;
    if (fl.head > 64 && fl.head * 2 > fl.xs.size()) {  // amortised O(1) per transfer
      fl.xs.erase(fl.xs.begin(), fl.xs.begin() + static_cast<long>(fl.head));
      fl.head = 0;
    }
  }
}

void StreamingAnalysis::enforce_xfer_bound() {
  if (total_xfers_ <= lim_.max_xfers) return;
  std::vector<uint64_t> t1;
  t1.reserve(total_xfers_);
  for (const auto& fl : flows_)
    for (size_t i = fl.head; i < fl.xs.size(); ++i) t1.push_back(fl.xs[i].t1);
  size_t target = static_cast<size_t>(kEvictTo * static_cast<double>(lim_.max_xfers));
  size_t drop = t1.size() - std::min(t1.size(), target);
  if (drop == 0) return;
  std::nth_element(t1.begin(), t1.begin() + static_cast<long>(drop - 1), t1.end());
  uint64_t cut = t1[drop - 1];
  for (auto& fl : flows_) {
    std::vector<XRec> kept;
    for (size_t i = fl.head; i < fl.xs.size(); ++i)
      if (fl.xs[i].t1 > cut) kept.push_back(fl.xs[i]);
    uint64_t gone = (fl.xs.size() - fl.head) - kept.size();
    stats_.dropped_xfers += gone;
    total_xfers_ -= gone;
    fl.xs = std::move(kept);
    fl.head = 0;
  }
}

Result StreamingAnalysis::pass(uint64_t now_ns) {
  stats_.tail_xfers = 0;
  expire(now_ns);
  Normalized n;
  n.now_ns = now_ns;
  for (auto& c : conns_) {  // resolve every endpoint first: node indices must exist before n.nodes is taken
    node_of_addr(c.key.a);
    node_of_addr(c.key.b);
  }
  n.nodes = nodes_;
  n.conns.reserve(conns_.size());
  for (const auto& cs : conns_) {
    Conn c;
    c.a = node_of_addr(cs.key.a);
    c.b = node_of_addr(cs.key.b);
    c.first_ns = cs.first_ns;
    c.last_ns = cs.last_ns;
    c.closed = cs.closed;
    c.label = cs.label;
    c.addr_a = cs.key.a;
    c.addr_b = cs.key.b;
    c.proto = cs.key.proto;
    for (uint32_t f : cs.flows) {
      const FlowSt& fl = flows_[f];
      for (const auto& o : fl.obs)
        if (o.obs == fl.chosen) {
          (fl.fwd ? c.bytes_ab : c.bytes_ba) += o.bytes;
          c.xfers += o.xfers;
        }
    }
    n.conns.push_back(std::move(c));
  }

  std::vector<JobSlice> slices = group_jobs(n);  // n.xfers is empty: connections and nodes only
  for (auto& sl : slices) {
    sl.first_ns = UINT64_MAX;
    sl.last_ns = 0;
    for (uint32_t c : sl.conns)
      for (uint32_t f : conns_[c].flows)
        for (const auto& o : flows_[f].obs)
          if (o.obs == flows_[f].chosen && o.xfers) {
            sl.first_ns = std::min(sl.first_ns, o.first_t0);
            sl.last_ns = std::max(sl.last_ns, o.last_t1);
          }
    if (sl.first_ns == UINT64_MAX) sl.first_ns = 0;
  }
  std::stable_sort(slices.begin(), slices.end(),
                   [](const JobSlice& a, const JobSlice& b) { return a.first_ns < b.first_ns; });

  Result r;
  for (auto& [id, h] : hist_) h.seen = false;
  std::unordered_map<uint64_t, std::string> job_of_uid;
  std::vector<uint64_t> keep_from(conns_.size(), now_ns > kTailNs ? now_ns - kTailNs : 0);
  for (auto& sl : slices) {
    std::vector<std::string> names;
    for (uint32_t v : sl.nodes) names.push_back(n.nodes[v]);
    std::string id = job_id(names, sl.first_ns);
    // A job whose first connection was forgotten (silent for the whole window) would get a new id from
    // its later first transfer: keep the id its connections had, when the nodes are the same.
    if (!hist_.count(id)) {
      for (uint32_t c : sl.conns)
        if (auto it = job_of_uid_.find(conns_[c].uid); it != job_of_uid_.end()) {
          auto h = hist_.find(it->second);
          if (h != hist_.end() && !h->second.seen && h->second.first_ns <= sl.first_ns &&
              h->second.nodes == names)
            id = it->second;
          break;
        }
    }
    History& h = hist_[id];
    if (h.first_ns == 0) h.first_ns = sl.first_ns;
    h.nodes = names;
    h.seen = true;
    uint64_t fresh = 0;
    for (uint32_t c : sl.conns) fresh += conns_[c].fresh;
    bool reuse = h.has_last && h.last_tail > kTailMaxXfers && fresh * 2 < h.last_tail &&
                 h.last_conns == sl.conns.size() && now_ns < h.analysed_ns + kStaleNs;
    Job j;
    if (reuse) {
      j = h.last;
    } else {
      j = analyse_job(n, sl, h, id);
      j.nodes = std::move(names);
      for (uint32_t c : sl.conns) conns_[c].fresh = 0;
      h.last_tail = sl.xfers.size();
      h.last_conns = sl.conns.size();
      h.analysed_ns = now_ns;
      h.has_last = h.last_tail > kTailMaxXfers;  // a copy only where it saves work
      if (h.has_last) h.last = j;
      sl.xfers = {};
    }
    for (uint32_t c : sl.conns) {
      job_of_uid[conns_[c].uid] = id;
      keep_from[c] = h.tail_from;
    }
    r.jobs.push_back(std::move(j));
  }
  job_of_uid_ = std::move(job_of_uid);
  std::erase_if(hist_, [](const auto& kv) { return !kv.second.seen; });
  prune(keep_from, now_ns);
  enforce_xfer_bound();
  stats_.conns = conns_.size();
  stats_.xfers = total_xfers_;
  return r;
}

Job StreamingAnalysis::analyse_job(const Normalized& n, JobSlice& sl, History& h, const std::string& id) {
  // The job's transfers from its tail on, as normalize() + group_jobs() would list them.
  sl.xfers.clear();
  sl.arrivals.clear();
  for (size_t ci = 0; ci < sl.conns.size(); ++ci) {
    // Transfers name their grouping unit's standing connection, as group_jobs() lists them.
    uint32_t c = sl.conns[ci], unit = sl.unit[ci];
    for (uint32_t f : conns_[c].flows) {
      const FlowSt& fl = flows_[f];
      uint32_t src = fl.fwd ? n.conns[c].a : n.conns[c].b, dst = fl.fwd ? n.conns[c].b : n.conns[c].a;
      // The receiver's own records of a direction whose sender's view is chosen: its arrival times.
      uint32_t sender = node_sid(node_of_addr(fl.key.src));
      uint32_t receiver = fl.chosen == sender ? name_sid_of_addr(fl.key.dst) : UINT32_MAX;
      for (size_t i = fl.head; i < fl.xs.size(); ++i) {
        const XRec& x = fl.xs[i];
        if (x.t0 < h.tail_from) continue;
        if (x.obs == fl.chosen)
          sl.xfers.push_back({src, dst, unit, x.t0, x.t1, x.bytes});
        else if (x.obs == receiver)
          sl.arrivals.push_back({src, dst, unit, x.t0, x.t1, x.bytes});
      }
    }
  }
  auto by_time = [](const Xfer& x, const Xfer& y) {
    return std::tie(x.t0, x.t1, x.conn) < std::tie(y.t0, y.t1, y.conn);
  };
  std::sort(sl.xfers.begin(), sl.xfers.end(), by_time);
  std::sort(sl.arrivals.begin(), sl.arrivals.end(), by_time);
  stats_.tail_xfers += sl.xfers.size();

  // Structure: inferred on every pass while the job is young (as offline), then cached until its
  // connections or nodes change.
  std::vector<uint64_t> key;
  for (uint32_t c : sl.conns) key.push_back(conns_[c].uid);
  std::sort(key.begin(), key.end());
  for (uint32_t v : sl.nodes) key.push_back(v);
  bool young = h.tail_from == 0;
  if (young || !h.has_structure || key != h.structure_key || sl.last_ns > h.structure_ns + kRestructureNs) {
    h.structure = infer_structure(n, sl);
    h.structure_key = std::move(key);
    h.structure_ns = sl.last_ns;
    h.has_structure = true;
    ++stats_.structure_runs;
  }
  Structure& s = h.structure;
  s.stage_of.resize(n.nodes.size(), -1);  // nodes seen since (outside this job) are in no stage
  s.group_of.resize(n.nodes.size(), -1);

  Job j;
  j.id = id;
  j.first_ns = sl.first_ns;
  j.last_ns = sl.last_ns;
  j.parallelism = parallelism_of(n, sl, s);
  Timeline t = build_timeline(n, sl, s);
  std::vector<Iteration> local = iterations_of(n, sl, s, t);
  std::string state;

  // Stitch: below the anchor the history is settled; from it on the tail's boundaries replace it.
  size_t keep = 0;  // boundaries of the history kept
  if (!young && h.anchor < h.boundaries.size() && !t.boundaries.empty()) {
    std::vector<double> d;
    for (size_t i = h.anchor > 16 ? h.anchor - 16 : 0; i + 1 <= h.anchor; ++i)
      d.push_back(static_cast<double>(h.boundaries[i + 1] - h.boundaries[i]));
    double step = median(d);
    uint64_t a = h.boundaries[h.anchor];
    auto nearest = std::min_element(t.boundaries.begin(), t.boundaries.end(), [&](uint64_t x, uint64_t y) {
      return (x > a ? x - a : a - x) < (y > a ? y - a : a - y);
    });
    uint64_t dist = *nearest > a ? *nearest - a : a - *nearest;
    keep = h.anchor + 1;
    std::vector<uint64_t> b(h.boundaries.begin(), h.boundaries.begin() + static_cast<long>(keep));
    if (static_cast<double>(dist) <= kStitchTolerance * step) {
      b.insert(b.end(), nearest + 1, t.boundaries.end());
    } else {
      ++stats_.restitched;  // counted: the history and the tail disagree at the anchor
      for (uint64_t x : t.boundaries)
        if (static_cast<double>(x) > static_cast<double>(a) + 0.5 * step) b.push_back(x);
    }
    h.boundaries = std::move(b);
  } else {
    h.boundaries = t.boundaries;
  }
  // Iterations from `keep - 1` on come from the tail (with their phases) when the tail has the same one,
  // else carry start/end only (a restitched gap).
  if (keep > 0)
    h.iterations.resize(std::min(h.iterations.size(), keep - 1));
  else
    h.iterations.clear();
  for (size_t k = h.iterations.size(); k + 1 < h.boundaries.size(); ++k) {
    auto it = std::lower_bound(local.begin(), local.end(), h.boundaries[k],
                               [](const Iteration& x, uint64_t v) { return x.start_ns < v; });
    Iteration x;
    if (it != local.end() && it->start_ns == h.boundaries[k] && it->end_ns == h.boundaries[k + 1]) x = *it;
    x.index = static_cast<int>(k);
    x.start_ns = h.boundaries[k];
    x.end_ns = h.boundaries[k + 1];
    x.duration_ns = x.end_ns - x.start_ns;
    h.iterations.push_back(std::move(x));
  }
  {
    size_t kept = 0;
    bool full = false;
    for (size_t k = h.iterations.size(); k-- > 0;) {
      auto& ph = h.iterations[k].phases;
      full = full || kept + ph.size() > kMaxPhases;
      if (!full) {
        kept += ph.size();
      } else if (!ph.empty()) {
        ph.clear();
        ph.shrink_to_fit();
      }
    }
  }
  j.iterations = h.iterations;
  {
    std::vector<double> d;
    for (const auto& x : j.iterations) d.push_back(static_cast<double>(x.duration_ns));
    j.step_time_ms = (young ? t.step_ns : median(d)) / 1e6;
  }
  j.state = job_state(n, sl, t.step_ns, j.iterations.size());

  // Findings of the tail (iteration numbers are the tail's own: mapped to the job's by start time), after
  // the settled ones of the history.
  std::vector<Finding> fs = diagnose(n, sl, s, t, local, j.state, n.now_ns, id);
  if (young) {
    h.findings = fs;
  } else {
    std::vector<Finding> merged;
    for (const auto& f : h.findings)
      if (f.start_ns < h.tail_from) merged.push_back(f);
    for (auto f : fs) {
      if (f.first_iteration >= 0 && static_cast<size_t>(f.first_iteration) < local.size()) {
        uint64_t st = local[static_cast<size_t>(f.first_iteration)].start_ns;
        auto b = std::lower_bound(h.boundaries.begin(), h.boundaries.end(), st);
        f.first_iteration = static_cast<int>(b - h.boundaries.begin());
      } else if (!local.empty() || f.first_iteration > 0) {
        f.first_iteration = static_cast<int>(j.iterations.size());  // past the last one (e.g. a hang)
      }
      bool dup = std::any_of(merged.begin(), merged.end(),
                             [&](const Finding& g) { return g.kind == f.kind && g.subject == f.subject; });
      if (!dup) merged.push_back(std::move(f));
    }
    h.findings = std::move(merged);
  }
  j.findings = h.findings;

  // Move the tail on: it starts one iteration before the anchor (so the anchor's whole synchronisation is
  // in it) and keeps at least kTailIterations iterations and kTailNs of traffic after that.
  // The kTailNs extension stops where the tail would hold more than kTailMaxXfers transfers: a large job
  // (hundreds of nodes) gets its kTailIterations iterations only.
  size_t nb = h.boundaries.size();
  if (nb >= 2) {
    auto xfers_since = [&](uint64_t b) {
      return static_cast<size_t>(sl.xfers.end() -
                                 std::lower_bound(sl.xfers.begin(), sl.xfers.end(), b,
                                                  [](const Xfer& x, uint64_t v) { return x.t0 < v; }));
    };
    long k = static_cast<long>(nb) - 1 - static_cast<long>(kTailIterations);
    while (k >= 1 && sl.last_ns - h.boundaries[static_cast<size_t>(k - 1)] < kTailNs) {
      if (k >= 2 && xfers_since(h.boundaries[static_cast<size_t>(k - 2)]) > kTailMaxXfers) break;
      --k;
    }
    if (k >= 2) {
      // The tail starts where the data of the iteration that begins at boundary k - 1 began (the boundary
      // itself, or the drain before it for a pipeline without DP: see Timeline::data_from).
      uint64_t b = h.boundaries[static_cast<size_t>(k - 1)], from = b;
      auto it = std::lower_bound(t.boundaries.begin(), t.boundaries.end(), b);
      if (it != t.boundaries.end() && *it == b)
        from = t.data_from[static_cast<size_t>(it - t.boundaries.begin())];
      if (from > h.tail_from) {
        h.anchor = static_cast<size_t>(k);
        h.tail_from = from;
      }
    }
  } else {
    // No period found (yet): once the job is older than kTailNs, keep looking at its most recent kTailNs
    // only, and at most at its last kAperiodicMaxXfers transfers.
    uint64_t from = sl.last_ns > sl.first_ns + kTailNs ? sl.last_ns - kTailNs : 0;
    if (sl.xfers.size() > kAperiodicMaxXfers)
      from = std::max(from, sl.xfers[sl.xfers.size() - kAperiodicMaxXfers].t0);
    if (from > h.tail_from) {
      h.tail_from = from;
      h.anchor = 0;
      h.boundaries.clear();
      h.iterations.clear();
    }
  }
  return j;
}

}  // namespace netprism::analysis
