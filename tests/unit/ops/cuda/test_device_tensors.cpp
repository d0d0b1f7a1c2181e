// Tensors on cuda:0 (core/cuda_allocator.cpp, Tensor::to(Device), copy_ across devices) and the
// cuda variants registered for DeviceType::CUDA, which take those tensors in place. Under the grid
// emulator device memory is host memory, so these tests check the bookkeeping and the code paths
// (which pointer each kernel gets, that nothing is staged, that host reads of GPU tensors are
// refused); on a GPU build (TITAN_CUDA_RUNTIME) the same tests run on the device.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "../op_test_util.h"
#include "core/allocator.h"
#include "core/exec_context.h"
#include "device_test_util.h"
#include "ops/attention/attention.h"
#include "ops/bias/bias.h"
#include "ops/embedding/embedding.h"
#include "ops/residual/residual.h"
#include "ops/rmsnorm/rmsnorm.h"
#include "ops/rope/rope.h"
#include "ops/swiglu/swiglu.h"

using namespace titan;
using optest::randn;

namespace {

using test::gpu_context;
using test::kGpu;

std::vector<float> host_values(const Tensor& t) {
  const Tensor h = t.device().type == DeviceType::CPU ? t : t.to(cpu());
  return std::vector<float>(h.data<float>(), h.data<float>() + h.numel());
}

}  // namespace

TEST(DeviceMemory, CopiesAcrossDevicesAndRefusesHostReads) {
  Allocator& a = cuda_allocator();
  const size_t live = a.stats().live_bytes;
  Tensor h = randn({3, 5}, 1);
  {
    Tensor d = h.to(kGpu);
    EXPECT_EQ(d.device(), kGpu);
    EXPECT_EQ(a.stats().live_bytes, live + h.nbytes());
    EXPECT_EQ(host_values(d), host_values(h));
    Tensor d2 = d.clone();  // device to device
    EXPECT_EQ(d2.device(), kGpu);
    EXPECT_EQ(host_values(d2), host_values(h));
    d2.zero_();
    EXPECT_EQ(host_values(d2), std::vector<float>(15, 0.f));
    Tensor z = Tensor::zeros({4}, DType::F32, kGpu);
    EXPECT_EQ(host_values(z), std::vector<float>(4, 0.f));
    EXPECT_NE(test::error_of([&] { (void)d.data<float>(); }).find("host access to f32[3, 5] on cuda:0"),
              std::string::npos);
    // A copy to or from the GPU keeps the dtype.
    Tensor hb = Tensor::empty({3, 5}, DType::BF16);
    EXPECT_NE(test::error_of([&] { hb.copy_(d); }).find("keeps the dtype"), std::string::npos);
  }
  EXPECT_EQ(a.stats().live_bytes, live);
  EXPECT_NE(test::error_of([] {
              (void)Tensor::empty({2}, DType::F32, Device{DeviceType::CUDA, 1});
            }).find("cuda:0"),
            std::string::npos);
}

// A training step allocates the same sizes every step: after the first, every request comes
// from the cache (no cudaMalloc), the reserved bytes stop growing, and peak and live are counted
// in requested bytes.
TEST(DeviceMemory, StepsReuseCachedBlocks) {
  Allocator& a = cuda_allocator();
  a.empty_cache();
  const size_t live = a.stats().live_bytes;
  const std::vector<Shape> shapes = {{7}, {1000}, {256, 1024}, {3, 333, 129}, {1}, {5000, 300}};
  size_t step_bytes = 0;
  for (const Shape& s : shapes) step_bytes += size_t(shape_numel(s)) * 4;
  size_t allocs_after_first = 0, reserved_after_first = 0;
  for (int step = 0; step < 5; ++step) {
    a.reset_peak();
    {
      std::vector<Tensor> acts;
      for (const Shape& s : shapes) acts.push_back(Tensor::empty(s, DType::F32, kGpu));
      Tensor tmp = Tensor::empty({256, 1024}, DType::F32, kGpu);  // freed and taken again within the step
      tmp = Tensor();
      acts.push_back(Tensor::empty({256, 1024}, DType::F32, kGpu));
    }
    EXPECT_EQ(a.stats().live_bytes, live);
    EXPECT_GE(a.stats().peak_bytes, live + step_bytes);
    if (step == 0) {
      allocs_after_first = a.stats().system_allocs, reserved_after_first = a.stats().reserved_bytes;
    } else {
      EXPECT_EQ(a.stats().system_allocs, allocs_after_first) << "step " << step << " called cudaMalloc";
      EXPECT_EQ(a.stats().reserved_bytes, reserved_after_first);
    }
  }
  EXPECT_GE(a.stats().cached_bytes, step_bytes);
  a.empty_cache();
  EXPECT_EQ(a.stats().cached_bytes, 0u);
}

// The layer ops on GPU tensors with a cuda:0 context (the DeviceType::CUDA registration) give the
// cpu variant's results on host copies, and take their operands in place: no staging allocation.
TEST(DeviceKernels, LayerOpsOnGpuTensorsMatchTheCpu) {
  const ExecContext& host = ExecContext::host();
  const ExecContext gpu = gpu_context();
  Allocator& a = cuda_allocator();
  const int64_t B = 2, S = 12, Hq = 4, Hkv = 2, D = 16, H = 32, V = 50;
  const auto close = [](const Tensor& got, const Tensor& want, double tol, const char* what) {
    test::expect_gpu_close(got, want, tol, what);
  };
  // embedding
  Tensor ids = Tensor::empty({B * S}, DType::I64);
  for (int64_t i = 0; i < B * S; ++i) ids.data<int64_t>()[i] = (i * 7) % V;
  Tensor emb = randn({V, H}, 2);
  Tensor x = Tensor::empty({B * S, H}, DType::F32);
  kernel<EmbeddingKernel>("cpu").forward(host, ids, emb, x);
  Tensor gids = ids.to(kGpu), gemb = emb.to(kGpu), gx = Tensor::empty({B * S, H}, DType::F32, kGpu);
  size_t allocs = a.stats().alloc_count;
  kernel<EmbeddingKernel>("cuda", DeviceType::CUDA).forward(gpu, gids, gemb, gx);
  EXPECT_EQ(a.stats().alloc_count, allocs) << "an operand on the GPU was staged";
  close(gx, x, 0, "embedding");
  // rmsnorm forward and backward
  Tensor w = randn({H}, 3, 0.1, 1.0), y = Tensor::empty({B * S, H}, DType::F32),
         rstd = Tensor::empty({B * S}, DType::F32);
  kernel<RMSNormKernel>("cpu").forward(host, x, w, 1e-6f, y, rstd);
  Tensor gw = w.to(kGpu), gy = Tensor::empty(y.shape(), DType::F32, kGpu),
         grstd = Tensor::empty({B * S}, DType::F32, kGpu);
  const RMSNormKernel& rn = kernel<RMSNormKernel>("cuda", DeviceType::CUDA);
  allocs = a.stats().alloc_count;
  rn.forward(gpu, gx, gw, 1e-6f, gy, grstd);
  EXPECT_EQ(a.stats().alloc_count, allocs) << "an operand on the GPU was staged";
  close(gy, y, 1e-6, "rmsnorm forward");
  Tensor dy = randn(y.shape(), 4), dx = Tensor::empty(y.shape(), DType::F32), dw = Tensor::zeros({H}, DType::F32);
  kernel<RMSNormKernel>("cpu").backward(host, x, w, rstd, dy, dx, dw);
  Tensor gdy = dy.to(kGpu), gdx = Tensor::empty(y.shape(), DType::F32, kGpu),
         gdw = Tensor::zeros({H}, DType::F32, kGpu);
  rn.backward(gpu, gx, gw, grstd, gdy, gdx, gdw);
  close(gdx, dx, 1e-5, "rmsnorm dx");
  close(gdw, dw, 1e-5, "rmsnorm dw");
  // rope (in place) and attention, q/k/v as [B*S, heads*D]
  const RopeCache cache = make_rope_cache(10000.0, D, S);
  const RopeCache gcache{cache.cos.to(kGpu), cache.sin.to(kGpu)};
  Tensor q = randn({B * S, Hq * D}, 5), k = randn({B * S, Hkv * D}, 6), v = randn({B * S, Hkv * D}, 7);
  Tensor gq = q.to(kGpu), gk = k.to(kGpu), gv = v.to(kGpu);
  kernel<RopeKernel>("cpu").forward_rows(host, RowView::of(q, Hq, D), S, 0, cache);
  kernel<RopeKernel>("cuda", DeviceType::CUDA).forward_rows(gpu, RowView::of(gq, Hq, D), S, 0, gcache);
  close(gq, q, 1e-6, "rope");
  const float scale = 1.f / std::sqrt(float(D));
  Tensor out = Tensor::empty({B * S, Hq * D}, DType::F32), lse = Tensor::empty({B, Hq, S}, DType::F32);
  const AttentionKernel& ac = kernel<AttentionKernel>("cpu");
  const AttentionKernel& ag = kernel<AttentionKernel>("cuda", DeviceType::CUDA);
  ac.forward_rows(host, RowView::of(q, Hq, D), RowView::of(k, Hkv, D), RowView::of(v, Hkv, D), S, scale, out, lse);
  Tensor gout = Tensor::empty(out.shape(), DType::F32, kGpu), glse = Tensor::empty(lse.shape(), DType::F32, kGpu);
  ag.forward_rows(gpu, RowView::of(gq, Hq, D), RowView::of(gk, Hkv, D), RowView::of(gv, Hkv, D), S, scale, gout, glse);
  close(gout, out, 1e-5, "attention out");
  close(glse, lse, 1e-5, "attention lse");
  Tensor dout = randn(out.shape(), 8), dq = Tensor::zeros(q.shape(), DType::F32),
         dk = Tensor::zeros(k.shape(), DType::F32), dv = Tensor::zeros(v.shape(), DType::F32);
  ac.backward_rows(host, RowView::of(q, Hq, D), RowView::of(k, Hkv, D), RowView::of(v, Hkv, D), out, lse, dout, S,
                   scale, RowView::of(dq, Hq, D), RowView::of(dk, Hkv, D), RowView::of(dv, Hkv, D));
  Tensor gdout = dout.to(kGpu), gdq = Tensor::zeros(q.shape(), DType::F32, kGpu),
         gdk = Tensor::zeros(k.shape(), DType::F32, kGpu), gdv = Tensor::zeros(v.shape(), DType::F32, kGpu);
  ag.backward_rows(gpu, RowView::of(gq, Hq, D), RowView::of(gk, Hkv, D), RowView::of(gv, Hkv, D), gout, glse, gdout, S,
                   scale, RowView::of(gdq, Hq, D), RowView::of(gdk, Hkv, D), RowView::of(gdv, Hkv, D));
  close(gdq, dq, 1e-4, "attention dq");
  close(gdk, dk, 1e-4, "attention dk");
  close(gdv, dv, 1e-4, "attention dv");
  // swiglu, residual, bias
  Tensor gu = randn({B * S, 2 * H}, 9), act = Tensor::empty({B * S, H}, DType::F32);
  kernel<SwiGLUKernel>("cpu").forward(host, gu, act);
  Tensor ggu = gu.to(kGpu), gact = Tensor::empty(act.shape(), DType::F32, kGpu);
  kernel<SwiGLUKernel>("cuda", DeviceType::CUDA).forward(gpu, ggu, gact);
  close(gact, act, 1e-6, "swiglu");
  Tensor sum = Tensor::empty(x.shape(), DType::F32), gsum = Tensor::empty(x.shape(), DType::F32, kGpu);
  kernel<ResidualKernel>("cpu").forward(host, x, y, sum);
  kernel<ResidualKernel>("cuda", DeviceType::CUDA).forward(gpu, gx, gy, gsum);
  close(gsum, sum, 1e-6, "residual");
  Tensor bias = randn({H}, 10), gbias = bias.to(kGpu);
  kernel<BiasKernel>("cpu").forward(host, sum, bias);
  kernel<BiasKernel>("cuda", DeviceType::CUDA).forward(gpu, gsum, gbias);
  close(gsum, sum, 1e-6, "bias");
}

// The DeviceType::CUDA registration refuses the host context (its operands would be host tensors
// it means to read in place), naming the kernel; the CPU registration still refuses cuda:0.
TEST(DeviceKernels, EachRegistrationRefusesTheOtherDevicesContext) {
  Tensor x = randn({2, 8}, 1), w = randn({8}, 2), y = x.clone(), rstd = Tensor::empty({2}, DType::F32);
  const std::string on_cpu = test::error_of(
      [&] { kernel<RMSNormKernel>("cuda", DeviceType::CUDA).forward(ExecContext::host(), x, w, 1e-6f, y, rstd); });
  EXPECT_NE(on_cpu.find("rmsnorm.cuda: registered for the GPU, not for cpu"), std::string::npos) << on_cpu;
  const std::string on_gpu =
      test::error_of([&] { kernel<RMSNormKernel>("cuda").forward(gpu_context(), x, w, 1e-6f, y, rstd); });
  EXPECT_NE(on_gpu.find("rmsnorm.cuda: runs on the CPU, not on cuda:0"), std::string::npos) << on_gpu;
}
