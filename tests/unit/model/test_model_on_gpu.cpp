// The model on cuda:0 (docs/cuda.md "The model on the GPU"): parameters, gradients, the RoPE
// tables and activations on the device, every kernel the cuda variant's GPU registration. Without a
// GPU the kernels run under the grid emulator with device memory in host memory, and
// Tensor::data<T>() refuses host access to a GPU tensor, so a host loop left on the path fails.
// Reference: the same model on the CPU with the cpu kernels, from the same init.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "common/gpu_test_util.h"
#include "common/test_util.h"
#include "model/decoder.h"
#include "model/positions.h"

using namespace titan;
using namespace titan::test;

namespace {

// ids and labels [B, S] on the host; with `sparse`, most labels are ignored (-100), which sends the
// CPU model's head down its row-gather path while the GPU model runs every row.
void make_batch(const ModelConfig& c, int64_t B, int64_t S, bool sparse, Tensor& ids, Tensor& labels) {
  ids = Tensor::empty({B, S}, DType::I64), labels = Tensor::empty({B, S}, DType::I64);
  for (int64_t i = 0; i < B * S; ++i) {
    ids.data<int64_t>()[i] = (i * 37 + 11) % c.vocab_size;
    labels.data<int64_t>()[i] = sparse && i % 3 != 0 ? -100 : (i * 53 + 5) % c.vocab_size;
  }
}

void expect_same_step(const ModelConfig& c, Checkpointing mode, bool sparse, DType compute = DType::F32,
                      double loss_tol = 1e-5, float grad_tol = 1e-4f) {
  SCOPED_TRACE(testing::Message() << "checkpointing " << int(mode) << (sparse ? ", sparse labels" : "") << ", compute "
                                  << dtype_name(compute));
  const int64_t B = 2, S = 24;
  Tensor ids, labels;
  make_batch(c, B, S, sparse, ids, labels);
  DecoderModel ref(c, "cpu");
  ref.init_weights(InitScheme::Torchtitan, 11);
  DecoderModel gpu = gpu_model(c);
  gpu.init_weights(InitScheme::Torchtitan, 11);  // drawn on the host, copied over: the same values
  ASSERT_EQ(gpu.params().all().size(), ref.params().all().size());
  for (size_t i = 0; i < ref.params().all().size(); ++i) {
    const Param& g = gpu.params().all()[i];
    ASSERT_EQ(g.value.device(), kGpu) << g.name;
    ASSERT_EQ(g.grad.device(), kGpu) << g.name;
    ASSERT_EQ(host_floats(g.value), host_floats(ref.params().all()[i].value)) << g.name;
  }
  ref.set_checkpointing(mode);
  gpu.set_checkpointing(mode);
  ref.set_compute_dtype(compute);
  gpu.set_compute_dtype(compute);
  const float scale = 1.0f / float(B * S);
  const double l_ref = ref.forward_backward(ids, labels, scale);
  const double l_gpu = gpu.forward_backward(ids, labels, scale);
  double worst = 0;
  EXPECT_NEAR(l_gpu, l_ref, loss_tol * std::abs(l_ref));
  for (size_t i = 0; i < ref.params().all().size(); ++i) {
    const std::vector<float> r = host_floats(ref.params().all()[i].grad);
    const std::vector<float> g = host_floats(gpu.params().all()[i].grad);
    float peak = 0, err = 0;
    for (size_t j = 0; j < r.size(); ++j)
      peak = std::max(peak, std::abs(r[j])), err = std::max(err, std::abs(r[j] - g[j]));
    EXPECT_GT(peak, 0.0f) << ref.params().all()[i].name;
    EXPECT_LE(err, grad_tol * peak) << ref.params().all()[i].name << ": max |diff| " << err << ", peak " << peak;
    worst = std::max(worst, double(err / peak));
  }
  std::printf("compute %s: loss %.9g (cpu) vs %.9g (gpu), worst gradient error / peak %.3g\n", dtype_name(compute),
              l_ref, l_gpu, worst);
  // Scoring (no gradients) on the GPU model gives the training pass's loss.
  EXPECT_NEAR(gpu.forward(ids, labels), l_ref, loss_tol * std::abs(l_ref));
}

}  // namespace

TEST(ModelOnGpu, DenseF32StepMatchesTheCpuModel) {
  ModelConfig c = flavor_config("debug-tiny");  // qwen3: q/k norm, tied head
  ASSERT_TRUE(c.tie_word_embeddings);
  expect_same_step(c, Checkpointing::None, false);
  expect_same_step(c, Checkpointing::None, true);
}

TEST(ModelOnGpu, CheckpointingModesMatchTheCpuModel) {
  ModelConfig c = flavor_config("debug-tiny");
  expect_same_step(c, Checkpointing::Selective, false);
  expect_same_step(c, Checkpointing::Full, false);
}

// Llama and Qwen2 (no q/k norm: q and k are copied out of the fused projection by a strided
// device copy before RoPE; Qwen2's q/k/v biases), untied heads as their small models have.
TEST(ModelOnGpu, LlamaAndQwen2FamiliesMatchTheCpuModel) {
  for (const char* type : {"llama", "qwen2"}) {
    SCOPED_TRACE(type);
    ModelConfig c = flavor_config("debug-tiny");
    c.model_type = type;
    c.tie_word_embeddings = false;
    ASSERT_FALSE(c.has_qk_norm());
    expect_same_step(c, Checkpointing::None, false);
    expect_same_step(c, Checkpointing::Full, false);
  }
}

TEST(ModelOnGpu, UntiedHead) {
  ModelConfig c = flavor_config("debug-tiny");
  c.tie_word_embeddings = false;
  expect_same_step(c, Checkpointing::None, false);
}

// bf16 compute: the GPU rounds the f32 weights on the device per GEMM, the CPU model its bf16 copy;
// the same values, but the GEMMs sum in a different order, so a bf16 rounding of an activation
// can differ: a looser gradient bound (the loss still agrees to 1e-5, while an f32 step's loss is
// 7e-5 away from the bf16 one, so compute left in f32 on either side fails).
TEST(ModelOnGpu, Bf16ComputeMatchesTheCpuModel) {
  const ModelConfig c = flavor_config("debug-tiny");
  expect_same_step(c, Checkpointing::None, false, DType::BF16, 1e-5, 5e-3f);
  expect_same_step(c, Checkpointing::Full, false, DType::BF16, 1e-5, 5e-3f);
}

// Packed documents: the positions stay a host tensor (the document starts a host array).
TEST(ModelOnGpu, PackedDocumentsMatchTheCpuModel) {
  const ModelConfig c = flavor_config("debug-tiny");
  Tensor ids, labels;
  make_batch(c, 2, 24, false, ids, labels);
  for (int64_t i = 0; i < ids.numel(); i += 7) ids.data<int64_t>()[i] = 0;  // separators
  const Tensor pos = positions_after_separator(ids, 0);
  DecoderModel ref(c, "cpu");
  ref.init_weights(InitScheme::Torchtitan, 5);
  DecoderModel gpu = gpu_model(c);
  gpu.init_weights(InitScheme::Torchtitan, 5);
  const double l_ref = ref.forward_backward(ids, labels, 1.0f, &pos);
  EXPECT_NEAR(gpu.forward_backward(ids, labels, 1.0f, &pos), l_ref, 1e-5 * std::abs(l_ref));
  for (size_t i = 0; i < ref.params().all().size(); ++i) {
    const std::vector<float> r = host_floats(ref.params().all()[i].grad);
    const std::vector<float> g = host_floats(gpu.params().all()[i].grad);
    float peak = 0, err = 0;
    for (size_t j = 0; j < r.size(); ++j)
      peak = std::max(peak, std::abs(r[j])), err = std::max(err, std::abs(r[j] - g[j]));
    EXPECT_LE(err, 1e-4f * peak) << ref.params().all()[i].name;
  }
  EXPECT_GT(std::abs(ref.forward(ids, labels) - l_ref), 1e-3 * std::abs(l_ref));  // the documents matter
}

TEST(ModelOnGpu, RefusesWhatIsNotDeviceAwareInOneLine) {
  EXPECT_ERROR_HAS(gpu_model(flavor_config("debug-qwen3_5")), "model on cuda:0: Qwen3.5 layers are not");
  const ModelConfig c = flavor_config("debug-tiny");
  EXPECT_ERROR_HAS(DecoderModel(c, "cuda", true, false, DType::F32, {}, {}, {}, kGpu), "not deferred");
  EXPECT_ERROR_HAS(DecoderModel(c, "cpu", false, false, DType::F32, {}, {}, {}, kGpu),
                   "kernel set 'cpu' has no cuda kernels");
  DecoderModel m = gpu_model(c);
  LoraConfig lc;
  lc.target_modules = {"q_proj"};
  EXPECT_ERROR_HAS(m.enable_lora(lc, 1), "model on cuda:0: LoRA is not device-aware yet");
}
