// A low-latency thread team for the decode step (team_parallel_for). One generated token runs
// ~140 short parallel regions (a GEMV of a few MB each, the cached attention); OpenMP's choice
// there is between spinning workers (fast on an idle machine, 4-5x slower on a busy one, where
// the spinner takes the core the other thread needs) and sleeping workers (robust, but a wake-up
// per region: 30-40% of a decode step on an idle machine). The team's workers wait in three
// stages instead: a short pause-spin, then a spin that yields the core at every turn (an idle
// machine gives it straight back; a busy one runs its other work), and only after
// kTeamYieldSeconds without work a futex sleep. The calling thread takes chunks too.
//
// Same contract as parallel_for (threading.h): fn(begin, end) over [0, n) in chunks of `grain`,
// claimed dynamically; results must not depend on which thread runs a chunk, and fn must not
// throw (a worker has nowhere to send the exception). The team has
// num_threads() - 1 workers (rebuilt when that changes). A call nested in a team chunk runs on
// its calling thread alone; one from inside an OpenMP region, or while another thread is using
// the team, goes through parallel_for; so nesting and concurrent callers stay correct.
#pragma once
#include <cstdint>

#include "core/threading.h"

namespace titan {

constexpr double kTeamSpinSeconds = 20e-6, kTeamYieldSeconds = 2e-3;

namespace detail {
using TeamChunkFn = void (*)(void* ctx, int64_t chunk);
// Runs fn(ctx, c) for every c in [0, chunks) on the team; false (nothing run) when the team
// cannot take the call (nested, busy, a single thread, or more chunks than it can index).
bool team_run(int64_t chunks, TeamChunkFn fn, void* ctx);
// True on a team worker, and on the caller while it runs a region.
bool in_team();
}  // namespace detail

template <class F>
void team_parallel_for(int64_t n, int64_t grain, F&& fn) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  const int64_t chunks = (n + grain - 1) / grain;
  if (chunks == 1) {
    fn(int64_t(0), n);
    return;
  }
  struct Ctx {
    F* f;
    int64_t n, grain;
  } ctx{&fn, n, grain};
  const auto body = [](void* p, int64_t c) {
    const Ctx& x = *static_cast<const Ctx*>(p);
    const int64_t b = c * x.grain, e = b + x.grain < x.n ? b + x.grain : x.n;
    (*x.f)(b, e);
  };
  if (detail::team_run(chunks, body, &ctx)) return;
  if (detail::in_team()) {  // nested inside a team chunk: the other threads are busy already
    for (int64_t c = 0; c < chunks; ++c) body(&ctx, c);
    return;
  }
  parallel_for(n, grain, fn);
}

}  // namespace titan
