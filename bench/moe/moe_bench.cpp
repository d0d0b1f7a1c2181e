// MoE block forward+backward timings: the grouped-GEMM variant on the full shape, and the
// reference loop on a few token counts (it is far too slow for 4096 tokens: its time is linear in
// the tokens plus a per-expert constant, so a least-squares line through the measured points is
// extrapolated to the full count, and the fit's points are printed alongside).
// Prints one JSON line per measurement.
//   moe_bench [--tokens 4096] [--hidden 2048] [--inter 768] [--experts 64] [--top-k 4] [--iters 3]
//             [--warmup 1] [--ref-tokens 16,32] [--bf16] [--gemm-probe]
// --gemm-probe: only time the CPU GEMM on the six products of an average expert group.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "core/rng.h"
#include "core/threading.h"
#include "ops/matmul/matmul.h"
#include "ops/moe/moe.h"

using namespace titan;

namespace {

struct Problem {
  Tensor x, router, gate_up, down, dy, y, dx, drouter, dgate_up, ddown;
  Tensor gate_up_bf, down_bf;  // bf16 copies for --bf16
};

Tensor randn(const Shape& s, uint64_t stream, double std) {
  Tensor t = Tensor::empty(s, DType::F32);
  fill_normal(t, 0.0, std, Philox{7, stream});
  return t;
}

// Seconds for one forward+backward of `k` on the first T tokens.
double step(const MoEKernel& k, Problem& p, int64_t T, int64_t K, DType compute) {
  const Tensor x = p.x.slice0(0, T), dy = p.dy.slice0(0, T);
  Tensor y = p.y.slice0(0, T), dx = p.dx.slice0(0, T);
  MoEArgs a;
  a.x = &x, a.router = &p.router, a.gate_up = &p.gate_up, a.down = &p.down, a.top_k = K, a.compute = compute;
  if (compute == DType::BF16) a.gate_up = &p.gate_up_bf, a.down = &p.down_bf;  // rounded once, as a trainer does
  MoEGrads g;
  g.dx = &dx, g.drouter = &p.drouter, g.dgate_up = &p.dgate_up, g.ddown = &p.ddown;
  const auto t0 = std::chrono::steady_clock::now();
  MoESaved s;
  k.forward(ExecContext::host(), a, y, s);
  k.backward(ExecContext::host(), a, s, dy, g);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// GFLOP/s of the CPU GEMM alone on one expert group's six products (m = rows of the group).
void gemm_probe(int64_t rows, int64_t H, int64_t I) {
  struct G {
    const char* what;
    bool ta, tb;
    int64_t m, n, k;
  } gs[] = {{"gate_up fwd", false, true, rows, 2 * I, H}, {"down fwd", false, true, rows, H, I},
            {"dact bwd", false, false, rows, I, H},       {"ddown bwd", true, false, H, I, rows},
            {"dgate_up bwd", true, false, 2 * I, H, rows}, {"dx bwd", false, false, rows, H, 2 * I}};
  const GemmKernel& gk = kernel<GemmKernel>("cpu");
  for (const G& g : gs) {
    const Tensor a = randn({g.ta ? g.k : g.m, g.ta ? g.m : g.k}, 8, 1.0);
    const Tensor b = randn({g.tb ? g.n : g.k, g.tb ? g.k : g.n}, 9, 1.0);
    Tensor c = Tensor::zeros({g.m, g.n}, DType::F32);
    GemmArgs args;
    args.trans_a = g.ta, args.trans_b = g.tb, args.m = g.m, args.n = g.n, args.k = g.k;
    args.a = a.raw(), args.b = b.raw(), args.c = c.data<float>();
    gemm(ExecContext::host(), gk, args);  // primitive creation
    const int reps = 10;
    const auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < reps; ++r) gemm(ExecContext::host(), gk, args);
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
    std::printf("{\"gemm\": \"%s\", \"m\": %lld, \"n\": %lld, \"k\": %lld, \"ta\": %d, \"tb\": %d, \"gflops\": %.1f}\n",
                g.what, (long long)g.m, (long long)g.n, (long long)g.k, g.ta, g.tb, 2.0 * double(g.m * g.n * g.k) / t / 1e9);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int64_t T = 4096, H = 2048, I = 768, E = 64, K = 4, iters = 3, warmup = 1;
  std::string ref_tokens = "16,32";
  bool bf16 = false;
  for (int i = 1; i < argc; ++i) {
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    const std::string a = argv[i];
    if (a == "--tokens") T = std::stoll(next());
    else if (a == "--hidden") H = std::stoll(next());
    else if (a == "--inter") I = std::stoll(next());
    else if (a == "--experts") E = std::stoll(next());
    else if (a == "--top-k") K = std::stoll(next());
    else if (a == "--iters") iters = std::stoll(next());
    else if (a == "--warmup") warmup = std::stoll(next());
    else if (a == "--ref-tokens") ref_tokens = next();
    else if (a == "--bf16") bf16 = true;
    else if (a == "--gemm-probe") {
      gemm_probe(T * K / E, H, I);  // the average group (options before it apply)
      return 0;
    }
    else {
      std::fprintf(stderr, "moe_bench: unknown option %s\n", a.c_str());
      return 2;
    }
  }
  const DType compute = bf16 ? DType::BF16 : DType::F32;
  Problem p;
  p.x = randn({T, H}, 1, 1.0);
  p.router = randn({E, H}, 2, 0.02);  // HF init std: near-uniform routing, as at the start of training
  p.gate_up = randn({E, 2 * I, H}, 3, 0.02);
  p.down = randn({E, H, I}, 4, 0.02);
  p.dy = randn({T, H}, 5, 1.0);
  if (bf16) p.gate_up_bf = p.gate_up.to(DType::BF16), p.down_bf = p.down.to(DType::BF16);
  p.y = Tensor::empty({T, H}, DType::F32);
  p.dx = Tensor::empty({T, H}, DType::F32);
  p.drouter = Tensor::zeros({E, H}, DType::F32);
  p.dgate_up = Tensor::zeros({E, 2 * I, H}, DType::F32);
  p.ddown = Tensor::zeros({E, H, I}, DType::F32);
  const double flops = 3.0 * 2.0 * double(T * K) * 3.0 * double(H) * double(I);  // fwd + 2x bwd, expert GEMMs
  std::printf("{\"config\": {\"tokens\": %lld, \"hidden\": %lld, \"inter\": %lld, \"experts\": %lld, \"top_k\": %lld, "
              "\"compute\": \"%s\", \"threads\": %d}}\n",
              (long long)T, (long long)H, (long long)I, (long long)E, (long long)K, bf16 ? "bf16" : "f32",
              num_threads());
  const MoEKernel& grouped = kernel<MoEKernel>("grouped_gemm");
  for (int64_t w = 0; w < warmup; ++w) step(grouped, p, T, K, compute);
  std::vector<double> ts;
  for (int64_t it = 0; it < iters; ++it) ts.push_back(step(grouped, p, T, K, compute));
  double best = ts[0], sum = 0;
  for (double t : ts) best = std::min(best, t), sum += t;
  std::printf("{\"variant\": \"grouped_gemm\", \"tokens\": %lld, \"best_s\": %.4f, \"mean_s\": %.4f, \"gflops\": %.1f}\n",
              (long long)T, best, sum / double(ts.size()), flops / best / 1e9);
  // Reference loop on a few token counts, then a least-squares line t = a + b * tokens.
  std::vector<double> xs, ys;
  std::stringstream ss(ref_tokens);
  for (std::string tok; std::getline(ss, tok, ',');) {
    const int64_t n = std::stoll(tok);
    if (n <= 0 || n > T) continue;
    const double t = step(kernel<MoEKernel>("reference"), p, n, K, compute);
    xs.push_back(double(n));
    ys.push_back(t);
    std::printf("{\"variant\": \"reference\", \"tokens\": %lld, \"measured_s\": %.3f}\n", (long long)n, t);
  }
  if (xs.size() >= 2) {
    double mx = 0, my = 0;
    for (size_t i = 0; i < xs.size(); ++i) mx += xs[i], my += ys[i];
    mx /= double(xs.size()), my /= double(xs.size());
    double sxy = 0, sxx = 0;
    for (size_t i = 0; i < xs.size(); ++i) sxy += (xs[i] - mx) * (ys[i] - my), sxx += (xs[i] - mx) * (xs[i] - mx);
    const double b = sxy / sxx, a = my - b * mx;
    const double est = a + b * double(T);
    std::printf("{\"variant\": \"reference\", \"tokens\": %lld, \"extrapolated_s\": %.1f, \"fixed_s\": %.3f, "
                "\"per_token_s\": %.5f, \"speedup_grouped\": %.1f}\n",
                (long long)T, est, a, b, est / best);
  }
  return 0;
}
