// A fixed set of threads that run one parallel-for at a time: the ingest thread hands out the decode and
// compression of a drained group (pure, per-message work) and keeps the ordered part (SQLite, ACKs) itself.
//
// start()/finish() split a parallel-for in two so the ingest thread can overlap it with other work: the
// pool threads begin on the next group while the ingest thread commits (and fsyncs) the previous one; in
// finish() the caller joins in on what is left and waits for the rest.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace netprism::daemon {

class WorkerPool {
 public:
  explicit WorkerPool(std::size_t threads);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Calls fn(i) for every i in [0, n), spread over the pool and the calling thread; returns when all ran.
  void parallel_for(std::size_t n, std::function<void(std::size_t)> fn);

  // Hands fn(0..n-1) to the pool threads and returns at once (with no pool threads, nothing runs until
  // finish()). At most one started job at a time; every start() must be followed by finish().
  void start(std::size_t n, std::function<void(std::size_t)> fn);
  // The caller runs what the pool has not taken yet, then waits until every fn(i) returned.
  void finish();

 private:
  void loop();
  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::function<void(std::size_t)> fn_;
  bool active_ = false;
  std::size_t n_ = 0, next_ = 0, done_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace netprism::daemon
