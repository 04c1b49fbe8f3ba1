// A fluent builder of raw Ethernet frames for BPF_PROG_TEST_RUN fixtures, in the style of katran's test
// packets: layers are appended in wire order and length fields are filled in by build(), unless a test
// overrides them to build a malformed packet. It also records where every header starts, so tests can cut
// a packet at each header boundary.
#pragma once

#include <arpa/inet.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace netprism::test {

class PacketBuilder {
 public:
  PacketBuilder& eth(uint16_t ethertype_if_last = 0) {
    mark("eth");
    put({0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1});
    ethertype_at_ = buf_.size();
    put16(ethertype_if_last);
    return *this;
  }
  PacketBuilder& vlan(uint16_t vid, uint16_t tpid = 0x8100) {
    set_ethertype(tpid);
    mark("vlan");
    put16(vid & 0x0fff);
    ethertype_at_ = buf_.size();
    put16(0);
    return *this;
  }
  PacketBuilder& arp() {
    set_ethertype(0x0806);
    mark("arp");
    put({0, 1, 8, 0, 6, 4, 0, 1});
    for (int i = 0; i < 20; ++i) buf_.push_back(0);
    return *this;
  }
  // IPv4 with `options_words` 32-bit option words (IHL = 5 + options_words unless ihl() overrides it).
  PacketBuilder& ipv4(const std::string& src, const std::string& dst, int options_words = 0) {
    set_ethertype(0x0800);
    mark("ipv4");
    ip_at_ = buf_.size();
    ip_family_ = 4;
    put({static_cast<uint8_t>(0x40 | (5 + options_words)), 0, 0, 0, 0, 1, 0x40, 0, 64, 0, 0, 0});
    put(addr4(src));
    put(addr4(dst));
    for (int i = 0; i < options_words * 4; ++i) buf_.push_back(1);  // NOP options
    l4_proto_at_ = ip_at_ + 9;
    return *this;
  }
  PacketBuilder& ipv6(const std::string& src, const std::string& dst) {
    set_ethertype(0x86DD);
    mark("ipv6");
    ip_at_ = buf_.size();
    ip_family_ = 6;
    put({0x60, 0, 0, 0, 0, 0, 0, 64});
    put(addr6(src));
    put(addr6(dst));
    l4_proto_at_ = ip_at_ + 6;
    return *this;
  }
  // An IPv6 extension header of 8 * (1 + len8) bytes: 0 hop-by-hop, 43 routing, 60 destination options.
  PacketBuilder& ipv6_ext(uint8_t type, uint8_t len8 = 0) {
    set_next(type);
    mark("ipv6_ext");
    l4_proto_at_ = buf_.size();
    put({0, len8, 1, 4, 0, 0, 0, 0});  // PadN option
    for (int i = 0; i < len8 * 8; ++i) buf_.push_back(0);
    return *this;
  }
  PacketBuilder& ipv6_frag(uint16_t offset8, bool more) {
    set_next(44);
    mark("ipv6_frag");
    l4_proto_at_ = buf_.size();
    put({0, 0});
    put16(static_cast<uint16_t>(offset8 << 3 | (more ? 1 : 0)));
    put({0, 0, 0, 1});
    return *this;
  }
  PacketBuilder& ipv4_frag(uint16_t offset8, bool more) {
    uint16_t v = static_cast<uint16_t>(offset8 | (more ? 0x2000 : 0));
    buf_[ip_at_ + 6] = static_cast<uint8_t>(v >> 8);
    buf_[ip_at_ + 7] = static_cast<uint8_t>(v);
    return *this;
  }
  PacketBuilder& icmp() {
    set_next(ip_family_ == 6 ? 58 : 1);
    mark("icmp");
    put({8, 0, 0, 0, 0, 1, 0, 1});
    return *this;
  }
  // TCP with `options_words` 32-bit option words (NOPs).
  PacketBuilder& tcp(uint16_t sport, uint16_t dport, uint8_t flags = 0x18, int options_words = 0) {
    set_next(6);
    mark("tcp");
    put16(sport);
    put16(dport);
    put({0, 0, 0, 1, 0, 0, 0, 0});
    buf_.push_back(static_cast<uint8_t>((5 + options_words) << 4));
    buf_.push_back(flags);
    put({0xff, 0xff, 0, 0, 0, 0});
    for (int i = 0; i < options_words * 4; ++i) buf_.push_back(1);
    return *this;
  }
  PacketBuilder& udp(uint16_t sport, uint16_t dport) {
    set_next(17);
    mark("udp");
    udp_at_ = buf_.size();
    put16(sport);
    put16(dport);
    put({0, 0, 0, 0});
    return *this;
  }
  // RoCEv2 Base Transport Header (follow with udp(x, 4791)).
  PacketBuilder& bth(uint8_t opcode, uint32_t dest_qp, uint32_t psn) {
    mark("bth");
    put({opcode, 0, 0xff, 0xff, 0});
    put({static_cast<uint8_t>(dest_qp >> 16), static_cast<uint8_t>(dest_qp >> 8),
         static_cast<uint8_t>(dest_qp)});
    put({0x80});
    put({static_cast<uint8_t>(psn >> 16), static_cast<uint8_t>(psn >> 8), static_cast<uint8_t>(psn)});
    return *this;
  }
  PacketBuilder& payload(std::size_t n) {
    mark("payload");
    for (std::size_t i = 0; i < n; ++i) buf_.push_back(static_cast<uint8_t>(i * 7));
    return *this;
  }
  // Malformations, applied by build() after the length fields.
  PacketBuilder& ihl(uint8_t v) {
    ihl_ = v;
    return *this;
  }
  PacketBuilder& ip_total_length(uint16_t v) {
    tot_len_ = v;
    return *this;
  }
  PacketBuilder& tcp_data_offset(uint8_t words) {
    tcp_doff_ = words;
    return *this;
  }

  std::vector<uint8_t> build() const {
    std::vector<uint8_t> out = buf_;
    if (ip_family_ == 4) {
      uint16_t len = static_cast<uint16_t>(out.size() - ip_at_);
      if (tot_len_) len = *tot_len_;
      out[ip_at_ + 2] = static_cast<uint8_t>(len >> 8);
      out[ip_at_ + 3] = static_cast<uint8_t>(len);
      if (ihl_) out[ip_at_] = static_cast<uint8_t>(0x40 | (*ihl_ & 0x0f));
    } else if (ip_family_ == 6) {
      uint16_t len = static_cast<uint16_t>(out.size() - ip_at_ - 40);
      if (tot_len_) len = *tot_len_;
      out[ip_at_ + 4] = static_cast<uint8_t>(len >> 8);
      out[ip_at_ + 5] = static_cast<uint8_t>(len);
    }
    if (udp_at_) {
      uint16_t len = static_cast<uint16_t>(out.size() - udp_at_);
      out[udp_at_ + 4] = static_cast<uint8_t>(len >> 8);
      out[udp_at_ + 5] = static_cast<uint8_t>(len);
    }
    if (tcp_doff_) {
      for (const auto& [name, off] : marks_)
        if (name == "tcp") out[off + 12] = static_cast<uint8_t>(*tcp_doff_ << 4);
    }
    return out;
  }
  // Offsets where each header (and the payload) starts, in wire order, and the full length.
  const std::vector<std::pair<std::string, std::size_t>>& marks() const { return marks_; }

 private:
  void mark(const char* name) { marks_.emplace_back(name, buf_.size()); }
  void put(std::initializer_list<uint8_t> b) { buf_.insert(buf_.end(), b); }
  void put(const std::vector<uint8_t>& b) { buf_.insert(buf_.end(), b.begin(), b.end()); }
  void put16(uint16_t v) {
    buf_.push_back(static_cast<uint8_t>(v >> 8));
    buf_.push_back(static_cast<uint8_t>(v));
  }
  void set_ethertype(uint16_t t) {
    buf_[ethertype_at_] = static_cast<uint8_t>(t >> 8);
    buf_[ethertype_at_ + 1] = static_cast<uint8_t>(t);
  }
  void set_next(uint8_t proto) {
    if (!l4_proto_at_) throw std::logic_error("L4 header without an IP header");
    buf_[*l4_proto_at_] = proto;
  }
  static std::vector<uint8_t> addr4(const std::string& s) {
    in_addr a{};
    if (inet_pton(AF_INET, s.c_str(), &a) != 1) throw std::invalid_argument("bad IPv4 " + s);
    std::vector<uint8_t> v(4);
    std::memcpy(v.data(), &a, 4);
    return v;
  }
  static std::vector<uint8_t> addr6(const std::string& s) {
    in6_addr a{};
    if (inet_pton(AF_INET6, s.c_str(), &a) != 1) throw std::invalid_argument("bad IPv6 " + s);
    return std::vector<uint8_t>(a.s6_addr, a.s6_addr + 16);
  }

  std::vector<uint8_t> buf_;
  std::vector<std::pair<std::string, std::size_t>> marks_;
  std::size_t ethertype_at_ = 12;
  std::size_t ip_at_ = 0;
  std::size_t udp_at_ = 0;
  int ip_family_ = 0;
  std::optional<std::size_t> l4_proto_at_;
  std::optional<uint8_t> ihl_;
  std::optional<uint16_t> tot_len_;
  std::optional<uint8_t> tcp_doff_;
};

}  // namespace netprism::test
