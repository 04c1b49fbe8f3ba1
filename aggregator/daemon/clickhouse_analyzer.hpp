// The analysis role (`netprism-aggregator --analyze-from-clickhouse URL [--shard K/N]`, docs/clickhouse.md):
// an aggregator that ingests nothing and instead follows ClickHouse's flowlets table -- every aggregator's
// rows -- into the same live analysis (live_analysis.hpp) an ingesting aggregator runs, and serves the
// usual queries (jobs, job, timeline, diagnose) over it.
//
// A thread of its own, each round (every analysis interval; after a failure with backoff, 0.25 s doubling
// to 10 s):
//  - registrations and own ports from ClickHouse's nodes / own_ports tables (the address -> node names of
//    the analysis, netprism's own traffic left out), as the agents' HELLOs name addresses locally;
//  - with --shard K/N, every 5 s, the nodes of this shard's jobs over the analysis window (clickhouse/
//    shard.hpp: the same split `netprism analyze --clickhouse --shard` makes); nodes new to the shard get
//    their rows of the window read at once. A node stays while it has traffic in the window, so a job that
//    merges with another of a different shard shows on both until its older traffic leaves the window;
//  - the rows inserted since the last round (clickhouse/follower.hpp: by the server's insert stamp, with a
//    lag band and dedup by (node, epoch, seq, idx)), handed to the analysis per node as runs of flowlets.
//    When the analysis' queue is full the thread waits (ClickHouse is the buffer; nothing is dropped).
// A restart re-reads the analysis window from ClickHouse (as an ingesting aggregator re-reads its store).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <stop_token>
#include <string>
#include <vector>

#include "clickhouse/follower.hpp"
#include "clickhouse/reader.hpp"
#include "clickhouse/shard.hpp"
#include "live_analysis.hpp"
#include "registry.hpp"
#include "settings.hpp"
#include "flows.hpp"

namespace netprism::daemon {

class ClickHouseAnalyzer {
 public:
  // address -> node of every registration in ClickHouse; shared with the analysis thread.
  class Names {
   public:
    std::map<std::string, std::string> get() const;
    void set(std::map<std::string, std::string> m);

   private:
    mutable std::mutex mu_;
    std::map<std::string, std::string> m_;
  };
  ClickHouseAnalyzer(const Settings& s, Registry& reg, LiveAnalysis& live, Names& names);
  void run(std::stop_token st);

 private:
  bool round(std::stop_token st, std::string& err);
  bool refresh_names(std::string& err);
  // The shard's nodes (unsharded: nullopt, every node); `added`: new since the last round.
  bool shard_nodes(std::vector<std::string>& nodes, std::vector<std::string>& added, std::string& err);
  void take(std::stop_token st, const clickhouse::FlowletRow& row);
  void flush(std::stop_token st);  // the current run of one node's flowlets into the analysis

  const Settings& s_;
  Registry& reg_;
  LiveAnalysis& live_;
  Names& names_;
  clickhouse::Reader reader_;
  clickhouse::Follower follower_;       // the flowlets table
  clickhouse::Follower rdma_follower_;  // the rdma table (counters-only agents' records)
  clickhouse::Shard shard_;
  std::map<std::string, std::string> addr_node_;
  store::OwnTraffic own_;                // every aggregator's ports
  std::vector<std::string> owned_;       // the shard's nodes as of the last successful round (sorted)
  std::vector<std::string> shard_view_;  // the shard's nodes as last computed (sorted)
  uint64_t next_shard_ns_ = 0;
  std::string run_node_;
  std::vector<Flowlet> run_;
};

}  // namespace netprism::daemon
