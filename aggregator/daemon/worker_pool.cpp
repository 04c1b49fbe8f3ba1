#include "worker_pool.hpp"

#include <pthread.h>

#include <algorithm>
#include <cstdlib>
#include <vector>

namespace netprism::daemon {

namespace {
// A pool thread's arena holds what the pipeline keeps from it: the compressed batches queued for the live
// analysis until its next pass (~18 B per flowlet, at most ~18 MB at the analysis' default bound) and the
// transient decode/encode buffers.
constexpr std::size_t kPoolHeapReserve = 32u << 20;
}  // namespace

void reserve_thread_heap(std::size_t bytes) {
  // Blocks below the mmap threshold (16 MiB, set by Ingest), so they come from the arena; a thread's arena
  // holds at most 64 MiB per heap, so stay well below that.
  constexpr std::size_t kBlock = 8u << 20;
  std::vector<void*> blocks;
  for (std::size_t got = 0; got < bytes; got += kBlock) blocks.push_back(std::malloc(kBlock));
  for (void* p : blocks) std::free(p);  // back to the arena's top: trimmed only above M_TRIM_THRESHOLD
}

WorkerPool::WorkerPool(std::size_t threads, Work work, const char* name) : work_(std::move(work)) {
  for (std::size_t i = 0; i < std::max<std::size_t>(threads, 1); ++i)
    threads_.emplace_back([this, name] {
      ::pthread_setname_np(::pthread_self(), name);
      reserve_thread_heap(kPoolHeapReserve);
      loop();
    });
}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void WorkerPool::submit(uint64_t n) {
  if (n == 0) return;
  {
    std::lock_guard lk(mu_);
    submitted_ += n;
  }
  // One wake-up per item at most: a thread that finds more work keeps going without one.
  if (n == 1)
    work_cv_.notify_one();
  else
    work_cv_.notify_all();
}

uint64_t WorkerPool::submitted() const {
  std::lock_guard lk(mu_);
  return submitted_;
}

uint64_t WorkerPool::wait_ready(uint64_t after, std::chrono::milliseconds timeout,
                                const std::atomic<bool>& wake) {
  std::unique_lock lk(mu_);
  ready_cv_.wait_for(lk, timeout, [&] { return ready_ > after || wake.load(); });
  return ready_;
}

void WorkerPool::poke() {
  { std::lock_guard lk(mu_); }  // a waiter is either before its predicate check or waiting: not in between
  ready_cv_.notify_all();
}

void WorkerPool::loop() {
  std::unique_lock lk(mu_);
  for (;;) {
    work_cv_.wait(lk, [&] { return stop_ || claimed_ < submitted_; });
    if (stop_) return;
    const uint64_t seq = claimed_++;
    lk.unlock();
    work_(seq);
    lk.lock();
    if (seq != ready_) {
      finished_.push_back(seq);  // an earlier item is still being worked on: the prefix ends before it
      continue;
    }
    // Extend the done prefix over items that finished earlier out of order (usually none or a few: the
    // other threads' items of the same moment).
    ++ready_;
    for (auto it = std::find(finished_.begin(), finished_.end(), ready_); it != finished_.end();
         it = std::find(finished_.begin(), finished_.end(), ready_)) {
      finished_.erase(it);
      ++ready_;
    }
    ready_cv_.notify_one();  // one consumer (the committer)
  }
}

}  // namespace netprism::daemon
