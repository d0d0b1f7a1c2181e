// The rest of a training step on GPU tensors: the DeviceType::CUDA registrations of gemm, linear,
// cross_entropy, adamw (one tensor and the list form), moe and the Gated DeltaNet ops, each run
// on tensors on cuda:0 with a cuda:0 context and compared with the cpu variant on host copies;
// operands on the GPU are used in place (the caching allocator's alloc_count does not move).
// The layer ops are in test_device_tensors.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "../op_test_util.h"
#include "core/allocator.h"
#include "core/exec_context.h"
#include "device_test_util.h"
#include "ops/adamw/adamw.h"
#include "ops/causal_conv1d/causal_conv1d.h"
#include "ops/cross_entropy/cross_entropy.h"
#include "ops/gated_delta/gated_delta.h"
#include "ops/gated_rmsnorm/gated_rmsnorm.h"
#include "ops/matmul/matmul.h"
#include "ops/moe/moe.h"

using namespace titan;
using optest::randn;

namespace {

using test::gpu_context;
using test::kGpu;

Tensor gpu(const Tensor& t) { return t.to(kGpu); }
Tensor gpu_empty(const Tensor& like) { return Tensor::empty(like.shape(), like.dtype(), kGpu); }

void expect_close(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  test::expect_gpu_close(got, want, tol, what);
}

size_t allocs() { return cuda_allocator().stats().alloc_count; }

}  // namespace

TEST(DeviceKernels, GemmAndLinearOnGpuTensorsMatchTheCpu) {
  const ExecContext& host = ExecContext::host();
  const ExecContext g = gpu_context();
  const int64_t M = 9, K = 24, N = 13;
  // gemm with device pointers: C = A B^T + 0.5 C + R.
  const Tensor A = randn({M, K}, 1), B = randn({N, K}, 2), R = randn({M, N}, 3);
  Tensor C = randn({M, N}, 4);
  const Tensor gA = gpu(A), gB = gpu(B), gR = gpu(R);
  Tensor gC = gpu(C);
  GemmArgs a;
  a.trans_b = true, a.m = M, a.n = N, a.k = K, a.beta = 0.5f;
  a.a = A.raw(), a.b = B.raw(), a.c = C.data<float>(), a.add = R.data<float>();
  gemm(host, kernel<GemmKernel>("cpu"), a);
  a.a = gA.raw(), a.b = gB.raw(), a.c = static_cast<float*>(gC.raw()), a.add = static_cast<const float*>(gR.raw());
  size_t n = allocs();
  gemm(g, kernel<GemmKernel>("cuda", DeviceType::CUDA), a);
  EXPECT_EQ(allocs(), n) << "gemm staged device pointers";
  expect_close(gC, C, 1e-5, "gemm");
  // linear forward (with a residual) and backward, f32 and bf16 compute.
  const LinearKernel& lc = kernel<LinearKernel>("cpu");
  const LinearKernel& lg = kernel<LinearKernel>("cuda", DeviceType::CUDA);
  const Tensor x = randn({3, 3, K}, 5), w = randn({N, K}, 6, 0.3), r = randn({3, 3, N}, 7), dy = randn({3, 3, N}, 8);
  const Tensor gx = gpu(x), gw = gpu(w), gr = gpu(r), gdy = gpu(dy);
  for (DType compute : {DType::F32, DType::BF16}) {
    const std::string tag = compute == DType::F32 ? " f32" : " bf16";
    const double tol = compute == DType::F32 ? 1e-5 : 1e-3;
    Tensor y = Tensor::empty({3, 3, N}, DType::F32), gy = gpu_empty(y);
    lc.forward_residual(host, x, w, &r, y, compute);
    n = allocs();
    lg.forward_residual(g, gx, gw, &gr, gy, compute);
    if (compute == DType::F32) {
      EXPECT_EQ(allocs(), n) << "linear staged an operand on the GPU";
    }
    expect_close(gy, y, tol, "linear forward" + tag);
    Tensor dx = Tensor::empty(x.shape(), DType::F32), dw = randn({N, K}, 9), gdx = gpu_empty(dx), gdw = gpu(dw);
    lc.backward(host, x, w, dy, &dx, &dw, compute);
    lg.backward(g, gx, gw, gdy, &gdx, &gdw, compute);
    expect_close(gdx, dx, tol, "linear dx" + tag);
    expect_close(gdw, dw, tol, "linear dw" + tag);
  }
}

TEST(DeviceKernels, CrossEntropyOnGpuTensorsMatchesTheCpu) {
  const ExecContext& host = ExecContext::host();
  const ExecContext g = gpu_context();
  const int64_t N = 11, H = 16, V = 37;
  const Tensor h = randn({N, H}, 11), w = randn({V, H}, 12, 0.3);
  Tensor labels = Tensor::empty({N}, DType::I64);
  for (int64_t i = 0; i < N; ++i) labels.data<int64_t>()[i] = i == 4 ? kIgnoreIndex : (i * 5) % V;
  const Tensor gh = gpu(h), gw = gpu(w), glabels = gpu(labels);
  const CrossEntropyKernel& cc = kernel<CrossEntropyKernel>("cpu");
  const CrossEntropyKernel& cg = kernel<CrossEntropyKernel>("cuda", DeviceType::CUDA);
  for (DType compute : {DType::F32, DType::BF16}) {
    const std::string tag = compute == DType::F32 ? " f32" : " bf16";
    const double tol = compute == DType::F32 ? 1e-5 : 1e-3;
    Tensor logits = Tensor::empty({N, V}, DType::F32), glogits = gpu_empty(logits);
    const double loss = cc.forward(host, h, w, labels, &logits, compute);
    const size_t n = allocs();
    const double gloss = cg.forward(g, gh, gw, glabels, nullptr, compute);
    // Only its two scratch buffers (the logits chunk and the row losses); no operand staged.
    if (compute == DType::F32) {
      EXPECT_EQ(allocs(), n + 2) << "cross_entropy staged an operand on the GPU";
    }
    EXPECT_NEAR(gloss, loss, tol * std::abs(loss)) << "cross_entropy loss" << tag;
    EXPECT_EQ(cg.forward(g, gh, gw, glabels, &glogits, compute), gloss) << tag;
    expect_close(glogits, logits, tol, "cross_entropy logits" + tag);
    Tensor dh = Tensor::empty(h.shape(), DType::F32), dw = randn({V, H}, 13), gdh = gpu_empty(dh), gdw = gpu(dw);
    const double l2 = cc.forward_backward(host, h, w, labels, 0.25f, dh, dw, compute);
    const double gl2 = cg.forward_backward(g, gh, gw, glabels, 0.25f, gdh, gdw, compute);
    EXPECT_NEAR(gl2, l2, tol * std::abs(l2)) << tag;
    expect_close(gdh, dh, tol, "cross_entropy dh" + tag);
    expect_close(gdw, dw, tol, "cross_entropy dw" + tag);
  }
}

TEST(DeviceKernels, AdamWOnGpuTensorsMatchesTheCpu) {
  const ExecContext& host = ExecContext::host();
  const ExecContext g = gpu_context();
  AdamWParams hp;
  hp.lr = 1e-2f, hp.step = 3;
  std::vector<Tensor> p, gr, m, v, gp, ggr, gm, gv;
  for (int i = 0; i < 3; ++i) {
    const Shape s = i == 1 ? Shape{0} : Shape{int64_t(100 + 50 * i)};
    p.push_back(randn(s, 20 + i)), gr.push_back(randn(s, 30 + i));
    m.push_back(randn(s, 40 + i, 0.1)), v.push_back(randn(s, 50 + i, 0.1, 1.0));
    gp.push_back(gpu(p.back())), ggr.push_back(gpu(gr.back())), gm.push_back(gpu(m.back())),
        gv.push_back(gpu(v.back()));
  }
  const AdamWKernel& ac = kernel<AdamWKernel>("cpu");
  const AdamWKernel& ag = kernel<AdamWKernel>("cuda", DeviceType::CUDA);
  ac.step(host, p[0], gr[0], m[0], v[0], hp);
  size_t n = allocs();
  ag.step(g, gp[0], ggr[0], gm[0], gv[0], hp);
  EXPECT_EQ(allocs(), n) << "adamw staged a tensor on the GPU";
  expect_close(gp[0], p[0], 1e-6, "adamw param");
  expect_close(gm[0], m[0], 1e-6, "adamw exp_avg");
  expect_close(gv[0], v[0], 1e-6, "adamw exp_avg_sq");
  std::vector<AdamWTensors> hl, gl;
  for (size_t i = 0; i < p.size(); ++i) {
    hl.push_back({&p[i], &gr[i], &m[i], &v[i]});
    gl.push_back({&gp[i], &ggr[i], &gm[i], &gv[i]});
  }
  adamw_step_all(host, ac, hl, hp);
  n = allocs();
  adamw_step_all(g, ag, gl, hp);
  EXPECT_EQ(allocs(), n + 2) << "the list step staged more than its two tables";
  for (size_t i = 0; i < p.size(); ++i) {
    expect_close(gp[i], p[i], 1e-6, "adamw list param " + std::to_string(i));
    expect_close(gv[i], v[i], 1e-6, "adamw list exp_avg_sq " + std::to_string(i));
  }
}

TEST(DeviceKernels, MoEOnGpuTensorsMatchesTheCpu) {
  const ExecContext& host = ExecContext::host();
  const ExecContext g = gpu_context();
  const int64_t T = 19, H = 12, E = 6, I = 8, K = 2;
  const Tensor x = randn({T, H}, 61), router = randn({E, H}, 62, 0.5), gate_up = randn({E, 2 * I, H}, 63, 0.3);
  const Tensor down = randn({E, H, I}, 64, 0.3), bias = randn({E}, 65, 0.01), dy = randn({T, H}, 66);
  const Tensor extra = randn({T, E}, 67, 0.1);
  const Tensor gx = gpu(x), grouter = gpu(router), ggu = gpu(gate_up), gdown = gpu(down), gbias = gpu(bias);
  const Tensor gdy = gpu(dy), gextra = gpu(extra);
  for (DType compute : {DType::F32, DType::BF16}) {
    const std::string tag = compute == DType::F32 ? " f32" : " bf16";
    const double tol = compute == DType::F32 ? 1e-5 : 2e-3;
    MoEArgs a, ga;
    a.x = &x, a.router = &router, a.gate_up = &gate_up, a.down = &down, a.bias = &bias, a.top_k = K;
    ga.x = &gx, ga.router = &grouter, ga.gate_up = &ggu, ga.down = &gdown, ga.bias = &gbias, ga.top_k = K;
    a.compute = ga.compute = compute;
    Tensor y = Tensor::empty({T, H}, DType::F32), gy = gpu_empty(y);
    MoESaved s, gs;
    kernel<MoEKernel>("grouped_gemm").forward(host, a, y, s);
    const MoEKernel& mg = kernel<MoEKernel>("cuda", DeviceType::CUDA);
    mg.forward(g, ga, gy, gs);
    expect_close(gy, y, tol, "moe y" + tag);
    expect_close(gs.logits, s.logits, 1e-5, "moe logits" + tag);
    expect_close(gs.topk_w, s.topk_w, 1e-5, "moe topk_w" + tag);
    EXPECT_EQ(gs.topk_idx.device(), kGpu);
    const Tensor idx = gs.topk_idx.to(cpu());
    EXPECT_EQ(0, std::memcmp(idx.raw(), s.topk_idx.raw(), s.topk_idx.nbytes())) << "moe topk_idx" << tag;
    ASSERT_EQ(gs.tokens_per_expert.device().type, DeviceType::CPU) << "tokens_per_expert is for the host";
    EXPECT_EQ(0, std::memcmp(gs.tokens_per_expert.raw(), s.tokens_per_expert.raw(), s.tokens_per_expert.nbytes()));
    Tensor dx = Tensor::empty({T, H}, DType::F32), dr = randn({E, H}, 68), dg = randn({E, 2 * I, H}, 69);
    Tensor dd = randn({E, H, I}, 70);
    Tensor gdx = gpu_empty(dx), gdr = gpu(dr), gdg = gpu(dg), gdd = gpu(dd);
    MoEGrads hg, gg;
    hg.dx = &dx, hg.drouter = &dr, hg.dgate_up = &dg, hg.ddown = &dd, hg.dlogits_extra = &extra;
    gg.dx = &gdx, gg.drouter = &gdr, gg.dgate_up = &gdg, gg.ddown = &gdd, gg.dlogits_extra = &gextra;
    kernel<MoEKernel>("grouped_gemm").backward(host, a, s, dy, hg);
    mg.backward(g, ga, gs, gdy, gg);
    expect_close(gdx, dx, tol, "moe dx" + tag);
    expect_close(gdr, dr, tol, "moe drouter" + tag);
    expect_close(gdg, dg, tol, "moe dgate_up" + tag);
    expect_close(gdd, dd, tol, "moe ddown" + tag);
  }
}

TEST(DeviceKernels, GatedDeltaNetOpsOnGpuTensorsMatchTheCpu) {
  const ExecContext& host = ExecContext::host();
  const ExecContext g = gpu_context();
  const int64_t B = 2, S = 6, Hk = 2, Hv = 4, dk = 8, dv = 8, C = 10, KW = 4;
  const std::vector<int64_t> seg = {0, 0, 0, 3, 3, 3, 0, 1, 1, 1, 1, 1};  // host array, documents per row
  // causal_conv1d forward and backward, with a state in and out
  const Tensor x = randn({B, S, C}, 71), w = randn({C, KW}, 72, 0.3), sin = randn({B, C, KW - 1}, 73);
  const Tensor gx = gpu(x), gw = gpu(w), gsin = gpu(sin);
  const CausalConv1dKernel& cc = kernel<CausalConv1dKernel>("cpu");
  const CausalConv1dKernel& cg = kernel<CausalConv1dKernel>("cuda", DeviceType::CUDA);
  Tensor y = Tensor::empty(x.shape(), DType::F32), sout = Tensor::empty(sin.shape(), DType::F32);
  Tensor gy = gpu_empty(y), gsout = gpu_empty(sout);
  cc.forward(host, x, w, seg.data(), sin, y, sout);
  cg.forward(g, gx, gw, seg.data(), gsin, gy, gsout);
  expect_close(gy, y, 1e-5, "conv1d y");
  expect_close(gsout, sout, 0, "conv1d state_out");
  const Tensor dy = randn(x.shape(), 74), gdy = gpu(dy);
  Tensor dx = Tensor::empty(x.shape(), DType::F32), dw = randn(w.shape(), 75),
         dsin = Tensor::empty(sin.shape(), DType::F32);
  Tensor gdx = gpu_empty(dx), gdw = gpu(dw), gdsin = gpu_empty(dsin);
  cc.backward(host, x, w, seg.data(), sin, dy, dx, dw, dsin);
  cg.backward(g, gx, gw, seg.data(), gsin, gdy, gdx, gdw, gdsin);
  expect_close(gdx, dx, 1e-5, "conv1d dx");
  expect_close(gdw, dw, 1e-5, "conv1d dw");
  expect_close(gdsin, dsin, 1e-5, "conv1d d_state_in");
  // gated_rmsnorm forward and backward
  const Tensor xn = randn({B * S, dv}, 76), z = randn({B * S, dv}, 77), wn = randn({dv}, 78, 0.1, 1.0);
  const Tensor gxn = gpu(xn), gz = gpu(z), gwn = gpu(wn);
  Tensor yn = Tensor::empty(xn.shape(), DType::F32), gyn = gpu_empty(yn);
  kernel<GatedRMSNormKernel>("cpu").forward(host, xn, z, wn, 1e-6f, yn);
  const GatedRMSNormKernel& ng = kernel<GatedRMSNormKernel>("cuda", DeviceType::CUDA);
  ng.forward(g, gxn, gz, gwn, 1e-6f, gyn);
  expect_close(gyn, yn, 1e-5, "gated_rmsnorm y");
  const Tensor dyn = randn(xn.shape(), 79), gdyn = gpu(dyn);
  Tensor dxn = Tensor::empty(xn.shape(), DType::F32), dz = Tensor::empty(xn.shape(), DType::F32), dwn = randn({dv}, 80);
  Tensor gdxn = gpu_empty(dxn), gdz = gpu_empty(dz), gdwn = gpu(dwn);
  kernel<GatedRMSNormKernel>("cpu").backward(host, xn, z, wn, 1e-6f, dyn, dxn, dz, dwn);
  ng.backward(g, gxn, gz, gwn, 1e-6f, gdyn, gdxn, gdz, gdwn);
  expect_close(gdxn, dxn, 1e-5, "gated_rmsnorm dx");
  expect_close(gdz, dz, 1e-5, "gated_rmsnorm dz");
  expect_close(gdwn, dwn, 1e-5, "gated_rmsnorm dw");
  // gated_delta forward, backward and the decode step
  const Tensor q = randn({B, S, Hk, dk}, 81), k = randn({B, S, Hk, dk}, 82), v = randn({B, S, Hv, dv}, 83);
  const Tensor gd = randn({B, S, Hv}, 84, 0.1, -0.3), beta = randn({B, S, Hv}, 85, 0.1, 0.5);
  const Tensor init = randn({B, Hv, dk, dv}, 86, 0.3);
  const Tensor gq = gpu(q), gk = gpu(k), gv = gpu(v), ggd = gpu(gd), gbeta = gpu(beta), ginit = gpu(init);
  const GatedDeltaOptions o{};
  const GatedDeltaKernel& dc = kernel<GatedDeltaKernel>("cpu");
  const GatedDeltaKernel& dg = kernel<GatedDeltaKernel>("cuda", DeviceType::CUDA);
  Tensor out = Tensor::empty(v.shape(), DType::F32), fin = Tensor::empty(init.shape(), DType::F32);
  Tensor gout = gpu_empty(out), gfin = gpu_empty(fin);
  dc.forward(host, q, k, v, gd, beta, seg.data(), init, o, out, fin);
  dg.forward(g, gq, gk, gv, ggd, gbeta, seg.data(), ginit, o, gout, gfin);
  expect_close(gout, out, 1e-4, "gated_delta out");
  expect_close(gfin, fin, 1e-4, "gated_delta final state");
  const Tensor dout = randn(v.shape(), 87), dfin = randn(init.shape(), 88, 0.1), gdout = gpu(dout), gdfin = gpu(dfin);
  std::vector<Tensor> hgr, ggr;
  for (const Tensor* t : {&q, &k, &v, &gd, &beta, &init}) {
    hgr.push_back(Tensor::empty(t->shape(), DType::F32));
    ggr.push_back(gpu_empty(hgr.back()));
  }
  dc.backward(host, q, k, v, gd, beta, seg.data(), init, dout, dfin, o, hgr[0], hgr[1], hgr[2], hgr[3], hgr[4], hgr[5]);
  dg.backward(g, gq, gk, gv, ggd, gbeta, seg.data(), ginit, gdout, gdfin, o, ggr[0], ggr[1], ggr[2], ggr[3], ggr[4],
              ggr[5]);
  const char* names[] = {"dq", "dk", "dv", "dg", "dbeta", "d_initial_state"};
  for (size_t i = 0; i < hgr.size(); ++i) expect_close(ggr[i], hgr[i], 1e-4, std::string("gated_delta ") + names[i]);
  // one decode token on a state held on the GPU
  const Tensor q1 = randn({B, Hk, dk}, 89), k1 = randn({B, Hk, dk}, 90), v1 = randn({B, Hv, dv}, 91);
  const Tensor g1 = randn({B, Hv}, 92, 0.1, -0.3), b1 = randn({B, Hv}, 93, 0.1, 0.5);
  Tensor st = init.clone(), gst = gpu(init), o1 = Tensor::empty(v1.shape(), DType::F32), go1 = gpu_empty(o1);
  dc.step(host, q1, k1, v1, g1, b1, o, st, o1);
  dg.step(g, gpu(q1), gpu(k1), gpu(v1), gpu(g1), gpu(b1), o, gst, go1);
  expect_close(go1, o1, 1e-4, "gated_delta step out");
  expect_close(gst, st, 1e-4, "gated_delta step state");
}

// Every DeviceType::CUDA registration refuses the host context, naming "<op>.cuda".
TEST(DeviceKernels, GpuRegistrationsRefuseTheHostContext) {
  const ExecContext& host = ExecContext::host();
  Tensor t, u, w, y;
  std::vector<std::string> msgs;
  const auto refusal = [&](const std::function<void()>& f) { msgs.push_back(test::error_of(f)); };
  refusal([&] { kernel<GemmKernel>("cuda", DeviceType::CUDA).gemm(host, GemmArgs{}); });
  refusal([&] { kernel<LinearKernel>("cuda", DeviceType::CUDA).forward(host, t, w, y, DType::F32); });
  refusal([&] { kernel<LinearKernel>("cuda", DeviceType::CUDA).backward(host, t, w, u, &y, nullptr, DType::F32); });
  refusal([&] { kernel<CrossEntropyKernel>("cuda", DeviceType::CUDA).forward(host, t, w, u, nullptr, DType::F32); });
  refusal([&] {
    kernel<CrossEntropyKernel>("cuda", DeviceType::CUDA).forward_backward(host, t, w, u, 1.f, y, y, DType::F32);
  });
  refusal([&] { kernel<AdamWKernel>("cuda", DeviceType::CUDA).step(host, y, t, u, w, AdamWParams{}); });
  refusal([&] { kernel<AdamWKernel>("cuda", DeviceType::CUDA).step_multi(host, {}, AdamWParams{}); });
  MoESaved saved;
  refusal([&] { kernel<MoEKernel>("cuda", DeviceType::CUDA).forward(host, MoEArgs{}, y, saved); });
  refusal([&] { kernel<MoEKernel>("cuda", DeviceType::CUDA).backward(host, MoEArgs{}, saved, t, MoEGrads{}); });
  const GatedDeltaOptions o{};
  const GatedDeltaKernel& gd = kernel<GatedDeltaKernel>("cuda", DeviceType::CUDA);
  refusal([&] { gd.forward(host, t, t, t, t, t, nullptr, u, o, y, w); });
  refusal([&] { gd.backward(host, t, t, t, t, t, nullptr, u, t, u, o, y, y, y, y, y, y); });
  refusal([&] { gd.step(host, t, t, t, t, t, o, w, y); });
  refusal([&] { kernel<CausalConv1dKernel>("cuda", DeviceType::CUDA).forward(host, t, w, nullptr, u, y, y); });
  refusal([&] { kernel<CausalConv1dKernel>("cuda", DeviceType::CUDA).backward(host, t, w, nullptr, u, t, y, y, y); });
  refusal([&] { kernel<GatedRMSNormKernel>("cuda", DeviceType::CUDA).forward(host, t, u, w, 1e-6f, y); });
  refusal([&] { kernel<GatedRMSNormKernel>("cuda", DeviceType::CUDA).backward(host, t, u, w, 1e-6f, t, y, y, y); });
  for (const std::string& m : msgs) {
    EXPECT_NE(m.find(".cuda: registered for the GPU, not for cpu"), std::string::npos) << m;
  }
  EXPECT_EQ(msgs.size(), 16u);
}
