// A watchdog for collectives that never complete. A rank that hangs without dying (a deadlock,
// SIGSTOP, a machine that stops answering) leaves every other rank waiting in its next collective
// forever: MPI has no timeout of its own, and mpirun only reacts to ranks that exit.
//
// The caller marks each blocking call: begin(op) before it, end() after it, one relaxed atomic
// store each and nothing else on the hot path (no clock read). A thread wakes every `period`
// seconds and looks at the mark. A call seen in flight at several wakes (same sequence number) has
// been waiting at least since the first of them; once that reaches the timeout, the expire action
// runs with one line such as
//   titan: error (rank 1 of 4): MPI_Alltoall has not completed after 5.0 s ([comm]
//   train_timeout_seconds = 5); another rank is hung or unreachable — ending the job
// (one line in reality). The default action writes it to stderr and ends the process with
// _exit(1); mpirun then ends the other ranks, as for a crashed rank. The thread never calls MPI
// (MPI_THREAD_FUNNELED allows only the main thread to), nor anything that could wait on the hung
// main thread. Since the wait is measured from the first wake that saw the call, the action runs
// between `timeout` and `timeout + period` seconds after the call began.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace titan::distributed {

class CollectiveWatchdog {
 public:
  using Clock = std::function<double()>;                   // monotonic seconds
  using Expire = std::function<void(const std::string&)>;  // receives the line (no newline)
  struct Options {
    double period_s = 1.0;
    Clock clock;         // default: std::chrono::steady_clock
    Expire expire;       // default: the line on stderr, then _exit(1)
    bool thread = true;  // false: no thread, the caller drives poll() (tests)
  };

  // `who` labels this process in the message ("rank 1 of 4"); `ops` names the operations that
  // begin() takes by index (at most 255).
  CollectiveWatchdog(std::string who, std::vector<std::string> ops, Options opt);
  CollectiveWatchdog(std::string who, std::vector<std::string> ops) : CollectiveWatchdog(std::move(who), std::move(ops), Options{}) {}
  ~CollectiveWatchdog();
  CollectiveWatchdog(const CollectiveWatchdog&) = delete;
  CollectiveWatchdog& operator=(const CollectiveWatchdog&) = delete;

  // 0 = wait forever (the initial state; the thread starts with the first positive timeout).
  // `setting` names the value's origin in the message ("[comm] train_timeout_seconds").
  void set_timeout(double seconds, const std::string& setting = "");
  double timeout() const;

  // Hot path, called by one thread at a time (the one that calls MPI).
  void begin(unsigned op) noexcept { state_.store((++seq_ << 8) | (op + 1), std::memory_order_relaxed); }
  void end() noexcept { state_.store(0, std::memory_order_relaxed); }

  // One look at the mark at time `now` (what the thread does every period). True when the timeout
  // was reached and the expire action ran (it runs at most once).
  bool poll(double now);

 private:
  void run();

  const std::string who_;
  const std::vector<std::string> ops_;
  Options opt_;
  std::atomic<uint64_t> state_{0};  // (sequence << 8) | (op + 1) while a call is in flight, else 0
  uint64_t seq_ = 0;                // touched by the calling thread only

  mutable std::mutex mu_;  // guards timeout_, setting_, stop_ and the thread's start
  double timeout_ = 0;
  std::string setting_;
  bool stop_ = false;
  std::condition_variable wake_;
  std::thread thread_;

  uint64_t seen_ = 0;  // poll()'s state: the in-flight mark last seen, and since when
  double seen_at_ = 0;
  bool fired_ = false;
};

}  // namespace titan::distributed
