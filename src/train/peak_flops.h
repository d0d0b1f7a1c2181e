// The peak FLOP/s that MFU divides by, measured on the machine the run is on.
//
// A probe runs a register-blocked multiply-add loop on every thread of the run at once (OpenMP,
// the run's thread count): independent accumulator chains (with AVX-512 the fastest here of
// several forms: 12 to 30 zmm chains, all-register or with a broadcast operand from L1 as
// oneDNN's kernels run it; 12 ymm with AVX2 + FMA; more than latency x pipes), so the loop is
// bound by the issue rate of the multiply-add units alone. FLOP/s = threads x chains x lanes x flops per
// lane x iterations / wall time of a repetition (~0.25 ms), best of the repetitions of ~0.1 s.
// That is the achievable FMA throughput of the cores, the usual "peak" of MFU. It is checked
// against the best rate of the project's GEMM (measure_gemm_peak): the peak is the larger, so a
// probe form a CPU issues slowly can never make MFU exceed 100%. The threads meet
// at spinning barriers between repetitions, are pinned to distinct CPUs while measuring, and a
// repetition counts only when all of them computed at once, so a busy machine (other processes,
// threads stacked on one CPU) shows up as missing repetitions, not as a lower peak. With more
// threads than the process has CPUs they cannot compute at once: the peak is then the best own
// rates of as many threads as there are CPUs, summed (the CPU count joins the cache key).
//
//   f32:  vfmadd (AVX-512 when the CPU has it, else AVX2 + FMA): 2 flops per lane.
//   bf16: vdpbf16ps (AVX512_BF16): 2 bf16 products + 2 adds per f32 lane, 4 flops per lane;
//         that is the instruction oneDNN's bf16 matmul (the bf16 path of gemm "cpu") runs on
//         such CPUs. Without AVX512_BF16, oneDNN converts bf16 to f32 and multiplies in f32,
//         so the bf16 peak is the f32 FMA peak (the same measurement and cache entry).
//         Some CPUs issue vdpbf16ps at a quarter of the FMA rate (Intel family 6 model 207:
//         bf16 peak = 0.5x f32), others at the FMA rate (AMD Zen 4: 2x).
//   bf16 with AMX tiles usable by the process (CPUID, XCR0 and Linux's arch_prctl permission):
//         tdpbf16ps on 6 independent accumulator tiles, 16 x 16 x 32 products per instruction,
//         the unit oneDNN's bf16 matmuls run on there (brg:avx512_core_amx_bf16), 4-8x the
//         vdpbf16ps rate; without this probe the bf16 MFU there read 164%.
//
// Steady measurements (at least three repetitions within 2% of the best) are cached per CPU
// (brand string, family, model, stepping) + probe kernel + thread count in
// <cache dir>/peak_flops.json (cache dir: $TITAN_CACHE_DIR, else $XDG_CACHE_HOME/titan, else
// ~/.cache/titan, as for token caches), written atomically. An unsteady measurement (a very busy
// machine) is used for the run but not cached; an unreadable or corrupt file is ignored and
// rewritten; an unwritable cache dir only means the next run measures again. Deleting the file
// (`titan cache clear`, or `titan info --peak --remeasure`) re-measures. [metrics] peak_tflops > 0 overrides all of
// this (nothing is measured).
#pragma once
#include <functional>
#include <string>

namespace titan {

// This CPU as a cache key: "<brand string> (family F model M stepping S)".
std::string cpu_identity();

// The file in a cache folder that holds the measured peaks (`titan cache clear` removes it too).
std::string peak_cache_path(const std::string& cache_dir);
// Whether `path` is a peaks file titan wrote (a regular file whose JSON names titan's format): the
// only kind `titan cache clear` removes.
bool is_peak_cache_file(const std::string& path);

// The kernel that measures `bf16`'s peak on this CPU: "avx512 fma", "avx512_bf16 vdpbf16ps",
// "amx_bf16 tdpbf16ps", "avx2 fma" (bf16 on a CPU without AVX512_BF16 gives the f32 kernel's name).
std::string peak_probe_kernel(bool bf16);

// One measurement, no cache, of the probe kernel for `bf16` on `threads` OpenMP threads (<= 0:
// num_threads()): repetitions for about `budget_s` seconds, longer (up to 4x) while fewer than
// three repetitions came within 2% of the best (a busy machine); then it is "unsteady".
struct PeakMeasurement {
  double gflops = 0;   // the best repetition
  int team = 0;        // threads that ran
  int cpus = 0;        // CPUs the process may use (fewer than `team`: the CPUs were measured)
  int reps = 0;        // repetitions run
  int concurrent = 0;  // of which counted: past warm-up, all threads computing at once
  int near_best = 0;   // of which within 2% of the best (with none concurrent, `gflops` is the
                       // sum of the threads' best own rates, one per CPU, and this the fewest
                       // own parts near a thread's best when threads > cpus, else 0)
  double seconds = 0;  // wall time of the whole measurement
  std::string form = {};  // the kernel form that ran (the fastest here), e.g. "24 chains, broadcast operand"
  bool steady() const { return near_best >= 3; }
};
PeakMeasurement measure_peak(bool bf16, int threads, double budget_s = 0.1);

// The check on the probe: the best rate (GFLOP/s, repetitions for about `budget_s`) of the
// project's own GEMM (gemm "cpu", oneDNN) on `threads` threads, at bf16 or f32 inputs, on a
// cache-friendly square shape (1024^3). A probe can only understate what the cores do (too few
// chains, a form the core issues slowly), a real GEMM can never exceed it, so the MFU peak is the
// larger of the two and MFU stays at or below 100% of what this machine can do.
double measure_gemm_peak(bool bf16, int threads, double budget_s = 0.1);

struct PeakOptions {
  double override_tflops = 0;  // [metrics] peak_tflops: > 0 wins and nothing is measured
  bool bf16 = false;           // the peak of bf16 matmuls ([training] mixed_precision_param)
  int threads = 0;             // threads the run computes on (<= 0: num_threads())
  std::string cache_dir;       // "": the default cache dir; "none": no cache
  bool remeasure = false;      // measure even when cached, and rewrite the entry
  double budget_s = 0.1;       // probe time when measuring
  // The measurement (tests substitute their own to count calls and control the result).
  std::function<PeakMeasurement(bool bf16, int threads, double budget_s)> measure = measure_peak;
  // The GEMM check (null: none).
  std::function<double(bool bf16, int threads, double budget_s)> measure_gemm = measure_gemm_peak;
};

struct PeakFlops {
  enum class Source { Override, Measured, Cached };
  double tflops = 0;
  Source source = Source::Measured;
  bool bf16 = false;
  int threads = 0;
  int cpus = 0;                // CPUs the process may use (part of the cache key when < threads)
  std::string cpu, kernel;     // cpu_identity(), peak_probe_kernel()
  std::string cache_path;      // the cache file read or written ("" = none)
  std::string cache_note;      // why nothing was cached, or why the cache was not used ("" = fine)
  double probe_ms = 0;         // time spent measuring (0 when cached or overridden)
  double probe_gflops = 0;     // the probe's rate, and the GEMM check's (0: not run), when measured
  double gemm_gflops = 0;      // or cached; tflops is the larger
  std::string form = {};       // the probe form that ran
  // The start-up log line, e.g. "[titan] MFU peak: 0.236 TFLOP/s f32 measured (...)".
  std::string describe() const;
};

// The peak for MFU: the override, else the cached measurement for this CPU, kernel and thread
// count, else a new measurement (then cached). Never throws on cache trouble.
PeakFlops mfu_peak(const PeakOptions& opt);

}  // namespace titan
