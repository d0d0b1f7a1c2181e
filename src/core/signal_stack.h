// Alternate stacks for signal handlers. Every handler titan installs (train's graceful stop, the
// temporary-file cleanup, chat's Ctrl-C) is registered with SA_ONSTACK after
// prepare_signal_stacks(), so it runs on a stack of its own instead of below the interrupted
// code's stack pointer.
//
// Why: oneDNN 2.6's generated f32 GEMM kernels (gemm:jit, what its matmul runs on AVX2-only CPUs
// such as the Zen 3) point rsp at heap workspace while they run (oneDNN issue 4845, fixed in 3.11).
// A handler that ran on the interrupted stack wrote its frame into that heap block: `titan train`
// stopped with SIGINT died in the next free() ("corrupted size vs. prev_size") in 4 of 6 runs.
#pragma once

namespace titan {

// Gives the calling thread and every OpenMP worker of the current team size an alternate signal
// stack (64 KiB each, kept for the thread's life), unless it has one already. Idempotent. In a
// child of fork() only the calling thread (OpenMP's pool does not survive a fork). A signal sent
// to the process goes to the main thread unless it blocks it.
void prepare_signal_stacks();

// Whether the calling thread has an alternate signal stack (tests).
bool has_signal_stack();

}  // namespace titan
