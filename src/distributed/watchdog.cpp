#include "distributed/watchdog.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>

#include "core/clock.h"
#include "core/error.h"

namespace titan::distributed {

namespace {

// The default action: one write() (no stdio lock the hung main thread could hold), then exit
// without running destructors or atexit handlers, which could wait on that thread.
void print_and_exit(const std::string& line) {
  const std::string l = line + "\n";
  const ssize_t ignored = ::write(2, l.data(), l.size());
  (void)ignored;
  ::_exit(1);
}

}  // namespace

CollectiveWatchdog::CollectiveWatchdog(std::string who, std::vector<std::string> ops, Options opt)
    : who_(std::move(who)), ops_(std::move(ops)), opt_(std::move(opt)) {
  TITAN_ASSERT(ops_.size() <= 255, "watchdog: ", ops_.size(), " operation names");
  TITAN_ASSERT(opt_.period_s > 0, "watchdog period ", opt_.period_s);
  if (!opt_.clock) opt_.clock = now_seconds;
  if (!opt_.expire) opt_.expire = print_and_exit;
}

CollectiveWatchdog::~CollectiveWatchdog() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void CollectiveWatchdog::set_timeout(double seconds, const std::string& setting) {
  TITAN_CHECK(std::isfinite(seconds) && seconds >= 0, setting.empty() ? std::string("collective timeout") : setting,
              " must be >= 0 seconds (0 = no timeout), got ", seconds);
  std::lock_guard<std::mutex> lk(mu_);
  timeout_ = seconds;
  setting_ = setting;
  if (seconds > 0 && opt_.thread && !thread_.joinable()) thread_ = std::thread([this] { run(); });
}

double CollectiveWatchdog::timeout() const {
  std::lock_guard<std::mutex> lk(mu_);
  return timeout_;
}

bool CollectiveWatchdog::poll(double now) {
  const uint64_t s = state_.load(std::memory_order_relaxed);
  if (s == 0 || s != seen_) {  // idle, or another call than at the last look: its wait starts now
    seen_ = s;
    seen_at_ = now;
    return false;
  }
  double timeout;
  std::string setting;
  {
    std::lock_guard<std::mutex> lk(mu_);
    timeout = timeout_;
    setting = setting_;
  }
  const double waited = now - seen_at_;
  if (fired_ || timeout <= 0 || waited < timeout) return false;
  fired_ = true;
  const size_t op = size_t(s & 0xff) - 1;
  char waited_s[32], timeout_s[32];
  std::snprintf(waited_s, sizeof waited_s, "%.1f", waited);
  std::snprintf(timeout_s, sizeof timeout_s, "%g", timeout);
  const std::string what = op < ops_.size() ? ops_[op] : "a collective";
  const std::string why = setting.empty() ? std::string("timeout ") + timeout_s + " s" : setting + " = " + timeout_s;
  opt_.expire("titan: error (" + who_ + "): " + what + " has not completed after " + waited_s + " s (" + why +
              "); another rank is hung or unreachable — ending the job");
  return true;
}

void CollectiveWatchdog::run() {
  std::unique_lock<std::mutex> lk(mu_);
  while (!stop_) {
    wake_.wait_for(lk, std::chrono::duration<double>(opt_.period_s));
    if (stop_) break;
    lk.unlock();
    const bool fired = poll(opt_.clock());
    lk.lock();
    if (fired) break;
  }
}

}  // namespace titan::distributed
