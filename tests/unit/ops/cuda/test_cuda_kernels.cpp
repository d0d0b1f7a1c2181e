// The "cuda" variants (ops/cuda: single-source kernels, run here under the grid emulator) beyond
// what the kernel case table checks (tests/unit/ops/test_kernel_cases.cpp runs every table row for
// them): outputs aliasing inputs, the same bits for every block and thread order (no order-
// dependent float atomics), no device memory left behind, and `verify kernels --device cuda`.
#include <cmath>
#include <set>
#include <vector>

#include "../op_test_util.h"
#include "core/allocator.h"
#include "core/cuda_emu/runtime.h"
#include "ops/adamw/adamw.h"
#include "ops/attention/attention.h"
#include "ops/catalog.h"
#include "ops/causal_conv1d/causal_conv1d.h"
#include "ops/cross_entropy/cross_entropy.h"
#include "ops/embedding/embedding.h"
#include "ops/gated_delta/gated_delta.h"
#include "ops/gated_rmsnorm/gated_rmsnorm.h"
#include "ops/moe/moe.h"
#include "ops/rmsnorm/rmsnorm.h"
#include "ops/swiglu/swiglu.h"
#include "ops/verify/verify.h"

using namespace titan;
using namespace titan::optest;

namespace {

// Restores the emulator's seed when a test changes it.
struct SeedGuard {
  uint64_t saved = cuda_emu::seed();
  ~SeedGuard() { cuda_emu::set_seed(saved); }
};

// The MoE block on one set of inputs (bias, extra logit gradient, bf16 or f32 compute): every
// output of forward and backward, for the variant named.
std::vector<Tensor> moe_outputs(const std::string& variant, bool bf16, bool bf16_weights = false) {
  const int64_t T = 37, H = 20, E = 8, I = 12, K = 3;
  const Tensor x = randn({T, H}, 51), router = randn({E, H}, 52, 0.5), gate_up = randn({E, 2 * I, H}, 53, 0.3);
  const Tensor down = randn({E, H, I}, 54, 0.3), dy = randn({T, H}, 55), extra = randn({T, E}, 56, 0.1);
  Tensor bias = randn({E}, 57, 0.01);
  bias.data<float>()[2] = -3.f;  // expert 2 gets no tokens
  // The weights rounded to bf16 once (the f32 tensors hold the same values, widened).
  const Tensor gu16 = gate_up.to(DType::BF16), dn16 = down.to(DType::BF16);
  const Tensor gu_r = gu16.to(DType::F32), dn_r = dn16.to(DType::F32);
  MoEArgs a;
  a.x = &x, a.router = &router, a.bias = &bias, a.top_k = K;
  a.gate_up = bf16_weights ? &gu16 : (bf16 ? &gu_r : &gate_up);
  a.down = bf16_weights ? &dn16 : (bf16 ? &dn_r : &down);
  a.compute = bf16 ? DType::BF16 : DType::F32;
  const auto& k = kernel<MoEKernel>(variant);
  Tensor y = Tensor::empty({T, H}, DType::F32);
  MoESaved s;
  k.forward(ExecContext::host(), a, y, s);
  Tensor dx = Tensor::empty({T, H}, DType::F32), dr = randn({E, H}, 58), dg = randn({E, 2 * I, H}, 59);
  Tensor dd = randn({E, H, I}, 60);  // accumulated into
  MoEGrads g;
  g.dx = &dx, g.drouter = &dr, g.dgate_up = &dg, g.ddown = &dd, g.dlogits_extra = &extra;
  k.backward(ExecContext::host(), a, s, dy, g);
  if (variant == "cuda") {  // another variant's saved state (padded rows) is refused, not indexed
    MoESaved other;
    kernel<MoEKernel>("grouped_gemm").forward(ExecContext::host(), a, y, other);
    other.acts = s.acts;  // shapes that pass the first check; rows that do not match the routing
    for (int64_t j = 0; j < T * K; ++j) other.slot_pos.data<int32_t>()[j] = int32_t(T * K - 1 - j);
    EXPECT_THROW(k.backward(ExecContext::host(), a, other, dy, g), Error);
  }
  return {y, s.logits, s.topk_idx, s.topk_w, s.tokens_per_expert, dx, dr, dg, dd};
}

TEST(CudaKernels, RegisteredForTheOpsTheyImplement) {
  for (const char* op : {"rmsnorm", "swiglu", "embedding", "adamw", "rope", "gemm", "linear", "cross_entropy",
                         "attention", "bias", "residual", "gated_delta", "causal_conv1d", "gated_rmsnorm", "moe"})
    EXPECT_TRUE(op_has_variant(op, "cuda")) << op;
}

TEST(CudaKernels, AliasedOutputsMatchOutOfPlaceCalls) {
  const auto& rn = kernel<RMSNormKernel>("cuda");
  Tensor x = randn({5, 37}, 1), w = randn({37}, 2, 0.1, 1.0), dy = randn({5, 37}, 3);
  Tensor rstd = Tensor::empty({5}, DType::F32);
  Tensor y = Tensor::empty({5, 37}, DType::F32);
  rn.forward(ExecContext::host(), x, w, 1e-6f, y, rstd);
  Tensor dx = Tensor::empty({5, 37}, DType::F32), dw = Tensor::zeros({37}, DType::F32);
  rn.backward(ExecContext::host(), x, w, rstd, dy, dx, dw);
  Tensor dyi = dy.clone(), dwi = Tensor::zeros({37}, DType::F32);
  rn.backward(ExecContext::host(), x, w, rstd, dyi, dyi,
              dwi);  // dx aliasing dy: dw must be computed from dy before dx overwrites it
  EXPECT_TRUE(bitwise_equal(dyi, dx));
  EXPECT_TRUE(bitwise_equal(dwi, dw));
  // Against the reference (accumulating dx as well).
  const auto& ref = kernel<RMSNormKernel>("reference");
  Tensor dx_r = randn({5, 37}, 9), dx_c = dx_r.clone(), dw_r = Tensor::zeros({37}, DType::F32);
  Tensor dw_c = dw_r.clone();
  ref.backward_add(ExecContext::host(), x, w, rstd, dy, dx_r, dw_r);
  rn.backward_add(ExecContext::host(), x, w, rstd, dy, dx_c, dw_c);
  EXPECT_TRUE(close(dx_c, dx_r, 1e-5, 1e-5));
  EXPECT_TRUE(close(dw_c, dw_r, 1e-5, 1e-5));

  const auto& sg = kernel<SwiGLUKernel>("cuda");
  Tensor gu = randn({3, 22}, 4), dout = randn({3, 11}, 5), dgu = Tensor::empty({3, 22}, DType::F32);
  sg.backward(ExecContext::host(), gu, dout, dgu);
  Tensor gui = gu.clone();
  sg.backward(ExecContext::host(), gui, dout, gui);  // dgu aliasing gu
  EXPECT_TRUE(bitwise_equal(gui, dgu));
}

TEST(CudaKernels, SameBitsForEveryBlockAndThreadOrder) {
  SeedGuard guard;
  const auto& rn = kernel<RMSNormKernel>("cuda");
  const auto& emb = kernel<EmbeddingKernel>("cuda");
  // 300 vectors: several dw chunks; repeated ids: several tokens add into one row.
  Tensor x = randn({300, 65}, 11), w = randn({65}, 12), dy = randn({300, 65}, 13);
  Tensor ids = Tensor::empty({300}, DType::I64);
  for (int64_t i = 0; i < 300; ++i) ids.data<int64_t>()[i] = (i * 7) % 5;
  std::vector<Tensor> first;
  for (uint64_t s : {1u, 2u, 3u}) {
    cuda_emu::set_seed(s);
    Tensor y = Tensor::empty({300, 65}, DType::F32), rstd = Tensor::empty({300}, DType::F32);
    rn.forward(ExecContext::host(), x, w, 1e-6f, y, rstd);
    Tensor dx = Tensor::empty({300, 65}, DType::F32), dw = Tensor::zeros({65}, DType::F32);
    rn.backward(ExecContext::host(), x, w, rstd, dy, dx, dw);
    Tensor dwe = Tensor::zeros({5, 65}, DType::F32);
    emb.backward(ExecContext::host(), ids, dy, dwe);
    const std::vector<Tensor> outs = {y, rstd, dx, dw, dwe};
    if (first.empty()) {
      first = outs;
      continue;
    }
    for (size_t k = 0; k < outs.size(); ++k) EXPECT_TRUE(bitwise_equal(outs[k], first[k])) << "seed " << s << " output " << k;
  }
}

// Ignored labels (-100) and a frozen bf16 lm_head, which the case table does not combine.
TEST(CudaKernels, CrossEntropyIgnoredRowsAndABf16Head) {
  const auto& ref = kernel<CrossEntropyKernel>("reference");
  const auto& cu = kernel<CrossEntropyKernel>("cuda");
  Tensor h = randn({6, 8}, 21), w = randn({11, 8}, 22), labels = Tensor::empty({6}, DType::I32);
  const int32_t ls[] = {3, -100, 10, 0, -100, 7};
  for (int i = 0; i < 6; ++i) labels.data<int32_t>()[i] = ls[i];
  EXPECT_NEAR(cu.forward(ExecContext::host(), h, w, labels, nullptr, DType::F32),
              ref.forward(ExecContext::host(), h, w, labels, nullptr, DType::F32), 1e-4);
  Tensor dh_r = Tensor::empty({6, 8}, DType::F32), dh_c = dh_r.clone();
  Tensor dw_r = Tensor::zeros({11, 8}, DType::F32), dw_c = dw_r.clone();
  const double lr = ref.forward_backward(ExecContext::host(), h, w, labels, 0.25f, dh_r, dw_r, DType::F32);
  const double lc = cu.forward_backward(ExecContext::host(), h, w, labels, 0.25f, dh_c, dw_c, DType::F32);
  EXPECT_NEAR(lc, lr, 1e-4);
  EXPECT_TRUE(close(dh_c, dh_r, 1e-5, 1e-4));
  EXPECT_TRUE(close(dw_c, dw_r, 1e-5, 1e-4));
  for (int k = 0; k < 8; ++k) EXPECT_EQ(dh_c.data<float>()[1 * 8 + k], 0.0f);  // an ignored row
  Tensor w16 = w.to(DType::BF16), none;
  const double lb_r = ref.forward_backward(ExecContext::host(), h, w16, labels, 1.f, dh_r, none, DType::BF16);
  const double lb_c = cu.forward_backward(ExecContext::host(), h, w16, labels, 1.f, dh_c, none, DType::BF16);
  EXPECT_NEAR(lb_c, lb_r, 2e-2 * std::abs(lb_r));
  EXPECT_TRUE(close(dh_c, dh_r, 1e-2, 2e-2));
}

// head_dim 128 (Qwen3) and 256, whose backward needs 68 KiB of dynamic shared memory: the launch
// must opt in above 48 KiB (the emulator refuses it otherwise, as a GPU does). GQA 4:1, f32.
TEST(CudaKernels, AttentionWideHeadsAgainstTheReference) {
  const auto& ref = kernel<AttentionKernel>("reference");
  const auto& cu = kernel<AttentionKernel>("cuda");
  for (int64_t D : {128, 256}) {
    const int64_t B = 1, S = 19, Hq = 4, Hkv = 1;
    Tensor q = randn({B, S, Hq, D}, 31), k = randn({B, S, Hkv, D}, 32), v = randn({B, S, Hkv, D}, 33);
    Tensor dout = randn({B, S, Hq, D}, 34);
    const float scale = float(1.0 / std::sqrt(double(D)));
    Tensor o_r, l_r, o_c, l_c;
    ref.forward(ExecContext::host(), q, k, v, scale, o_r, l_r);
    cu.forward(ExecContext::host(), q, k, v, scale, o_c, l_c);
    EXPECT_TRUE(close(o_c, o_r, 1e-5, 1e-4)) << D;
    EXPECT_TRUE(close(l_c, l_r, 1e-5, 1e-5)) << D;
    Tensor dq_r, dk_r, dv_r, dq_c, dk_c, dv_c;
    ref.backward(ExecContext::host(), q, k, v, o_r, l_r, dout, scale, dq_r, dk_r, dv_r);
    cu.backward(ExecContext::host(), q, k, v, o_r, l_r, dout, scale, dq_c, dk_c, dv_c);
    EXPECT_TRUE(close(dq_c, dq_r, 1e-5, 1e-4)) << D;
    EXPECT_TRUE(close(dk_c, dk_r, 1e-5, 1e-4)) << D;
    EXPECT_TRUE(close(dv_c, dv_r, 1e-5, 1e-4)) << D;
  }
}

// The Gated DeltaNet kernels: per-tile partial sums (gated_delta), chunked dw sums (conv1d over
// 150 tokens, gated_rmsnorm over 140 rows: several chunks each), the same bits for every block and
// thread order.
TEST(CudaKernels, GatedDeltaNetKernelsSameBitsForEveryOrder) {
  SeedGuard guard;
  const ExecContext& ctx = ExecContext::host();
  const auto& gd = kernel<GatedDeltaKernel>("cuda");
  const auto& cv = kernel<CausalConv1dKernel>("cuda");
  const auto& gn = kernel<GatedRMSNormKernel>("cuda");
  const int64_t B = 1, S = 12, Hk = 1, Hv = 2, dk = 16, dv = 40;
  Tensor q = randn({B, S, Hk, dk}, 41), k = randn({B, S, Hk, dk}, 42), v = randn({B, S, Hv, dv}, 43);
  Tensor g = randn({B, S, Hv}, 44, 0.3, -0.5), beta = randn({B, S, Hv}, 45, 0.1, 0.5), dout = randn({B, S, Hv, dv}, 46);
  Tensor x = randn({2, 75, 6}, 47), w = randn({6, 4}, 48), dyc = randn({2, 75, 6}, 49);
  Tensor xn = randn({140, 33}, 50), zn = randn({140, 33}, 51), wn = randn({33}, 52), dyn = randn({140, 33}, 53);
  const GatedDeltaOptions o;
  std::vector<Tensor> first;
  for (uint64_t seed : {1u, 2u, 3u}) {
    cuda_emu::set_seed(seed);
    Tensor out = Tensor::empty(v.shape(), DType::F32), none, none2;
    gd.forward(ctx, q, k, v, g, beta, nullptr, none, o, out, none2);
    Tensor dq = Tensor::empty(q.shape(), DType::F32), dk_ = dq.clone(), dv_ = Tensor::empty(v.shape(), DType::F32);
    Tensor dg = Tensor::empty(g.shape(), DType::F32), db = dg.clone(), di;
    gd.backward(ctx, q, k, v, g, beta, nullptr, none, dout, none, o, dq, dk_, dv_, dg, db, di);
    Tensor dx = Tensor::empty(x.shape(), DType::F32), dw = Tensor::zeros(w.shape(), DType::F32), ds;
    cv.backward(ctx, x, w, nullptr, none, dyc, dx, dw, ds);
    Tensor gx = Tensor::empty(xn.shape(), DType::F32), gz = gx.clone(), gw = Tensor::zeros({33}, DType::F32);
    gn.backward(ctx, xn, zn, wn, 1e-6f, dyn, gx, gz, gw);
    const std::vector<Tensor> outs = {out, dq, dk_, dv_, dg, db, dx, dw, gx, gz, gw};
    if (first.empty()) {
      first = outs;
      continue;
    }
    for (size_t i = 0; i < outs.size(); ++i)
      EXPECT_TRUE(bitwise_equal(outs[i], first[i])) << "seed " << seed << " output " << i;
  }
}

// Qwen3.5's head sizes (dk = dv = 128: four column tiles per head, 33 KiB of shared memory in the
// backward), GQA 2:1, two documents and an initial state, against the reference; then the decode
// step in place. Tolerances as the kernel case table's f32 rows (1e-4 of the largest magnitude).
TEST(CudaKernels, GatedDeltaQwen35HeadsAgainstTheReference) {
  const ExecContext& ctx = ExecContext::host();
  const auto& ref = kernel<GatedDeltaKernel>("reference");
  const auto& cu = kernel<GatedDeltaKernel>("cuda");
  const int64_t B = 1, S = 10, Hk = 1, Hv = 2, dk = 128, dv = 128;
  Tensor q = randn({B, S, Hk, dk}, 61), k = randn({B, S, Hk, dk}, 62), v = randn({B, S, Hv, dv}, 63);
  Tensor g = randn({B, S, Hv}, 64, 0.3, -0.3), beta = randn({B, S, Hv}, 65, 0.1, 0.6);
  Tensor init = randn({B, Hv, dk, dv}, 66, 0.1), dout = randn({B, S, Hv, dv}, 67), dfin = randn({B, Hv, dk, dv}, 68);
  const std::vector<int64_t> seg = {0, 0, 0, 0, 4, 4, 4, 4, 4, 4};
  const GatedDeltaOptions o;
  auto rel = [](const Tensor& a, const Tensor& r) {
    double m = 1e-3, d = 0;
    for (int64_t i = 0; i < r.numel(); ++i) {
      m = std::max(m, double(std::fabs(r.data<float>()[i])));
      d = std::max(d, double(std::fabs(a.data<float>()[i] - r.data<float>()[i])));
    }
    return d / m;
  };
  Tensor out_r = Tensor::empty(v.shape(), DType::F32), out_c = out_r.clone();
  Tensor fin_r = Tensor::empty(init.shape(), DType::F32), fin_c = fin_r.clone();
  ref.forward(ctx, q, k, v, g, beta, seg.data(), init, o, out_r, fin_r);
  cu.forward(ctx, q, k, v, g, beta, seg.data(), init, o, out_c, fin_c);
  EXPECT_LT(rel(out_c, out_r), 1e-4);
  EXPECT_LT(rel(fin_c, fin_r), 1e-4);
  std::vector<Tensor> gr, gc;
  for (auto* gs : {&gr, &gc}) {
    for (const Tensor* t : {&q, &k, &v, &g, &beta, &init}) gs->push_back(Tensor::empty(t->shape(), DType::F32));
    (gs == &gr ? ref : cu)
        .backward(ctx, q, k, v, g, beta, seg.data(), init, dout, dfin, o, (*gs)[0], (*gs)[1], (*gs)[2], (*gs)[3],
                  (*gs)[4], (*gs)[5]);
  }
  for (size_t i = 0; i < gr.size(); ++i) EXPECT_LT(rel(gc[i], gr[i]), 1e-4) << "gradient " << i;
  // The decode step: the first token from the initial state, the state updated in place.
  auto tok = [](const Tensor& t) {
    Shape sh = t.shape();
    sh.erase(sh.begin() + 1);
    return t.view({t.numel()}).slice0(0, t.numel() / t.dim(1)).clone().view(sh);
  };
  Tensor st_r = init.clone(), st_c = init.clone(), so_r = Tensor::empty({B, Hv, dv}, DType::F32), so_c = so_r.clone();
  ref.step(ctx, tok(q), tok(k), tok(v), tok(g), tok(beta), o, st_r, so_r);
  cu.step(ctx, tok(q), tok(k), tok(v), tok(g), tok(beta), o, st_c, so_c);
  EXPECT_LT(rel(so_c, so_r), 1e-4);
  EXPECT_LT(rel(st_c, st_r), 1e-4);
  EXPECT_GT(rel(st_c, init), 1e-3);  // the state did change
}

TEST(CudaKernels, NoDeviceMemoryLeftBehind) {
#ifdef TITAN_CUDA_RUNTIME
  GTEST_SKIP() << "the emulator's device memory count; this build runs on the GPU";
#endif
  // Staging takes its blocks from the CUDA caching allocator: after the calls none is in use, and
  // once the cache is emptied the emulator holds no device memory beyond what it held before.
  Allocator& cache = cuda_allocator();
  cache.empty_cache();
  const size_t live = cuda_emu::device_live_bytes(), in_use = cache.stats().live_bytes;
  const auto none_left = [&] {
    EXPECT_EQ(cache.stats().live_bytes, in_use);
    cache.empty_cache();
    EXPECT_EQ(cuda_emu::device_live_bytes(), live);
  };
  Tensor p = randn({100}, 1), g = randn({100}, 2), m = Tensor::zeros({100}, DType::F32), v = m.clone();
  kernel<AdamWKernel>("cuda").step(ExecContext::host(), p, g, m, v, AdamWParams{});
  Tensor x = randn({4, 8}, 3), w = randn({8}, 4), y = Tensor::empty({4, 8}, DType::F32);
  Tensor rstd = Tensor::empty({4}, DType::F32);
  kernel<RMSNormKernel>("cuda").forward(ExecContext::host(), x, w, 1e-6f, y, rstd);
  none_left();
  {  // the Gated DeltaNet variants, with document starts and states staged as well
    const ExecContext& ctx = ExecContext::host();
    Tensor q = randn({1, 4, 1, 8}, 6), v = randn({1, 4, 2, 8}, 7), gg = randn({1, 4, 2}, 8, 0.1, -0.5);
    Tensor st = randn({1, 2, 8, 8}, 9), out = Tensor::empty(v.shape(), DType::F32), fin = st.clone();
    const int64_t seg[4] = {0, 0, 2, 2};
    kernel<GatedDeltaKernel>("cuda").forward(ctx, q, q, v, gg, gg, seg, st, GatedDeltaOptions{}, out, fin);
    Tensor dq = q.clone(), dk = q.clone(), dv = v.clone(), dg = gg.clone(), db = gg.clone(), di = st.clone();
    kernel<GatedDeltaKernel>("cuda").backward(ctx, q, q, v, gg, gg, seg, st, v, st, GatedDeltaOptions{}, dq, dk, dv, dg,
                                              db, di);
    Tensor cx = randn({1, 4, 3}, 10), cw = randn({3, 2}, 11), cs = randn({1, 3, 1}, 12), cy = cx.clone(),
           co = cs.clone();
    kernel<CausalConv1dKernel>("cuda").forward(ctx, cx, cw, seg, cs, cy, co);
    Tensor cdx = cx.clone(), cdw = cw.clone(), cds = cs.clone();
    kernel<CausalConv1dKernel>("cuda").backward(ctx, cx, cw, seg, cs, cy, cdx, cdw, cds);
    Tensor gx = x.clone(), gz = x.clone(), gw = w.clone();
    kernel<GatedRMSNormKernel>("cuda").backward(ctx, x, x, w, 1e-6f, x, gx, gz, gw);
    none_left();
  }
  moe_outputs("cuda", true);  // the MoE block, forward and backward
  Tensor p2 = randn({3000}, 14), g2 = randn({3000}, 15), m2 = Tensor::zeros({3000}, DType::F32), v2 = m2.clone();
  std::vector<AdamWTensors> list = {{&p, &g, &m, &v}, {&p2, &g2, &m2, &v2}};
  adamw_step_all(ExecContext::host(), kernel<AdamWKernel>("cuda"), list, AdamWParams{});
  none_left();
  // A bad argument is refused before any device memory is taken.
  Tensor bad_w = randn({7}, 5);
  EXPECT_THROW(kernel<RMSNormKernel>("cuda").forward(ExecContext::host(), x, bad_w, 1e-6f, y, rstd), Error);
  none_left();
}

TEST(CudaKernels, VerifyKernelsOnTheCudaDeviceRunsOnlyCudaRows) {
  const auto rows = verify_kernels("swiglu", "cuda");
  ASSERT_FALSE(rows.empty());
  for (const auto& r : rows) {
    EXPECT_EQ(r.variant, "cuda");
    EXPECT_TRUE(r.ok) << r.shape << " " << r.direction << ": " << r.why;
  }
  // The MoE rows: forward and backward, f32 and bf16, all run for cuda and pass.
  std::set<std::string> seen;
  for (const auto& r : verify_kernels("moe", "cuda")) {
    EXPECT_EQ(r.variant, "cuda");
    EXPECT_TRUE(r.ok) << r.shape << " " << r.dtype << " " << r.direction << ": " << r.why;
    seen.insert(r.dtype + " " + r.direction);
  }
  for (const char* want : {"f32 forward", "f32 backward", "bf16 forward", "bf16 backward"})
    EXPECT_TRUE(seen.count(want)) << want;
}

TEST(CudaKernels, MoESameBitsForEveryOrderAndAgainstTheReference) {
  SeedGuard guard;
  for (bool bf : {false, true}) {
    std::vector<Tensor> first;
    for (uint64_t seed : {4u, 5u, 6u}) {
      cuda_emu::set_seed(seed);
      const std::vector<Tensor> outs = moe_outputs("cuda", bf);
      if (first.empty()) {
        first = outs;
        continue;
      }
      for (size_t i = 0; i < outs.size(); ++i)
        EXPECT_TRUE(bitwise_equal(outs[i], first[i])) << "bf16 " << bf << " seed " << seed << " output " << i;
    }
    if (bf) {  // bf16 weight tensors give the results of their f32 originals
      const std::vector<Tensor> w16 = moe_outputs("cuda", true, true);
      for (size_t i = 0; i < w16.size(); ++i)
        EXPECT_TRUE(bitwise_equal(w16[i], first[i])) << "bf16 weights, output " << i;
    }
    const std::vector<Tensor> ref = moe_outputs("reference", bf);
    EXPECT_EQ(first[4].data<int64_t>()[2], 0);  // the expert with no tokens
    for (size_t i : {2u, 4u}) EXPECT_TRUE(bitwise_equal(first[i], ref[i])) << "routing output " << i;
    const double tol = bf ? 2e-2 : 1e-4;
    for (size_t i : {0u, 1u, 3u, 5u, 6u, 7u, 8u})
      EXPECT_LT(test::rel_err(first[i], ref[i]), tol) << "bf16 " << bf << " output " << i;
  }
}

// The list form of the cuda AdamW (one launch) against its per-tensor form: the same bits, over
// tensors of odd sizes (one empty, several spanning more than one block chunk); and the list step
// of a variant without one (cpu) is its per-tensor step.
TEST(CudaKernels, AdamWListFormEqualsPerTensorForm) {
  const std::vector<int64_t> sizes = {1, 7, 0, 1023, 1024, 1025, 3001, 33, 2 * 1024 + 5};
  for (const char* variant : {"cuda", "cpu"}) {
    const auto& k = kernel<AdamWKernel>(variant);
    std::vector<Tensor> p, g, m, v;
    for (size_t i = 0; i < sizes.size(); ++i) {
      const int64_t n = sizes[i];
      p.push_back(randn({n}, 70 + i)), g.push_back(randn({n}, 80 + i)), m.push_back(randn({n}, 90 + i, 0.1));
      Tensor vi = randn({n}, 100 + i, 0.1);
      for (int64_t j = 0; j < n; ++j) vi.data<float>()[j] = std::fabs(vi.data<float>()[j]);
      v.push_back(vi);
    }
    std::vector<Tensor> p1, m1, v1, p2, m2, v2;
    for (size_t i = 0; i < sizes.size(); ++i) {
      p1.push_back(p[i].clone()), m1.push_back(m[i].clone()), v1.push_back(v[i].clone());
      p2.push_back(p[i].clone()), m2.push_back(m[i].clone()), v2.push_back(v[i].clone());
    }
    AdamWParams hp;
    hp.lr = 3e-3f, hp.weight_decay = 0.1f;
    for (int64_t step = 1; step <= 2; ++step) {
      hp.step = step;
      for (size_t i = 0; i < sizes.size(); ++i) k.step(ExecContext::host(), p1[i], g[i], m1[i], v1[i], hp);
      std::vector<AdamWTensors> list;
      for (size_t i = 0; i < sizes.size(); ++i) list.push_back({&p2[i], &g[i], &m2[i], &v2[i]});
      adamw_step_all(ExecContext::host(), k, list, hp);
    }
    EXPECT_EQ(std::string(variant) == "cuda", k.step_multi != nullptr);
    for (size_t i = 0; i < sizes.size(); ++i) {
      EXPECT_TRUE(bitwise_equal(p2[i], p1[i])) << variant << " param " << i;
      EXPECT_TRUE(bitwise_equal(m2[i], m1[i])) << variant << " exp_avg " << i;
      EXPECT_TRUE(bitwise_equal(v2[i], v1[i])) << variant << " exp_avg_sq " << i;
      if (sizes[i] > 0) {
        EXPECT_FALSE(bitwise_equal(p2[i], p[i])) << variant << " param " << i << " did not move";
      }
    }
  }
  // A bad entry is refused in one line, naming the tensor.
  Tensor p = randn({4}, 1), g = randn({5}, 2), m = Tensor::zeros({4}, DType::F32), v = m.clone();
  std::vector<AdamWTensors> bad = {{&p, &g, &m, &v}};
  Tensor p0 = p.clone();
  std::vector<AdamWTensors> bad2 = {{&p0, &p, &m, &v}, {&p, &g, &m, &v}};  // entry 1 is bad
  try {
    adamw_step_all(ExecContext::host(), kernel<AdamWKernel>("cuda"), bad2, AdamWParams{});
    ADD_FAILURE() << "a bad list entry was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("list entry 1"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(bitwise_equal(p0, p));  // checked before any entry was updated
  EXPECT_THROW(adamw_step_all(ExecContext::host(), kernel<AdamWKernel>("cuda"), bad, AdamWParams{}), Error);
}

}  // namespace
