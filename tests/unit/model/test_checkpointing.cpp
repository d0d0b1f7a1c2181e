// Activation checkpointing: identical gradients, lower peak memory.
#include <gtest/gtest.h>

#include <cstring>

#include "core/allocator.h"
#include "model/decoder.h"

using namespace titan;

TEST(ActivationCheckpointing, SameGradientsLessPeakMemory) {
  ModelConfig c = flavor_config("debug-tiny");
  c.num_hidden_layers = 4;
  const int64_t B = 2, S = 64;
  Tensor ids = Tensor::empty({B, S}, DType::I64), labels = Tensor::empty({B, S}, DType::I64);
  for (int64_t i = 0; i < B * S; ++i) {
    ids.data<int64_t>()[i] = (i * 37 + 11) % c.vocab_size;
    labels.data<int64_t>()[i] = (i * 53 + 5) % c.vocab_size;
  }
  std::vector<std::vector<float>> grads[3];
  size_t peak[3];
  const Checkpointing modes[3] = {Checkpointing::None, Checkpointing::Selective, Checkpointing::Full};
  for (int m = 0; m < 3; ++m) {
    DecoderModel model(c, "cpu");
    model.init_weights(InitScheme::HF, 3);
    model.set_checkpointing(modes[m]);
    cpu_allocator().reset_peak();
    const size_t before = cpu_allocator().stats().live_bytes;
    model.forward_backward(ids, labels, 1.0f / float(B * S));
    peak[m] = cpu_allocator().stats().peak_bytes - before;
    for (auto& p : model.params().all())
      grads[m].emplace_back(p.grad.data<float>(), p.grad.data<float>() + p.grad.numel());
  }
  for (int m = 1; m < 3; ++m) {
    ASSERT_EQ(grads[m].size(), grads[0].size());
    for (size_t i = 0; i < grads[0].size(); ++i)
      EXPECT_EQ(0, std::memcmp(grads[m][i].data(), grads[0][i].data(), grads[0][i].size() * 4)) << "mode " << m;
  }
  EXPECT_LT(peak[1], peak[0]);
  EXPECT_LT(peak[2], peak[1]);
  std::printf("activation peak bytes: none %zu, selective %zu, full %zu\n", peak[0], peak[1], peak[2]);
}
