// sFlow v5 (sflow.org/sflow_version_5.txt): flow samples (compact and expanded) with raw packet header
// records, parsed by the probe's own packet parser (packet.h), RoCEv2 BTH included (destination QP, opcode
// class). Counter samples and other record types are skipped. The only per-agent state is when its last
// flush arrived (bounded, see kMaxAgents). Each sample is a flowlet of its own, marked NP_END_SAMPLE with
// packets = N: the analysis needs N to know what a sample can show (a connection's FIN is seen only if one
// of its packets was sampled, diagnosis.cpp teardown_seen), and merging a datagram's samples of one key would
// hide it.
#include <algorithm>
#include <string>
#include <unordered_map>

#include "flowin.hpp"
#include "netprism/addr.hpp"
#include "packet.h"
#include "reader.hpp"

namespace netprism::flowin {
namespace {

constexpr uint32_t kFlowSample = 1, kExpandedFlowSample = 3, kRawHeader = 1;
constexpr uint32_t kHeaderEthernet = 1, kHeaderIpv4 = 11, kHeaderIpv6 = 12;
// A sampled header is at most a few hundred bytes (sFlow agents default to 128); 64 KiB bounds the copy a
// headerless (IPv4/IPv6) sample needs to be given an Ethernet header.
constexpr size_t kMaxHeader = 65535;

// When a sample was taken. A sample carries no time, its datagram only an arrival: an agent holds samples
// until a datagram fills or its flush tick comes, then sends what it holds back to back (pmacct's sfprobe:
// a 1 s tick; the testbed's capture has runs of up to 14 datagrams within 3 ms, one run per second;
// hsflowd's tick is 1 s too). So a sample lies after the agent's previous flush and at most one tick before
// its datagram arrived: its flowlet spans that window (first_ns..last_ns), which the analysis reads as a
// coarse record when it is longer than its episode gap (coarse_records.cpp). Datagrams within kRunGapNs of
// the one before and kRunSpanNs of the run's first are one flush; an agent streaming full datagrams back to
// back (a busy switch) starts a new run every kRunSpanNs, so its windows stay that short.
constexpr uint64_t kRunGapNs = 1'000'000;
constexpr uint64_t kRunSpanNs = 10'000'000;
constexpr uint64_t kMaxHoldNs = 1'000'000'000;
constexpr size_t kMaxAgents = 65536;  // forget every agent's last flush past this many (a scan, not a fabric)

class SflowDecoder final : public Decoder {
 public:
  bool decode(const std::string& exporter, uint16_t /*port*/, uint64_t recv_ns, std::span<const uint8_t> d,
              std::vector<Flowlet>& out, std::string& node_out, std::string& err) override {
    stats_.datagrams++;
    node_out = exporter_node(Protocol::kSflow, exporter);
    try {
      Reader r(d);
      uint64_t version = r.uint(4, "version");
      if (version != 5) throw DecodeError("version " + std::to_string(version) + " is not sFlow v5");
      node_out = exporter_node(Protocol::kSflow, agent_address(r));
      if (uint64_t sub = r.uint(4, "sub-agent id"); sub != 0)
        node_out.append("/").append(std::to_string(sub));
      r.uint(4, "sequence number");
      r.uint(4, "uptime");
      uint64_t n = r.uint(4, "sample count");
      if (n > r.left() / 8) throw DecodeError(std::to_string(n) + " samples cannot fit the datagram");
      uint64_t from = held_since(node_out, recv_ns);
      for (uint64_t i = 0; i < n; ++i) {
        uint64_t format = r.uint(4, "sample format");
        size_t len = r.uint(4, "sample length");
        Reader s = r.sub(len, "sample");
        if (format == kFlowSample || format == kExpandedFlowSample)
          flow_sample(s, format == kExpandedFlowSample, from, recv_ns, out);
        else
          stats_.skipped_records++;  // counter samples, vendor formats
      }
      return true;
    } catch (const DecodeError& e) {
      stats_.errors++;
      err = exporter + ": " + e.what();
      return false;
    }
  }

 private:
  static std::string agent_address(Reader& r) {
    uint64_t type = r.uint(4, "agent address type");
    if (type == 1) {
      Addr16 a{};
      a[10] = a[11] = 0xff;
      auto b = r.bytes(4, "agent IPv4 address");
      std::copy(b.begin(), b.end(), a.begin() + 12);
      return format_addr(a.data());
    }
    if (type == 2) {
      auto b = r.bytes(16, "agent IPv6 address");
      return format_addr(b.data());
    }
    throw DecodeError("agent address type " + std::to_string(type) + " is neither IPv4 (1) nor IPv6 (2)");
  }

  // The earliest time a sample of the datagram arriving now from `agent` can have been taken (see kRunGapNs).
  uint64_t held_since(const std::string& agent, uint64_t recv_ns) {
    if (flush_.size() >= kMaxAgents && !flush_.count(agent)) flush_.clear();
    auto [it, fresh] = flush_.try_emplace(agent);
    Flush& f = it->second;
    bool same_run = !fresh && recv_ns <= f.last + kRunGapNs && recv_ns <= f.run_start + kRunSpanNs;
    if (!same_run) {
      uint64_t earliest = recv_ns > kMaxHoldNs ? recv_ns - kMaxHoldNs : 0;
      f.from = fresh || f.last >= recv_ns ? recv_ns : std::max(f.last, earliest);
      f.run_start = recv_ns;
    }
    f.last = std::max(f.last, recv_ns);
    return std::min(f.from, recv_ns);
  }

  void flow_sample(Reader& s, bool expanded, uint64_t from, uint64_t recv_ns, std::vector<Flowlet>& out) {
    s.uint(4, "sample sequence number");
    s.uint(expanded ? 8 : 4, "source id");
    uint64_t rate = std::max<uint64_t>(s.uint(4, "sampling rate"), 1);
    s.uint(4, "sample pool");
    s.uint(4, "drops");
    uint32_t input = static_cast<uint32_t>(s.uint(expanded ? 8 : 4, "input interface") & 0x3fffffff);
    s.uint(expanded ? 8 : 4, "output interface");
    uint64_t records = s.uint(4, "record count");
    if (records > s.left() / 8) throw DecodeError(std::to_string(records) + " records cannot fit the sample");
    for (uint64_t i = 0; i < records; ++i) {
      uint64_t format = s.uint(4, "record format");
      size_t len = s.uint(4, "record length");
      Reader rec = s.sub(len, "flow record");
      if (format != kRawHeader) continue;  // extended switch/router data etc.: not needed
      Flowlet f{};
      if (raw_header(rec, f)) {
        f.key.ifindex = input;
        f.key.dir = NP_DIR_EGRESS;
        f.first_ns = from;  // samples carry no time: between the agent's previous flush and this one
        f.last_ns = recv_ns;
        f.end_reason = NP_END_SAMPLE;
        f.packets = rate;
        f.bytes *= rate;
        f.payload_bytes *= rate;
        for (auto& op : f.roce_ops) op = static_cast<uint32_t>(std::min<uint64_t>(op * rate, UINT32_MAX));
        out.push_back(f);
        stats_.records++;
      } else {
        stats_.skipped_records++;
      }
    }
  }

  // One sampled packet (unscaled) into f; false for a packet without a TCP/UDP flow (ARP, ICMP, cut short).
  bool raw_header(Reader& rec, Flowlet& f) {
    uint64_t proto = rec.uint(4, "header protocol");
    uint64_t frame_len = rec.uint(4, "frame length");
    uint64_t stripped = rec.uint(4, "stripped bytes");
    size_t hlen = rec.uint(4, "header length");
    if (hlen > kMaxHeader) throw DecodeError("sampled header of " + std::to_string(hlen) + " bytes");
    auto h = rec.bytes(hlen, "sampled header");
    uint64_t whole = frame_len > stripped ? frame_len - stripped : 0;
    if (proto == kHeaderIpv4 || proto == kHeaderIpv6) {
      // Headerless: give it an Ethernet header so the one parser (which starts at Ethernet) reads it.
      frame_.assign(14, 0);
      frame_[12] = proto == kHeaderIpv4 ? 0x08 : 0x86;
      frame_[13] = proto == kHeaderIpv4 ? 0x00 : 0xdd;
      frame_.insert(frame_.end(), h.begin(), h.end());
      h = frame_;
      whole += 14;
    } else if (proto != kHeaderEthernet) {
      return false;
    }
    np_user_pkt p;
    uint32_t frame_whole =
        static_cast<uint32_t>(std::min<uint64_t>(std::max<uint64_t>(whole, h.size()), UINT32_MAX));
    if (np_user_parse(h.data(), h.size(), frame_whole, &p) != NP_USER_PARSE_OK) return false;
    f.key = p.key;
    f.bytes = p.ip_len;
    f.payload_bytes = p.payload;
    f.tcp_flags = p.tcp_flags & 0xff;
    if (p.roce_class < NP_ROCE_CLASSES) f.roce_ops[p.roce_class] = 1;
    return true;
  }

  struct Flush {
    uint64_t last = 0;       // the agent's latest datagram
    uint64_t run_start = 0;  // the first datagram of its current flush
    uint64_t from = 0;       // the current flush's samples were taken after this
  };
  std::unordered_map<std::string, Flush> flush_;
  std::vector<uint8_t> frame_;  // scratch for headerless samples
};

}  // namespace

std::unique_ptr<Decoder> make_sflow_decoder() {
  return std::make_unique<SflowDecoder>();
}

}  // namespace netprism::flowin
