#include "netprism/keys.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include <zmq.h>

#include "netprism/fd.hpp"

namespace netprism::keys {

namespace {

std::string write_file(const std::string& path, const std::string& text, mode_t mode) {
  // O_EXCL: a key is never overwritten by accident (that would lock every peer holding its public half out).
  Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode));
  if (fd.get() < 0) return "cannot create " + path + ": " + std::strerror(errno);
  if (::fchmod(fd.get(), mode) != 0) return "cannot set the mode of " + path + ": " + std::strerror(errno);
  if (::write(fd.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size()) ||
      ::fsync(fd.get()) != 0)
    return "cannot write " + path + ": " + std::strerror(errno);
  return "";
}

// The first line of a small file, trimmed; nullopt (err set) when it cannot be read.
std::optional<std::string> first_line(const std::string& path, std::string& err) {
  std::ifstream in(path);
  if (!in) {
    err = "cannot read key file " + path + ": " + std::strerror(errno);
    return std::nullopt;
  }
  std::string line;
  std::getline(in, line);
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.pop_back();
  return line;
}

}  // namespace

bool valid_z85(const std::string& key) {
  if (key.size() != kZ85Len) return false;
  uint8_t bin[32];
  return zmq_z85_decode(bin, key.c_str()) != nullptr;
}

std::string generate(const std::string& prefix, KeyPair* out) {
  char pub[kZ85Len + 1], sec[kZ85Len + 1];
  if (zmq_curve_keypair(pub, sec) != 0)
    return std::string("cannot generate a CURVE key pair: ") + zmq_strerror(zmq_errno());
  if (auto e = write_file(prefix + ".key", std::string(sec) + "\n", 0600); !e.empty()) return e;
  if (auto e = write_file(prefix + ".pub", std::string(pub) + "\n", 0644); !e.empty()) return e;
  if (out) *out = {pub, sec};
  return "";
}

std::optional<KeyPair> read_secret(const std::string& path, std::string& err) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    err = "cannot read key file " + path + ": " + std::strerror(errno);
    return std::nullopt;
  }
  // Group read is allowed (a packaged daemon's key may belong to root with its service group); world read
  // is not: anyone on the host could impersonate the holder.
  if (st.st_mode & S_IROTH) {
    err = "secret key " + path + " is readable by everyone (chmod 600 it)";
    return std::nullopt;
  }
  auto line = first_line(path, err);
  if (!line) return std::nullopt;
  if (!valid_z85(*line)) {
    err = path + ": not a CURVE secret key (one Z85 key of 40 characters; see `netprism keygen`)";
    return std::nullopt;
  }
  char pub[kZ85Len + 1];
  if (zmq_curve_public(pub, line->c_str()) != 0) {
    err = path + ": cannot derive the public key: " + zmq_strerror(zmq_errno());
    return std::nullopt;
  }
  return KeyPair{pub, *line};
}

std::optional<std::string> read_public(const std::string& path, std::string& err) {
  auto line = first_line(path, err);
  if (!line) return std::nullopt;
  if (!valid_z85(*line)) {
    err = path + ": not a CURVE public key (one Z85 key of 40 characters; see `netprism keygen`)";
    return std::nullopt;
  }
  return line;
}

Allowlist parse_allowlist(const std::string& text, const std::string& origin, bool roles) {
  Allowlist out;
  std::istringstream in(text);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    // '#' is a Z85 digit, so a comment is a whole line starting with '#' or anything after the two fields
    // that starts with '#' (a key may itself begin with '#': it is always the second field).
    std::istringstream fields(line);
    std::string name, key, extra;
    if (!(fields >> name) || name[0] == '#') continue;  // blank or comment
    const std::string where = origin + ":" + std::to_string(n) + ": ";
    if (!(fields >> key) || ((fields >> extra) && extra[0] != '#')) {
      out.error = where + (roles ? "expected 'read|admin PUBKEY'" : "expected 'NODE PUBKEY'");
      break;
    }
    if (roles && name != "read" && name != "admin") {
      out.error = where + "role must be read or admin, not '" + name + "'";
      break;
    }
    if (!valid_z85(key)) {
      out.error = where + "not a Z85 public key: '" + key + "'";
      break;
    }
    // One key, one node: a key listed twice could write for two nodes, which the allowlist exists to stop.
    if (auto [it, fresh] = out.by_key.emplace(key, name); !fresh && it->second != name) {
      out.error = where + "key listed twice ('" + it->second + "' and '" + name + "')";
      break;
    }
  }
  if (!out.error.empty()) out.by_key.clear();
  return out;
}

Allowlist load_allowlist(const std::string& path, bool roles) {
  std::ifstream in(path);
  if (!in) {
    Allowlist a;
    a.error = "cannot read " + path + ": " + std::strerror(errno);
    return a;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_allowlist(ss.str(), path, roles);
}

std::string load_client(const std::string& key_file, const std::string& server_pub_file, ClientCurve& out) {
  if (key_file.empty() || server_pub_file.empty())
    return "CURVE needs both a key (--key) and the aggregator's public key (--server-pub); or --insecure "
           "for plain TCP";
  std::string err;
  auto own = read_secret(key_file, err);
  if (!own) return err;
  auto server = read_public(server_pub_file, err);
  if (!server) return err;
  out.own = *own;
  out.server_public = *server;
  return "";
}

void apply_client(void* socket, const ClientCurve& c) {
  if (!c.enabled()) return;
  zmq_setsockopt(socket, ZMQ_CURVE_SERVERKEY, c.server_public.c_str(), kZ85Len);
  zmq_setsockopt(socket, ZMQ_CURVE_PUBLICKEY, c.own.public_z85.c_str(), kZ85Len);
  zmq_setsockopt(socket, ZMQ_CURVE_SECRETKEY, c.own.secret_z85.c_str(), kZ85Len);
}

void apply_server(void* socket, const KeyPair& server, const std::string& zap_domain) {
  const int one = 1;
  zmq_setsockopt(socket, ZMQ_CURVE_SERVER, &one, sizeof one);
  zmq_setsockopt(socket, ZMQ_CURVE_SECRETKEY, server.secret_z85.c_str(), kZ85Len);
  // libzmq lets every CURVE client in when no ZAP handler is bound (ZMQ_ZAP_ENFORCE_DOMAIN is a draft
  // option Debian's libzmq does not export), so callers bind the handler first (daemon/auth.hpp).
  zmq_setsockopt(socket, ZMQ_ZAP_DOMAIN, zap_domain.data(), zap_domain.size());
}

}  // namespace netprism::keys
