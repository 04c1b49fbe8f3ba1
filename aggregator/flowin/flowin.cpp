// Protocol names, exporter nodes, and reading a capture of exporters' datagrams (libpcap: pcap and pcapng).
#include "flowin.hpp"

#include <pcap/pcap.h>

#include <memory>

#include "netprism/addr.hpp"
#include "packet.h"

namespace netprism::flowin {

std::unique_ptr<Decoder> make_netflow_decoder();  // netflow.cpp
std::unique_ptr<Decoder> make_sflow_decoder();    // sflow.cpp

std::optional<Protocol> parse_protocol(const std::string& name) {
  if (name == "ipfix" || name == "netflow") return Protocol::kIpfix;
  if (name == "sflow") return Protocol::kSflow;
  return std::nullopt;
}

const char* protocol_name(Protocol p) {
  return p == Protocol::kIpfix ? "ipfix" : "sflow";
}

std::string exporter_node(Protocol p, const std::string& addr) {
  return std::string(protocol_name(p)) + ":" + addr;
}

std::unique_ptr<Decoder> make_decoder(Protocol p) {
  return p == Protocol::kIpfix ? make_netflow_decoder() : make_sflow_decoder();
}

namespace {

struct PcapCloser {
  void operator()(pcap_t* p) const { pcap_close(p); }
};

// The frame as Ethernet: captures on "any" (Linux cooked SLL/SLL2) or of raw IP get a synthetic Ethernet
// header carrying their protocol, so the one packet parser reads every link type. Empty: not IP.
std::span<const uint8_t> as_ethernet(int dlt, std::span<const uint8_t> pkt, std::vector<uint8_t>& buf) {
  auto with_proto = [&](uint16_t proto, size_t skip) {
    if (pkt.size() < skip) return std::span<const uint8_t>();
    buf.assign(12, 0);
    buf.push_back(static_cast<uint8_t>(proto >> 8));
    buf.push_back(static_cast<uint8_t>(proto & 0xff));
    buf.insert(buf.end(), pkt.begin() + static_cast<long>(skip), pkt.end());
    return std::span<const uint8_t>(buf);
  };
  switch (dlt) {
    case DLT_EN10MB:
      return pkt;
    case DLT_LINUX_SLL:  // 16-byte header, protocol last
      return pkt.size() < 16 ? std::span<const uint8_t>() : with_proto(pkt[14] << 8 | pkt[15], 16);
    case DLT_LINUX_SLL2:  // 20-byte header, protocol first
      return pkt.size() < 20 ? std::span<const uint8_t>() : with_proto(pkt[0] << 8 | pkt[1], 20);
    case DLT_RAW:
    case DLT_IPV4:
    case DLT_IPV6:
      if (pkt.empty()) return {};
      return with_proto((pkt[0] >> 4) == 6 ? 0x86dd : 0x0800, 0);
    default:
      return {};
  }
}

}  // namespace

std::optional<ByNode> read_capture(const std::string& path, Protocol proto, Stats& stats, std::string& err) {
  char ebuf[PCAP_ERRBUF_SIZE] = "";
  std::unique_ptr<pcap_t, PcapCloser> pc(pcap_open_offline(path.c_str(), ebuf));
  if (!pc) {
    err = path + ": not a pcap/pcapng capture (" + ebuf + ")";
    return std::nullopt;
  }
  int dlt = pcap_datalink(pc.get());
  auto dec = make_decoder(proto);
  ByNode out;
  std::vector<uint8_t> buf;
  std::vector<Flowlet> fl;
  std::string node, derr, first_err;
  uint64_t udp = 0;
  pcap_pkthdr* h = nullptr;
  const u_char* data = nullptr;
  int rc;
  while ((rc = pcap_next_ex(pc.get(), &h, &data)) == 1) {
    auto frame = as_ethernet(dlt, {data, h->caplen}, buf);
    np_user_pkt p;
    uint32_t whole = static_cast<uint32_t>(h->len + (frame.size() - h->caplen));
    if (frame.empty() || np_user_parse(frame.data(), frame.size(), whole, &p) != NP_USER_PARSE_OK ||
        p.key.proto == NP_PROTO_TCP || p.payload_off + p.payload > frame.size())
      continue;  // not a whole UDP datagram (other traffic in the capture, fragments, cut by the snaplen)
    udp++;
    uint64_t ts = static_cast<uint64_t>(h->ts.tv_sec) * 1000000000ull +
                  static_cast<uint64_t>(h->ts.tv_usec) *
                      (pcap_get_tstamp_precision(pc.get()) == PCAP_TSTAMP_PRECISION_NANO ? 1ull : 1000ull);
    fl.clear();
    bool ok = dec->decode(format_addr(p.key.saddr), p.key.sport, ts, frame.subspan(p.payload_off, p.payload),
                          fl, node, derr);
    if (!ok && first_err.empty()) first_err = derr;
    if (!fl.empty()) {
      auto& v = out[node];
      v.insert(v.end(), fl.begin(), fl.end());
    }
  }
  stats = dec->stats();
  if (rc == PCAP_ERROR) {
    err = path + ": " + pcap_geterr(pc.get());
    // A capture cut short (a full disk, a killed tcpdump): what was read is kept, the reason is the warning.
    if (stats.datagrams == 0) return std::nullopt;
    if (stats.datagrams > stats.errors) return out;
  }
  if (stats.datagrams == stats.errors) {
    err = (err.empty() ? "" : err + "; ") + path + ": " + std::to_string(udp) +
          " UDP datagrams, none of them " + protocol_name(proto) +
          (first_err.empty() ? "" : " (first error: " + first_err + ")");
    return std::nullopt;
  }
  return out;
}

}  // namespace netprism::flowin
