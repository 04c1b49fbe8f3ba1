// A ClickHouse server (or a cluster's entry point) over its HTTP interface: the URL operators give
// (`--clickhouse http://HOST:8123/?database=netprism[&cluster=NAME][&user=U&password=P]`) and queries/inserts
// through cpp-httplib. database (default "netprism") and cluster are ours; every other parameter is passed on
// to the server with each request (user, password, settings).
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>

namespace netprism::clickhouse {

struct Url {
  std::string base;      // http://host:port
  std::string database;  // "netprism" unless given
  std::string cluster;   // a <remote_servers> name: tables are Distributed over it (clickhouse_schema.hpp)
  std::map<std::string, std::string> params;  // passed on (user, password, settings)
};
// nullopt and err for anything but http://HOST[:PORT]/[?k=v&...] with a plain identifier as database and
// cluster (they are spliced into SQL).
std::optional<Url> parse_url(const std::string& url, std::string& err);
// parse_url for a URL the settings already checked: throws std::runtime_error("FLAG: <why>") otherwise.
Url parse_checked_url(const std::string& url, const std::string& flag);
std::string url_encode(const std::string& s);

class Server {
 public:
  explicit Server(Url url, std::chrono::milliseconds timeout = std::chrono::seconds(30))
      : url_(std::move(url)), timeout_(timeout) {}
  const Url& url() const { return url_; }
  // Runs sql (sent as the POST body); the reply's body, or nullopt with err ("HTTP 500: <server message>"
  // or the connection error). extra: more URL parameters (settings) for this request only.
  std::optional<std::string> query(const std::string& sql, std::string& err,
                                   const std::map<std::string, std::string>& extra = {}) const;
  // INSERT INTO table FORMAT format (RowBinary, Native) with `rows` as the data. true, or false with err.
  bool insert(const std::string& table, const std::string& rows, std::string& err,
              const std::map<std::string, std::string>& extra = {},
              const std::string& format = "RowBinary") const;

 private:
  std::optional<std::string> post(const std::string& path_query, const std::string& body,
                                  std::string& err) const;
  std::string path(const std::map<std::string, std::string>& extra) const;
  Url url_;
  std::chrono::milliseconds timeout_;
};

}  // namespace netprism::clickhouse
