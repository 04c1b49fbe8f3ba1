#include "worker_pool.hpp"

namespace netprism::daemon {

WorkerPool::WorkerPool(std::size_t threads) {
  for (std::size_t i = 0; i < threads; ++i) threads_.emplace_back([this] { loop(); });
}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void WorkerPool::parallel_for(std::size_t n, const std::function<void(std::size_t)>& fn) {
  if (n == 0) return;
  std::unique_lock lk(mu_);
  fn_ = &fn;
  n_ = n;
  next_ = 0;
  done_ = 0;
  generation_++;
  work_cv_.notify_all();
  // The caller works too, then waits for the stragglers.
  while (next_ < n_) {
    std::size_t i = next_++;
    lk.unlock();
    fn(i);
    lk.lock();
    done_++;
  }
  done_cv_.wait(lk, [&] { return done_ == n_; });
  fn_ = nullptr;
}

void WorkerPool::loop() {
  std::unique_lock lk(mu_);
  uint64_t seen = 0;
  for (;;) {
    work_cv_.wait(lk, [&] { return stop_ || (generation_ != seen && fn_ && next_ < n_); });
    if (stop_) return;
    while (fn_ && next_ < n_) {
      std::size_t i = next_++;
      const auto* fn = fn_;
      lk.unlock();
      (*fn)(i);
      lk.lock();
      if (++done_ == n_) done_cv_.notify_all();
    }
    seen = generation_;
  }
}

}  // namespace netprism::daemon
