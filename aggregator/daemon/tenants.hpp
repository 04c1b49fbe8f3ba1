// Tenant attribution: which tenant (and which scheduler job name) a training job belongs to, from a file the
// scheduler writes (`--tenants FILE`, config `tenants_file`). One line per node or address:
//   NODE_OR_IP  TENANT  [JOB_NAME]        # comment; JOB_NAME "-" or absent: none
// or, when the file is JSON, a static export of Kubernetes pods (`kubectl get pods -A -o json`): each running
// pod's node and pod IPs map to its namespace (tenant) and job (label job-name, else its first owner).
// A job belongs to the tenant most of its nodes map to (ties: the first in name order); its job name likewise
// among those nodes. The file is re-read when its modification time changes, so the scheduler rewrites it as
// allocations change and no restart is needed. Shown as "tenant"/"job_name" in `jobs` and `report` entries
// and as netprism_job_info{tenant,job_name} in /metrics.
#pragma once

#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace netprism::daemon {

struct Tenancy {
  std::string tenant;
  std::string job_name;  // "" when the file names none
};

// Parses the file's text (either form); nullopt and a one-line error (naming the line) on bad input.
std::optional<std::map<std::string, Tenancy>> parse_tenants(const std::string& text, std::string& err);
// The job's tenancy from its nodes (pure).
std::optional<Tenancy> attribute(const std::map<std::string, Tenancy>& map,
                                 const std::vector<std::string>& nodes);

class Tenants {
 public:
  explicit Tenants(std::string path) : path_(std::move(path)) {}
  // Adds "tenant" and "job_name" to every entry of doc[list_key] whose "nodes" map to a tenant.
  void annotate(nlohmann::json& doc, const char* list_key);

 private:
  void reload();  // under mu_; keeps the last good map when the file is unreadable or malformed (logged)
  std::string path_;
  std::mutex mu_;
  int64_t mtime_ns_ = -1;
  std::map<std::string, Tenancy> map_;
};

}  // namespace netprism::daemon
