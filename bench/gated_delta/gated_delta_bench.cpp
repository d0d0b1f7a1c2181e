// The chunked gated delta rule (gated_delta.cpu) forward and forward+backward on a Qwen3.5-0.8B-shaped
// linear-attention layer (16 key and value heads of 128), at several chunk lengths; hf_gated_delta.py
// times transformers' torch_chunk_gated_delta_rule on the same shape and threads (RESULTS.md).
//   bench_gated_delta [S=1024] [threads=2] [heads=16] [d=128]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/rng.h"
#include "core/threading.h"
#include "ops/gated_delta/gated_delta.h"

using namespace titan;

int main(int argc, char** argv) {
  const int64_t S = argc > 1 ? std::atoll(argv[1]) : 1024, T = argc > 2 ? std::atoll(argv[2]) : 2;
  const int64_t H = argc > 3 ? std::atoll(argv[3]) : 16, D = argc > 4 ? std::atoll(argv[4]) : 128;
  set_num_threads(int(T));
  auto rnd = [](const Shape& s, uint64_t k, double mean = 0.0) {
    Tensor t = Tensor::empty(s, DType::F32);
    fill_normal(t, mean, 1.0, Philox{7, k});
    return t;
  };
  const Tensor q = rnd({1, S, H, D}, 1), k = rnd({1, S, H, D}, 2), v = rnd({1, S, H, D}, 3), dout = rnd({1, S, H, D}, 6);
  Tensor g = rnd({1, S, H}, 4, -1.0), beta = rnd({1, S, H}, 5);
  for (int64_t i = 0; i < g.numel(); ++i) {
    g.data<float>()[i] = -std::log1p(std::exp(g.data<float>()[i]));
    beta.data<float>()[i] = 1.0f / (1.0f + std::exp(-beta.data<float>()[i]));
  }
  const auto& K = kernel<GatedDeltaKernel>("cpu");
  Tensor out = Tensor::empty(v.shape(), DType::F32), none;
  Tensor dq = Tensor::empty(q.shape(), DType::F32), dk = Tensor::empty(q.shape(), DType::F32),
         dv = Tensor::empty(v.shape(), DType::F32), dg = Tensor::empty(g.shape(), DType::F32),
         db = Tensor::empty(g.shape(), DType::F32);
  auto now = [] { return std::chrono::steady_clock::now(); };
  std::printf("gated_delta.cpu S=%lld heads=%lld d=%lld threads=%lld\n", (long long)S, (long long)H, (long long)D,
              (long long)T);
  for (int64_t chunk : {16, 32, 64, 128}) {
    GatedDeltaOptions o;
    o.chunk = chunk;
    double fwd = 1e30, bwd = 1e30;
    for (int rep = 0; rep < 3; ++rep) {
      auto t0 = now();
      K.forward(ExecContext::host(), q, k, v, g, beta, nullptr, none, o, out, none);
      auto t1 = now();
      K.backward(ExecContext::host(), q, k, v, g, beta, nullptr, none, dout, none, o, dq, dk, dv, dg, db, none);
      auto t2 = now();
      fwd = std::min(fwd, std::chrono::duration<double>(t1 - t0).count());
      bwd = std::min(bwd, std::chrono::duration<double>(t2 - t1).count());
    }
    std::printf("chunk=%lld forward %.1f ms  forward+backward %.1f ms  (%.0f tokens/s fwd+bwd)\n", (long long)chunk,
                fwd * 1e3, (fwd + bwd) * 1e3, double(S) / (fwd + bwd));
  }
  return 0;
}
