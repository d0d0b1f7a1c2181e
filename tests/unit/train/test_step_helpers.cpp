#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>
#include <vector>

#include "common/test_util.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/signal_stack.h"
#include "core/threading.h"
#include "model/params.h"
#include "ops/matmul/matmul.h"
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

// The clipping of a model on cuda:0: a ParamStore whose gradients live on the GPU, clipped through
// grad_ranges and clip_grad_norm with a cuda:0 context (the GPU foreach kernels), against the same
// store on the CPU: the norm within 1e-12 relative, the clipped gradients the same bits; a
// non-finite gradient is named by first_non_finite (a host copy) and leaves the gradients alone.
namespace {
struct TwinStores {
  ParamStore cpu_ps, gpu_ps;
  std::vector<NamedTensor> cpu_g, gpu_g;
  explicit TwinStores(double scale) {
    const Device gpu{DeviceType::CUDA, 0};
    for (NamedTensor& t : random_grads(scale)) {
      // A fused buffer's two row views, as the model's q/k/v: ranges inside one allocation.
      Tensor v = Tensor::zeros(t.tensor.shape(), DType::F32);
      cpu_ps.add(t.name, v, t.tensor);
      gpu_ps.add(t.name, v.to(gpu), t.tensor.to(gpu));
    }
    Tensor fused = Tensor::empty({6, 5}, DType::F32);
    fill_normal(fused, 0.0, scale, Philox{7, 7});
    Tensor gfused = fused.to(gpu);
    cpu_ps.add("fused.a", Tensor::zeros({2, 5}, DType::F32), fused.slice0(0, 2));
    cpu_ps.add("fused.b", Tensor::zeros({4, 5}, DType::F32), fused.slice0(2, 6));
    gpu_ps.add("fused.a", Tensor::zeros({2, 5}, DType::F32, gpu), gfused.slice0(0, 2));
    gpu_ps.add("fused.b", Tensor::zeros({4, 5}, DType::F32, gpu), gfused.slice0(2, 6));
    for (const Param& p : cpu_ps.all()) cpu_g.push_back({p.name, p.grad});
    for (const Param& p : gpu_ps.all()) gpu_g.push_back({p.name, p.grad});
  }
};
ExecContext gpu_ctx() {
  ExecContext c;
  c.device = Device{DeviceType::CUDA, 0};
  return c;
}
bool same_bits(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}
}  // namespace

TEST(GradClip, GpuParamStoreClipsLikeTheCpuOne) {
  for (double scale : {1.0, 1e-4}) {  // clipped, and below the limit (untouched)
    TwinStores s(scale);
    const double want = distributed::clip_grad_norm(ExecContext::host(), grad_ranges(s.cpu_g, "gradient norm"), 1.0);
    const double got = distributed::clip_grad_norm(gpu_ctx(), grad_ranges(s.gpu_g, "gradient norm"), 1.0);
    EXPECT_NEAR(got, want, 1e-12 * want) << scale;
    EXPECT_EQ(scale == 1.0, want > 1.0);
    for (size_t i = 0; i < s.gpu_g.size(); ++i) {
      ASSERT_EQ(s.gpu_g[i].tensor.device().type, DeviceType::CUDA);
      EXPECT_TRUE(same_bits(s.gpu_g[i].tensor.to(cpu()), s.cpu_g[i].tensor)) << scale << " " << s.gpu_g[i].name;
    }
    const double after = global_l2_norm(s.gpu_g);  // on the GPU: the tensors' device
    EXPECT_NEAR(after, global_l2_norm(s.cpu_g), 1e-12 * after);
  }
}

TEST(NonFinite, GpuGradientsAreNamedAndLeftAlone) {
  TwinStores s(1.0);
  EXPECT_FALSE(first_non_finite(s.gpu_g).has_value());
  Tensor bad = s.cpu_g[5].tensor.clone();
  bad.data<float>()[70] = std::numeric_limits<float>::infinity();
  s.gpu_g[5].tensor.copy_(bad);
  const Tensor before = s.gpu_g[0].tensor.to(cpu());
  EXPECT_TRUE(std::isinf(distributed::clip_grad_norm(gpu_ctx(), grad_ranges(s.gpu_g, "gradient norm"), 1.0)));
  EXPECT_TRUE(same_bits(s.gpu_g[0].tensor.to(cpu()), before));
  EXPECT_EQ(first_non_finite(s.gpu_g).value_or(""), s.gpu_g[5].name);
  // One call's ranges live on one device.
  std::vector<NamedTensor> mixed = {s.cpu_g[0], s.gpu_g[1]};
  EXPECT_ERROR_HAS(grad_ranges(mixed, "gradient norm"), "tensor 'grad.7' is on cuda:0, tensor 'grad.1' on cpu");
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

TEST(Signals, HandlersRunOnAnAlternateStackOnEveryThread) {
  // core/signal_stack.h: the handler's frame must not go below the interrupted rsp, which oneDNN's
  // f32 GEMM kernels point at the heap. Installing gives this thread and every OpenMP worker a stack.
  install_stop_handlers();
  EXPECT_TRUE(has_signal_stack());
  std::vector<int> has(size_t(num_threads()), 0);
  parallel_for(num_threads(), 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) has[size_t(i)] = has_signal_stack() ? 1 : 0;
  });
  for (size_t i = 0; i < has.size(); ++i) EXPECT_EQ(has[i], 1) << "chunk " << i;
  struct sigaction now {};
  ASSERT_EQ(::sigaction(SIGINT, nullptr, &now), 0);
  EXPECT_TRUE(now.sa_flags & SA_ONSTACK);
  uninstall_stop_handlers();
}

TEST(Signals, StopSignalsDuringGemmsLeaveTheHeapWhole) {
  // 100 stop signals while oneDNN f32 GEMMs run (on an AVX2-only CPU its gemm:jit kernels, whose
  // rsp points into the heap): with the handler on the interrupted stack, `titan train` died in
  // malloc's consistency checks (SIGABRT) in 4 of 6 stops on the Zen 3; a corrupted heap ends this
  // test binary (on an AVX-512 CPU, ONEDNN_MAX_CPU_ISA=AVX2 runs those kernels: without SA_ONSTACK
  // 3 of 3 runs aborted, "corrupted size vs. prev_size"). The sender sends the next signal only once the computing loop
  // has counted the last one and cleared its flag, so none is a second one (which would exit). (It waited for the flag
  // itself before: the loop often cleared it between two looks, and each such signal cost the wait's whole second, 114
  // s in all on 2 threads.)
  install_stop_handlers();
  clear_stop_request();
  const int64_t n = 256;
  std::vector<float> a(size_t(n * n), 0.5f), b(size_t(n * n), 0.25f), c(size_t(n * n));
  std::atomic<bool> done{false};
  std::atomic<int> sent{0}, taken{0};
  std::thread sender([&] {
    sigset_t block;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    pthread_sigmask(SIG_BLOCK, &block, nullptr);  // delivered to the computing threads, not here
    for (int i = 0; i < 100; ++i) {
      ::kill(::getpid(), SIGINT);
      sent.fetch_add(1);
      for (int w = 0; w < 200000 && taken.load() <= i; ++w) ::usleep(50);  // taken and cleared
      if (taken.load() <= i) break;                                        // lost: the check below fails
      ::usleep(300);
    }
    done.store(true);
  });
  GemmArgs g;
  g.m = g.n = g.k = n, g.a = a.data(), g.b = b.data(), g.c = c.data();
  while (!done.load()) {
    gemm(ExecContext::host(), kernel<GemmKernel>("cpu"), g);
    std::vector<char> churn(size_t(1) << 16);  // malloc/free: where a corrupted heap is caught
    churn[7] = char(c[5]);
    if (stop_requested()) clear_stop_request(), taken.fetch_add(1);
  }
  sender.join();
  uninstall_stop_handlers();
  EXPECT_EQ(sent.load(), 100);
  EXPECT_EQ(taken.load(), 100);
  EXPECT_EQ(c[size_t(n + 1)], 0.125f * float(n));
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
