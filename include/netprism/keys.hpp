// CURVE keys (ZeroMQ's CurveZMQ, libsodium underneath): key files, allowlists, and the socket options of
// both ends. A key file holds one Z85 key on one line (40 characters): PREFIX.key the secret (mode 0600),
// PREFIX.pub the public one. The public key is derived from the secret one, so a process needs only its
// .key file plus the peer's .pub.
#pragma once

#include <map>
#include <optional>
#include <string>

namespace netprism::keys {

inline constexpr std::size_t kZ85Len = 40;  // a 32-byte key in Z85

struct KeyPair {
  std::string public_z85, secret_z85;
};

// Writes PREFIX.key (0600, created exclusively: an existing key is never overwritten) and PREFIX.pub.
// "" on success, else a one-line error.
std::string generate(const std::string& prefix, KeyPair* out = nullptr);

// Reads a secret key file (public key derived); refuses a file readable by group or others. Error in `err`.
std::optional<KeyPair> read_secret(const std::string& path, std::string& err);
// Reads a public key file (or a .key file's public half is NOT accepted: one Z85 key of 40 characters).
std::optional<std::string> read_public(const std::string& path, std::string& err);
bool valid_z85(const std::string& key);

// Allowlists: lines "NAME PUBKEY" ('#' starts a comment, blank lines ignored). The map goes from the
// public key (Z85) to NAME. `what` names the first column in errors ("node", "role").
struct Allowlist {
  std::map<std::string, std::string> by_key;
  std::string error;  // empty on success; otherwise "FILE:LINE: ..."
};
Allowlist parse_allowlist(const std::string& text, const std::string& origin, bool roles);
Allowlist load_allowlist(const std::string& path, bool roles);

// The client side of a connection (agent, CLI): our key pair and the server's public key. Empty = plain.
struct ClientCurve {
  KeyPair own;
  std::string server_public;
  bool enabled() const { return !server_public.empty(); }
};
// Loads --key/--server-pub; "" or a one-line error.
std::string load_client(const std::string& key_file, const std::string& server_pub_file, ClientCurve& out);
// Sets the CURVE client options on a ZeroMQ socket (void* = zmq socket handle) before it connects.
void apply_client(void* socket, const ClientCurve& c);
// Sets the CURVE server options plus a ZAP domain (the handler authorises each connection in it). The ZAP
// handler must be bound before: without one, libzmq admits every client.
void apply_server(void* socket, const KeyPair& server, const std::string& zap_domain);

}  // namespace netprism::keys
