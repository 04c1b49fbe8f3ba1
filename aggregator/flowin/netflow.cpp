// IPFIX (RFC 7011) and NetFlow v9 (RFC 3954): one template-based decoder for both, a datagram at a time.
//
// Why not libfixbuf (Debian's IPFIX library): its in-memory mode (fBufSetBuffer) reads IPFIX only; NetFlow v9
// and sFlow are translated only inside its own socket collectors (fbCollectorSetNetflowV9Translator), which
// own the UDP socket, its threading and the exporter sessions. The collector here must take datagrams from a
// capture file as well as from the aggregator's socket, name each exporter, and bound its template memory
// itself. The two formats differ only in their headers and template sets, so one small decoder reads both.
//
// Bounds (hostile or merely huge exporters): a template has at most kMaxFields fields; the cache holds at
// most kMaxCachedFields fields over all exporters' templates, evicting the least recently used exporter
// domain first. A data set whose template is unknown (not yet sent, evicted) is counted and skipped, as
// collectors do: exporters resend templates periodically (softflowd every 16 datagrams, pmacct every 60 s).
#include <algorithm>
#include <list>
#include <map>
#include <tuple>

#include "flowin.hpp"
#include "netprism/addr.hpp"
#include "reader.hpp"

namespace netprism::flowin {
namespace {

// 128 fields is far above any flow template seen in the wild (softflowd: 12, pmacct: ~20, Cisco: ~40);
// 1 Mi cached fields are 8 MiB, enough for thousands of exporters with dozens of templates each.
constexpr size_t kMaxFields = 128;
constexpr size_t kMaxCachedFields = 1u << 20;
constexpr uint16_t kVarLen = 65535;
constexpr uint64_t kNtpToUnixS = 2208988800ull;  // seconds from 1900 (NTP era 0) to 1970

struct Field {
  uint16_t id = 0;
  uint16_t len = 0;
  bool enterprise = false;
};
struct Template {
  std::vector<Field> fields;
  bool options = false;
};
struct Domain {
  std::map<uint16_t, Template> templates;
  uint64_t sampling = 1;     // 1:N from options records (samplingInterval and kin)
  uint64_t sys_init_ms = 0;  // systemInitTimeMilliseconds, for IPFIX's sysUpTime-relative times
};
// An exporter domain: source address and port (the UDP transport session), version, observation domain
// (IPFIX) / source id (v9).
using DomainKey = std::tuple<std::string, uint16_t, int, uint32_t>;

// The fields of one data record that a flowlet needs; anything else is skipped.
struct Rec {
  Addr16 src{}, dst{};
  uint8_t family = 0, ip_proto = 0;
  uint16_t sport = 0, dport = 0, tcp_flags = 0;
  uint64_t octets = 0, packets = 0, total_octets = 0, total_packets = 0;
  uint64_t start_ns = 0, end_ns = 0;        // absolute, when the record says so
  uint64_t up_start_ms = 0, up_end_ms = 0;  // sysUpTime-relative
  bool has_up = false;
  uint32_t ifindex = 0;
  uint64_t sampling = 0, sampling_space = 0, sys_init_ms = 0;
};

uint64_t ntp_to_ns(uint64_t v) {
  uint64_t sec = v >> 32, frac = v & 0xffffffffu;
  if (sec < kNtpToUnixS) return 0;
  return (sec - kNtpToUnixS) * 1000000000ull + ((frac * 1000000000ull) >> 32);
}

void v4_mapped(std::span<const uint8_t> b, Addr16& out) {
  out = {};
  out[10] = out[11] = 0xff;
  std::copy(b.begin(), b.end(), out.begin() + 12);
}

// One field's value into the record (IANA IPFIX information element ids; v9 uses the same numbers).
void take(const Field& f, std::span<const uint8_t> b, Rec& r) {
  if (f.enterprise) return;
  auto num = [&] {
    uint64_t v = 0;
    if (b.size() > 8) return v;
    for (uint8_t c : b) v = v << 8 | c;
    return v;
  };
  switch (f.id) {
    case 1:
      r.octets = num();
      break;
    case 2:
      r.packets = num();
      break;
    case 85:
      r.total_octets = num();
      break;
    case 86:
      r.total_packets = num();
      break;
    case 4:
      r.ip_proto = static_cast<uint8_t>(num());
      break;
    case 6:
      r.tcp_flags = static_cast<uint16_t>(num());
      break;
    case 7:
      r.sport = static_cast<uint16_t>(num());
      break;
    case 11:
      r.dport = static_cast<uint16_t>(num());
      break;
    case 10:
      r.ifindex = static_cast<uint32_t>(num());
      break;
    case 8:
    case 12:
      if (b.size() != 4) return;
      v4_mapped(b, f.id == 8 ? r.src : r.dst);
      r.family = 4;
      break;
    case 27:
    case 28:
      if (b.size() != 16) return;
      std::copy(b.begin(), b.end(), (f.id == 27 ? r.src : r.dst).begin());
      r.family = 6;
      break;
    case 22:
      r.up_start_ms = num(), r.has_up = true;
      break;
    case 21:
      r.up_end_ms = num(), r.has_up = true;
      break;
    case 150:
      r.start_ns = num() * 1000000000ull;
      break;
    case 151:
      r.end_ns = num() * 1000000000ull;
      break;
    case 152:
      r.start_ns = num() * 1000000ull;
      break;
    case 153:
      r.end_ns = num() * 1000000ull;
      break;
    case 154:
    case 156:
      r.start_ns = ntp_to_ns(num());
      break;
    case 155:
    case 157:
      r.end_ns = ntp_to_ns(num());
      break;
    case 160:
      r.sys_init_ms = num();
      break;
    case 34:
    case 50:
    case 305:
      r.sampling = num();
      break;  // samplingInterval, v9 random interval, ...
    case 306:
      r.sampling_space = num();
      break;  // samplingPacketSpace
    default:
      break;
  }
}

// Payload bytes of a record: flow records count IP bytes only. Estimated as bytes minus minimal headers per
// packet; a TCP record averaging at most 80 (IPv4) / 100 (IPv6) bytes a packet is taken for pure ACKs, the
// same rule the analysis applies to rows without payload counts (stages.hpp data_bytes).
uint64_t payload_estimate(const Rec& r, uint8_t proto, uint64_t bytes, uint64_t packets) {
  uint64_t ip = r.family == 4 ? 20 : 40;
  uint64_t hdr = ip + (proto == NP_PROTO_TCP ? 20 : 8) + (proto == NP_PROTO_ROCE ? 16 : 0);  // BTH + ICRC
  if (proto == NP_PROTO_TCP && bytes <= packets * (r.family == 4 ? 80 : 100)) return 0;
  return bytes > packets * hdr ? bytes - packets * hdr : 0;
}

class NetflowDecoder final : public Decoder {
 public:
  bool decode(const std::string& exporter, uint16_t port, uint64_t recv_ns, std::span<const uint8_t> d,
              std::vector<Flowlet>& out, std::string& node_out, std::string& err) override {
    stats_.datagrams++;
    node_out = exporter_node(Protocol::kIpfix, exporter);
    try {
      Reader r(d);
      int version = static_cast<int>(r.uint(2, "version"));
      if (version == 10)
        ipfix(exporter, port, r, recv_ns, out, node_out);
      else if (version == 9)
        v9(exporter, port, r, recv_ns, out, node_out);
      else
        throw DecodeError("version " + std::to_string(version) + " is neither IPFIX (10) nor NetFlow v9");
      return true;
    } catch (const DecodeError& e) {
      stats_.errors++;
      err = exporter + ": " + e.what();
      return false;
    }
  }

 private:
  // Message context: how a record's times become absolute.
  struct Msg {
    Domain* dom;
    int version;
    uint64_t export_s = 0;
    uint64_t uptime_ms = 0;  // v9 header
    uint64_t recv_ns = 0;
  };

  void ipfix(const std::string& exporter, uint16_t port, Reader& r, uint64_t recv_ns,
             std::vector<Flowlet>& out, std::string& node) {
    size_t len = r.uint(2, "message length");
    if (len < 16 || len - 4 > r.left())
      throw DecodeError("message length " + std::to_string(len) + " does not fit the datagram");
    Msg m{nullptr, 10, r.uint(4, "export time"), 0, recv_ns};
    r.uint(4, "sequence number");
    uint32_t odid = static_cast<uint32_t>(r.uint(4, "observation domain"));
    m.dom = &domain({exporter, port, 10, odid});
    if (odid != 0) node.append("/").append(std::to_string(odid));
    Reader body = r.sub(len - 16, "message body");
    while (body.left() > 0) {
      uint16_t id = static_cast<uint16_t>(body.uint(2, "set id"));
      size_t slen = body.uint(2, "set length");
      if (slen < 4) throw DecodeError("set length " + std::to_string(slen) + " below its header");
      Reader set = body.sub(slen - 4, "set");
      if (id == 2 || id == 3)
        templates(*m.dom, set, id == 3, true);
      else if (id >= 256)
        data(m, id, set, out);
      // ids 4..255 are reserved: skipped
    }
  }

  void v9(const std::string& exporter, uint16_t port, Reader& r, uint64_t recv_ns, std::vector<Flowlet>& out,
          std::string& node) {
    r.uint(2, "record count");
    Msg m{nullptr, 9, 0, r.uint(4, "sysUptime"), recv_ns};
    m.export_s = r.uint(4, "unix seconds");
    r.uint(4, "sequence number");
    uint32_t source = static_cast<uint32_t>(r.uint(4, "source id"));
    m.dom = &domain({exporter, port, 9, source});
    if (source != 0) node.append("/").append(std::to_string(source));
    while (r.left() > 0) {
      uint16_t id = static_cast<uint16_t>(r.uint(2, "flowset id"));
      size_t slen = r.uint(2, "flowset length");
      if (slen < 4) throw DecodeError("flowset length " + std::to_string(slen) + " below its header");
      Reader set = r.sub(slen - 4, "flowset");
      if (id == 0 || id == 1)
        templates(*m.dom, set, id == 1, false);
      else if (id >= 256)
        data(m, id, set, out);
    }
  }

  // A template set (IPFIX 2/3, v9 0/1). Fewer than 4 bytes left is padding.
  void templates(Domain& dom, Reader& set, bool options, bool ipfix) {
    while (set.left() >= 4) {
      uint16_t tid = static_cast<uint16_t>(set.uint(2, "template id"));
      size_t count = set.uint(2, "field count");
      if (ipfix && count == 0) {  // withdrawal (RFC 7011 8.1); id 2/3 withdraws them all
        if (tid == 2 || tid == 3)
          forget(dom);
        else
          drop(dom, tid);
        continue;
      }
      if (tid < 256) throw DecodeError("template id " + std::to_string(tid) + " below 256");
      size_t fields = count;
      if (options && ipfix) {  // template id, field count, scope field count
        size_t scope = set.uint(2, "scope field count");
        if (scope == 0 || scope > count)
          throw DecodeError("options template " + std::to_string(tid) + ": bad scope field count");
      } else if (options) {  // v9: template id, scope length and option length in bytes (4 per field)
        fields = (count + set.uint(2, "option length")) / 4;
      }
      if (fields == 0 || fields > kMaxFields)
        throw DecodeError("template " + std::to_string(tid) + ": " + std::to_string(fields) +
                          " fields (1 to " + std::to_string(kMaxFields) + " accepted)");
      Template t;
      t.options = options;
      for (size_t i = 0; i < fields; ++i) {
        Field f;
        f.id = static_cast<uint16_t>(set.uint(2, "field id"));
        f.len = static_cast<uint16_t>(set.uint(2, "field length"));
        if (ipfix && (f.id & 0x8000)) {
          f.enterprise = true;
          f.id &= 0x7fff;
          set.uint(4, "enterprise number");
        }
        if (!ipfix && f.len == kVarLen) throw DecodeError("NetFlow v9 field of variable length");
        t.fields.push_back(f);
      }
      store(dom, tid, std::move(t));
    }
  }

  void data(const Msg& m, uint16_t tid, Reader& set, std::vector<Flowlet>& out) {
    auto it = m.dom->templates.find(tid);
    if (it == m.dom->templates.end()) {
      stats_.no_template++;
      return;
    }
    const Template& t = it->second;
    size_t min_len = 0;
    for (const auto& f : t.fields) min_len += f.len == kVarLen ? 1 : f.len;
    // Records until only padding (fewer bytes than the shortest record) is left; every record takes >= 1
    // byte.
    while (set.left() > 0 && set.left() >= min_len) {
      Rec rec;
      for (const auto& f : t.fields) {
        size_t len = f.len;
        if (len == kVarLen) {
          len = set.uint(1, "variable length");
          if (len == 255) len = set.uint(2, "variable length");
        }
        take(f, set.bytes(len, "field value"), rec);
      }
      if (t.options) {
        options_record(*m.dom, rec);
        stats_.skipped_records++;
      } else if (auto fl = to_flowlet(m, rec)) {
        out.push_back(*fl);
        stats_.records++;
      } else {
        stats_.skipped_records++;
      }
    }
  }

  static void options_record(Domain& dom, const Rec& rec) {
    if (rec.sampling > 0)
      dom.sampling =
          rec.sampling_space > 0 ? (rec.sampling + rec.sampling_space) / rec.sampling : rec.sampling;
    if (rec.sys_init_ms > 0) dom.sys_init_ms = rec.sys_init_ms;
  }

  static std::optional<Flowlet> to_flowlet(const Msg& m, const Rec& rec) {
    if (rec.family == 0 || (rec.ip_proto != 6 && rec.ip_proto != 17)) return std::nullopt;
    Flowlet f{};
    f.key.family = rec.family;
    std::copy(rec.src.begin(), rec.src.end(), f.key.saddr);
    std::copy(rec.dst.begin(), rec.dst.end(), f.key.daddr);
    f.key.sport = rec.sport;
    f.key.dport = rec.dport;
    f.key.ifindex = rec.ifindex;
    f.key.dir = NP_DIR_EGRESS;
    f.key.proto = rec.ip_proto == 6               ? NP_PROTO_TCP
                  : rec.dport == NP_ROCE_UDP_PORT ? NP_PROTO_ROCE
                                                  : NP_PROTO_UDP;
    uint64_t n = rec.sampling > 0 ? rec.sampling : m.dom->sampling;
    uint64_t bytes = rec.octets ? rec.octets : rec.total_octets;
    uint64_t packets = rec.packets ? rec.packets : rec.total_packets;
    f.payload_bytes = payload_estimate(rec, f.key.proto, bytes, packets) * n;
    f.bytes = bytes * n;
    f.packets = packets * n;
    f.tcp_flags = rec.tcp_flags & 0xff;
    times(m, rec, f);
    return f;
  }

  // Absolute first/last times: explicit timestamps; else sysUpTime-relative ones (v9: against the header's
  // uptime and export time; IPFIX: against systemInitTimeMilliseconds, or, without it, taking the flow to end
  // at the export time); else the datagram's arrival.
  static void times(const Msg& m, const Rec& rec, Flowlet& f) {
    uint64_t start = rec.start_ns, end = rec.end_ns;
    if ((start == 0 || end == 0) && rec.has_up) {
      uint64_t init_ms = rec.sys_init_ms ? rec.sys_init_ms : m.dom->sys_init_ms;
      if (m.version == 9) {
        auto at = [&](uint64_t up) {  // uptime counters wrap at 2^32 ms: take the signed distance
          int64_t d = static_cast<int32_t>(static_cast<uint32_t>(up - m.uptime_ms));
          return static_cast<uint64_t>(static_cast<int64_t>(m.export_s * 1000) + d) * 1000000ull;
        };
        start = at(rec.up_start_ms), end = at(rec.up_end_ms);
      } else if (init_ms > 0) {
        start = (init_ms + rec.up_start_ms) * 1000000ull, end = (init_ms + rec.up_end_ms) * 1000000ull;
      } else {
        end = m.export_s * 1000000000ull;
        uint64_t dur = rec.up_end_ms > rec.up_start_ms ? rec.up_end_ms - rec.up_start_ms : 0;
        start = end > dur * 1000000ull ? end - dur * 1000000ull : end;
      }
    }
    if (start == 0 && end == 0) start = end = m.recv_ns;
    if (start == 0) start = end;
    if (end == 0) end = start;
    f.first_ns = std::min(start, end);
    f.last_ns = std::max(start, end);
  }

  Domain& domain(const DomainKey& k) {
    auto it = domains_.find(k);
    if (it == domains_.end()) {
      lru_.push_front(k);
      it = domains_.emplace(k, Entry{Domain{}, lru_.begin()}).first;
    } else {
      lru_.splice(lru_.begin(), lru_, it->second.pos);
    }
    return it->second.dom;
  }
  void store(Domain& dom, uint16_t tid, Template t) {
    drop(dom, tid);
    cached_ += t.fields.size();
    dom.templates[tid] = std::move(t);
    // Over the bound: evict the least recently used domains (never this one: it was just used, so it is at
    // the front); if this domain alone still exceeds it, its own templates go, lowest id first.
    while (cached_ > kMaxCachedFields && lru_.size() > 1) {
      auto victim = domains_.find(lru_.back());
      forget(victim->second.dom);
      domains_.erase(victim);
      lru_.pop_back();
    }
    while (cached_ > kMaxCachedFields && !dom.templates.empty()) drop(dom, dom.templates.begin()->first);
  }
  void drop(Domain& dom, uint16_t tid) {
    auto it = dom.templates.find(tid);
    if (it == dom.templates.end()) return;
    cached_ -= it->second.fields.size();
    dom.templates.erase(it);
  }
  void forget(Domain& dom) {
    while (!dom.templates.empty()) drop(dom, dom.templates.begin()->first);
  }

  struct Entry {
    Domain dom;
    std::list<DomainKey>::iterator pos;
  };
  std::map<DomainKey, Entry> domains_;
  std::list<DomainKey> lru_;  // most recent first
  size_t cached_ = 0;         // fields over all cached templates
};

}  // namespace

std::unique_ptr<Decoder> make_netflow_decoder() {
  return std::make_unique<NetflowDecoder>();
}

}  // namespace netprism::flowin
