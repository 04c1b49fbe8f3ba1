// Streaming analysis, what is kept: events added, connections forgotten, ids compacted, transfers pruned and
// bounded (see incremental.hpp for what is kept and why it matches analyze(); the pass: incremental_job.cpp).
#include "incremental.hpp"

#include <algorithm>
#include <tuple>

namespace netprism::analysis {
namespace {

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
        if (const auto* slot = fl.xs.next_slot()) __builtin_prefetch(slot, 1);
      }
    add(events[i], hashes[i]);
  }
}

uint64_t StreamingAnalysis::data_bytes_of(const Event& e) const {
  // The address family counts only for an event without payload count nor direction (a CSV row's): its
  // address text is looked at then only, as normalize() looks at it.
  const bool v6 = e.payload_bytes == 0 && e.dir < 0 && is_v6(strs_[e.src]);
  return data_bytes(e.payload_bytes, e.dir, v6, e.packets, e.bytes);
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
  add_to_conn(c, e);
  uint64_t bytes = data_bytes_of(e);
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
  fl.xs.push_back({e.observer, record_packets(e), e.first_ns, t1, bytes});
  ++total_xfers_;
  ++c.fresh;
}

void StreamingAnalysis::expire(uint64_t now_ns) {
  if (now_ns <= lim_.window_ns) return;
  uint64_t since = now_ns - lim_.window_ns;
  // A connection silent for the window is forgotten, unless its job (as the last pass grouped it) was active
  // within the window and is young or settled:
  //  - young: its whole history is re-analysed every pass, so losing its first connections would drop its
  //    first iterations from the live answer and from the record it is retired with. Sources that open a
  //    port or QP per message (SimAI's records) lose a connection after every message: the SimAI copy of a
  //    30-minute target run retired with 2 of its 3 iterations. A young job is bounded (kTailBudgetXfers),
  //    and so is what this keeps.
  //  - settled (hung, idle or ended at its last analysis): its connections fall silent within seconds of
  //    each other; forgotten one by one, the job was re-analysed over the tail of those left, the stitch
  //    failed, and it lost its history: in a 30-minute target run stopped jobs went from 47-419 iterations
  //    to 0 and were then deleted as regrouped, and a replayed copy retired with 0 of its 11. Kept whole, it
  //    leaves the window at once, retired with every iteration. A settled job opens no connections.
  // A running job's connections silent for the window go (a bootstrap connection, a port per message): they
  // hold none of its tail, and keeping them would grow with the job's age.
  auto keep = [&](const ConnSt& c) {
    if (c.last_ns >= since) return true;
    auto job = job_of_uid_.find(c.uid);
    if (job == job_of_uid_.end()) return false;
    auto h = hist_.find(job->second);
    return h != hist_.end() && h->second.last_ns >= since && (h->second.tail_from == 0 || h->second.settled);
  };
  if (std::all_of(conns_.begin(), conns_.end(), [&](const ConnSt& c) { return c.last_ns >= since; })) return;
  std::vector<char> kept(conns_.size());
  for (uint32_t c = 0; c < conns_.size(); ++c) kept[c] = keep(conns_[c]);
  if (std::all_of(kept.begin(), kept.end(), [](char k) { return k != 0; })) return;
  // In place (each kept record moves down over the forgotten ones): building new vectors beside the old
  // ones, at every pass that forgot a connection, held both for the copy, and the heap kept that peak.
  std::vector<uint32_t> conn_map(conns_.size(), UINT32_MAX);
  uint32_t n = 0;
  for (uint32_t c = 0; c < conns_.size(); ++c)
    if (kept[c]) {
      conn_map[c] = n;
      if (n != c) conns_[n] = std::move(conns_[c]);
      ++n;
    }
  conns_.erase(conns_.begin() + n, conns_.end());
  size_t m = 0;
  for (size_t f = 0; f < flows_.size(); ++f) {
    FlowSt& fl = flows_[f];
    if (conn_map[fl.conn] == UINT32_MAX) {
      total_xfers_ -= fl.xs.size();
      continue;
    }
    fl.conn = conn_map[fl.conn];
    if (m != f) flows_[m] = std::move(fl);
    ++m;
  }
  flows_.erase(flows_.begin() + static_cast<long>(m), flows_.end());
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
      for (size_t i = 0; i < fl.xs.size(); ++i) keep(fl.xs[i].obs);
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
  flow_idx_.reset(flows_.size());
  for (uint32_t f = 0; f < flows_.size(); ++f) flow_idx_.insert(hash_of(flows_[f].key), f);
  conn_idx_.reset(conns_.size());
  for (uint32_t c = 0; c < conns_.size(); ++c) {
    conn_idx_.insert(hash_of(conns_[c].key), c);
    conns_[c].flows.clear();
  }
  for (uint32_t f = 0; f < flows_.size(); ++f) conns_[flows_[f].conn].flows.push_back(f);
  if (strings)
    for (auto& fl : flows_) node_of_addr(fl.key.src);  // renumber nodes in flow order (first sender first)
}

void StreamingAnalysis::prune(const std::vector<uint64_t>& keep_from_conn, uint64_t) {
  stats_.xfer_slots = 0;  // the room left, counted on the way (Stats::xfer_slots)
  for (auto& fl : flows_) {
    uint64_t from = keep_from_conn[fl.conn];
    // Arrival order is close to time order (agents send batches as flowlets end); stop at the first
    // transfer still needed, so a late one only delays eviction of the few behind it.
    size_t h = 0;
    while (h < fl.xs.size() && fl.xs[h].t1 < from) ++h;
    total_xfers_ -= h;
    fl.xs.pop_front(h);
    stats_.xfer_slots += fl.xs.capacity();
  }
}

void StreamingAnalysis::enforce_xfer_bound() {
  if (total_xfers_ <= lim_.max_xfers) return;
  std::vector<uint64_t> t1;
  t1.reserve(total_xfers_);
  for (const auto& fl : flows_)
    for (size_t i = 0; i < fl.xs.size(); ++i) t1.push_back(fl.xs[i].t1);
  size_t target = static_cast<size_t>(kEvictTo * static_cast<double>(lim_.max_xfers));
  size_t drop = t1.size() - std::min(t1.size(), target);
  if (drop == 0) return;
  std::nth_element(t1.begin(), t1.begin() + static_cast<long>(drop - 1), t1.end());
  uint64_t cut = t1[drop - 1];
  stats_.xfer_slots = 0;  // counted again: the rings shrank
  for (auto& fl : flows_) {
    const uint64_t gone = fl.xs.retain_if([cut](const XRec& x) { return x.t1 > cut; });
    stats_.dropped_xfers += gone;
    total_xfers_ -= gone;
    stats_.xfer_slots += fl.xs.capacity();
  }
}

}  // namespace netprism::analysis
