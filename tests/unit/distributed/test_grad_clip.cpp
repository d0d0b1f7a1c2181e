// distributed::clip_grad_norm: the one clipping routine of the whole-tensor step (train/grad_utils.h) and
// of the sharded step (Fsdp::step). Cut into shards whose sums of squares are added, it clips
// exactly as it does the whole.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/rng.h"
#include "core/tensor.h"
#include "distributed/grad_clip.h"

using namespace titan;
using namespace titan::distributed;

namespace {

std::vector<float> random_values(int64_t n, double scale, uint64_t seed) {
  Tensor t = Tensor::empty({n}, DType::F32);
  fill_normal(t, 0.0, scale, Philox{seed, 1});
  return std::vector<float>(t.data<float>(), t.data<float>() + n);
}

}  // namespace

TEST(GradClip, ShardsClipLikeTheWhole) {
  const int64_t n = 300007;  // several 64Ki chunks and a ragged end
  std::vector<float> whole = random_values(n, 1.0, 3);
  double ref = 0;
  for (float v : whole) ref += double(v) * double(v);
  ref = std::sqrt(ref);
  // Three "ranks": uneven shards, their sums of squares added as the all-reduce would.
  std::vector<float> shards = whole;
  const std::vector<GradRange> parts = {{shards.data(), 70000}, {shards.data() + 70000, 1}, {shards.data() + 70001, n - 70001}};
  double total_ss = 0;
  for (const GradRange& p : parts) total_ss += sum_of_squares(ExecContext::host(), {p});
  const double whole_norm = clip_grad_norm(ExecContext::host(), {{whole.data(), n}}, 1.0);
  EXPECT_NEAR(whole_norm, ref, 1e-12 * ref);
  for (const GradRange& p : parts) {
    const double norm = clip_grad_norm(ExecContext::host(), {p}, 1.0, [&](double) { return total_ss; });
    EXPECT_NEAR(norm, whole_norm, 1e-12 * whole_norm);
  }
  const float coef = float(1.0 / (whole_norm + 1e-6));
  for (int64_t i = 0; i < n; i += 997) EXPECT_FLOAT_EQ(shards[size_t(i)], whole[size_t(i)]) << i;
  EXPECT_NEAR(double(whole[5]), double(random_values(n, 1.0, 3)[5]) * coef, 1e-7);
}

TEST(GradClip, BelowTheLimitNonFiniteOrNoLimitLeavesGradientsAlone) {
  std::vector<float> g = random_values(1000, 1e-4, 5);
  const std::vector<float> before = g;
  auto same = [&] { return std::memcmp(g.data(), before.data(), g.size() * sizeof(float)) == 0; };
  EXPECT_LT(clip_grad_norm(ExecContext::host(), {{g.data(), 1000}}, 1.0), 1.0);
  EXPECT_TRUE(same());
  EXPECT_GT(clip_grad_norm(ExecContext::host(), {{g.data(), 1000}}, 0.0), 0.0);  // max_norm 0: the norm only
  EXPECT_TRUE(same());
  EXPECT_TRUE(
      std::isnan(clip_grad_norm(ExecContext::host(), {{g.data(), 1000}}, 1e-9, [](double) { return std::nan(""); })));
  EXPECT_TRUE(same());
  EXPECT_EQ(clip_grad_norm(ExecContext::host(), {}, 1.0), 0.0);
}
