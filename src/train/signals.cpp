#include "train/signals.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>

#include "core/error.h"
#include "core/signal_stack.h"

namespace titan {
namespace {

// Lock-free atomics are async-signal-safe; the handler does nothing else but write(2)/_exit(2).
std::atomic<int> g_signal{0};
std::atomic<bool> g_installed{false};
struct sigaction g_old_int, g_old_term;
static_assert(std::atomic<int>::is_always_lock_free);

void on_signal(int sig) {
  int expected = 0;
  if (g_signal.compare_exchange_strong(expected, sig)) {
    static const char msg[] =
        "\ntitan: stop requested; finishing the step and writing a checkpoint (signal again to exit now)\n";
    ssize_t r = ::write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)r;
    return;
  }
  static const char msg2[] = "\ntitan: second signal, exiting immediately\n";
  ssize_t r = ::write(STDERR_FILENO, msg2, sizeof msg2 - 1);
  (void)r;
  ::_exit(128 + sig);
}

}  // namespace

void install_stop_handlers() {
  if (g_installed.exchange(true)) return;
  prepare_signal_stacks();
  struct sigaction sa{};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  // Interrupted reads/writes resume (the loop polls the flag); the handler's frame goes on an
  // alternate stack (core/signal_stack.h: oneDNN's GEMM kernels point rsp at the heap).
  sa.sa_flags = SA_RESTART | SA_ONSTACK;
  TITAN_CHECK(sigaction(SIGINT, &sa, &g_old_int) == 0 && sigaction(SIGTERM, &sa, &g_old_term) == 0,
              "cannot install SIGINT/SIGTERM handlers");
}

void uninstall_stop_handlers() {
  if (!g_installed.exchange(false)) return;
  sigaction(SIGINT, &g_old_int, nullptr);
  sigaction(SIGTERM, &g_old_term, nullptr);
}

bool stop_requested() { return g_signal.load() != 0; }
int stop_signal() { return g_signal.load(); }
void clear_stop_request() { g_signal.store(0); }

}  // namespace titan
