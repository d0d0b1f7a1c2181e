// ops/foreach on ranges in GPU memory (a cuda:0 context): foreach_sum_squares and foreach_scale
// against the CPU foreach on host copies of the same tensors, over many ranges of odd sizes in one
// call (one empty, a range inside a tensor, several spanning more than one 8Ki-element block
// chunk); the sum within 1e-12 relative and the same bits for three block orders of the emulator;
// the scaling the CPU's bits. Refusals: a bad range, a context that is not cuda:0.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "core/cuda_emu/runtime.h"
#include "core/exec_context.h"
#include "core/tensor.h"
#include "device_test_util.h"
#include "ops/foreach/foreach.h"

using namespace titan;

namespace {

using test::gpu_context;
using test::kGpu;

struct SeedGuard {
  uint64_t saved = cuda_emu::seed();
  ~SeedGuard() { cuda_emu::set_seed(saved); }
};

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// Tensors of odd sizes and scales (host), and the same tensors on the GPU.
struct Grads {
  std::vector<Tensor> host, gpu;
  Grads() {
    const std::vector<int64_t> sizes = {1, 7, 0, 8191, 8192, 8193, 70001, 3, 3 * 8192 + 5};
    for (size_t i = 0; i < sizes.size(); ++i) {
      host.push_back(test::randn({sizes[i]}, 40 + i, std::pow(10.0, double(i % 5) - 2)));
      gpu.push_back(host.back().to(kGpu));
    }
  }
  // Every tensor whole, plus elements [5, 1005) of tensor 6 a second time (a range inside a tensor).
  static std::vector<FloatRange> ranges(const std::vector<Tensor>& ts) {
    std::vector<FloatRange> r;
    for (const Tensor& t : ts) r.push_back({static_cast<float*>(t.raw()), t.numel()});
    r.push_back({static_cast<float*>(ts[6].raw()) + 5, 1000});
    return r;
  }
};

}  // namespace

TEST(DeviceForeach, SumOfSquaresMatchesTheCpuAndIsTheSameForEveryOrder) {
  SeedGuard guard;
  Grads g;
  const double want = foreach_sum_squares(ExecContext::host(), Grads::ranges(g.host));
  ASSERT_GT(want, 0.0);
  const ExecContext ctx = gpu_context();
  double first = 0;
  for (uint64_t seed : {1u, 2u, 3u}) {
    cuda_emu::set_seed(seed);
    const double got = foreach_sum_squares(ctx, Grads::ranges(g.gpu));
    EXPECT_NEAR(got, want, 1e-12 * want) << "seed " << seed;
    if (seed == 1) first = got;
    EXPECT_EQ(std::memcmp(&got, &first, sizeof got), 0) << "seed " << seed << ": the sum depends on the block order";
  }
  // One range, a sub-range, and none.
  const FloatRange one{static_cast<float*>(g.gpu[5].raw()), g.gpu[5].numel()};
  const FloatRange one_h{static_cast<float*>(g.host[5].raw()), g.host[5].numel()};
  const double w1 = foreach_sum_squares(ExecContext::host(), {one_h});
  EXPECT_NEAR(foreach_sum_squares(ctx, {one}), w1, 1e-12 * w1);
  EXPECT_EQ(foreach_sum_squares(ctx, {}), 0.0);
  EXPECT_EQ(foreach_sum_squares(ctx, {{static_cast<float*>(g.gpu[2].raw()), 0}}), 0.0);
  // The gradients were only read.
  for (size_t i = 0; i < g.gpu.size(); ++i) EXPECT_TRUE(same_bits(g.gpu[i].to(cpu()), g.host[i])) << i;
}

TEST(DeviceForeach, ScaleGivesTheCpuBits) {
  SeedGuard guard;
  const float scales[] = {0.37f, 1e-3f, -2.5f};
  for (uint64_t k = 0; k < 3; ++k) {
    const float c = scales[k];
    Grads g;
    // Scale every tensor but 6 whole, and [5, 1005) of tensor 6.
    auto pick = [](const std::vector<Tensor>& ts) {
      std::vector<FloatRange> r = Grads::ranges(ts);
      r.erase(r.begin() + 6);
      return r;
    };
    foreach_scale(ExecContext::host(), pick(g.host), c);
    cuda_emu::set_seed(7 + k);
    foreach_scale(gpu_context(), pick(g.gpu), c);
    for (size_t i = 0; i < g.gpu.size(); ++i) {
      ASSERT_EQ(g.gpu[i].device(), kGpu);
      EXPECT_TRUE(same_bits(g.gpu[i].to(cpu()), g.host[i])) << "scale " << c << " tensor " << i;
    }
    if (k == 0) {  // not a no-op: tensor 6 has its unscaled ends and its scaled middle
      const Tensor t6 = g.gpu[6].to(cpu()), orig = test::randn(g.host[6].shape(), 46, std::pow(10.0, 6 % 5 - 2));
      EXPECT_EQ(t6.data<float>()[4], orig.data<float>()[4]);
      EXPECT_EQ(t6.data<float>()[5], orig.data<float>()[5] * c);
      EXPECT_EQ(t6.data<float>()[1005], orig.data<float>()[1005]);
    }
  }
}

TEST(DeviceForeach, RefusesBadRangesAndOtherDevices) {
  Tensor t = Tensor::zeros({16}, DType::F32, kGpu);
  float* d = static_cast<float*>(t.raw());
  const ExecContext ctx = gpu_context();
  const std::vector<FloatRange> no_data = {{nullptr, 4}}, negative = {{d, 16}, {d, -1}}, whole = {{d, 16}};
  EXPECT_ERROR_HAS(foreach_sum_squares(ctx, no_data), "foreach_sum_squares: range 0 of 4 elements has no data");
  EXPECT_ERROR_HAS(foreach_scale(ctx, negative, 2.0f), "foreach_scale: range 1 has a negative length");
  ExecContext other = ctx;
  other.device = Device{DeviceType::CUDA, 1};
  EXPECT_ERROR_HAS(foreach_sum_squares(other, whole),
                   "foreach_sum_squares: the GPU path runs on cuda:0, not on cuda:1");
  EXPECT_EQ(foreach_sum_squares(ctx, whole), 0.0);  // zeros
}
