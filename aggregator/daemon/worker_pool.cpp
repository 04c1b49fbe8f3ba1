#include "worker_pool.hpp"

#include <pthread.h>

namespace netprism::daemon {

WorkerPool::WorkerPool(std::size_t threads) {
  for (std::size_t i = 0; i < threads; ++i) threads_.emplace_back([this] { loop(); });
}

WorkerPool::~WorkerPool() {
  if (active_) finish();
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void WorkerPool::parallel_for(std::size_t n, std::function<void(std::size_t)> fn) {
  start(n, std::move(fn));
  finish();
}

void WorkerPool::start(std::size_t n, std::function<void(std::size_t)> fn) {
  std::lock_guard lk(mu_);
  fn_ = std::move(fn);
  active_ = true;
  n_ = n;
  next_ = 0;
  done_ = 0;
  generation_++;
  if (n > 0) work_cv_.notify_all();
}

void WorkerPool::finish() {
  std::unique_lock lk(mu_);
  if (!active_) return;
  // The caller works too, then waits for the stragglers.
  while (next_ < n_) {
    std::size_t i = next_++;
    lk.unlock();
    fn_(i);  // fn_ is only replaced by start(), which the (single) caller does not run concurrently
    lk.lock();
    done_++;
  }
  done_cv_.wait(lk, [&] { return done_ == n_; });
  active_ = false;
  fn_ = nullptr;
}

void WorkerPool::loop() {
  ::pthread_setname_np(::pthread_self(), "np-pool");
  std::unique_lock lk(mu_);
  uint64_t seen = 0;
  for (;;) {
    work_cv_.wait(lk, [&] { return stop_ || (generation_ != seen && active_ && next_ < n_); });
    if (stop_) return;
    while (active_ && next_ < n_) {
      std::size_t i = next_++;
      lk.unlock();
      fn_(i);
      lk.lock();
      if (++done_ == n_) done_cv_.notify_all();
    }
    seen = generation_;
  }
}

}  // namespace netprism::daemon
