// Stage 2: which connections carry training traffic, and which nodes train together.
//
// A job is a set of nodes exchanging training traffic at the same time. Union-find runs over grouping
// units (a long-lived connection, or the short connections of one endpoint pair, see grouping_units): two
// training units that share a node and whose lifetimes overlap belong to the same job. Using
// lifetimes (not just endpoints) lets a later job reuse the same nodes without being merged with the
// earlier one, and keeps concurrent jobs on disjoint nodes apart.
#include <algorithm>
#include <cstdio>
#include <map>
#include <tuple>
#include <numeric>
#include <unordered_map>

#include "stages.hpp"

namespace netprism::analysis {
namespace {

// A training connection moves tensors every iteration: even a tiny model's activations (kilobytes) over
// tens of iterations add up to far more than 64 KiB, while rendezvous/store RPCs, barriers and connection
// set-up move a few kilobytes in total.
constexpr uint64_t kMinTrainingBytes = 64 * 1024;
// Relative floor inside one group of overlapping connections: the lightest real training edge (pipeline
// activations of a large model with few micro-batches) still carries a few percent of the heaviest (its
// gradient all-reduce); 0.1 % keeps those with an order of magnitude of margin and drops the per-job
// control traffic (barriers, the all-pairs connections a process group opens but never uses for data).
constexpr double kMinShareOfHeaviest = 0.001;
// Periodic traffic shows up as repeated bursts; one or two large bursts (a checkpoint copy, a dataset
// download) are not iterations. Three transfers are the fewest that repeat (two intervals): a job seen
// for three iterations has at least one transfer per synchronisation on each connection it uses, so it is
// recognised from a recording that short (issue 17: "a job with its groups from 3 observed iterations").
constexpr uint64_t kMinTransfers = 3;

// A short connection joins its endpoint pair's pool when it carries at least a chunk of a tensor: 4 KiB
// (a thousand floats; NCCL and gloo move collectives in chunks far larger). Control connections carry less:
// handshakes, rendezvous and barrier RPCs (tens to hundreds of bytes, measured on the testbed). Without this
// floor, the young connections of a TCP job (each with a transfer or two so far) pooled with its control
// connections when the daemon first saw them, and the job took an earlier first transfer (its id) than the
// analysis of the whole recording.
constexpr uint64_t kMinPooledBytes = 4096;

struct UnionFind {
  std::vector<uint32_t> p;
  explicit UnionFind(size_t n) : p(n) { std::iota(p.begin(), p.end(), 0u); }
  uint32_t find(uint32_t x) {
    while (p[x] != x) x = p[x] = p[p[x]];
    return x;
  }
  void unite(uint32_t a, uint32_t b) { p[find(a)] = find(b); }
};

// Totals of one grouping unit, stored at the index of the connection that stands for it.
struct Unit {
  uint32_t a = 0, b = 0;  // node indices
  uint64_t bytes = 0, xfers = 0;
  uint64_t first_ns = UINT64_MAX, last_ns = 0;
};

std::vector<Unit> unit_totals(const Normalized& n, const std::vector<uint32_t>& unit) {
  std::vector<Unit> u(n.conns.size());
  for (uint32_t c = 0; c < n.conns.size(); ++c) {
    const Conn& k = n.conns[c];
    Unit& t = u[unit[c]];
    t.a = n.conns[unit[c]].a;
    t.b = n.conns[unit[c]].b;
    t.bytes += k.bytes_ab + k.bytes_ba;
    t.xfers += k.xfers;
    t.first_ns = std::min(t.first_ns, k.first_ns);
    t.last_ns = std::max(t.last_ns, k.last_ns);
  }
  return u;
}

// Union of units that share a node and overlap in time. Per node: sort its units by start and sweep with
// the running end, so the cost is O(C log C), never pairwise.
UnionFind overlap_union(const Normalized& n, const std::vector<Unit>& units, const std::vector<bool>& keep) {
  UnionFind uf(units.size());
  std::vector<std::vector<uint32_t>> by_node(n.nodes.size());
  for (uint32_t c = 0; c < units.size(); ++c) {
    if (!keep[c]) continue;
    by_node[units[c].a].push_back(c);
    by_node[units[c].b].push_back(c);
  }
  for (auto& list : by_node) {
    std::sort(list.begin(), list.end(),
              [&](uint32_t x, uint32_t y) { return units[x].first_ns < units[y].first_ns; });
    uint64_t run_end = 0;
    uint32_t rep = 0;
    bool open = false;
    for (uint32_t c : list) {
      if (open && units[c].first_ns <= run_end) {
        uf.unite(c, rep);
        run_end = std::max(run_end, units[c].last_ns);
      } else {
        rep = c;
        run_end = units[c].last_ns;
        open = true;
      }
    }
  }
  return uf;
}

// Training units (indexed like the units: true at a unit's standing connection only).
std::vector<bool> training_units(const Normalized& n, const std::vector<Unit>& units,
                                 const std::vector<uint32_t>& unit) {
  std::vector<bool> keep(units.size(), false);
  for (uint32_t c = 0; c < units.size(); ++c) {
    const Unit& u = units[c];
    keep[c] = unit[c] == c && u.a != u.b && u.bytes >= kMinTrainingBytes && u.xfers >= kMinTransfers;
  }
  UnionFind uf = overlap_union(n, units, keep);
  std::unordered_map<uint32_t, uint64_t> heaviest;
  for (uint32_t c = 0; c < units.size(); ++c)
    if (keep[c]) {
      uint64_t& h = heaviest[uf.find(c)];
      h = std::max(h, units[c].bytes);
    }
  for (uint32_t c = 0; c < units.size(); ++c)
    if (keep[c])
      keep[c] = static_cast<double>(units[c].bytes) >=
                kMinShareOfHeaviest * static_cast<double>(heaviest[uf.find(c)]);
  return keep;
}

}  // namespace

// A connection that carries kMinTransfers transfers or more is a unit of its own (a TCP connection of a
// collective library, a long-lived QP seen by the agents). Fewer, and it cannot show a period on its own:
// either control traffic (handshakes, the all-pairs connections a process group opens but does not use) or
// one message of a source that writes a record per message on its own QP or source port (switch collectors,
// simulators; NCCL also spreads one peer's traffic over several QPs and channels). The short connections of
// one endpoint pair (addresses and protocol, ports ignored) are therefore pooled into one unit: what is
// periodic is the pair's traffic. Control connections pool too, and stay far below the training floors.
std::vector<uint32_t> grouping_units(const Normalized& n) {
  std::vector<uint32_t> unit(n.conns.size());
  std::map<std::tuple<uint32_t, uint32_t, uint8_t>, uint32_t> pool;
  for (uint32_t c = 0; c < n.conns.size(); ++c) {
    const Conn& k = n.conns[c];
    bool pooled = k.xfers < kMinTransfers && k.bytes_ab + k.bytes_ba >= kMinPooledBytes;
    unit[c] = pooled ? pool.try_emplace({k.addr_a, k.addr_b, k.proto}, c).first->second : c;
  }
  return unit;
}

std::vector<bool> training_connections(const Normalized& n) {
  std::vector<uint32_t> unit = grouping_units(n);
  std::vector<bool> ku = training_units(n, unit_totals(n, unit), unit);
  std::vector<bool> keep(n.conns.size());
  for (uint32_t c = 0; c < n.conns.size(); ++c) keep[c] = ku[unit[c]];
  return keep;
}

std::vector<JobSlice> group_jobs(const Normalized& n) {
  std::vector<uint32_t> unit = grouping_units(n);
  std::vector<Unit> units = unit_totals(n, unit);
  std::vector<bool> keep = training_units(n, units, unit);
  UnionFind uf = overlap_union(n, units, keep);
  std::unordered_map<uint32_t, size_t> slot;
  std::vector<JobSlice> jobs;
  for (uint32_t c = 0; c < n.conns.size(); ++c) {
    if (!keep[unit[c]]) continue;
    auto [it, inserted] = slot.try_emplace(uf.find(unit[c]), jobs.size());
    if (inserted) jobs.emplace_back();
    jobs[it->second].conns.push_back(c);
    jobs[it->second].unit.push_back(unit[c]);
  }
  std::vector<int64_t> job_of_conn(n.conns.size(), -1);
  for (size_t j = 0; j < jobs.size(); ++j) {
    std::vector<uint32_t> nodes;
    for (uint32_t c : jobs[j].conns) {
      job_of_conn[c] = static_cast<int64_t>(j);
      nodes.push_back(n.conns[c].a);
      nodes.push_back(n.conns[c].b);
    }
    std::sort(nodes.begin(), nodes.end(), [&](uint32_t x, uint32_t y) { return n.nodes[x] < n.nodes[y]; });
    nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
    jobs[j].nodes = std::move(nodes);
  }
  // Already sorted by t0, so each job's list is too. A transfer names its unit's standing connection.
  auto add = [&](Xfer x, auto member) {
    if (job_of_conn[x.conn] < 0) return;
    JobSlice& j = jobs[static_cast<size_t>(job_of_conn[x.conn])];
    x.conn = unit[x.conn];
    (j.*member).push_back(x);
  };
  for (const Xfer& x : n.xfers) add(x, &JobSlice::xfers);
  for (const Xfer& x : n.arrivals) add(x, &JobSlice::arrivals);
  for (auto& j : jobs) {
    j.first_ns = j.xfers.empty() ? 0 : j.xfers.front().t0;
    for (const Xfer& x : j.xfers) j.last_ns = std::max(j.last_ns, x.t1);
  }
  std::sort(jobs.begin(), jobs.end(),
            [](const JobSlice& a, const JobSlice& b) { return a.first_ns < b.first_ns; });
  return jobs;
}

// Stable across re-analysis (live refreshes and the offline run over the same recording): the sorted node
// names and the first training transfer (millisecond resolution), hashed with FNV-1a.
std::string job_id(const std::vector<std::string>& sorted_nodes, uint64_t first_ns) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](const std::string& s) {
    for (unsigned char ch : s) {
      h ^= ch;
      h *= 1099511628211ull;
    }
  };
  for (const auto& s : sorted_nodes) mix(s + ",");
  mix(std::to_string(first_ns / 1000000));
  char buf[32];
  std::snprintf(buf, sizeof buf, "j%010llx", static_cast<unsigned long long>(h & 0xffffffffffull));
  return buf;
}

}  // namespace netprism::analysis
