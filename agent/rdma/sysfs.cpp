#include "sysfs.hpp"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <limits>
#include <tuple>

namespace netprism::agent {
namespace fs = std::filesystem;

namespace {
bool read_u64(const fs::path& p, uint64_t& v) {
  std::ifstream f(p);
  std::string s;
  if (!(f >> s)) return false;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc() && ptr == s.data() + s.size();
}
// Soft-RoCE's bytes (see read_port_counters): its interface's byte counters, as 4-byte words like the port
// counters' (the remainder of a division is at most 3 bytes per reading, not cumulative), and its packets
// with them: the interface counts a packet when it leaves (virtio-net: at completion), rxe's sent_pkts when
// rxe hands it to the interface, tens of ms earlier under emulation (a 68-packet message counted by rxe in
// one 10 ms sample, its bytes by eth0 in the next), so bytes and packets of one burst come from one place.
// Without the interface or its counters the port keeps rxe's packets only.
void netdev_bytes(const RdmaPortPath& p, RawPortCounters& out) {
  std::ifstream f(fs::path(p.dir) / "gid_attrs" / "ndevs" / "0");
  std::string ifname;
  out.bytes_from_netdev.clear();
  if (!(f >> ifname) || ifname.find('/') != std::string::npos || ifname == "." || ifname == "..") return;
  const fs::path stats = fs::path(p.net_root) / ifname / "statistics";
  uint64_t tx = 0, rx = 0, txp = 0, rxp = 0;
  if (!read_u64(stats / "tx_bytes", tx) || !read_u64(stats / "rx_bytes", rx) ||
      !read_u64(stats / "tx_packets", txp) || !read_u64(stats / "rx_packets", rxp))
    return;
  out.xmit_words = tx / 4;
  out.rcv_words = rx / 4;
  out.xmit_packets = txp;
  out.rcv_packets = rxp;
  out.bytes_from_netdev = ifname;
}
}  // namespace

std::vector<RdmaPortPath> list_rdma_ports(const std::string& root) {
  std::vector<RdmaPortPath> out;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return out;
  for (const auto& dev : fs::directory_iterator(root, ec)) {
    fs::path ports = dev.path() / "ports";
    if (!fs::is_directory(ports, ec)) continue;
    for (const auto& p : fs::directory_iterator(ports, ec)) {
      std::string n = p.path().filename().string();
      uint32_t num = 0;
      auto [ptr, e] = std::from_chars(n.data(), n.data() + n.size(), num);
      if (e != std::errc() || ptr != n.data() + n.size()) continue;
      out.push_back({dev.path().filename().string(), num, p.path().string(),
                     (fs::path(root).parent_path() / "net").string()});
    }
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return std::tie(a.device, a.port) < std::tie(b.device, b.port);
  });
  return out;
}

bool read_port_counters(const RdmaPortPath& p, RawPortCounters& out, std::string& err, bool all_hw) {
  fs::path c = fs::path(p.dir) / "counters";
  std::error_code ec;
  // ib_core makes the counters/ group only for devices with a PMA (process_mad): soft-RoCE (rxe) has none,
  // it counts packets in hw_counters only (sent_pkts, rcvd_pkts; no bytes). Checked on Debian's 6.1 rxe.
  const bool pma = fs::is_directory(c, ec);
  struct {
    const char* name;
    uint64_t* dst;
  } required[] = {{"port_xmit_data", &out.xmit_words},
                  {"port_rcv_data", &out.rcv_words},
                  {"port_xmit_packets", &out.xmit_packets},
                  {"port_rcv_packets", &out.rcv_packets}};
  for (auto& r : required) {
    if (!pma) {
      *r.dst = 0;
    } else if (!read_u64(c / r.name, *r.dst)) {
      err = (c / r.name).string() + ": missing or not a number";
      return false;
    }
  }
  out.hw.clear();
  fs::path hw = fs::path(p.dir) / "hw_counters";
  if (!all_hw) {  // only the packet counters a port without counters/ needs (see RawPortCounters)
    for (const char* name : {"sent_pkts", "rcvd_pkts"})
      if (uint64_t v = 0; !pma && read_u64(hw / name, v)) out.hw[name] = v;
  } else if (fs::is_directory(hw, ec)) {
    for (const auto& f : fs::directory_iterator(hw, ec)) {
      std::string name = f.path().filename().string();
      if (name == "lifespan") continue;  // a setting (cache lifetime in ms), not a counter
      uint64_t v = 0;
      if (read_u64(f.path(), v)) out.hw[name] = v;
    }
  }
  if (!pma) {
    auto sent = out.hw.find("sent_pkts"), rcvd = out.hw.find("rcvd_pkts");
    if (sent == out.hw.end() || rcvd == out.hw.end()) {
      err = c.string() + ": missing, and hw_counters has no sent_pkts/rcvd_pkts";
      return false;
    }
    out.xmit_packets = sent->second;
    out.rcv_packets = rcvd->second;
    netdev_bytes(p, out);
  }
  return true;
}

RdmaCounterSample to_sample(const RdmaPortPath& p, uint64_t ts_ns, const RawPortCounters& c) {
  RdmaCounterSample s;
  s.device = p.device;
  s.port = p.port;
  s.ts_ns = ts_ns;
  s.xmit_bytes = c.xmit_words * 4;
  s.rcv_bytes = c.rcv_words * 4;
  s.xmit_packets = c.xmit_packets;
  s.rcv_packets = c.rcv_packets;
  s.hw = c.hw;
  return s;
}

CounterDelta counter_delta(uint64_t prev, uint64_t cur) {
  constexpr uint64_t k32 = std::numeric_limits<uint32_t>::max();
  if (cur == prev && cur == k32) return {0, DeltaKind::kSaturated};
  if (cur >= prev) return {cur - prev, DeltaKind::kNormal};
  if (prev <= k32) return {(k32 - prev) + cur + 1, DeltaKind::kWrap32};
  if (prev > (uint64_t{1} << 63)) return {cur - prev, DeltaKind::kWrap64};  // modulo 2^64
  return {cur, DeltaKind::kReset};
}

uint64_t RdmaBurstTracker::delta(uint64_t prev, uint64_t cur) {
  CounterDelta d = counter_delta(prev, cur);
  switch (d.kind) {
    case DeltaKind::kWrap32:
    case DeltaKind::kWrap64:
      ++stats_.wraps;
      break;
    case DeltaKind::kReset:
      ++stats_.resets;
      break;
    case DeltaKind::kSaturated:
      ++stats_.saturated;
      break;
    case DeltaKind::kNormal:
      break;
  }
  return d.value;
}

void RdmaBurstTracker::feed(const std::string& device, uint32_t port, uint64_t ts_ns,
                            const RawPortCounters& c, std::vector<RdmaPortBurst>& out) {
  ++stats_.samples;
  auto [it, fresh] = ports_.try_emplace({device, port});
  PortState& st = it->second;
  if (fresh || ts_ns <= st.prev_ts) {  // first reading, or the clock went back: a new baseline
    st.prev = c;
    st.prev_ts = ts_ns;
    return;
  }
  uint64_t xb = delta(st.prev.xmit_words, c.xmit_words) * 4;
  uint64_t rb = delta(st.prev.rcv_words, c.rcv_words) * 4;
  uint64_t xp = delta(st.prev.xmit_packets, c.xmit_packets);
  uint64_t rp = delta(st.prev.rcv_packets, c.rcv_packets);
  bool activity = xb || rb || xp || rp;
  if (st.active) {
    bool gap = activity ? st.prev_ts - st.cur.last_ns > gap_ns_ : ts_ns - st.cur.last_ns > gap_ns_;
    bool too_long = activity && ts_ns - st.cur.first_ns > max_burst_ns_;
    if (gap || too_long) {
      out.push_back(st.cur);
      ++stats_.bursts;
      st.active = false;
    }
  }
  if (activity) {
    if (!st.active) {
      st.cur = RdmaPortBurst{};
      st.cur.device = device;
      st.cur.port = port;
      st.cur.first_ns = st.prev_ts;
      st.active = true;
    }
    st.cur.last_ns = ts_ns;
    st.cur.xmit_bytes += xb;
    st.cur.rcv_bytes += rb;
    st.cur.xmit_packets += xp;
    st.cur.rcv_packets += rp;
  }
  st.prev = c;
  st.prev_ts = ts_ns;
}

void RdmaBurstTracker::flush(std::vector<RdmaPortBurst>& out, std::optional<uint64_t> now_ns) {
  for (auto& [k, st] : ports_) {
    if (!st.active) continue;
    if (now_ns && *now_ns - st.cur.last_ns <= gap_ns_) continue;
    out.push_back(st.cur);
    ++stats_.bursts;
    st.active = false;
  }
}

}  // namespace netprism::agent
