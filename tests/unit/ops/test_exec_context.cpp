// Every kernel takes an ExecContext first (core/exec_context.h), and a kernel registered for the
// CPU (the reference and cpu variants, and the cuda variants that stage host tensors) refuses a
// context naming another device before it reads an operand: its tensors would not be where it
// reads them. The arguments here are placeholders; the refusal must come first and name the kernel
// and the device.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "ops/adamw/adamw.h"
#include "ops/attention/attention.h"
#include "ops/bias/bias.h"
#include "ops/causal_conv1d/causal_conv1d.h"
#include "ops/cross_entropy/cross_entropy.h"
#include "ops/embedding/embedding.h"
#include "ops/gated_delta/gated_delta.h"
#include "ops/gated_rmsnorm/gated_rmsnorm.h"
#include "ops/matmul/matmul.h"
#include "ops/moe/moe.h"
#include "ops/residual/residual.h"
#include "ops/rmsnorm/rmsnorm.h"
#include "ops/rope/rope.h"
#include "ops/swiglu/swiglu.h"

using namespace titan;

namespace {

ExecContext cuda_context() {
  ExecContext c;
  c.device = Device{DeviceType::CUDA, 0};
  return c;
}

// Calls `call` for every variant of K registered on the CPU (test-only variants excepted) and
// expects the one-line refusal naming "<op>.<variant>" and the device.
template <class K>
int expect_refusals(const std::function<void(const K&, const ExecContext&)>& call) {
  const ExecContext cu = cuda_context();
  int n = 0;
  for (const std::string& v : KernelRegistry<K>::get().variants(DeviceType::CPU)) {
    if (v.rfind("test", 0) == 0) continue;
    const K& k = kernel<K>(v);
    try {
      call(k, cu);
      ADD_FAILURE() << K::op_name << "." << v << " ran with a cuda:0 context";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(std::string(K::op_name) + "." + v), std::string::npos) << msg;
      EXPECT_NE(msg.find("not on cuda:0"), std::string::npos) << msg;
    }
    ++n;
  }
  return n;
}

}  // namespace

TEST(ExecContext, EveryCpuKernelRefusesAnotherDevicesContext) {
  Tensor t, u, w, y;
  const RowView r{};
  const RopeCache cache{};
  int n = 0;
  n += expect_refusals<EmbeddingKernel>([&](const auto& k, const auto& c) { k.forward(c, t, w, y); });
  n += expect_refusals<EmbeddingKernel>([&](const auto& k, const auto& c) { k.backward(c, t, u, w); });
  n += expect_refusals<GemmKernel>([&](const auto& k, const auto& c) { k.gemm(c, GemmArgs{}); });
  n += expect_refusals<LinearKernel>([&](const auto& k, const auto& c) { k.forward(c, t, w, y, DType::F32); });
  n += expect_refusals<LinearKernel>(
      [&](const auto& k, const auto& c) { k.backward(c, t, w, u, &y, nullptr, DType::F32); });
  n += expect_refusals<RMSNormKernel>([&](const auto& k, const auto& c) { k.forward_rows(c, r, w, 1e-6f, r, y); });
  n += expect_refusals<RMSNormKernel>(
      [&](const auto& k, const auto& c) { k.backward_rows(c, r, w, u, r, r, y, false); });
  n += expect_refusals<RopeKernel>([&](const auto& k, const auto& c) { k.forward_rows(c, r, 1, 0, cache); });
  n += expect_refusals<RopeKernel>([&](const auto& k, const auto& c) { k.backward_rows(c, r, 1, 0, cache); });
  n += expect_refusals<AttentionKernel>(
      [&](const auto& k, const auto& c) { k.forward_rows(c, r, r, r, 1, 1.f, t, u); });
  n += expect_refusals<AttentionKernel>(
      [&](const auto& k, const auto& c) { k.backward_rows(c, r, r, r, t, u, w, 1, 1.f, r, r, r); });
  n += expect_refusals<SwiGLUKernel>([&](const auto& k, const auto& c) { k.forward(c, t, y); });
  n += expect_refusals<SwiGLUKernel>([&](const auto& k, const auto& c) { k.backward(c, t, u, y); });
  n += expect_refusals<ResidualKernel>([&](const auto& k, const auto& c) { k.forward(c, t, u, y); });
  n += expect_refusals<ResidualKernel>([&](const auto& k, const auto& c) { k.accumulate(c, y, t); });
  n += expect_refusals<BiasKernel>([&](const auto& k, const auto& c) { k.forward(c, y, t); });
  n += expect_refusals<BiasKernel>([&](const auto& k, const auto& c) { k.backward(c, t, y); });
  n += expect_refusals<CrossEntropyKernel>(
      [&](const auto& k, const auto& c) { k.forward(c, t, w, u, nullptr, DType::F32); });
  n += expect_refusals<CrossEntropyKernel>(
      [&](const auto& k, const auto& c) { k.forward_backward(c, t, w, u, 1.f, y, y, DType::F32); });
  n += expect_refusals<AdamWKernel>([&](const auto& k, const auto& c) { k.step(c, y, t, u, w, AdamWParams{}); });
  MoESaved saved;
  n += expect_refusals<MoEKernel>([&](const auto& k, const auto& c) { k.forward(c, MoEArgs{}, y, saved); });
  n += expect_refusals<MoEKernel>([&](const auto& k, const auto& c) { k.backward(c, MoEArgs{}, saved, t, MoEGrads{}); });
  // Qwen3.5's Gated DeltaNet ops
  const GatedDeltaOptions o{};
  n += expect_refusals<GatedDeltaKernel>(
      [&](const auto& k, const auto& c) { k.forward(c, t, t, t, t, t, nullptr, u, o, y, w); });
  n += expect_refusals<GatedDeltaKernel>(
      [&](const auto& k, const auto& c) { k.backward(c, t, t, t, t, t, nullptr, u, t, u, o, y, y, y, y, y, y); });
  n += expect_refusals<GatedDeltaKernel>([&](const auto& k, const auto& c) { k.step(c, t, t, t, t, t, o, w, y); });
  n += expect_refusals<CausalConv1dKernel>([&](const auto& k, const auto& c) { k.forward(c, t, w, nullptr, u, y, y); });
  n += expect_refusals<CausalConv1dKernel>(
      [&](const auto& k, const auto& c) { k.backward(c, t, w, nullptr, u, t, y, y, y); });
  n += expect_refusals<GatedRMSNormKernel>([&](const auto& k, const auto& c) { k.forward(c, t, u, w, 1e-6f, y); });
  n += expect_refusals<GatedRMSNormKernel>(
      [&](const auto& k, const auto& c) { k.backward(c, t, u, w, 1e-6f, t, y, y, y); });
  // reference, cpu and cuda of most ops, plus gemv, transposed and grouped_gemm: none missed silently.
  EXPECT_GE(n, 75);
}

TEST(ExecContext, HostContextIsTheCpu) {
  const ExecContext& h = ExecContext::host();
  EXPECT_EQ(h.device.type, DeviceType::CPU);
  EXPECT_EQ(h.stream, nullptr);
  EXPECT_EQ(h.gemm_handle, nullptr);
}
