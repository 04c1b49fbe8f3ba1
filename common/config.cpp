#include "netprism/config.hpp"

#include <fstream>
#include <sstream>

#include <toml++/toml.h>

namespace netprism::config {
namespace {

const char* type_name(Type t) {
  switch (t) {
    case Type::kString:
      return "a string";
    case Type::kInteger:
      return "an integer";
    case Type::kFloat:
      return "a number";
    case Type::kBool:
      return "a boolean";
    case Type::kStringList:
      return "an array of strings";
  }
  return "?";
}

// Walks the table; returns an error naming the first offending key, or "" when every key fits the schema.
std::string walk(const toml::table& t, const std::string& prefix, const Schema& schema, Values& out) {
  for (const auto& [k, node] : t) {
    std::string key = prefix.empty() ? std::string(k.str()) : prefix + "." + std::string(k.str());
    if (const auto* sub = node.as_table()) {
      auto e = walk(*sub, key, schema, out);
      if (!e.empty()) return e;
      continue;
    }
    auto it = schema.find(key);
    if (it == schema.end()) return "unknown key '" + key + "'";
    std::string bad = "key '" + key + "' must be " + type_name(it->second);
    switch (it->second) {
      case Type::kString:
        if (auto v = node.value<std::string>(); v && node.is_string())
          out[key] = *v;
        else
          return bad;
        break;
      case Type::kInteger:
        if (auto v = node.as_integer())
          out[key] = v->get();
        else
          return bad;
        break;
      case Type::kFloat:
        if (auto v = node.as_floating_point())
          out[key] = v->get();
        else if (auto i = node.as_integer())
          out[key] = static_cast<double>(i->get());
        else
          return bad;
        break;
      case Type::kBool:
        if (auto v = node.as_boolean())
          out[key] = v->get();
        else
          return bad;
        break;
      case Type::kStringList: {
        const auto* arr = node.as_array();
        if (!arr) return bad;
        std::vector<std::string> list;
        for (const auto& el : *arr) {
          if (!el.is_string()) return bad;
          list.push_back(*el.value<std::string>());
        }
        out[key] = std::move(list);
        break;
      }
    }
  }
  return "";
}

}  // namespace

LoadResult load_string(const std::string& text, const Schema& schema, const std::string& origin) {
  LoadResult r;
  try {
    toml::table t = toml::parse(text, origin);
    auto e = walk(t, "", schema, r.values);
    if (!e.empty()) r.error = origin + ": " + e;
  } catch (const toml::parse_error& e) {
    const auto& src = e.source();
    r.error = origin + ":" + std::to_string(src.begin.line) + ":" + std::to_string(src.begin.column) + ": " +
              std::string(e.description());
  }
  if (!r.error.empty()) r.values.clear();
  return r;
}

LoadResult load_file(const std::string& path, const Schema& schema) {
  std::ifstream in(path);
  if (!in) return {{}, path + ": cannot open config file"};
  std::stringstream ss;
  ss << in.rdbuf();
  return load_string(ss.str(), schema, path);
}

}  // namespace netprism::config
