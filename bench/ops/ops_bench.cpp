// Times the ops of src/ops at the shapes of the benchmark model (tokens 2048 = batch 4 x seq 512,
// hidden 512, intermediate 1536, 8 q / 4 kv heads of 64, vocab 151936), reference of nothing: it
// prints the best of a few runs per call, and for the memory-bound ops the bytes each call must move
// divided by that time. `ops_bench ce` adds the fused lm_head + cross-entropy (seconds per call;
// the GEMMs alone at the same chunking for comparison), which needs gemm.cpu.
//   ops_bench [all|elementwise|ce] [threads]   (threads 1: timed by process CPU time)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <functional>
#include <string>

#include "core/rng.h"
#include "core/threading.h"
#include "ops/adamw/adamw.h"
#include "ops/cross_entropy/cpu_impl.h"
#include "ops/embedding/embedding.h"
#include "ops/residual/residual.h"
#include "ops/rmsnorm/rmsnorm.h"
#include "ops/rope/rope.h"
#include "ops/swiglu/swiglu.h"

using namespace titan;

namespace {

constexpr int64_t kB = 4, kS = 512, kT = kB * kS, kHidden = 512, kInter = 1536, kHeads = 8, kKvHeads = 4,
                  kHeadDim = 64, kVocab = 151936;

Tensor randn(const Shape& s, uint64_t seed, double std = 1.0) {
  Tensor t = Tensor::empty(s, DType::F32);
  fill_normal(t, 0, std, Philox{seed, 1});
  return t;
}

double process_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// Best of `reps` calls after one warm-up, in seconds: wall time, or with `cpu_time` the process's
// CPU time (on a shared machine a single-threaded run's CPU time leaves out the time it was
// descheduled; with several threads it would count OpenMP's spin-waiting, so it is only used with 1).
bool g_cpu_time = false;
double best_of(int reps, const std::function<void()>& fn) {
  fn();
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    const double c0 = process_cpu_seconds();
    fn();
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, g_cpu_time ? process_cpu_seconds() - c0 : wall);
  }
  return best;
}

void report(const char* name, const char* variant, double sec, double bytes) {
  std::printf("%-34s %-9s %9.3f ms  %7.1f GB/s\n", name, variant, sec * 1e3, bytes / sec / 1e9);
}

void bench_elementwise() {
  const double f = 4;  // bytes per f32
  for (const char* v : {"reference", "cpu"}) {
    const int reps = std::string(v) == "cpu" ? 20 : 2;
    {  // embedding: gather 2048 rows of 512, and the scatter-add back
      const auto& k = kernel<EmbeddingKernel>(v);
      Tensor w = randn({kVocab, kHidden}, 1), out = Tensor::empty({kT, kHidden}, DType::F32);
      Tensor ids = Tensor::empty({kT}, DType::I64);
      for (int64_t i = 0; i < kT; ++i) ids.data<int64_t>()[i] = (i * 7919) % kVocab;
      report("embedding fwd [2048]x512", v, best_of(reps, [&] { k.forward(ExecContext::host(), ids, w, out); }),
             2 * f * kT * kHidden);
      Tensor dw = Tensor::zeros({kVocab, kHidden}, DType::F32);
      report("embedding bwd [2048]x512", v, best_of(reps, [&] { k.backward(ExecContext::host(), ids, out, dw); }),
             3 * f * kT * kHidden);
    }
    {  // rmsnorm on the hidden rows and on q heads (q_norm)
      const auto& k = kernel<RMSNormKernel>(v);
      for (auto [n, d, name] : {std::tuple{kT, kHidden, "rmsnorm fwd 2048x512"},
                                std::tuple{kT * kHeads, kHeadDim, "rmsnorm fwd (q_norm) 16384x64"}}) {
        Tensor x = randn({n, d}, 2), w = randn({d}, 3), y = Tensor::empty({n, d}, DType::F32);
        Tensor rstd = Tensor::empty({n}, DType::F32), dx = Tensor::empty({n, d}, DType::F32);
        Tensor dw = Tensor::zeros({d}, DType::F32);
        report(name, v, best_of(reps, [&] { k.forward(ExecContext::host(), x, w, 1e-6f, y, rstd); }), 2 * f * n * d);
        std::string bname = std::string(name);
        bname.replace(bname.find("fwd"), 3, "bwd");
        report(bname.c_str(), v, best_of(reps, [&] { k.backward(ExecContext::host(), x, w, rstd, y, dx, dw); }),
               3 * f * n * d);
      }
    }
    {  // rope on q [4, 512, 8, 64]
      const auto& k = kernel<RopeKernel>(v);
      RopeCache cache = make_rope_cache(1e6, kHeadDim, kS);
      Tensor q = randn({kB, kS, kHeads, kHeadDim}, 4);
      report("rope fwd q [4,512,8,64]", v, best_of(reps, [&] { k.forward(ExecContext::host(), q, cache); }),
             2 * f * q.numel());
      report("rope bwd q [4,512,8,64]", v, best_of(reps, [&] { k.backward(ExecContext::host(), q, cache); }),
             2 * f * q.numel());
    }
    {  // swiglu on the fused gate/up [2048, 3072]
      const auto& k = kernel<SwiGLUKernel>(v);
      Tensor gu = randn({kT, 2 * kInter}, 5), out = Tensor::empty({kT, kInter}, DType::F32);
      Tensor dgu = Tensor::empty({kT, 2 * kInter}, DType::F32);
      report("swiglu fwd 2048x(2x1536)", v, best_of(reps, [&] { k.forward(ExecContext::host(), gu, out); }),
             3 * f * kT * kInter);
      report("swiglu bwd 2048x(2x1536)", v, best_of(reps, [&] { k.backward(ExecContext::host(), gu, out, dgu); }),
             5 * f * kT * kInter);
    }
    {  // residual add and gradient accumulation on [2048, 512]
      const auto& k = kernel<ResidualKernel>(v);
      Tensor a = randn({kT, kHidden}, 6), b = randn({kT, kHidden}, 7), y = Tensor::empty({kT, kHidden}, DType::F32);
      report("residual add 2048x512", v, best_of(reps, [&] { k.forward(ExecContext::host(), a, b, y); }),
             3 * f * kT * kHidden);
      report("residual accumulate 2048x512", v, best_of(reps, [&] { k.accumulate(ExecContext::host(), a, b); }),
             3 * f * kT * kHidden);
    }
    {  // AdamW over the tied embedding (the largest parameter, 77.8M)
      const auto& k = kernel<AdamWKernel>(v);
      Tensor p = randn({kVocab, kHidden}, 8), g = randn({kVocab, kHidden}, 9);
      Tensor m = Tensor::zeros({kVocab, kHidden}, DType::F32), s = Tensor::zeros({kVocab, kHidden}, DType::F32);
      AdamWParams hp;
      report("adamw 151936x512", v,
             best_of(std::string(v) == "cpu" ? 5 : 1, [&] { k.step(ExecContext::host(), p, g, m, s, hp); }),
             7 * f * p.numel());
    }
  }
}

void bench_cross_entropy() {
  const GemmKernel* gemm = KernelRegistry<GemmKernel>::get().find("cpu");
  if (!gemm) {
    std::printf("cross_entropy: no gemm.cpu registered in this build, skipped\n");
    return;
  }
  Tensor h = randn({kT, kHidden}, 10), w = randn({kVocab, kHidden}, 11, 0.02);
  Tensor labels = Tensor::empty({kT}, DType::I64);
  for (int64_t i = 0; i < kT; ++i) labels.data<int64_t>()[i] = (i * 104729) % kVocab;
  Tensor dh = Tensor::empty({kT, kHidden}, DType::F32), dw = Tensor::zeros({kVocab, kHidden}, DType::F32);
  const double flops = 3 * 2.0 * double(kT) * kHidden * kVocab;  // logits, dh, dW
  for (DType c : {DType::F32, DType::BF16}) {
    for (int64_t rows : {int64_t(256), ce_detail::chunk_rows(kT, kVocab), int64_t(1024)}) {
      double loss = 0;
      const double t = best_of(1, [&] {
        loss = ce_detail::cpu_forward_backward(ExecContext::host(), *gemm, h, w, labels, 1.0f / kT, dh, dw, c, rows);
      });
      // The three GEMMs alone on the same chunking (f32 or bf16 inputs, as the kernel runs them).
      Tensor logits = Tensor::empty({rows, kVocab}, DType::F32);
      std::vector<uint16_t> wb, lb, hb;
      const void *wp = w.raw(), *lp = logits.raw(), *hp = h.raw();
      if (c == DType::BF16) {
        wb.assign(size_t(w.numel()), 0x3f80);
        lb.assign(size_t(logits.numel()), 0x3c00);
        hb.assign(size_t(h.numel()), 0x3f80);
        wp = wb.data(), lp = lb.data(), hp = hb.data();
      }
      const double tg = best_of(1, [&] {
        for (int64_t r0 = 0; r0 < kT; r0 += rows) {
          const int64_t R = std::min(rows, kT - r0);
          const size_t es = dtype_size(c);
          const void* hc = static_cast<const char*>(hp) + size_t(r0 * kHidden) * es;
          GemmArgs g1{false, true, R, kVocab, kHidden, 1.f, 0.f, hc, kHidden, wp, kHidden, logits.data<float>(), kVocab,
                      nullptr, 0, c};
          gemm->gemm(ExecContext::host(), g1);
          GemmArgs g2{false, false, R, kHidden, kVocab, 1.f, 0.f, lp, kVocab, wp, kHidden, dh.data<float>() + r0 * kHidden,
                      kHidden, nullptr, 0, c};
          gemm->gemm(ExecContext::host(), g2);
          GemmArgs g3{true, false, kVocab, kHidden, R, 1.f, 1.f, lp, kVocab, hc, kHidden, dw.data<float>(), kHidden,
                      nullptr, 0, c};
          gemm->gemm(ExecContext::host(), g3);
        }
      });
      std::printf("cross_entropy fwd+bwd %s rows/chunk %4lld: %7.3f s (%5.1f GFLOP/s), GEMMs alone %7.3f s -> row "
                  "passes + conversions %5.1f%%  [mean loss %.4f]\n",
                  dtype_name(c), (long long)rows, t, flops / t / 1e9, tg, 100.0 * (t - tg) / t, loss / kT);
    }
    const double tf = best_of(1, [&] { ce_detail::cpu_forward(ExecContext::host(), *gemm, h, w, labels, nullptr, c); });
    std::printf("cross_entropy fwd only %s: %7.3f s\n", dtype_name(c), tf);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string what = argc > 1 ? argv[1] : "all";
  set_num_threads(argc > 2 ? std::atoi(argv[2]) : 0);
  g_cpu_time = num_threads() == 1;
  std::printf("threads: %d (%s)\n", num_threads(), g_cpu_time ? "process CPU time" : "wall time");
  if (what == "all" || what == "elementwise") bench_elementwise();
  if (what == "all" || what == "ce") bench_cross_entropy();
  return 0;
}
