#include "tenants.hpp"

#include <sys/stat.h>

#include <fstream>
#include <sstream>

#include "log.hpp"

namespace netprism::daemon {

namespace {
// A static export of Kubernetes pods (`kubectl get pods -A -o json`, no kubeconfig needed by the aggregator):
// each pod's node (spec.nodeName, the agent's default node name) and its IPs map to its namespace as the
// tenant and its job as the job name (label job-name, as Job controllers set it, else its first owner's
// name).
std::optional<std::map<std::string, Tenancy>> parse_pods(const std::string& text, std::string& err) {
  auto doc = nlohmann::json::parse(text, nullptr, false);
  if (doc.is_discarded() || !doc.is_object() || !doc.contains("items") || !doc["items"].is_array()) {
    err = "not a Kubernetes pod list (expected `kubectl get pods -A -o json` output)";
    return std::nullopt;
  }
  std::map<std::string, Tenancy> out;
  for (const auto& pod : doc["items"]) {
    if (!pod.is_object()) continue;
    const auto meta = pod.value("metadata", nlohmann::json::object());
    const auto spec = pod.value("spec", nlohmann::json::object());
    const auto status = pod.value("status", nlohmann::json::object());
    if (status.value("phase", "") != "Running" && status.value("phase", "") != "Pending") continue;
    Tenancy t{meta.value("namespace", "default"), ""};
    const auto labels = meta.value("labels", nlohmann::json::object());
    const auto owners = meta.value("ownerReferences", nlohmann::json::array());
    if (labels.contains("job-name") && labels["job-name"].is_string())
      t.job_name = labels["job-name"];
    else if (!owners.empty() && owners[0].is_object())
      t.job_name = owners[0].value("name", "");
    if (auto node = spec.value("nodeName", ""); !node.empty()) out[node] = t;
    for (const auto& ip : status.value("podIPs", nlohmann::json::array()))
      if (ip.is_object() && ip.contains("ip") && ip["ip"].is_string()) out[ip["ip"].get<std::string>()] = t;
  }
  return out;
}
}  // namespace

std::optional<std::map<std::string, Tenancy>> parse_tenants(const std::string& text, std::string& err) {
  if (auto first = text.find_first_not_of(" \t\r\n"); first != std::string::npos && text[first] == '{')
    return parse_pods(text, err);
  std::map<std::string, Tenancy> out;
  std::istringstream in(text);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (auto h = line.find('#'); h != std::string::npos) line.resize(h);
    std::istringstream ss(line);
    std::string key, tenant, job, extra;
    if (!(ss >> key)) continue;
    if (!(ss >> tenant) || (ss >> job && ss >> extra)) {
      err = "line " + std::to_string(n) + ": expected 'NODE_OR_IP TENANT [JOB_NAME]'";
      return std::nullopt;
    }
    out[key] = {tenant, job == "-" ? "" : job};
  }
  return out;
}

std::optional<Tenancy> attribute(const std::map<std::string, Tenancy>& map,
                                 const std::vector<std::string>& nodes) {
  std::map<std::string, int> tenants, names;
  for (const auto& n : nodes)
    if (auto it = map.find(n); it != map.end()) tenants[it->second.tenant]++;
  if (tenants.empty()) return std::nullopt;
  auto best = [](const std::map<std::string, int>& votes) {
    auto it = votes.begin();
    for (auto v = votes.begin(); v != votes.end(); ++v)
      if (v->second > it->second) it = v;
    return it->first;
  };
  Tenancy t{best(tenants), ""};
  for (const auto& n : nodes)
    if (auto it = map.find(n);
        it != map.end() && it->second.tenant == t.tenant && !it->second.job_name.empty())
      names[it->second.job_name]++;
  if (!names.empty()) t.job_name = best(names);
  return t;
}

void Tenants::reload() {
  struct stat st {};
  if (::stat(path_.c_str(), &st) != 0) return;  // keep the last map; the file may be being replaced
  const int64_t mtime = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  if (mtime == mtime_ns_) return;
  std::ifstream f(path_);
  std::stringstream text;
  text << f.rdbuf();
  std::string err;
  auto parsed = parse_tenants(text.str(), err);
  mtime_ns_ = mtime;  // a malformed version is reported once, not on every query
  if (!parsed) {
    log_at(Level::kWarning, "tenants file " + path_ + ": " + err + " (keeping the previous mapping)");
    return;
  }
  map_ = std::move(*parsed);
}

void Tenants::annotate(nlohmann::json& doc, const char* list_key) {
  std::lock_guard lk(mu_);
  reload();
  auto it = doc.find(list_key);
  if (it == doc.end() || !it->is_array()) return;
  for (auto& entry : *it) {
    auto nodes = entry.value("nodes", std::vector<std::string>{});
    if (auto t = attribute(map_, nodes)) {
      entry["tenant"] = t->tenant;
      entry["job_name"] = t->job_name;
    }
  }
}

}  // namespace netprism::daemon
