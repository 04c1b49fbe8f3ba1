#include "tenants.hpp"

#include <sys/stat.h>

#include <fstream>
#include <sstream>

#include "log.hpp"

namespace netprism::daemon {

std::optional<std::map<std::string, Tenancy>> parse_tenants(const std::string& text, std::string& err) {
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
