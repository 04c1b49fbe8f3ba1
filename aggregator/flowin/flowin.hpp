// Switch telemetry as a source: IPFIX (RFC 7011), NetFlow v9 (RFC 3954) and sFlow v5 datagrams, decoded one
// datagram at a time into the flowlet record every other source produces (netprism/flowlet.h), so the
// store, the live analysis and `netprism analyze` treat them like agents' records.
//
// What a flow record becomes (docs/formats.md, "Switch telemetry"):
// - key: addresses (v4-mapped for IPv4), ports, proto (TCP; UDP; RoCEv2 = UDP to 4791, with the BTH's
//   destination QP when a sampled header carries it), dir = egress (the exporter saw the packets pass).
// - first_ns/last_ns: the record's flow start/end (IPFIX, v9), or the datagram's arrival (sFlow samples
//   carry no time of their own).
// - bytes/packets scaled by the sampling rate 1:N; payload_bytes exact from a sampled header (sFlow), else
//   estimated from bytes minus minimal headers (see netflow.cpp).
// Records of other protocols (ICMP, ...) and counter samples are skipped, not errors.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "netprism/records.hpp"

namespace netprism::flowin {

enum class Protocol { kIpfix, kSflow };

// "ipfix" / "sflow" (also accepts "netflow" for kIpfix: the decoder takes IPFIX and v9 alike).
std::optional<Protocol> parse_protocol(const std::string& name);
const char* protocol_name(Protocol p);

// Name of the synthetic node that stands for one exporter: "ipfix:ADDR" / "sflow:ADDR" (ADDR: the datagrams'
// source for IPFIX and v9, the agent address inside sFlow datagrams), with "/ID" appended for a non-zero
// observation domain (IPFIX), source id (v9) or sub-agent (sFlow): exporters sharing an address are told
// apart by those. It is the observer of the exporter's records; the flows' endpoints are named by address
// (or by a topology file).
std::string exporter_node(Protocol p, const std::string& addr);

// Counters of one collector (what was decoded, what was skipped and why).
struct Stats {
  uint64_t datagrams = 0;
  uint64_t records = 0;          // flow records / flow samples turned into flowlets
  uint64_t skipped_records = 0;  // other protocols, counter samples, options records
  uint64_t no_template = 0;      // data sets whose template was not (yet) known
  uint64_t errors = 0;           // malformed datagrams
};

// Per-exporter state (template caches, sampling rates, system init times) is bounded: see netflow.cpp.
class Decoder {
 public:
  virtual ~Decoder() = default;
  // Decodes one datagram from `exporter` (its source address) and source port, received at recv_ns (Unix
  // ns). Flowlets are appended to `out`; their observer is the node `node_out` receives (the exporter's
  // synthetic node, see exporter_node). False and a one-line reason for a malformed datagram; records
  // decoded before the fault are kept (they were well-formed). IPFIX scopes templates to the transport
  // session and observation domain (RFC 7011 8), so two exporters on one host keep their own templates.
  virtual bool decode(const std::string& exporter, uint16_t port, uint64_t recv_ns,
                      std::span<const uint8_t> datagram, std::vector<Flowlet>& out, std::string& node_out,
                      std::string& err) = 0;
  const Stats& stats() const { return stats_; }

 protected:
  Stats stats_;
};

std::unique_ptr<Decoder> make_decoder(Protocol p);

// Flowlets per observer node, as decoded from a capture.
using ByNode = std::map<std::string, std::vector<Flowlet>>;

// Reads a pcap/pcapng file of the UDP datagrams an exporter sent (tcpdump -w on the collector's port),
// decodes every datagram and groups the flowlets by exporter node. A datagram that is not UDP is skipped; a
// malformed one is counted in stats.errors (the rest of the file is still read). nullopt and a reason when
// the file cannot be read as a capture or holds no datagram of the protocol at all; a capture cut short is
// read up to the cut, with the reason in err as a warning.
std::optional<ByNode> read_capture(const std::string& path, Protocol p, Stats& stats, std::string& err);

}  // namespace netprism::flowin
