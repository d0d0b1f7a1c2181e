#include "train/peak_flops.h"

#include <cpuid.h>
#include <immintrin.h>
#include <omp.h>
#include <pthread.h>
#include <sched.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <vector>

#include "core/clock.h"
#include "core/cpu_features.h"
#include "core/threading.h"
#include "data/dataset.h"
#include "ops/matmul/matmul.h"
#include "ops/registry.h"
#include "train/peak_flops_kernels.h"
#include "util/strings.h"

namespace titan {

namespace {

namespace fs = std::filesystem;

constexpr const char* kCacheFormat = "titan measured peak FLOP/s";  // marks the file as ours
// Bump when a kernel changes what it measures. 2: the fastest of several probe forms, and never
// below the best oneDNN GEMM (version 1's 16-chain register form alone read Zen 5's bf16 peak low).
// 3: the precision in the key (a CPU without AVX512_BF16 probes bf16 with the f32 kernel, but the
// entry also holds the GEMM measured at that precision).
constexpr int kCacheVersion = 3;
constexpr const char* kCacheFile = "peak_flops.json";

// AMX-BF16 and AMX-TILE in CPUID with the tile state enabled by the OS (XCR0 bits 17, 18), and
// Linux's permission for this process to use the tile data (arch_prctl ARCH_REQ_XCOMP_PERM for
// XFEATURE_XTILEDATA, which oneDNN asks for too): then oneDNN runs bf16 matmuls on AMX tiles, far
// above the vdpbf16ps rate, and the bf16 probe is the tile kernel. Without the permission neither
// can use them.
bool has_amx() {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return false;  // OSXSAVE
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  if (!(d & (1u << 22)) || !(d & (1u << 24))) return false;
  unsigned lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  if ((lo & (3u << 17)) != (3u << 17)) return false;
#if defined(__linux__) && defined(SYS_arch_prctl)
  static const bool permitted = [] {
    constexpr long kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return permitted;
#else
  return false;
#endif
}

// The inputs come through volatiles, so the compiler cannot see them (nor fold the kernels).
volatile float g_mul = 0.999999f, g_add = 1e-7f;
volatile uint16_t g_bf16_one = 0x3f80, g_bf16_tiny = 0x3380;  // 1.0, 2^-24

// The kernel: its forms (peak_flops.avx512.cpp), each with its flops per iteration summed over
// its chains; the probe runs the fastest form here.
struct Kernel {
  std::string name;
  int forms = 1;
  double (*flops_per_iter)(int form) = nullptr;
  float (*run)(int form, int64_t iters) = nullptr;
  std::string (*describe)(int form) = nullptr;
};

std::string describe_avx512(int form) {
  return std::to_string(detail::peak_form_chains_avx512(form)) + " chains" +
         (detail::peak_form_broadcast_avx512(form) ? ", broadcast operand" : "");
}

Kernel probe_kernel(bool bf16) {
  Kernel k;
  if (bf16 && cpu_has_avx512_bf16() && has_amx()) {
    k.name = "amx_bf16 tdpbf16ps";
    k.flops_per_iter = [](int) { return 16.0 * 16 * 32 * 2 * detail::peak_amx_tiles(); };
    k.run = [](int, int64_t n) { return detail::peak_tdpbf16_amx(n, g_bf16_one, g_bf16_tiny); };
    k.describe = [](int) { return std::to_string(detail::peak_amx_tiles()) + " tiles"; };
  } else if (bf16 && cpu_has_avx512_bf16()) {
    k.name = "avx512_bf16 vdpbf16ps";
    k.forms = detail::peak_forms_avx512();
    k.flops_per_iter = [](int f) { return 16.0 * 4 * detail::peak_form_chains_avx512(f); };
    k.run = [](int f, int64_t n) { return detail::peak_dpbf16_avx512(f, n, g_bf16_one, g_bf16_tiny); };
    k.describe = describe_avx512;
  } else if (cpu_has_avx512()) {
    k.name = "avx512 fma";
    k.forms = detail::peak_forms_avx512();
    k.flops_per_iter = [](int f) { return 16.0 * 2 * detail::peak_form_chains_avx512(f); };
    k.run = [](int f, int64_t n) { return detail::peak_fma_avx512(f, n, g_mul, g_add); };
    k.describe = describe_avx512;
  } else {
    TITAN_CHECK(cpu_has_avx2_fma(), "peak FLOP/s probe: this CPU has neither AVX-512 nor AVX2 with FMA");
    k.name = "avx2 fma";
    k.flops_per_iter = [](int) { return double(detail::peak_chains_avx2()) * 8 * 2; };
    k.run = [](int, int64_t n) { return detail::peak_fma_avx2(n, g_mul, g_add); };
    k.describe = [](int) { return std::to_string(detail::peak_chains_avx2()) + " chains"; };
  }
  return k;
}

volatile float g_sink = 0;

// A spinning barrier: an OpenMP barrier or a new parallel region may put waiting threads to sleep,
// and waking them on a busy machine costs milliseconds, far longer than a repetition; a thread
// that yielded its core would also miss the moment its partners get theirs. Waiting threads yield
// only when the team has more threads than the process has CPUs.
class SpinBarrier {
 public:
  void set_team(int team, int cpus) {
    team_ = team;
    oversubscribed_ = team > cpus;
  }
  void wait() {
    const int gen = gen_.load(std::memory_order_acquire);
    if (arrived_.fetch_add(1, std::memory_order_acq_rel) == team_ - 1) {
      arrived_.store(0, std::memory_order_relaxed);
      gen_.fetch_add(1, std::memory_order_release);
      return;
    }
    for (int spins = 0; gen_.load(std::memory_order_acquire) == gen; ++spins) {
      _mm_pause();
      if (oversubscribed_ && spins > 4096) std::this_thread::yield();
    }
  }

 private:
  int team_ = 1;
  bool oversubscribed_ = false;
  alignas(64) std::atomic<int> arrived_{0};
  alignas(64) std::atomic<int> gen_{0};
};

// CPUs this process may run on.
int process_cpu_count() {
#ifdef __linux__
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
#endif
  return std::max(1, int(std::thread::hardware_concurrency()));
}

// More threads than CPUs measure the CPUs: then their count is part of the key.
std::string cache_key(const std::string& cpu, const std::string& kernel, bool bf16, int threads, int cpus) {
  return cpu + " | " + kernel + " | " + (bf16 ? "bf16" : "f32") + " | " + std::to_string(threads) + " threads" +
         (threads > cpus ? " on " + std::to_string(cpus) + " CPUs" : "");
}

// The cache file's entries, or an empty object (with a note) when it is missing or unusable.
nlohmann::json read_cache(const std::string& path, std::string* note) {
  std::ifstream f(path);
  if (!f) return nlohmann::json::object();  // no cache yet: nothing to say
  std::stringstream ss;
  ss << f.rdbuf();
  nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("entries") || !j["entries"].is_object()) {
    *note = "ignored an unreadable cache file";
    return nlohmann::json::object();
  }
  if (!j.contains("version") || j["version"] != kCacheVersion) {
    *note = "ignored a cache file of another probe version";
    return nlohmann::json::object();
  }
  return j["entries"];
}

// A usable cached GFLOP/s, or 0.
double cached_gflops(const nlohmann::json& entries, const std::string& key) {
  auto it = entries.find(key);
  if (it == entries.end() || !it->is_object()) return 0;
  auto g = it->find("gflops");
  if (g == it->end() || !g->is_number()) return 0;
  const double v = g->get<double>();
  return std::isfinite(v) && v > 0 && v < 1e9 ? v : 0;
}

}  // namespace

bool is_peak_cache_file(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > (64 << 20)) return false;
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  return j.is_object() && j.contains("format") && j["format"] == kCacheFormat;
}

std::string peak_cache_path(const std::string& cache_dir) { return (fs::path(cache_dir) / kCacheFile).string(); }

std::string cpu_identity() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  char brand[49] = {};
  if (__get_cpuid(0x80000000, &a, &b, &c, &d) && a >= 0x80000004)
    for (unsigned leaf = 0; leaf < 3; ++leaf) {
      unsigned r[4];
      __get_cpuid(0x80000002 + leaf, &r[0], &r[1], &r[2], &r[3]);
      std::memcpy(brand + 16 * leaf, r, 16);
    }
  std::string name = trim(std::string(brand));
  if (name.empty()) name = "unknown x86-64 CPU";
  if (__get_cpuid(1, &a, &b, &c, &d)) {
    const unsigned base_family = (a >> 8) & 0xf, base_model = (a >> 4) & 0xf, stepping = a & 0xf;
    const unsigned family = base_family == 0xf ? base_family + ((a >> 20) & 0xff) : base_family;
    const unsigned model = base_family == 0x6 || base_family == 0xf ? base_model | (((a >> 16) & 0xf) << 4) : base_model;
    name += " (family " + std::to_string(family) + " model " + std::to_string(model) + " stepping " +
            std::to_string(stepping) + ")";
  }
  return name;
}

std::string peak_probe_kernel(bool bf16) { return probe_kernel(bf16).name; }

PeakMeasurement measure_peak(bool bf16, int threads, double budget_s) {
  if (threads <= 0) threads = num_threads();
  const Kernel kern = probe_kernel(bf16);
  // Calibration on this thread alone: every form of the kernel a few times, interleaved (load
  // that comes and goes hits all alike), the fastest form's best run kept. Then iterations for a
  // repetition of about 0.25 ms, short against a scheduler slice, so that on a busy machine some
  // repetitions still run undisturbed on every thread at once.
  int64_t iters = 1 << 12;
  std::vector<double> fastest(size_t(kern.forms), 1e30);
  for (int i = 0; i < 5; ++i)
    for (int f = 0; f < kern.forms; ++f) {
      const double t = now_seconds();
      g_sink = g_sink + kern.run(f, iters);
      fastest[size_t(f)] = std::min(fastest[size_t(f)], now_seconds() - t);
    }
  int form = 0;
  for (int f = 1; f < kern.forms; ++f)
    if (kern.flops_per_iter(f) / fastest[size_t(f)] > kern.flops_per_iter(form) / fastest[size_t(form)]) form = f;
  iters = std::clamp(int64_t(double(iters) * 2.5e-4 / std::max(fastest[size_t(form)], 1e-7)), int64_t(1) << 10,
                     int64_t(1) << 26);
  const double flops = double(iters) * kern.flops_per_iter(form);  // per thread and repetition
  auto run = [&kern, form](int64_t n) { return kern.run(form, n); };

  // Repetitions in one parallel region, the threads meeting at spinning barriers between them;
  // each thread clocks its own part. A repetition counts only when the threads computed at once:
  // the span common to all of them is at least 95% of the whole (first start to last end). On a
  // busy machine the threads of a repetition often run one after another on a shared CPU, or one
  // is preempted part-way; such repetitions measure the load, not the cores. On SMT cores,
  // siblings computing at once share the FMA units, as they do in a GEMM. The rate is the work of
  // all threads over the whole span, so a disturbed repetition can only look slower, never faster.
  // The first two repetitions warm up (some CPUs run wide vectors at reduced throughput for
  // their first microseconds) and do not count. Unless the OpenMP runtime binds its threads
  // itself, each thread is pinned to its own CPU of the process's set while it measures (the
  // scheduler of a busy machine may otherwise stack them on one CPU), and unpinned after.
  constexpr int kWarmup = 2, kMinReps = 5;
  constexpr double kNear = 0.98, kOverlap = 0.95;
  const double deadline = 4 * budget_s;  // an unsteady measurement gets this much time at most
  struct alignas(64) PerThread {
    double start = 0, end = 0;  // this repetition
    double best = 0;            // best rate of this thread's own parts (GFLOP/s)
    int near = 0;               // own parts within 2% of `best`
    std::vector<double> rates;  // of the own parts
  };
  std::vector<PerThread> per{size_t(threads)};
  std::vector<int> cpus;
#ifdef __linux__
  cpu_set_t process_set;
  if (omp_get_proc_bind() == omp_proc_bind_false && sched_getaffinity(0, sizeof process_set, &process_set) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &process_set)) cpus.push_back(c);
#endif
  const int ncpus = cpus.empty() ? process_cpu_count() : int(cpus.size());
  PeakMeasurement m;
  std::vector<double> rates;
  std::atomic<bool> stop{false};
  float sink = 0;
  SpinBarrier bar;
  const double begin = now_seconds();
#pragma omp parallel num_threads(threads)
  {
#pragma omp single
    bar.set_team(omp_get_num_threads(), ncpus);  // (the end of `single` is a barrier: all see it)
    const int team = omp_get_num_threads(), me = omp_get_thread_num();
#ifdef __linux__
    cpu_set_t own;
    const bool pin = !cpus.empty() && pthread_getaffinity_np(pthread_self(), sizeof own, &own) == 0;
    if (pin) {
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(cpus[size_t(me) % cpus.size()], &one);
      pthread_setaffinity_np(pthread_self(), sizeof one, &one);
    }
#endif
    PerThread& mine = per[size_t(me)];
    float local = 0;
    for (int rep = 0;; ++rep) {
      bar.wait();
      if (stop.load()) break;
      mine.start = now_seconds();
      local += run(iters);
      mine.end = now_seconds();
      if (rep >= kWarmup) {
        const double own = flops / std::max(mine.end - mine.start, 1e-9) * 1e-9;
        mine.rates.push_back(own);
        if (own > mine.best) {
          mine.best = own;
          mine.near = int(std::count_if(mine.rates.begin(), mine.rates.end(), [&](double r) { return r >= kNear * own; }));
        } else if (own >= kNear * mine.best) {
          ++mine.near;
        }
      }
      bar.wait();
      if (me != 0) continue;
      // Thread 0 keeps the books and decides when to stop.
      double first = 1e300, last = 0, last_start = 0, first_end = 1e300;
      for (int t = 0; t < team; ++t) {
        first = std::min(first, per[size_t(t)].start);
        last_start = std::max(last_start, per[size_t(t)].start);
        first_end = std::min(first_end, per[size_t(t)].end);
        last = std::max(last, per[size_t(t)].end);
      }
      const double whole = std::max(last - first, 1e-9);
      ++m.reps;
      if (rep >= kWarmup && first_end - last_start >= kOverlap * whole) {
        const double rate = double(team) * flops / whole * 1e-9;
        rates.push_back(rate);
        if (rate > m.gflops) {
          m.gflops = rate;
          m.near_best = 0;
          for (double r : rates) m.near_best += r >= kNear * rate;
        } else if (rate >= kNear * m.gflops) {
          ++m.near_best;
        }
      }
      // More threads than CPUs never compute all at once: there, each thread's own rate must be steady.
      bool steady = int(rates.size()) >= kMinReps && m.steady();
      if (team > ncpus) {
        steady = rep >= kWarmup + kMinReps;
        for (int t = 0; t < team; ++t) steady = steady && per[size_t(t)].near >= 3;
      }
      const double elapsed = now_seconds() - begin;
      if ((elapsed >= budget_s && steady) || (elapsed >= deadline && rep >= kWarmup)) stop.store(true);
    }
#ifdef __linux__
    if (pin) pthread_setaffinity_np(pthread_self(), sizeof own, &own);
#endif
#pragma omp atomic
    sink += local;
#pragma omp single
    m.team = team;
  }
  g_sink = g_sink + sink;
  m.concurrent = int(rates.size());
  m.cpus = ncpus;
  if (m.concurrent == 0) {
    // Never all at once (more threads than CPUs, or a very busy machine): the sum of the best
    // own rates of as many threads as there are CPUs, which can only overstate the peak (MFU
    // understated) where SMT siblings share a core. Steady when each of them is.
    std::vector<const PerThread*> order;
    for (int t = 0; t < m.team; ++t) order.push_back(&per[size_t(t)]);
    std::sort(order.begin(), order.end(), [](const PerThread* a, const PerThread* b) { return a->best > b->best; });
    m.near_best = m.team > ncpus ? 1 << 30 : 0;  // busy machine, not oversubscribed: unsteady
    for (int t = 0; t < std::min(m.team, ncpus); ++t) {
      m.gflops += order[size_t(t)]->best;
      m.near_best = std::min(m.near_best, order[size_t(t)]->near);
    }
  }
  m.seconds = now_seconds() - begin;
  m.form = kern.describe(form);
  return m;
}

double measure_gemm_peak(bool bf16, int threads, double budget_s) {
  if (threads <= 0) threads = num_threads();
  const int before = num_threads();
  if (threads != before) omp_set_num_threads(threads);
  constexpr int64_t n = 1024;
  const size_t es = bf16 ? 2 : 4;
  std::vector<unsigned char> a(size_t(n * n) * es), b(size_t(n * n) * es);
  std::vector<float> c(size_t(n * n));
  for (size_t i = 0; i < a.size() / es; ++i) {  // values in [-1, 1): no subnormals, no overflow
    const float v = float(int(i * 2654435761u % 2001) - 1000) * 1e-3f;
    if (bf16) {
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      const uint16_t h = uint16_t(bits >> 16);
      std::memcpy(&a[i * 2], &h, 2);
      std::memcpy(&b[i * 2], &h, 2);
    } else {
      std::memcpy(&a[i * 4], &v, 4);
      std::memcpy(&b[i * 4], &v, 4);
    }
  }
  GemmArgs g;
  g.trans_b = true;  // as linear's forward runs it: x [m, k] @ W[n, k]^T
  g.m = g.n = g.k = n;
  g.a = a.data();
  g.b = b.data();
  g.c = c.data();
  g.in_dtype = bf16 ? DType::BF16 : DType::F32;
  const GemmKernel& kern = kernel<GemmKernel>(default_variant());
  gemm(ExecContext::host(), kern, g);  // builds (JIT) and warms the primitive
  double best = 0;
  const double begin = now_seconds();
  for (int rep = 0; rep < 5 || (now_seconds() - begin < budget_s && rep < 1000); ++rep) {
    const double t = now_seconds();
    gemm(ExecContext::host(), kern, g);
    best = std::max(best, 2.0 * double(n) * n * n / std::max(now_seconds() - t, 1e-9) * 1e-9);
  }
  g_sink = g_sink + c[size_t(n + 1)];
  if (threads != before) omp_set_num_threads(before);
  return best;
}

PeakFlops mfu_peak(const PeakOptions& opt) {
  PeakFlops p;
  p.bf16 = opt.bf16;
  p.threads = opt.threads > 0 ? opt.threads : num_threads();
  if (opt.override_tflops > 0) {
    p.tflops = opt.override_tflops;
    p.source = PeakFlops::Source::Override;
    return p;
  }
  p.cpu = cpu_identity();
  p.kernel = peak_probe_kernel(opt.bf16);
  p.cpus = process_cpu_count();
  const std::string key = cache_key(p.cpu, p.kernel, p.bf16, p.threads, p.cpus);
  const std::string dir = opt.cache_dir.empty() ? data::default_cache_dir() : opt.cache_dir;
  const bool use_cache = dir != "none";
  const std::string path = use_cache ? peak_cache_path(dir) : "";
  nlohmann::json entries = use_cache ? read_cache(path, &p.cache_note) : nlohmann::json::object();
  if (!opt.remeasure) {
    if (double g = cached_gflops(entries, key); g > 0) {
      p.tflops = g * 1e-3;
      p.source = PeakFlops::Source::Cached;
      p.cache_path = path;
      const nlohmann::json& e = entries[key];
      if (e.contains("probe_gflops") && e["probe_gflops"].is_number()) p.probe_gflops = e["probe_gflops"].get<double>();
      if (e.contains("gemm_gflops") && e["gemm_gflops"].is_number()) p.gemm_gflops = e["gemm_gflops"].get<double>();
      if (e.contains("form") && e["form"].is_string()) p.form = e["form"].get<std::string>();
      return p;
    }
  }
  const double t0 = now_seconds();
  const PeakMeasurement m = opt.measure(opt.bf16, p.threads, opt.budget_s);
  p.probe_gflops = m.gflops;
  p.form = m.form;
  p.gemm_gflops = opt.measure_gemm ? opt.measure_gemm(opt.bf16, p.threads, opt.budget_s) : 0;
  p.probe_ms = (now_seconds() - t0) * 1e3;
  const double best = std::max(m.gflops, p.gemm_gflops);
  p.tflops = best * 1e-3;
  p.source = PeakFlops::Source::Measured;
  if (!use_cache) return p;
  if (!m.steady()) {  // too few undisturbed repetitions: use it for this run, measure again next time
    p.cache_note = "not cached: unsteady (busy machine?), " + std::to_string(m.near_best) + " of " +
                   std::to_string(m.concurrent) + " concurrent repetitions (of " + std::to_string(m.reps) +
                   ") within 2% of the best";
    return p;
  }
  entries[key] = {{"gflops", best}, {"probe_gflops", m.gflops}, {"gemm_gflops", p.gemm_gflops},
                  {"form", p.form}, {"cpu", p.cpu}, {"kernel", p.kernel}, {"threads", p.threads},
                  {"probe_ms", std::round(p.probe_ms)}, {"reps", m.reps}, {"near_best", m.near_best}, {"measured_unix", (long long)std::time(nullptr)}};
  const nlohmann::json file = {{"format", kCacheFormat}, {"version", kCacheVersion}, {"entries", entries}};
  try {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) throw std::runtime_error(dir + ": " + ec.message());
    write_file_atomic(path, file.dump(1) + "\n");
    p.cache_path = path;
  } catch (const std::exception& e) {
    p.cache_note = std::string("not cached: ") + e.what();
  }
  return p;
}

std::string PeakFlops::describe() const {
  char head[96];
  std::snprintf(head, sizeof head, "[titan] MFU peak: %.3f TFLOP/s %s", tflops, bf16 ? "bf16" : "f32");
  std::string s = head;
  if (source == Source::Override) return s + " from [metrics] peak_tflops";
  s += " measured (" + cpu + ", " + kernel;
  if (bf16 && kernel.find("bf16") == std::string::npos) s += " (no AVX512_BF16: bf16 matmuls run at the f32 FMA rate)";
  if (!form.empty()) s += " " + form;
  s += ", " + std::to_string(threads) + (threads == 1 ? " thread" : " threads");
  if (cpus > 0 && threads > cpus) s += " on " + std::to_string(cpus) + (cpus == 1 ? " CPU" : " CPUs");
  if (source == Source::Measured) {
    char ms[32];
    std::snprintf(ms, sizeof ms, ", probe %.0f ms", probe_ms);
    s += ms;
  }
  if (gemm_gflops > 0) {
    char g[128];
    std::snprintf(g, sizeof g, "; probe %.1f, oneDNN %s GEMM %.1f GFLOP/s%s", probe_gflops, bf16 ? "bf16" : "f32",
                  gemm_gflops, gemm_gflops > probe_gflops ? " (the peak: the probe read low)" : "");
    s += g;
  }
  if (source == Source::Cached) s += ", cached in " + cache_path;
  else if (!cache_path.empty()) s += ", now cached in " + cache_path;
  if (!cache_note.empty()) s += "; " + cache_note;
  s += ")";
  return s;
}

}  // namespace titan
