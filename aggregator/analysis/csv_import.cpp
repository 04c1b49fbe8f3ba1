// Flow CSV import (contracts.md): header, then one row per flow or flowlet, any order; optional topology
// file mapping addresses to node names. Bad input is an error naming the file and line, never a crash.
//
// The file is streamed in 1 MiB chunks and every row is split in place (string views into the chunk, numbers
// through std::from_chars): a 2,048-node simulation is over a million rows, and per-row streams, copies of
// the whole text or per-field strings would cost more than the analysis itself (and hold the text in memory
// twice next to the parsed events).
#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string_view>

#include "analysis.hpp"
#include "netprism/addr.hpp"
#include "netprism/flowlet.h"
#include "topology.hpp"

namespace netprism::analysis {
namespace {

std::string_view trim(std::string_view s) {
  auto sp = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
  while (!s.empty() && sp(s.back())) s.remove_suffix(1);
  while (!s.empty() && sp(s.front())) s.remove_prefix(1);
  return s;
}

// Fields of one line, trimmed, into `out` (reused across rows, so no allocation per row). "a,b," has three
// fields, the last one empty.
void split(std::string_view line, std::vector<std::string_view>& out) {
  out.clear();
  for (;;) {
    size_t c = line.find(',');
    out.push_back(trim(line.substr(0, c)));
    if (c == std::string_view::npos) return;
    line.remove_prefix(c + 1);
  }
}

// Lines of a file, read in chunks: plain files with fopen, *.gz through `gzip -dc` (the testbed's recordings
// are gzipped; gzip is an essential Debian package, and a pipe keeps the build free of another library).
class LineReader {
 public:
  bool open(const std::string& path) {
    if (path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0) {
      if (path.find('\'') != std::string::npos) return false;
      if (FILE* probe = std::fopen(path.c_str(), "rb"))
        std::fclose(probe);
      else
        return false;
      std::string cmd = "gzip -dc -- '" + path + "'";
      f_ = popen(cmd.c_str(), "r");
      pipe_ = true;
    } else {
      f_ = std::fopen(path.c_str(), "rb");
    }
    return f_ != nullptr;
  }
  // Closes the file; false when reading failed (a read error, or gzip reporting a corrupt file).
  bool close() {
    if (!f_) return ok_;
    bool err = std::ferror(f_) != 0;
    int rc = pipe_ ? pclose(f_) : std::fclose(f_);
    f_ = nullptr;
    return ok_ && !err && rc == 0;
  }
  ~LineReader() { close(); }
  LineReader() = default;
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;

  // Next line without its newline; false at the end of the file.
  bool next(std::string_view& line) {
    for (;;) {
      if (const char* nl = static_cast<const char*>(std::memchr(buf_.data() + pos_, '\n', end_ - pos_))) {
        size_t at = static_cast<size_t>(nl - buf_.data());
        line = std::string_view(buf_.data() + pos_, at - pos_);
        pos_ = at + 1;
        return true;
      }
      if (eof_) {
        if (pos_ == end_) return false;
        line = std::string_view(buf_.data() + pos_, end_ - pos_);
        pos_ = end_;
        return true;
      }
      // Keep the partial line, refill behind it (the buffer grows only for a line longer than a chunk).
      std::memmove(buf_.data(), buf_.data() + pos_, end_ - pos_);
      end_ -= pos_;
      pos_ = 0;
      if (buf_.size() - end_ < kChunk) buf_.resize(end_ + kChunk);
      size_t n = std::fread(buf_.data() + end_, 1, buf_.size() - end_, f_);
      end_ += n;
      if (n == 0) eof_ = true;
    }
  }

 private:
  static constexpr size_t kChunk = 1 << 20;
  FILE* f_ = nullptr;
  bool pipe_ = false, eof_ = false, ok_ = true;
  std::vector<char> buf_ = std::vector<char>(kChunk);
  size_t pos_ = 0, end_ = 0;
};

template <typename T>
bool parse_num(std::string_view s, T& v) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc() && p == s.data() + s.size();
}

// An address in its usual text form (contracts.md: dotted quad, RFC 5952), as the topology file's keys and
// agents' addresses are; text that is no address stays as it is (a simulator's own host names).
std::string canonical(std::string_view text) {
  std::string a(text);
  auto b = parse_addr(a);
  return b ? format_addr(b->data()) : a;
}

}  // namespace

std::optional<Input> load_csv(const std::string& path, const std::string& topology_path, std::string& err) {
  Input in;
  in.offline = true;
  if (!topology_path.empty() && !load_topology(topology_path, in.addr_node, &in.fabric, err))
    return std::nullopt;

  LineReader f;
  if (!f.open(path)) {
    err = path + ": cannot open or read";
    return std::nullopt;
  }
  std::string_view line;
  if (!f.next(line)) {
    err = f.close() ? path + ": empty file (expected a header line)" : path + ": cannot open or read";
    return std::nullopt;
  }
  std::vector<std::string> header;
  std::vector<std::string_view> v;
  split(trim(line), v);
  for (auto h : v) header.emplace_back(h);
  std::map<std::string, size_t> col;
  for (size_t i = 0; i < header.size(); ++i) col[header[i]] = i;
  for (const char* req : {"src_ip", "dst_ip", "src_port", "dst_port", "bytes", "start_ns", "end_ns"})
    if (!col.count(req)) {
      err = path + ":1: header lacks required column '" + req + "'";
      return std::nullopt;
    }
  auto opt = [&](const char* name) { return col.count(name) ? static_cast<long>(col[name]) : -1L; };
  const size_t c_src = col["src_ip"], c_dst = col["dst_ip"], c_sport = col["src_port"],
               c_dport = col["dst_port"], c_bytes = col["bytes"], c_start = col["start_ns"],
               c_end = col["end_ns"];
  long c_proto = opt("proto"), c_qpn = opt("qpn"), c_packets = opt("packets"), c_node = opt("node"),
       c_flags = opt("tcp_flags");

  for (size_t ln = 2; f.next(line); ++ln) {
    line = trim(line);
    if (line.empty()) continue;
    split(line, v);
    auto bad = [&](const std::string& what) {
      err = path + ":" + std::to_string(ln) + ": " + what;
      return std::nullopt;
    };
    if (v.size() != header.size())
      return bad("expected " + std::to_string(header.size()) + " fields, found " + std::to_string(v.size()));
    FlowEvent e;
    e.src = canonical(v[c_src]);
    e.dst = canonical(v[c_dst]);
    if (e.src.empty() || e.dst.empty()) return bad("empty address");
    if (!parse_num(v[c_sport], e.src_port) || !parse_num(v[c_dport], e.dst_port))
      return bad("port is not a number in 0-65535");
    if (!parse_num(v[c_bytes], e.bytes)) return bad("bytes is not a non-negative integer");
    if (!parse_num(v[c_start], e.first_ns) || !parse_num(v[c_end], e.last_ns))
      return bad("start_ns/end_ns is not a non-negative integer");
    if (e.last_ns < e.first_ns) return bad("end_ns is before start_ns");
    e.proto = NP_PROTO_TCP;
    if (c_proto >= 0) {
      std::string_view p = v[static_cast<size_t>(c_proto)];
      if (p == "tcp" || p.empty())
        e.proto = NP_PROTO_TCP;
      else if (p == "udp")
        e.proto = NP_PROTO_UDP;
      else if (p == "roce")
        e.proto = NP_PROTO_ROCE;
      else
        return bad("proto must be tcp, udp or roce, not '" + std::string(p) + "'");
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
  if (!f.close()) {
    err = path + ": cannot open or read";
    return std::nullopt;
  }
  return in;
}

}  // namespace netprism::analysis
