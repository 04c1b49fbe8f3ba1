// A fixed set of threads that run one parallel-for at a time: the ingest thread hands out the decode and
// compression of a drained group (pure, per-message work) and keeps the ordered part (SQLite, ACKs) itself.
#pragma once

#include <condition_variable>
#include <cstddef>
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
  void parallel_for(std::size_t n, const std::function<void(std::size_t)>& fn);

 private:
  void loop();
  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  const std::function<void(std::size_t)>* fn_ = nullptr;
  std::size_t n_ = 0, next_ = 0, done_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace netprism::daemon
