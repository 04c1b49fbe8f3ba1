// Every committed recording streamed as the daemon streams it (arrival order, a pass a second, the daemon's
// window and pass budget), then passes going on, no new data, until it has left the window: at every pass
// after its last event, each offline job is reported with exactly its nodes and iteration count. The
// 30-minute live_scale runs replay these recordings and compare the retired jobs with `netprism analyze`;
// what a job looks like while it sits ended in the window (connections forgotten one by one, settled
// re-checks) is what this pins.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>

#include "analysis.hpp"
#include "feed.hpp"
#include "incremental.hpp"

using namespace netprism::analysis;

namespace {

constexpr uint64_t kSec = 1'000'000'000ull;

std::vector<std::string> recordings() {
  std::vector<std::string> out;
  for (const auto& d : std::filesystem::directory_iterator(NP_SAMPLES_DIR))
    if (std::filesystem::exists(d.path() / "flows.csv.gz")) out.push_back(d.path().filename());
  std::sort(out.begin(), out.end());
  return out;
}

// Jobs by their sorted node names (each renamed by `name`) -> iteration count.
using Counts = std::map<std::vector<std::string>, size_t>;
Counts iterations_by_nodes(
    const Result& r,
    const std::function<std::string(const std::string&)>& name = [](const std::string& n) { return n; }) {
  Counts out;
  for (const auto& j : r.jobs) {
    std::vector<std::string> names;
    for (const auto& n : j.nodes) names.push_back(name(n));
    std::sort(names.begin(), names.end());
    out[names] = j.iterations.size();
  }
  return out;
}

// The order the daemon receives events in: by end time (agents send a flowlet once it ended).
void by_arrival(std::vector<FlowEvent>& events) {
  std::stable_sort(events.begin(), events.end(),
                   [](const FlowEvent& a, const FlowEvent& b) { return a.last_ns < b.last_ns; });
}

// The daemon's defaults: a 600 s window, at least 400 ms of CPU a pass.
StreamingAnalysis::Limits daemon_limits() {
  StreamingAnalysis::Limits lim;
  lim.pass_budget_ns = 400'000'000ull;
  return lim;
}

// Empty when the offline job (nodes, its iterations) is reported live as it should be: with exactly its
// iterations, or absent once it may have left the window; otherwise what was wrong.
std::string mismatch(const Counts& live, const std::vector<std::string>& nodes, size_t its,
                     bool may_be_gone) {
  auto it = live.find(nodes);
  if (it == live.end() ? may_be_gone : it->second == its) return "";
  return "job on " + std::to_string(nodes.size()) + " nodes (" + nodes.front() + "...) offline " +
         std::to_string(its) + " iterations, live " +
         (it == live.end() ? "absent" : std::to_string(it->second));
}

class ReplayWindow : public ::testing::TestWithParam<std::string> {};

}  // namespace

TEST_P(ReplayWindow, EveryPassAfterTheDataMatchesOffline) {
  const std::string dir = std::string(NP_SAMPLES_DIR) + "/" + GetParam();
  std::string err;
  auto in = load_csv(dir + "/flows.csv.gz", dir + "/topology.txt", err);
  ASSERT_TRUE(in) << err;
  by_arrival(in->events);
  const Counts offline = iterations_by_nodes(analyze(*in));
  const StreamingAnalysis::Limits lim = daemon_limits();
  StreamingAnalysis sa(lim);
  sa.set_addr_nodes(in->addr_node);
  const uint64_t end = in->events.back().last_ns;
  uint64_t t = in->events.front().last_ns + kSec;
  size_t i = 0, bad = 0;
  for (; t < end + lim.window_ns + 60 * kSec; t += kSec) {
    while (i < in->events.size() && in->events[i].last_ns <= t) add_event(sa, in->events[i++]);
    Result r = sa.pass(t);
    if (t < end + 2 * kSec) continue;  // the last records in: from here on the answer is final
    const Counts live = iterations_by_nodes(r);
    // Until the window has passed the job is reported; then it may be gone, never reported with less.
    const bool may_be_gone = t + 30 * kSec >= end + lim.window_ns;  // its own last transfer may be earlier
    for (const auto& [nodes, its] : offline)
      if (auto why = mismatch(live, nodes, its, may_be_gone); !why.empty() && bad++ < 3)
        ADD_FAILURE() << GetParam() << " at " << (t - end) / kSec << " s after the data: " << why;
  }
}

INSTANTIATE_TEST_SUITE_P(Samples, ReplayWindow, ::testing::ValuesIn(recordings()),
                         [](const auto& info) { return info.param; });

// All recordings at once in one engine, each as two copies on addresses and node names of its own, the
// second five minutes after the first (as live_scale replays them beside its synthetic cluster): a job is
// then analysed among others, its connections forgotten while others' are live and ids compacted under it.
TEST(ReplayWindow, AllRecordingsTogetherStayExact) {
  struct Copy {
    std::string name;
    Counts offline;  // renamed nodes -> iterations
    uint64_t end = 0;
  };
  Input all;
  std::vector<Copy> copies;
  uint32_t slot = 1;
  const uint64_t t0 = 1'800'000'000'000'000'000ull;
  for (const auto& rec : recordings()) {
    const std::string dir = std::string(NP_SAMPLES_DIR) + "/" + rec;
    std::string err;
    auto in = load_csv(dir + "/flows.csv.gz", dir + "/topology.txt", err);
    ASSERT_TRUE(in) << err;
    uint64_t first = UINT64_MAX;
    for (const auto& e : in->events) first = std::min(first, e.first_ns);
    const auto off = analyze(*in);
    for (int c = 0; c < 2; ++c) {
      std::map<std::string, std::string> addr;  // original -> this copy's
      auto remap = [&](const std::string& a) {
        auto [it, fresh] = addr.try_emplace(a);
        if (fresh)
          it->second = "172." + std::to_string(16 + ((slot >> 16) & 15)) + "." +
                       std::to_string((slot >> 8) & 255) + "." + std::to_string(slot & 255),
          ++slot;
        return it->second;
      };
      auto node = [&](const std::string& n) { return "r" + rec + "c" + std::to_string(c) + "-" + n; };
      const uint64_t shift = t0 + 10 * kSec + static_cast<uint64_t>(c) * 300 * kSec - first;
      Copy cp{rec + " copy " + std::to_string(c), {}, 0};
      for (const auto& [a, n] : in->addr_node) all.addr_node[remap(a)] = node(n);
      for (auto e : in->events) {
        e.observer = node(e.observer.empty() ? in->addr_node[e.src] : e.observer);
        e.src = remap(e.src);
        e.dst = remap(e.dst);
        e.first_ns += shift;
        e.last_ns += shift;
        cp.end = std::max(cp.end, e.last_ns);
        all.events.push_back(std::move(e));
      }
      cp.offline = iterations_by_nodes(off, node);
      copies.push_back(std::move(cp));
    }
  }
  by_arrival(all.events);
  const StreamingAnalysis::Limits lim = daemon_limits();
  StreamingAnalysis sa(lim);
  sa.set_addr_nodes(all.addr_node);
  size_t i = 0, bad = 0, checked = 0;
  const uint64_t last =
      std::max_element(copies.begin(), copies.end(), [](auto& a, auto& b) { return a.end < b.end; })->end;
  for (uint64_t t = all.events.front().last_ns + kSec; t < last + lim.window_ns + 60 * kSec; t += kSec) {
    while (i < all.events.size() && all.events[i].last_ns <= t) add_event(sa, all.events[i++]);
    Result r = sa.pass(t);
    const Counts live = iterations_by_nodes(r);
    for (const auto& cp : copies) {
      if (t < cp.end + 2 * kSec) continue;
      const bool may_be_gone = t + 30 * kSec >= cp.end + lim.window_ns;
      for (const auto& [nodes, its] : cp.offline) {
        ++checked;
        if (auto why = mismatch(live, nodes, its, may_be_gone); !why.empty() && bad++ < 10)
          ADD_FAILURE() << cp.name << " at " << (t - cp.end) / kSec << " s after its data: " << why;
      }
    }
  }
  EXPECT_EQ(bad, 0u);
  size_t jobs = 0;
  for (const auto& cp : copies) jobs += cp.offline.size();
  EXPECT_GE(jobs, 2 * recordings().size());               // every recording has its job(s), in both copies
  EXPECT_GE(checked, jobs * (lim.window_ns / kSec / 2));  // each checked at every pass for most of the window
}
