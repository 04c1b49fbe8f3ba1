// Diagnosis, fabric: a link between switches, or a switch's links, that slows the traffic of every job
// crossing it. Tomography over the jobs' traffic: each job's slow-link step rates every direction between
// two of its nodes against the job's comparable links (diagnosis_link.cpp); here the directions of all jobs
// are laid on the fabric of the topology file, and the smallest explanation of the slow ones is sought among
// the elements that no healthy direction certainly crosses.
//
// Elements: every link (a host link "n1<->leaf1" is the node's NIC and cable; a fabric link joins two
// switches) and every switch with two or more fabric links (standing for all of them: "leaf1" is its
// uplinks). A direction's routes: its `path` line when the topology file has one (the ECMP choice, measured
// on the switches), otherwise every shortest route through switches (ECMP: the spine is unknown from host
// data). An element is certainly on a direction when it is on all its routes, possibly when on some.
// - exonerated: certainly crossed by a healthy direction (measured in kLinkPersist iterations or more, never
//   slow): a degraded link slows every direction through it.
// - chosen greedily: the element possibly crossed by the most unexplained slow directions, then the one
//   certainly crossed by most, then the most specific (a host link before a fabric link before a switch:
//   a switch is named only when one of its links cannot explain as much). Elements of the same cover and
//   rank are named together: the smallest set the data cannot tell apart (without path lines, a leaf's
//   uplinks to different spines).
// A fabric element is reported when it explains two or more slow directions that do not all share one node
// (those would be that node's NIC, which the per-job slow_link finding names); a straggler's compute does not
// slow transfers, so it raises no slow direction here at all.
#include <algorithm>
#include <map>
#include <set>

#include "diagnosis_steps.hpp"
#include "stats.hpp"

namespace netprism::analysis {
namespace {

constexpr size_t kHealthyMeasured = 4;  // = kLinkPersist: as many iterations as a slow direction needs
constexpr size_t kMaxRoutes = 64;       // shortest routes enumerated per direction (ECMP fan-out)

struct Element {
  std::string label;
  int rank = 0;  // specificity: 2 host link, 1 fabric link, 0 switch
  std::set<int> links;
};

struct Net {
  std::map<std::string, int> id;
  std::vector<std::string> name;
  std::vector<std::vector<std::pair<int, int>>> adj;  // vertex -> (neighbour, link)
  std::map<std::pair<int, int>, int> link_of;
  std::vector<Element> elements;
  const Fabric* f = nullptr;
  int vertex(const std::string& v) {
    auto [it, fresh] = id.emplace(v, static_cast<int>(name.size()));
    if (fresh) {
      name.push_back(v);
      adj.emplace_back();
    }
    return it->second;
  }
  bool is_switch(int v) const { return f->switches.count(name[static_cast<size_t>(v)]) > 0; }
};

Net build(const Fabric& f) {
  Net g;
  g.f = &f;
  std::map<int, std::set<int>> switch_links;
  for (const auto& [a, b] : f.links) {
    int u = g.vertex(a), v = g.vertex(b);
    if (g.link_of.count({u, v})) continue;
    int l = static_cast<int>(g.elements.size());
    g.link_of[{u, v}] = g.link_of[{v, u}] = l;
    g.adj[static_cast<size_t>(u)].emplace_back(v, l);
    g.adj[static_cast<size_t>(v)].emplace_back(u, l);
    bool fabric = g.is_switch(u) && g.is_switch(v);
    g.elements.push_back({a + "<->" + b, fabric ? 1 : 2, {l}});
    if (fabric) switch_links[u].insert(l), switch_links[v].insert(l);
  }
  for (const auto& [v, links] : switch_links)
    if (links.size() >= 2) g.elements.push_back({g.name[static_cast<size_t>(v)], 0, links});
  return g;
}

using Route = std::set<int>;  // link ids

// Every shortest route from u to v whose inner vertices are switches (at most kMaxRoutes).
void shortest(const Net& g, int u, int v, std::vector<Route>& out) {
  std::vector<int> dist(g.name.size(), -1);
  std::vector<int> queue{v};
  dist[static_cast<size_t>(v)] = 0;
  for (size_t q = 0; q < queue.size(); ++q) {  // distances to v
    int x = queue[q];
    if (x != v && !g.is_switch(x)) continue;
    for (auto [y, l] : g.adj[static_cast<size_t>(x)])
      if (dist[static_cast<size_t>(y)] < 0)
        dist[static_cast<size_t>(y)] = dist[static_cast<size_t>(x)] + 1, queue.push_back(y);
  }
  if (dist[static_cast<size_t>(u)] < 0) return;
  std::vector<std::pair<int, Route>> stack{{u, {}}};
  while (!stack.empty() && out.size() < kMaxRoutes) {
    auto [x, r] = stack.back();
    stack.pop_back();
    if (x == v) {
      out.push_back(r);
      continue;
    }
    if (x != u && !g.is_switch(x)) continue;
    for (auto [y, l] : g.adj[static_cast<size_t>(x)])
      if (dist[static_cast<size_t>(y)] == dist[static_cast<size_t>(x)] - 1) {
        Route next = r;
        next.insert(l);
        stack.emplace_back(y, std::move(next));
      }
  }
}

// The routes of src -> dst: its path line when every hop of it is a link, else the shortest routes.
std::vector<Route> routes(const Net& g, const std::string& src, const std::string& dst, bool& known) {
  known = false;
  auto a = g.id.find(src), b = g.id.find(dst);
  if (a == g.id.end() || b == g.id.end()) return {};
  if (auto p = g.f->paths.find({src, dst}); p != g.f->paths.end()) {
    std::vector<std::string> hops{src};
    hops.insert(hops.end(), p->second.begin(), p->second.end());
    hops.push_back(dst);
    Route r;
    for (size_t i = 0; i + 1 < hops.size(); ++i) {
      auto x = g.id.find(hops[i]), y = g.id.find(hops[i + 1]);
      auto l = x == g.id.end() || y == g.id.end() ? g.link_of.end() : g.link_of.find({x->second, y->second});
      if (l == g.link_of.end()) break;
      r.insert(l->second);
      if (i + 2 == hops.size()) return known = true, std::vector<Route>{r};
    }
  }
  std::vector<Route> out;
  shortest(g, a->second, b->second, out);
  return out;
}

struct Dir {
  size_t job;
  const DirectionState* st;
  std::vector<Route> routes;
  bool known = false;
};

bool on(const Element& e, const Route& r) {
  return std::any_of(e.links.begin(), e.links.end(), [&](int l) { return r.count(l) > 0; });
}
bool certain(const Element& e, const Dir& d) {
  return std::all_of(d.routes.begin(), d.routes.end(), [&](const Route& r) { return on(e, r); });
}
bool possible(const Element& e, const Dir& d) {
  return std::any_of(d.routes.begin(), d.routes.end(), [&](const Route& r) { return on(e, r); });
}

struct Choice {
  std::vector<size_t> elements;  // the ambiguous set, first the chosen one
  std::vector<size_t> cover;     // indices into the slow directions
};

// Greedy cover of the slow directions by non-exonerated elements (see the file comment).
std::vector<Choice> explain(const Net& g, const std::vector<Dir>& slow, const std::vector<char>& exonerated) {
  std::vector<Choice> out;
  std::vector<char> done(slow.size(), 0);
  for (;;) {
    std::vector<std::pair<std::tuple<size_t, size_t, int>, std::vector<size_t>>> cand(g.elements.size());
    for (size_t e = 0; e < g.elements.size(); ++e) {
      if (exonerated[e]) continue;
      size_t sure = 0;
      for (size_t k = 0; k < slow.size(); ++k)
        if (!done[k] && possible(g.elements[e], slow[k])) {
          cand[e].second.push_back(k);
          sure += certain(g.elements[e], slow[k]);
        }
      cand[e].first = {cand[e].second.size(), sure, g.elements[e].rank};
    }
    size_t best = 0;
    for (size_t e = 1; e < cand.size(); ++e)
      if (cand[e].first > cand[best].first) best = e;
    if (cand.empty() || cand[best].second.empty()) return out;
    Choice c{{best}, cand[best].second};
    for (size_t e = 0; e < cand.size(); ++e)
      if (e != best && cand[e].first == cand[best].first && cand[e].second == cand[best].second)
        c.elements.push_back(e);
    for (size_t k : c.cover) done[k] = 1;
    out.push_back(std::move(c));
  }
}

std::string describe(const std::vector<Dir>& slow, const std::vector<size_t>& cover,
                     const std::vector<JobDirections>& jobs) {
  std::string s;
  size_t last_job = SIZE_MAX;
  for (size_t k : cover) {
    const Dir& d = slow[k];
    if (d.job != last_job) s += std::string(s.empty() ? " " : "; ") + "job " + jobs[d.job].job_id + ":";
    last_job = d.job;
    s += " " + d.st->src + "->" + d.st->dst + " " + diagnosis_steps::fmt("%.2fx", d.st->ratio) +
         " from iteration " + std::to_string(d.st->onset);
  }
  return s;
}

// Healthy directions certainly crossing the elements next to the chosen one (sharing a switch with it, or
// the host links of the slow directions' nodes): why they are not the fault.
std::string cleared(const Net& g, const Choice& c, const std::vector<Dir>& slow,
                    const std::vector<size_t>& healthy_on) {
  std::set<int> near;
  for (size_t e : c.elements)
    for (int l : g.elements[e].links)
      for (const auto& [pair, link] : g.link_of)
        if (link == l)
          for (int v : {pair.first, pair.second})
            if (g.is_switch(v))
              for (auto [y, l2] : g.adj[static_cast<size_t>(v)]) near.insert(l2);
  for (size_t k : c.cover)
    for (const std::string& v : {slow[k].st->src, slow[k].st->dst})
      if (auto it = g.id.find(v); it != g.id.end())
        for (auto [y, l] : g.adj[static_cast<size_t>(it->second)]) near.insert(l);
  std::string s;
  for (int l : near) {
    bool chosen = false;
    for (size_t e : c.elements) chosen |= g.elements[e].links.count(l) > 0;
    if (!chosen && healthy_on[static_cast<size_t>(l)] > 0)
      s += std::string(s.empty() ? "" : ", ") + g.elements[static_cast<size_t>(l)].label + " (" +
           std::to_string(healthy_on[static_cast<size_t>(l)]) + ")";
  }
  return s.empty() ? "none measured" : s;
}

bool one_node(const std::vector<Dir>& slow, const std::vector<size_t>& cover) {
  for (const std::string& v : {slow[cover[0]].st->src, slow[cover[0]].st->dst})
    if (std::all_of(cover.begin(), cover.end(),
                    [&](size_t k) { return slow[k].st->src == v || slow[k].st->dst == v; }))
      return true;
  return false;
}

}  // namespace

std::vector<std::vector<Finding>> fabric_findings(const Fabric& f, const std::vector<JobDirections>& jobs) {
  std::vector<std::vector<Finding>> out(jobs.size());
  if (f.empty()) return out;
  Net g = build(f);
  std::vector<Dir> slow, healthy;
  for (size_t j = 0; j < jobs.size(); ++j)
    for (const DirectionState& st : jobs[j].dirs) {
      Dir d{j, &st, {}};
      d.routes = routes(g, st.src, st.dst, d.known);
      if (d.routes.empty()) continue;
      if (st.onset >= 0)
        slow.push_back(std::move(d));
      else if (st.measured >= kHealthyMeasured)
        healthy.push_back(std::move(d));
    }
  std::vector<char> exonerated(g.elements.size(), 0);
  std::vector<size_t> healthy_on(g.elements.size(), 0);  // per element: healthy directions certainly on it
  for (size_t e = 0; e < g.elements.size(); ++e)
    for (const Dir& d : healthy)
      if (certain(g.elements[e], d)) exonerated[e] = 1, ++healthy_on[e];
  for (const Choice& c : explain(g, slow, exonerated)) {
    const Element& e = g.elements[c.elements.front()];
    if (e.rank == 2 || c.cover.size() < 2 || one_node(slow, c.cover)) continue;
    std::string subject;
    for (size_t k : c.elements) subject += (subject.empty() ? "" : "|") + g.elements[k].label;
    std::vector<double> ratios;
    std::set<size_t> in_jobs;
    bool known = true;
    for (size_t k : c.cover)
      ratios.push_back(slow[k].st->ratio), in_jobs.insert(slow[k].job), known &= slow[k].known;
    std::string ev =
        std::to_string(c.cover.size()) + " slow directions of " + std::to_string(in_jobs.size()) +
        " job(s) cross " + (e.rank == 0 ? "switch " + subject + "'s links to other switches" : subject) +
        (c.elements.size() > 1 ? " (one of these: the data cannot tell them apart)" : "") + " (" +
        (known ? "paths from the topology file's path lines" : "some paths unknown: every ECMP route") +
        "), rate vs each job's comparable links:" + describe(slow, c.cover, jobs) +
        ". Healthy directions certainly crossing the neighbouring links, which clears them (a host link is "
        "its node's NIC): " +
        cleared(g, c, slow, healthy_on) + ".";
    for (size_t j : in_jobs) {
      Finding fd;
      fd.kind = "fabric";
      fd.subject = subject;
      fd.first_iteration = INT32_MAX;
      for (size_t k : c.cover)
        if (slow[k].job == j && slow[k].st->onset < fd.first_iteration)
          fd.first_iteration = slow[k].st->onset, fd.start_ns = slow[k].st->start_ns;
      fd.severity = 1.0 / std::max(median(ratios), 1e-6);
      fd.evidence = ev;
      out[j].push_back(std::move(fd));
    }
  }
  return out;
}

}  // namespace netprism::analysis
