#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "core/rng.h"
#include "core/threading.h"
#include "train/grad_utils.h"
#include "train/signals.h"

using namespace titan;

namespace {

std::vector<NamedTensor> random_grads(double scale) {
  std::vector<NamedTensor> g;
  int64_t sizes[] = {1, 7, 8, 9, 65537, 200003, 3};
  uint64_t stream = 0;
  for (int64_t n : sizes) {
    Tensor t = Tensor::empty({n}, DType::F32);
    fill_normal(t, 0.0, scale, Philox{99, ++stream});
    g.push_back({"grad." + std::to_string(n), t});
  }
  return g;
}

double naive_norm(const std::vector<NamedTensor>& g) {
  double s = 0;
  for (auto& t : g)
    for (int64_t i = 0; i < t.tensor.numel(); ++i) s += double(t.tensor.data<float>()[i]) * t.tensor.data<float>()[i];
  return std::sqrt(s);
}

}  // namespace

TEST(GradNorm, MatchesDoubleReferenceAndIsThreadCountInvariant) {
  auto g = random_grads(0.01);
  double ref = naive_norm(g);
  int saved = num_threads();
  set_num_threads(1);
  double one = global_l2_norm(g);
  set_num_threads(2);
  double two = global_l2_norm(g);
  set_num_threads(saved);
  EXPECT_NEAR(one, ref, 1e-12 * ref);
  EXPECT_EQ(std::memcmp(&one, &two, sizeof one), 0) << "result depends on the thread count";
  EXPECT_EQ(global_l2_norm({}), 0.0);
  std::vector<NamedTensor> bf = {{"w", Tensor::zeros({4}, DType::BF16)}};
  EXPECT_THROW(global_l2_norm(bf), Error);
}

TEST(GradClip, ScalesLikeTorchClipGradNorm) {
  auto g = random_grads(1.0);
  double before = naive_norm(g);
  std::vector<float> first(g[5].tensor.data<float>(), g[5].tensor.data<float>() + 10);
  double ret = distributed::clip_grad_norm(ExecContext::host(), grad_ranges(g, "gradient norm"), 1.0);
  EXPECT_NEAR(ret, before, 1e-12 * before);
  float coef = float(1.0 / (before + 1e-6));
  for (int i = 0; i < 10; ++i) EXPECT_EQ(g[5].tensor.data<float>()[i], first[i] * coef);
  EXPECT_NEAR(naive_norm(g), 1.0, 1e-5);

  // Below max_norm: untouched, bit for bit.
  auto h = random_grads(1e-4);
  std::vector<float> before_h(h[4].tensor.data<float>(), h[4].tensor.data<float>() + h[4].tensor.numel());
  distributed::clip_grad_norm(ExecContext::host(), grad_ranges(h, "gradient norm"), 1.0);
  EXPECT_EQ(std::memcmp(before_h.data(), h[4].tensor.raw(), h[4].tensor.nbytes()), 0);
}

TEST(NonFinite, NamesTheFirstOffender) {
  auto g = random_grads(1.0);
  EXPECT_FALSE(first_non_finite(g).has_value());
  g[4].tensor.data<float>()[60000] = std::numeric_limits<float>::quiet_NaN();
  g[5].tensor.data<float>()[3] = std::numeric_limits<float>::infinity();
  EXPECT_EQ(first_non_finite(g).value_or(""), "grad.65537");
  // A non-finite norm leaves the gradients untouched.
  float keep = g[0].tensor.data<float>()[0];
  EXPECT_TRUE(std::isnan(distributed::clip_grad_norm(ExecContext::host(), grad_ranges(g, "gradient norm"), 1e-9)));
  EXPECT_EQ(g[0].tensor.data<float>()[0], keep);
  g[4].tensor.data<float>()[60000] = 0;
  EXPECT_EQ(first_non_finite(g).value_or(""), "grad.200003");
  EXPECT_TRUE(std::isinf(global_l2_norm(g)));

  Tensor bf = Tensor::zeros({70000}, DType::BF16);
  static_cast<uint16_t*>(bf.raw())[69999] = 0xff80;  // -inf in bf16
  Tensor h = Tensor::zeros({5}, DType::F16);
  std::vector<NamedTensor> mixed = {{"h", h}, {"ids", Tensor::zeros({3}, DType::I64)}, {"bf", bf}};
  EXPECT_EQ(first_non_finite(mixed).value_or(""), "bf");
  static_cast<uint16_t*>(h.raw())[2] = 0x7e00;  // NaN in f16
  EXPECT_EQ(first_non_finite(mixed).value_or(""), "h");
  static_cast<uint16_t*>(h.raw())[2] = 0x7bff;  // 65504: the largest finite f16
  static_cast<uint16_t*>(bf.raw())[69999] = 0x7f7f;  // the largest finite bf16
  EXPECT_FALSE(first_non_finite(mixed).has_value());
}

TEST(Signals, FirstSignalSetsTheFlag) {
  install_stop_handlers();
  install_stop_handlers();  // idempotent
  clear_stop_request();
  EXPECT_FALSE(stop_requested());
  ::raise(SIGTERM);
  EXPECT_TRUE(stop_requested());
  EXPECT_EQ(stop_signal(), SIGTERM);
  clear_stop_request();
  ::raise(SIGINT);
  EXPECT_EQ(stop_signal(), SIGINT);
  clear_stop_request();
  uninstall_stop_handlers();
}

TEST(Signals, SecondSignalExitsImmediately) {
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {  // child: only async-signal-safe calls from here on
    install_stop_handlers();
    ::raise(SIGINT);
    if (!stop_requested()) ::_exit(3);
    ::raise(SIGINT);
    ::_exit(4);  // not reached when the second signal exits
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGINT);
}
