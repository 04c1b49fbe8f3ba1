// TOML configuration shared by both daemons: a file is read against a schema (key -> type), unknown keys and
// wrong types are errors that name the key, and values from the file only fill options the command line left
// unset ("flags override the file").
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace netprism::config {

enum class Type { kString, kInteger, kFloat, kBool, kStringList };

using Value = std::variant<std::string, int64_t, double, bool, std::vector<std::string>>;

// Keys are dotted paths ("probe.gap_ms").
using Schema = std::map<std::string, Type>;
using Values = std::map<std::string, Value>;

struct LoadResult {
  Values values;
  std::string error;  // empty on success; otherwise one line naming the file and key
  explicit operator bool() const { return error.empty(); }
};

LoadResult load_file(const std::string& path, const Schema& schema);
LoadResult load_string(const std::string& text, const Schema& schema, const std::string& origin = "<string>");

template <class T>
std::optional<T> get(const Values& v, const std::string& key) {
  auto it = v.find(key);
  if (it == v.end()) return std::nullopt;
  if (const T* p = std::get_if<T>(&it->second)) return *p;
  return std::nullopt;
}

}  // namespace netprism::config
