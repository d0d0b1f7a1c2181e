#include "util/temp_files.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>

#include "core/signal_stack.h"

namespace titan {

namespace {

constexpr int kSlots = 64;
constexpr size_t kPathBytes = 4096;

// state: 0 free, 1 being filled or emptied, 2 holds a path the handler may unlink.
struct Slot {
  std::atomic<int> state{0};
  char path[kPathBytes];
};
Slot g_slots[kSlots];
static_assert(std::atomic<int>::is_always_lock_free);

void on_signal(int sig) {
  const int saved = errno;
  for (Slot& s : g_slots) {
    int held = 2;  // claimed, so that the owner cannot refill the slot while it is read
    if (s.state.compare_exchange_strong(held, 1, std::memory_order_acq_rel)) ::unlink(s.path);
  }
  // SA_RESETHAND has put the default action back, and the signal stays blocked until this
  // handler returns: then it ends the process as it would have without the handler.
  ::raise(sig);
  errno = saved;
}

void install_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    prepare_signal_stacks();
    for (int sig : {SIGINT, SIGTERM}) {
      struct sigaction old {};
      if (::sigaction(sig, nullptr, &old) != 0 || old.sa_handler != SIG_DFL || (old.sa_flags & SA_SIGINFO)) continue;
      struct sigaction sa {};
      sa.sa_handler = on_signal;
      sigemptyset(&sa.sa_mask);
      sa.sa_flags = SA_RESETHAND | SA_RESTART | SA_ONSTACK;  // core/signal_stack.h
      ::sigaction(sig, &sa, nullptr);
    }
  });
}

}  // namespace

TempFileGuard::TempFileGuard(const std::string& path) {
  install_once();
  if (path.size() >= kPathBytes) return;
  for (int i = 0; i < kSlots; ++i) {
    int expected = 0;
    if (!g_slots[i].state.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) continue;
    std::memcpy(g_slots[i].path, path.c_str(), path.size() + 1);
    g_slots[i].state.store(2, std::memory_order_release);
    slot_ = i;
    return;
  }
}

TempFileGuard::~TempFileGuard() {
  // A slot the handler has claimed stays taken: the process is ending.
  int held = 2;
  if (slot_ >= 0) g_slots[slot_].state.compare_exchange_strong(held, 0, std::memory_order_acq_rel);
}

}  // namespace titan
