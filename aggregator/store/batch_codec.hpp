// How a batch is laid out in the store before zstd: a compact, column-wise encoding of its flowlets.
//
// The wire message is row-wise msgpack (~91 B per flowlet: 16-byte addresses, 8-byte times, a type byte per
// field). Stored as is, zstd has to find the repetition across rows itself, and that was the aggregator's
// largest single cost. Column-wise, each field of all flowlets sits together in the fewest bytes that hold
// its range (times as deltas, addresses as indexes into a per-batch table, constant fields in no bytes at
// all), so a batch is ~20 B per flowlet before zstd, and zstd compresses that several times faster and
// smaller than the wire bytes.
//
// Layout (varint = LEB128):
//   "NPC2"                      magic; a msgpack wire message can never start with 'N' (0x4e is a fixint,
//                               not the fixarray every message starts with), so the formats are told apart
//   varint rest_len, rest       the batch without its flowlets, as a wire message (node, epoch, seq, sent_ns,
//                               RDMA samples/bursts, QPs, counters: small, rarely many)
//   varint n                    flowlets (at most the wire codec's array limit)
//   varint a, a x 16 bytes      distinct addresses, in order of first use
//   21 columns of n values:     saddr index, daddr index, ifindex, sport, dport, qpn, proto, dir, family,
//                               first_ns (zigzag delta from the previous flowlet's, the first from 0),
//                               last_ns - first_ns, packets, bytes, payload_bytes, roce_ops[0..3], last_psn,
//                               tcp_flags, end_reason
//   each column:                byte w (0..8), varint lo (smallest value), then the n values (value - lo)
//                               in w byte planes: byte 0 (least significant) of every value, then byte 1
//                               of every value, ...; w = 0: every value is lo
//   ("NPC1", written before NPC2: the same, but each value's w bytes together, little-endian.)
// Decoding checks every length, index and range, so a corrupt row is an error, never a crash or a huge
// allocation; a decoded batch equals the one that was encoded, field for field.
//
// Rows written before the column formats hold the zstd'd wire message itself; decode_stored() reads all
// three.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "netprism/records.hpp"

namespace netprism::store {

// Appends nothing: out is overwritten with the encoding of b (its capacity is reused across calls).
void encode_stored(const Batch& b, std::string& out);

// Decodes what encode_stored() produced, or a wire message (older rows). nullopt and a reason if corrupt.
std::optional<Batch> decode_stored(std::string_view bytes, std::string& err);

// encode_stored() + zstd at `level` into out (scratch holds the uncompressed encoding, with slack: its
// capacity is reused). false on failure.
bool compress_stored(const Batch& b, int level, std::string& out, std::string& scratch);

// The inverse: a row's stored bytes (zstd of any of the formats above) back to the batch. Decompression is
// bounded by twice the wire codec's message limit: nothing larger was ever accepted, and a batch's column
// encoding is at most a few bytes per flowlet larger than its wire message. nullopt and a reason if corrupt.
std::optional<Batch> decompress_stored(std::string_view stored, std::string& err);

}  // namespace netprism::store
