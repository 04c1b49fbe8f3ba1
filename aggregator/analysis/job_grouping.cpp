// Stage 2: which connections carry training traffic, and which nodes train together.
//
// A job is a set of nodes exchanging training traffic at the same time. Union-find runs over connections:
// two training connections that share a node and whose lifetimes overlap belong to the same job. Using
// lifetimes (not just endpoints) lets a later job reuse the same nodes without being merged with the
// earlier one, and keeps concurrent jobs on disjoint nodes apart.
#include <algorithm>
#include <cstdio>
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
// Periodic traffic shows up as many bursts; one or two large bursts (a checkpoint copy, a dataset
// download) are not iterations. Four is the least that still lets the timeline see three iterations.
constexpr uint64_t kMinTransfers = 4;

struct UnionFind {
  std::vector<uint32_t> p;
  explicit UnionFind(size_t n) : p(n) { std::iota(p.begin(), p.end(), 0u); }
  uint32_t find(uint32_t x) {
    while (p[x] != x) x = p[x] = p[p[x]];
    return x;
  }
  void unite(uint32_t a, uint32_t b) { p[find(a)] = find(b); }
};

// Union of connections that share a node and overlap in time. Per node: sort its connections by start and
// sweep with the running end, so the cost is O(C log C), never pairwise.
UnionFind overlap_union(const Normalized& n, const std::vector<bool>& keep) {
  UnionFind uf(n.conns.size());
  std::vector<std::vector<uint32_t>> by_node(n.nodes.size());
  for (uint32_t c = 0; c < n.conns.size(); ++c) {
    if (!keep[c]) continue;
    by_node[n.conns[c].a].push_back(c);
    by_node[n.conns[c].b].push_back(c);
  }
  for (auto& list : by_node) {
    std::sort(list.begin(), list.end(),
              [&](uint32_t x, uint32_t y) { return n.conns[x].first_ns < n.conns[y].first_ns; });
    uint64_t run_end = 0;
    uint32_t rep = 0;
    bool open = false;
    for (uint32_t c : list) {
      if (open && n.conns[c].first_ns <= run_end) {
        uf.unite(c, rep);
        run_end = std::max(run_end, n.conns[c].last_ns);
      } else {
        rep = c;
        run_end = n.conns[c].last_ns;
        open = true;
      }
    }
  }
  return uf;
}

}  // namespace

std::vector<bool> training_connections(const Normalized& n) {
  std::vector<bool> keep(n.conns.size(), false);
  for (size_t c = 0; c < n.conns.size(); ++c) {
    const Conn& k = n.conns[c];
    keep[c] = k.a != k.b && k.bytes_ab + k.bytes_ba >= kMinTrainingBytes && k.xfers >= kMinTransfers;
  }
  UnionFind uf = overlap_union(n, keep);
  std::unordered_map<uint32_t, uint64_t> heaviest;
  for (uint32_t c = 0; c < n.conns.size(); ++c)
    if (keep[c]) {
      uint64_t& h = heaviest[uf.find(c)];
      h = std::max(h, n.conns[c].bytes_ab + n.conns[c].bytes_ba);
    }
  for (uint32_t c = 0; c < n.conns.size(); ++c)
    if (keep[c])
      keep[c] = static_cast<double>(n.conns[c].bytes_ab + n.conns[c].bytes_ba) >=
                kMinShareOfHeaviest * static_cast<double>(heaviest[uf.find(c)]);
  return keep;
}

std::vector<JobSlice> group_jobs(const Normalized& n) {
  std::vector<bool> keep = training_connections(n);
  UnionFind uf = overlap_union(n, keep);
  std::unordered_map<uint32_t, size_t> slot;
  std::vector<JobSlice> jobs;
  for (uint32_t c = 0; c < n.conns.size(); ++c) {
    if (!keep[c]) continue;
    auto [it, inserted] = slot.try_emplace(uf.find(c), jobs.size());
    if (inserted) jobs.emplace_back();
    jobs[it->second].conns.push_back(c);
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
  for (const Xfer& x : n.xfers)  // already sorted by t0, so each job's list is too
    if (job_of_conn[x.conn] >= 0) jobs[static_cast<size_t>(job_of_conn[x.conn])].xfers.push_back(x);
  for (const Xfer& x : n.arrivals)
    if (job_of_conn[x.conn] >= 0) jobs[static_cast<size_t>(job_of_conn[x.conn])].arrivals.push_back(x);
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
