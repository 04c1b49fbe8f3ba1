// An ordered parallel stage: items numbered 0, 1, 2, ... in arrival order are worked on by a fixed set of
// threads, each item once, and come out in the same order -- a consumer takes the prefix of items that are
// all done.
//
// Ingest uses it between its receiving thread and the committer: the receiving thread only moves messages
// (and sends ACKs, so they leave as soon as their commit returns), the pool decodes and compresses each
// message as soon as it arrives, and the committer takes everything prepared so far, in arrival order,
// while the next messages are being prepared. No stage waits for another's whole group (the pipeline this
// replaces prepared a group with a barrier, on the receiving thread too, and ACKs waited behind it).
//
// The pool owns no items: work(seq) finds item seq in the caller's storage. submit() publishes items the
// caller stored, and wait_ready() tells which are done; both go through the pool's mutex, so whatever one
// thread wrote into an item before submit()/before its work returned is visible to the next.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace netprism::daemon {

// Grows the calling thread's malloc arena by about `bytes` at once (then frees it: the memory stays with
// the arena, untouched, so it costs address space, not RSS). glibc grows a thread's arena (not the main
// one) by exactly what each allocation lacks, with one mprotect() call per growth: a thread whose working
// set grows page by page -- SQLite's page cache filling up on the committer, batches queued for the live
// analysis on the pool -- makes a system call (and a memory-map update) per page while it grows.
void reserve_thread_heap(std::size_t bytes);

class WorkerPool {
 public:
  using Work = std::function<void(uint64_t seq)>;
  // threads >= 1 (0 is taken as 1); name shows in top -H / perf / the ingest bench's per-thread CPU.
  WorkerPool(std::size_t threads, Work work, const char* name = "np-pool");
  // Stops the threads after the items they are working on (items not yet started are not worked on).
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Items [submitted(), submitted() + n) are stored and may be worked on. Returns at once.
  void submit(uint64_t n);
  uint64_t submitted() const;
  // Waits until more than `after` items are done, or `wake` is true, or the timeout passed; returns the
  // number of done items (every item below it is done). Whoever sets `wake` calls poke() afterwards.
  uint64_t wait_ready(uint64_t after, std::chrono::milliseconds timeout, const std::atomic<bool>& wake);
  void poke();

 private:
  void loop();
  Work work_;
  mutable std::mutex mu_;
  std::condition_variable work_cv_, ready_cv_;
  uint64_t submitted_ = 0, claimed_ = 0, ready_ = 0;
  std::vector<uint64_t> finished_;  // done items above ready_ (finished out of order), unsorted; small
  bool stop_ = false;
  std::vector<std::thread> threads_;  // last: started once everything above exists
};

}  // namespace netprism::daemon
