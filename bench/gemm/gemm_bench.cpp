// GEMM candidates on the shapes of the Qwen3 benchmark model (hidden 512, ffn 1536, kv 256,
// 2048 tokens per step, vocab 151936 in lm_head chunks), 2 threads, GFLOP/s = 2*M*N*K / time.
// OpenBLAS and BLIS are dlopen'ed, each in its own process (their symbols never mix, and their
// spinning worker threads never steal time from another library); run.sh runs all and joins.
//
//   gemm_bench BACKEND[,BACKEND...] [--quick | SECONDS]
//   BACKEND: dnnl_sgemm | dnnl_matmul_f32 | dnnl_matmul_bf16 | titan_f32 | titan_bf16 |
//            openblas | blis (at most one of these two per process) | convert | peak
// Several backends given together are interleaved call by call on each shape, so that they see
// the same background load (the machine is shared); each reports its best time.
#include <dlfcn.h>
#include <immintrin.h>
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "oneapi/dnnl/dnnl.hpp"
#include "ops/matmul/matmul.h"
#include "ops/matmul/bf16_convert.h"
#include "train/peak_flops.h"

namespace {

struct Shape {
  const char* what;
  bool ta, tb;
  int64_t m, n, k;
};

// fwd y = x W^T (NT), dgrad dx = dy W (NN), wgrad dW = dy^T x (TN); M = 2048 tokens.
const Shape kShapes[] = {
    {"attn q/o fwd", false, true, 2048, 512, 512},
    {"attn q/o dgrad", false, false, 2048, 512, 512},
    {"attn q/o wgrad", true, false, 512, 512, 2048},
    {"attn k/v fwd", false, true, 2048, 256, 512},
    {"mlp up fwd", false, true, 2048, 1536, 512},
    {"mlp up dgrad", false, false, 2048, 512, 1536},
    {"mlp up wgrad", true, false, 1536, 512, 2048},
    {"mlp down fwd", false, true, 2048, 512, 1536},
    {"mlp down wgrad", true, false, 512, 1536, 2048},
    {"lm_head 8192 fwd", false, true, 1024, 8192, 512},
    {"lm_head 16384 fwd", false, true, 2048, 16384, 512},
    {"lm_head 16384 dgrad", false, false, 2048, 512, 16384},
    {"lm_head 16384 wgrad", true, false, 16384, 512, 2048},
};

using Clock = std::chrono::steady_clock;

// Best time over repetitions (the minimum is the least disturbed by other load on the machine).
double best_seconds(const std::function<void()>& fn, double budget_s) {
  fn();  // warm-up: primitive creation, page faults, library thread start
  double best = 1e30, total = 0;
  int reps = 0;
  while ((total < budget_s || reps < 3) && reps < 200) {
    auto t0 = Clock::now();
    fn();
    double s = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::min(best, s);
    total += s;
    ++reps;
  }
  return best;
}

// GCC 12 flags its own _mm512_undefined_* placeholders inside the intrinsics headers.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// Peak throughput: 16 independent accumulator chains per thread (more than FMA latency x pipes),
// so the loop is bound by the FMA / dot-product issue rate alone.
// Short runs (about a millisecond) taken best of many, like the GEMMs, so that on a shared
// machine the peak and the GEMMs are measured the same way.
constexpr int kPeakIters = 1 << 16;
__attribute__((target("avx512f"))) float peak_fma_f32() {
  __m512 acc[16];
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_set1_ps(float(i) * 1e-3f);
  const __m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-7f);
  for (int it = 0; it < kPeakIters; ++it)
    for (int i = 0; i < 16; ++i) acc[i] = _mm512_fmadd_ps(acc[i], x, y);
  __m512 s = acc[0];
  for (int i = 1; i < 16; ++i) s = _mm512_add_ps(s, acc[i]);
  return _mm512_reduce_add_ps(s);
}
__attribute__((target("avx512f,avx512bf16"))) float peak_dot_bf16() {
  __m512 acc[16];
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_set1_ps(float(i) * 1e-3f);
  const __m512bh x = (__m512bh)_mm512_set1_epi16(0x3f80), y = (__m512bh)_mm512_set1_epi16(0x3380);
  for (int it = 0; it < kPeakIters; ++it)
    for (int i = 0; i < 16; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], x, y);
  __m512 s = acc[0];
  for (int i = 1; i < 16; ++i) s = _mm512_add_ps(s, acc[i]);
  return _mm512_reduce_add_ps(s);
}
// GFLOP/s of `fn` (flops_per_iter per inner step per chain) run on every thread at once.
double peak_gflops(float (*fn)(), double flops_per_op) {
  double best = 0;
  volatile float sink = 0;
  for (int rep = 0; rep < 400; ++rep) {
    auto t0 = Clock::now();
#pragma omp parallel
    { sink = sink + fn(); }
    double s = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::max(best, double(omp_get_max_threads()) * kPeakIters * 16 * flops_per_op / s * 1e-9);
  }
  return best;
}

struct Buffers {
  std::vector<float> a, b, c;
  std::vector<uint16_t> a16, b16;
  explicit Buffers(const Shape& s) : a(size_t(s.m * s.k)), b(size_t(s.k * s.n)), c(size_t(s.m * s.n)) {
    for (size_t i = 0; i < a.size(); ++i) a[i] = float((i * 7919) % 1000) * 1e-3f - 0.5f;
    for (size_t i = 0; i < b.size(); ++i) b[i] = float((i * 104729) % 1000) * 1e-3f - 0.5f;
    a16.resize(a.size());
    b16.resize(b.size());
    for (size_t i = 0; i < a.size(); ++i) a16[i] = titan::f32_to_bf16(a[i]);
    for (size_t i = 0; i < b.size(); ++i) b16[i] = titan::f32_to_bf16(b[i]);
  }
};
// Packed leading dimensions of A and B as stored.
int64_t lda_of(const Shape& s) { return s.ta ? s.m : s.k; }
int64_t ldb_of(const Shape& s) { return s.tb ? s.k : s.n; }

// oneDNN matmul primitive created once outside the timing, as a cache would.
struct DnnlMatmul {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream strm{eng};
  dnnl::matmul prim;
  dnnl::memory ma, mb, mc;
  DnnlMatmul(const Shape& s, dnnl::memory::data_type dt, void* a, void* b, float* c) {
    using md = dnnl::memory::desc;
    md da({s.m, s.k}, dt, s.ta ? dnnl::memory::dims{1, s.m} : dnnl::memory::dims{s.k, 1});
    md db({s.k, s.n}, dt, s.tb ? dnnl::memory::dims{1, s.k} : dnnl::memory::dims{s.n, 1});
    md dc({s.m, s.n}, dnnl::memory::data_type::f32, dnnl::memory::dims{s.n, 1});
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(da, db, dc), eng);
    prim = dnnl::matmul(pd);
    ma = dnnl::memory(da, eng, a);
    mb = dnnl::memory(db, eng, b);
    mc = dnnl::memory(dc, eng, c);
    std::fprintf(stderr, "  [%s] dnnl impl: %s\n", "matmul", pd.impl_info_str());
  }
  void run() {
    prim.execute(strm, {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}});
    strm.wait();
  }
};

enum CblasOrder { RowMajor = 101 };
enum CblasTrans { NoTrans = 111, Trans = 112 };
using cblas_sgemm_t = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int, float,
                               float*, int);

void* must_dlopen(const char* path) {
  void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    std::fprintf(stderr, "cannot load %s: %s\n", path, dlerror());
    std::exit(1);
  }
  return h;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: gemm_bench BACKEND[,BACKEND...] [--quick]\n");
    return 2;
  }
  std::vector<std::string> backends;
  for (std::string list = argv[1]; !list.empty();) {
    size_t comma = list.find(',');
    backends.push_back(list.substr(0, comma));
    list = comma == std::string::npos ? "" : list.substr(comma + 1);
  }
  // Optional second argument: --quick (small shapes, short runs) or a time budget in seconds per
  // backend and shape.
  bool quick = argc > 2 && std::strcmp(argv[2], "--quick") == 0;
  double budget = quick ? 0.1 : (argc > 2 ? std::atof(argv[2]) : 0.5);
  if (!(budget > 0)) budget = 0.5;
  omp_set_num_threads(2);

  if (backends[0] == "peak") {
    for (int thr : {1, 2}) {
      omp_set_num_threads(thr);
      std::printf("peak threads=%d: f32 FMA %.0f GFLOP/s, bf16 dot %.0f GFLOP/s\n", thr,
                  peak_gflops(peak_fma_f32, 32), peak_gflops(peak_dot_bf16, 64));
      // The start-up probe titan train divides MFU by (src/train/peak_flops.h), not cached.
      std::printf("  titan MFU probe threads=%d: f32 %.0f GFLOP/s (%s), bf16 %.0f GFLOP/s (%s)\n", thr,
                  titan::measure_peak(false, thr).gflops, titan::peak_probe_kernel(false).c_str(),
                  titan::measure_peak(true, thr).gflops, titan::peak_probe_kernel(true).c_str());
    }
    return 0;
  }
  if (backends[0] == "convert") {  // f32 -> bf16 of the full embedding / lm_head matrix
    size_t n = size_t(151936) * 512;
    std::vector<float> src(n);
    std::vector<uint16_t> dst(n);
    for (size_t i = 0; i < n; ++i) src[i] = float(i % 1000) * 1e-3f;
    for (int path = 0; path < 2; ++path) {
      bool vec = path == 1;
      if (vec && !titan::bf16_convert_has_avx512()) continue;
      for (int thr : {1, 2}) {
        omp_set_num_threads(thr);
        double s = best_seconds([&] { titan::f32_to_bf16_array(src.data(), dst.data(), n, vec); }, budget);
        std::printf("convert %s threads=%d 151936x512: %.2f ms, %.1f GB/s (read+write)\n",
                    vec ? "avx512" : "scalar", thr, s * 1e3, double(n) * 6 / s * 1e-9);
      }
    }
    return 0;
  }

  cblas_sgemm_t cblas_sgemm = nullptr;
  for (const std::string& be : backends) {
    if (be == "openblas") {
      void* h = must_dlopen("/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0");
      reinterpret_cast<void (*)(int)>(dlsym(h, "openblas_set_num_threads"))(2);
      auto core = reinterpret_cast<char* (*)()>(dlsym(h, "openblas_get_corename"));
      const char* env = std::getenv("OPENBLAS_CORETYPE");
      std::printf("# openblas core: %s (OPENBLAS_CORETYPE=%s)\n", core(), env ? env : "unset");
      cblas_sgemm = reinterpret_cast<cblas_sgemm_t>(dlsym(h, "cblas_sgemm"));
    } else if (be == "blis") {
      void* h = must_dlopen("/usr/lib/x86_64-linux-gnu/blis-openmp/libblis.so.4");
      reinterpret_cast<void (*)(long)>(dlsym(h, "bli_thread_set_num_threads"))(2);
      auto id = reinterpret_cast<int (*)()>(dlsym(h, "bli_arch_query_id"))();
      auto name = reinterpret_cast<const char* (*)(int)>(dlsym(h, "bli_arch_string"))(id);
      std::printf("# blis arch: %s\n", name);
      cblas_sgemm = reinterpret_cast<cblas_sgemm_t>(dlsym(h, "cblas_sgemm"));
    }
  }

  std::printf("| shape | op | M | N | K |");
  for (auto& be : backends) std::printf(" %s |", be.c_str());
  std::printf("\n|---|---|---|---|---|");
  for (size_t i = 0; i < backends.size(); ++i) std::printf("---|");
  std::printf("\n");
  for (const Shape& s : kShapes) {
    if (quick && s.n * s.m * s.k > int64_t(2048) * 2048 * 2048) continue;
    if (const char* only = std::getenv("GEMM_BENCH_ONLY"); only && !std::strstr(s.what, only)) continue;
    Buffers buf(s);
    std::vector<std::function<void()>> fns;
    std::vector<std::unique_ptr<DnnlMatmul>> mms;
    const char* op = s.ta ? "TN" : (s.tb ? "NT" : "NN");
    for (const std::string& be : backends) {
      if (be == "dnnl_sgemm") {
        fns.push_back([&] {
          dnnl_sgemm(s.ta ? 'T' : 'N', s.tb ? 'T' : 'N', s.m, s.n, s.k, 1.f, buf.a.data(), lda_of(s), buf.b.data(),
                     ldb_of(s), 0.f, buf.c.data(), s.n);
        });
      } else if (be == "dnnl_matmul_f32" || be == "dnnl_matmul_bf16") {
        bool bf = be == "dnnl_matmul_bf16";
        mms.push_back(std::make_unique<DnnlMatmul>(
            s, bf ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f32,
            bf ? (void*)buf.a16.data() : (void*)buf.a.data(), bf ? (void*)buf.b16.data() : (void*)buf.b.data(),
            buf.c.data()));
        DnnlMatmul* mm = mms.back().get();
        fns.push_back([mm] { mm->run(); });
      } else if (be == "openblas" || be == "blis") {
        fns.push_back([&] {
          cblas_sgemm(RowMajor, s.ta ? Trans : NoTrans, s.tb ? Trans : NoTrans, int(s.m), int(s.n), int(s.k), 1.f,
                      buf.a.data(), int(lda_of(s)), buf.b.data(), int(ldb_of(s)), 0.f, buf.c.data(), int(s.n));
        });
      } else if (be == "titan_f32" || be == "titan_bf16") {
        bool bf = be == "titan_bf16";
        const auto& kern = titan::kernel<titan::GemmKernel>("cpu");
        fns.push_back([&, bf] {
          titan::GemmArgs g;
          g.trans_a = s.ta, g.trans_b = s.tb, g.m = s.m, g.n = s.n, g.k = s.k;
          g.a = bf ? (const void*)buf.a16.data() : buf.a.data();
          g.b = bf ? (const void*)buf.b16.data() : buf.b.data();
          g.c = buf.c.data();
          g.in_dtype = bf ? titan::DType::BF16 : titan::DType::F32;
          titan::gemm(titan::ExecContext::host(), kern, g);
        });
      } else {
        std::fprintf(stderr, "unknown backend %s\n", be.c_str());
        return 2;
      }
    }
    // Round robin: one call of each backend per round, best time per backend.
    std::vector<double> best(fns.size(), 1e30);
    for (auto& f : fns) f();  // warm-up
    double total = 0;
    for (int round = 0; round < 200 && (total < budget * double(fns.size()) || round < 3); ++round)
      for (size_t i = 0; i < fns.size(); ++i) {
        auto t0 = Clock::now();
        fns[i]();
        double sec = std::chrono::duration<double>(Clock::now() - t0).count();
        best[i] = std::min(best[i], sec);
        total += sec;
      }
    std::printf("| %s | %s | %lld | %lld | %lld |", s.what, op, (long long)s.m, (long long)s.n, (long long)s.k);
    for (double b : best) std::printf(" %.0f |", 2.0 * double(s.m) * double(s.n) * double(s.k) / b * 1e-9);
    std::printf("\n");
    std::fflush(stdout);
  }
  return 0;
}
