// Stage 2: which connections carry training traffic, and which nodes train together.
//
// A job is a set of nodes exchanging training traffic at the same time. Union-find runs over grouping
// units (a long-lived connection, or the short connections of one endpoint pair, see grouping_units): two
// training units that share a node and whose lifetimes overlap belong to the same job. Using
// lifetimes (not just endpoints) lets a later job reuse the same nodes without being merged with the
// earlier one, and keeps concurrent jobs on disjoint nodes apart.
//
// A multi-NIC server can host several tenants (each job its GPUs and their NICs), so "shares a node" is
// first read at the address level: units that share an address (a NIC) and overlap in time are one job.
// Address components that meet only on a server (different NICs of it) are then one job only when their
// traffic is driven by the same clock (see kMinRailCoupling): the rails of one job carry the same
// collectives at the same moments, two tenants do not. Without a topology (or with one NIC per node) an
// address is a node and this is the node-level union above.
#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
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

// Two address components meeting on a server are rails of one job when the phi coefficient of their busy
// indicators (activity_coupling.cpp) is at least 0.5. Measured: the 8 rails of SimAI job_c (a ring per rail,
// the same collectives at the same instants) 1.00 for all 28 pairs, offline and in every streaming pass;
// two real testbed jobs merged onto the same four servers (tests/e2e/samples/tenants_shared_nodes: OpenMPI
// DP4 beside PyTorch DDP DP4, tests/e2e/merge_tenants.py) 0.01; job_c beside a 1.2x slower copy of itself
// on the same servers (simai_test.cpp) -0.02 when 40 ms apart, 0.25 when both start in the same instant
// (their first bursts coincide, then drift apart over 4 iterations). 0.5 is the midpoint between
// "independent" (0) and "together" (1), with 0.25 of margin on the worst measured side.
constexpr double kMinRailCoupling = 0.5;
// ... judged over the last 30 s in which both were seen: dozens of iterations of a training job (steps of
// 0.1-10 s; three of the slowest), and it bounds what the daemon reads for it each pass to its tails'
// kTailNs (incremental.hpp) however long the jobs have run.
constexpr uint64_t kCouplingWindowNs = 30'000'000'000ull;

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
  uint32_t a = 0, b = 0;            // node indices
  uint32_t addr_a = 0, addr_b = 0;  // interned address ids
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
    t.addr_a = n.conns[unit[c]].addr_a;
    t.addr_b = n.conns[unit[c]].addr_b;
    t.bytes += k.bytes_ab + k.bytes_ba;
    t.xfers += k.xfers;
    t.first_ns = std::min(t.first_ns, k.first_ns);
    t.last_ns = std::max(t.last_ns, k.last_ns);
  }
  return u;
}

// Union of units that share an endpoint (a node, or with by_address an address) and overlap in time. Per
// endpoint: sort its units by start and sweep with the running end, so the cost is O(C log C), never
// pairwise.
UnionFind overlap_union(const std::vector<Unit>& units, const std::vector<bool>& keep, bool by_address) {
  UnionFind uf(units.size());
  std::unordered_map<uint32_t, std::vector<uint32_t>> by_end;
  for (uint32_t c = 0; c < units.size(); ++c) {
    if (!keep[c]) continue;
    by_end[by_address ? units[c].addr_a : units[c].a].push_back(c);
    by_end[by_address ? units[c].addr_b : units[c].b].push_back(c);
  }
  for (auto& [end, list] : by_end) {
    std::sort(list.begin(), list.end(), [&](uint32_t x, uint32_t y) {
      return std::tie(units[x].first_ns, x) < std::tie(units[y].first_ns, y);
    });
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
std::vector<bool> training_units(const std::vector<Unit>& units, const std::vector<uint32_t>& unit) {
  std::vector<bool> keep(units.size(), false);
  for (uint32_t c = 0; c < units.size(); ++c) {
    const Unit& u = units[c];
    keep[c] = unit[c] == c && u.a != u.b && u.bytes >= kMinTrainingBytes && u.xfers >= kMinTransfers;
  }
  UnionFind uf = overlap_union(units, keep, false);
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

// Address components (roots of uf) that meet on a node and overlap in time, each pair once.
std::set<std::pair<uint32_t, uint32_t>> meeting_components(const std::vector<Unit>& units,
                                                           const std::vector<bool>& keep, UnionFind& uf) {
  std::unordered_map<uint32_t, std::pair<uint64_t, uint64_t>> life;
  std::unordered_map<uint32_t, std::vector<uint32_t>> on_node;
  for (uint32_t c = 0; c < units.size(); ++c) {
    if (!keep[c]) continue;
    uint32_t r = uf.find(c);
    auto [it, fresh] = life.try_emplace(r, units[c].first_ns, units[c].last_ns);
    it->second = {std::min(it->second.first, units[c].first_ns),
                  std::max(it->second.second, units[c].last_ns)};
    on_node[units[c].a].push_back(r);
    on_node[units[c].b].push_back(r);
  }
  std::set<std::pair<uint32_t, uint32_t>> out;
  for (auto& [node, roots] : on_node) {
    std::sort(roots.begin(), roots.end());
    roots.erase(std::unique(roots.begin(), roots.end()), roots.end());
    for (size_t i = 0; i < roots.size(); ++i)
      for (size_t j = i + 1; j < roots.size(); ++j) {
        auto x = life[roots[i]], y = life[roots[j]];
        if (x.first <= y.second && y.first <= x.second) out.emplace(roots[i], roots[j]);
      }
  }
  return out;
}

// Unites the address components that meet on a server and are driven by the same clock (kMinRailCoupling).
void join_coupled_rails(const Normalized& n, const std::vector<Unit>& units, const std::vector<bool>& keep,
                        const std::vector<uint32_t>& unit, UnionFind& uf, const ConnActivity& activity) {
  auto pairs = meeting_components(units, keep, uf);
  if (pairs.empty()) return;
  std::unordered_map<uint32_t, Intervals> busy;
  for (auto [x, y] : pairs) busy[x], busy[y];
  // Transfers ending before the earliest window of a pair are never looked at.
  std::unordered_map<uint32_t, uint64_t> last;
  for (uint32_t c = 0; c < units.size(); ++c)
    if (keep[c] && busy.count(uf.find(c))) last[uf.find(c)] = std::max(last[uf.find(c)], units[c].last_ns);
  uint64_t from = UINT64_MAX;
  for (auto [r, t] : last) from = std::min(from, t > kCouplingWindowNs ? t - kCouplingWindowNs : 0);
  auto root_of = [&](uint32_t c) -> Intervals* {
    if (!keep[unit[c]]) return nullptr;
    auto it = busy.find(uf.find(unit[c]));
    return it == busy.end() ? nullptr : &it->second;
  };
  if (activity) {
    for (uint32_t c = 0; c < n.conns.size(); ++c)
      if (Intervals* b = root_of(c)) activity(c, from, *b);
  } else {
    for (const Xfer& x : n.xfers)
      if (x.t1 >= from)
        if (Intervals* b = root_of(x.conn)) b->emplace_back(x.t0, x.t1);
  }
  for (auto& [r, iv] : busy) iv = busy_intervals(std::move(iv));
  std::vector<std::pair<uint32_t, uint32_t>> joins;  // decided on the components as found, then united
  for (auto [x, y] : pairs) {
    if (activity_coupling(busy[x], busy[y], kCouplingWindowNs) >= kMinRailCoupling) joins.emplace_back(x, y);
  }
  for (auto [x, y] : joins) uf.unite(x, y);
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
  std::vector<bool> ku = training_units(unit_totals(n, unit), unit);
  std::vector<bool> keep(n.conns.size());
  for (uint32_t c = 0; c < n.conns.size(); ++c) keep[c] = ku[unit[c]];
  return keep;
}

std::vector<JobSlice> group_jobs(const Normalized& n, const ConnActivity& activity) {
  std::vector<uint32_t> unit = grouping_units(n);
  std::vector<Unit> units = unit_totals(n, unit);
  std::vector<bool> keep = training_units(units, unit);
  UnionFind uf = overlap_union(units, keep, true);
  join_coupled_rails(n, units, keep, unit, uf, activity);
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
  salt_shared_ids(n, jobs);
  return jobs;
}

void salt_shared_ids(const Normalized& n, std::vector<JobSlice>& jobs) {
  std::map<std::pair<std::vector<uint32_t>, uint64_t>, std::vector<size_t>> same;
  for (size_t j = 0; j < jobs.size(); ++j) {
    jobs[j].id_salt.clear();
    same[{jobs[j].nodes, jobs[j].first_ns / 1000000}].push_back(j);
  }
  for (auto& [key, js] : same) {
    if (js.size() < 2) continue;
    for (size_t j : js) {
      std::string least;
      for (uint32_t c : jobs[j].conns) {
        const std::string& l = n.conns[c].label;  // "addr:port<->addr:port"
        size_t mid = l.find("<->");
        if (mid == std::string::npos) continue;
        for (std::string end : {l.substr(0, mid), l.substr(mid + 3)}) {
          std::string addr = end.substr(0, end.rfind(':'));
          if (least.empty() || addr < least) least = addr;
        }
      }
      jobs[j].id_salt = least;
    }
  }
}

// Stable across re-analysis (live refreshes and the offline run over the same recording): the sorted node
// names and the first training transfer (millisecond resolution), hashed with FNV-1a; with the salt of
// tenants that would otherwise collide (salt_shared_ids).
std::string job_id(const std::vector<std::string>& sorted_nodes, uint64_t first_ns, const std::string& salt) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](const std::string& s) {
    for (unsigned char ch : s) {
      h ^= ch;
      h *= 1099511628211ull;
    }
  };
  for (const auto& s : sorted_nodes) mix(s + ",");
  mix(std::to_string(first_ns / 1000000));
  if (!salt.empty()) mix("," + salt);
  char buf[32];
  std::snprintf(buf, sizeof buf, "j%010llx", static_cast<unsigned long long>(h & 0xffffffffffull));
  return buf;
}

}  // namespace netprism::analysis
