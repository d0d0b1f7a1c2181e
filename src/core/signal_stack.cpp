#include "core/signal_stack.h"

#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <cstdlib>

namespace titan {
namespace {

constexpr size_t kStackBytes = size_t(64) << 10;  // an AVX-512 signal frame is a few KiB

struct AltStack {
  void* mem = nullptr;
  void ensure() {
    if (mem || has_signal_stack()) return;
    void* p = std::malloc(kStackBytes);
    if (!p) return;  // the handler then runs on the thread's own stack, as before
    stack_t ss{};
    ss.ss_sp = p;
    ss.ss_size = kStackBytes;
    if (::sigaltstack(&ss, nullptr) != 0) return std::free(p);
    mem = p;
  }
  ~AltStack() {  // at thread exit: unregister before the memory goes
    if (!mem) return;
    stack_t off{};
    off.ss_flags = SS_DISABLE;
    ::sigaltstack(&off, nullptr);
    std::free(mem);
  }
};
thread_local AltStack t_stack;

// In a child of fork() libgomp's thread pool is unusable (a parallel region can hang there), so a
// forked child gives the calling thread its stack only.
std::atomic<bool> g_forked{false};
const int g_atfork = ::pthread_atfork(nullptr, nullptr, [] { g_forked.store(true); });

}  // namespace

bool has_signal_stack() {
  stack_t cur{};
  return ::sigaltstack(nullptr, &cur) == 0 && !(cur.ss_flags & SS_DISABLE);
}

void prepare_signal_stacks() {
  t_stack.ensure();
  if (g_forked.load() || g_atfork != 0) return;
#pragma omp parallel
  t_stack.ensure();
}

}  // namespace titan
