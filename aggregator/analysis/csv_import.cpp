// Flow CSV import (contracts.md): header, then one row per flow or flowlet, any order; optional topology
// file mapping addresses to node names. Bad input is an error naming the file and line, never a crash.
#include <algorithm>
#include <charconv>
#include <cstdio>
#include <memory>
#include <fstream>
#include <map>
#include <sstream>

#include "analysis.hpp"
#include "netprism/flowlet.h"

namespace netprism::analysis {
namespace {

std::string trim(std::string s) {
  auto sp = [](unsigned char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
  while (!s.empty() && sp(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t i = 0;
  while (i < s.size() && sp(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

std::vector<std::string> split(const std::string& line, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(line);
  while (std::getline(in, cur, sep)) out.push_back(trim(cur));
  if (!line.empty() && line.back() == sep) out.emplace_back();
  return out;
}

// Whole file as text; *.gz through `gzip -dc` (the testbed's recordings are gzipped; gzip is an essential
// Debian package, and a pipe keeps the build free of another library). nullopt on any read failure.
std::optional<std::string> read_all(const std::string& path) {
  if (path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0) {
    if (path.find('\'') != std::string::npos) return std::nullopt;
    if (FILE* probe = std::fopen(path.c_str(), "rb"))
      std::fclose(probe);
    else
      return std::nullopt;
    std::string cmd = "gzip -dc -- '" + path + "'";
    std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(cmd.c_str(), "r"), pclose);
    if (!pipe) return std::nullopt;
    std::string out;
    char buf[65536];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, pipe.get())) > 0) out.append(buf, n);
    if (pclose(pipe.release()) != 0) return std::nullopt;
    return out;
  }
  std::ifstream f(path, std::ios::binary);
  if (!f) return std::nullopt;
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

template <typename T>
bool parse_num(const std::string& s, T& v) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc() && p == s.data() + s.size();
}

}  // namespace

std::optional<Input> load_csv(const std::string& path, const std::string& topology_path, std::string& err) {
  Input in;
  in.offline = true;
  if (!topology_path.empty()) {
    std::ifstream t(topology_path);
    if (!t) {
      err = topology_path + ": cannot open topology file";
      return std::nullopt;
    }
    std::string line;
    for (size_t ln = 1; std::getline(t, line); ++ln) {
      line = trim(line);
      if (line.empty() || line[0] == '#') continue;
      std::istringstream ls(line);
      std::string ip, node, extra;
      if (!(ls >> ip >> node) || (ls >> extra)) {
        err = topology_path + ":" + std::to_string(ln) + ": expected 'IP NODE'";
        return std::nullopt;
      }
      in.addr_node[ip] = node;
    }
  }

  auto text = read_all(path);
  if (!text) {
    err = path + ": cannot open or read";
    return std::nullopt;
  }
  std::istringstream f(*text);
  std::string line;
  if (!std::getline(f, line)) {
    err = path + ": empty file (expected a header line)";
    return std::nullopt;
  }
  auto header = split(trim(line), ',');
  std::map<std::string, size_t> col;
  for (size_t i = 0; i < header.size(); ++i) col[header[i]] = i;
  for (const char* req : {"src_ip", "dst_ip", "src_port", "dst_port", "bytes", "start_ns", "end_ns"})
    if (!col.count(req)) {
      err = path + ":1: header lacks required column '" + req + "'";
      return std::nullopt;
    }
  auto opt = [&](const char* name) { return col.count(name) ? static_cast<long>(col[name]) : -1L; };
  long c_proto = opt("proto"), c_qpn = opt("qpn"), c_packets = opt("packets"), c_node = opt("node"),
       c_flags = opt("tcp_flags");

  for (size_t ln = 2; std::getline(f, line); ++ln) {
    if (trim(line).empty()) continue;
    auto v = split(trim(line), ',');
    auto bad = [&](const std::string& what) {
      err = path + ":" + std::to_string(ln) + ": " + what;
      return std::nullopt;
    };
    if (v.size() != header.size())
      return bad("expected " + std::to_string(header.size()) + " fields, found " + std::to_string(v.size()));
    FlowEvent e;
    e.src = v[col["src_ip"]];
    e.dst = v[col["dst_ip"]];
    if (e.src.empty() || e.dst.empty()) return bad("empty address");
    if (!parse_num(v[col["src_port"]], e.src_port) || !parse_num(v[col["dst_port"]], e.dst_port))
      return bad("port is not a number in 0-65535");
    if (!parse_num(v[col["bytes"]], e.bytes)) return bad("bytes is not a non-negative integer");
    if (!parse_num(v[col["start_ns"]], e.first_ns) || !parse_num(v[col["end_ns"]], e.last_ns))
      return bad("start_ns/end_ns is not a non-negative integer");
    if (e.last_ns < e.first_ns) return bad("end_ns is before start_ns");
    e.proto = NP_PROTO_TCP;
    if (c_proto >= 0) {
      const std::string& p = v[static_cast<size_t>(c_proto)];
      if (p == "tcp" || p.empty())
        e.proto = NP_PROTO_TCP;
      else if (p == "udp")
        e.proto = NP_PROTO_UDP;
      else if (p == "roce")
        e.proto = NP_PROTO_ROCE;
      else
        return bad("proto must be tcp, udp or roce, not '" + p + "'");
    }
    if (c_qpn >= 0 && !v[static_cast<size_t>(c_qpn)].empty() &&
        !parse_num(v[static_cast<size_t>(c_qpn)], e.qpn))
      return bad("qpn is not a number");
    if (c_packets >= 0 && !v[static_cast<size_t>(c_packets)].empty() &&
        !parse_num(v[static_cast<size_t>(c_packets)], e.packets))
      return bad("packets is not a number");
    if (c_node >= 0) e.observer = v[static_cast<size_t>(c_node)];
    if (c_flags >= 0 && !v[static_cast<size_t>(c_flags)].empty() &&
        !parse_num(v[static_cast<size_t>(c_flags)], e.tcp_flags))
      return bad("tcp_flags is not a number");
    in.now_ns = std::max(in.now_ns, e.last_ns);
    in.events.push_back(std::move(e));
  }
  return in;
}

}  // namespace netprism::analysis
