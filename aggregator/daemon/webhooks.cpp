#include "webhooks.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <stdexcept>
#include <thread>

#include <httplib.h>

#include "log.hpp"
#include "stoppable_sleep.hpp"
#include "netprism/version.hpp"

namespace netprism::daemon {

namespace {
using nlohmann::json;
using namespace std::chrono_literals;

// Events waiting per URL. Findings and state changes come a handful per job per hour; 1024 rides out a
// receiver that is down while a whole fleet's jobs start (one state event per job) with room to spare.
constexpr std::size_t kQueueMax = 1024;
// Retries: 0.5 s doubling up to 30 s, 9 attempts in all (~2 min): long enough for a receiver to restart.
constexpr auto kFirstBackoff = 500ms;
constexpr auto kMaxBackoff = 30s;
constexpr int kAttempts = 9;
// How often the snapshot is checked: the analysis publishes one per pass (every >= 1 s), so 200 ms adds
// at most a fifth of a pass to an event's latency.
constexpr auto kPoll = 200ms;

struct Url {
  std::string base;  // scheme://host[:port], what httplib::Client takes
  std::string path;
};

Url parse_url(const std::string& url) {
  auto scheme = url.find("://");
  if (scheme == std::string::npos ||
      (url.compare(0, scheme, "http") != 0 && url.compare(0, scheme, "https") != 0))
    throw std::runtime_error("webhook URL must start with http:// or https://, got '" + url + "'");
  auto slash = url.find('/', scheme + 3);
  if (slash == scheme + 3) throw std::runtime_error("webhook URL has no host: '" + url + "'");
  if (slash == std::string::npos) return {url, "/"};
  return {url.substr(0, slash), url.substr(slash)};
}
}  // namespace

ChangeTracker::ChangeTracker(const std::vector<analysis::Job>& initial) {
  (void)changes(initial);
}

std::string ChangeTracker::finding_key(const analysis::Finding& f) {
  std::string key = f.kind + '\x1f' + f.subject;
  if (f.kind == "slow_iteration") key += '\x1f' + std::to_string(f.first_iteration);
  return key;
}

std::vector<json> ChangeTracker::changes(const std::vector<analysis::Job>& jobs) {
  std::vector<json> out;
  std::map<std::string, Known> now;
  for (const auto& j : jobs) {
    auto it = jobs_.find(j.id);
    Known k = it == jobs_.end() ? Known{} : std::move(it->second);
    if (it == jobs_.end() || k.state != j.state) {
      out.push_back({{"event", "job_state"},
                     {"job", j.id},
                     {"state", j.state},
                     {"previous", it == jobs_.end() ? json(nullptr) : json(k.state)},
                     {"summary", analysis::job_summary(j)}});
      k.state = j.state;
    }
    const json docs = analysis::diagnosis(j)["findings"];
    for (std::size_t i = 0; i < j.findings.size(); ++i) {
      if (!k.findings.insert(finding_key(j.findings[i])).second) continue;
      out.push_back({{"event", "finding"}, {"job", j.id}, {"job_state", j.state}, {"finding", docs[i]}});
    }
    now[j.id] = std::move(k);
  }
  jobs_ = std::move(now);
  return out;
}

// One URL's queue and delivery thread.
struct Webhooks::Sender {
  std::string url;
  Url target;
  std::mutex mu;
  std::condition_variable_any cv;
  std::deque<std::string> queue;
  uint64_t dropped = 0;
  std::jthread thread;  // last: starts once the rest exists

  explicit Sender(const std::string& u) : url(u), target(parse_url(u)) {
    thread = std::jthread([this](std::stop_token st) { loop(st); });
  }

  void push(std::string body) {
    {
      std::lock_guard lk(mu);
      if (queue.size() >= kQueueMax) {
        queue.pop_front();
        if (dropped++ % 100 == 0)
          log_at(Level::kWarning, "webhook " + url + ": queue full, dropped the oldest event (" +
                                      std::to_string(dropped) + " so far)");
      }
      queue.push_back(std::move(body));
    }
    cv.notify_one();
  }

  void loop(std::stop_token st) {
    httplib::Client cli(target.base);
    cli.set_connection_timeout(2, 0);
    cli.set_read_timeout(5, 0);
    cli.set_write_timeout(5, 0);
    cli.set_default_headers({{"User-Agent", "netprism-aggregator/" + std::string(kVersion)}});
    for (;;) {
      std::string body;
      {
        std::unique_lock lk(mu);
        if (!cv.wait(lk, st, [&] { return !queue.empty(); })) return;
        body = std::move(queue.front());
        queue.pop_front();
      }
      deliver(cli, body, st);
    }
  }

  // POSTs until a 2xx, a permanent refusal (4xx other than 408/429), the last attempt, or shutdown.
  void deliver(httplib::Client& cli, const std::string& body, std::stop_token st) {
    auto backoff = std::chrono::duration_cast<std::chrono::milliseconds>(kFirstBackoff);
    std::string why;
    for (int attempt = 1; attempt <= kAttempts; ++attempt) {
      auto res = cli.Post(target.path, body, "application/json");
      if (res && res->status >= 200 && res->status < 300) return;
      why = res ? "HTTP " + std::to_string(res->status) : httplib::to_string(res.error());
      if (res && res->status >= 400 && res->status < 500 && res->status != 408 && res->status != 429) break;
      std::unique_lock lk(mu);
      if (cv.wait_for(lk, st, backoff, [] { return false; }) || st.stop_requested()) return;
      backoff = std::min(backoff * 2, std::chrono::duration_cast<std::chrono::milliseconds>(kMaxBackoff));
    }
    log_at(Level::kWarning, "webhook " + url + ": gave up on an event (" + why + ")");
  }
};

Webhooks::Webhooks(const std::vector<std::string>& urls, LiveAnalysis& live)
    : live_(live),
      tracker_(live.latest() ? live.latest()->jobs : std::vector<analysis::Job>{}),
      boot_ns_(now_unix_ns()) {
  for (const auto& u : urls) senders_.push_back(std::make_unique<Sender>(u));
}

Webhooks::~Webhooks() = default;

void Webhooks::run(std::stop_token stop) {
  uint64_t seen = 0;
  while (!stop.stop_requested()) {
    auto snap = live_.latest();
    if (snap && snap->computed_ns != seen) {
      seen = snap->computed_ns;
      for (auto& ev : tracker_.changes(snap->jobs)) {
        ev["id"] = std::to_string(boot_ns_) + "-" + std::to_string(next_id_++);
        ev["aggregator_ns"] = now_unix_ns();
        const std::string body = ev.dump(-1, ' ', false, json::error_handler_t::replace);
        for (auto& s : senders_) s->push(body);
      }
    }
    nap(stop, kPoll);
  }
}

}  // namespace netprism::daemon
