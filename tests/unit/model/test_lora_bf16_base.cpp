// [lora] base_dtype = "bfloat16": a frozen base stored in bf16 (DecoderModel's weight_dtype) trains its
// adapters with exactly the arithmetic of the same base in f32 with bf16 GEMMs
// (set_compute_dtype(BF16), what [training] mixed_precision_param = "bfloat16" sets): the bf16
// step rounds each f32 linear weight to bf16 (RNE) before its GEMMs, and the bf16 base holds those
// rounded values from the load (RNE too), so every GEMM reads the same operands. Loss, every
// adapter gradient and 3 AdamW steps are bit-identical, on a tied and an untied base (the untied
// lm_head is stored in bf16 too; the tied one stays f32 with the embedding), each kernel set and
// checkpointing mode.
#include <gtest/gtest.h>

#include <cstring>

#include <nlohmann/json.hpp>

#include "io/token_lines.h"
#include "model/hf_model.h"
#include "model/peft_adapter.h"
#include "ops/adamw/adamw.h"
#include "ops/cross_entropy/cross_entropy.h"
#include "util/strings.h"

using namespace titan;

namespace {

std::string fixtures() { return std::string(TITAN_FIXTURES); }

struct Case {
  std::string adapter, kernels;
  Checkpointing ckpt;
};

class LoraBf16Base : public ::testing::TestWithParam<Case> {};

std::vector<std::vector<float>> values(const ParamStore& ps, bool grads) {
  std::vector<std::vector<float>> out;
  for (auto& p : ps.all()) {
    const Tensor& t = grads ? p.grad : p.value;
    out.emplace_back(t.data<float>(), t.data<float>() + t.numel());
  }
  return out;
}

TEST_P(LoraBf16Base, TrainsExactlyAsAnF32BaseWithBf16Gemms) {
  const Case& c = GetParam();
  const std::string dir = fixtures() + "/lora/" + c.adapter;
  auto meta = nlohmann::json::parse(read_file(dir + "/golden.json"));
  const std::string base = fixtures() + "/" + meta["base"].get<std::string>();
  Tensor ids = read_token_lines(base + "/tokens.txt");
  Tensor labels = next_token_labels(ids);
  const float scale = float(1.0 / double(count_labels(labels)));

  std::unique_ptr<DecoderModel> m[2] = {load_hf_model(base, c.kernels),
                                      load_hf_model(base, c.kernels, /*frozen=*/true, DType::BF16)};
  for (auto& mm : m) {
    load_peft_adapter(*mm, dir + "/adapter");
    mm->freeze_base();
    mm->set_compute_dtype(DType::BF16);
    mm->set_checkpointing(c.ckpt);
  }
  ASSERT_EQ(m[1]->weight_dtype(), DType::BF16);
  for (auto& p : m[1]->params().all()) {
    EXPECT_FALSE(p.grad.defined()) << p.name;
    const bool linear = p.name.find("_proj.weight") != std::string::npos || p.name == "lm_head.weight";
    EXPECT_EQ(p.value.dtype(), linear ? DType::BF16 : DType::F32) << p.name;
  }
  const AdamWKernel& adamw = kernel<AdamWKernel>("cpu");
  AdamWParams h;
  h.lr = 0.02f, h.weight_decay = 0.1f;
  std::vector<Tensor> mom[2][2];
  for (int k = 0; k < 2; ++k)
    for (auto& p : m[k]->lora_params().all())
      for (int j = 0; j < 2; ++j) mom[k][j].push_back(Tensor::zeros(p.value.shape(), DType::F32));
  for (int step = 1; step <= 3; ++step) {
    SCOPED_TRACE(step);
    double loss[2];
    for (int k = 0; k < 2; ++k) {
      m[k]->lora_params().zero_grad();
      loss[k] = m[k]->forward_backward(ids, labels, scale);
    }
    EXPECT_EQ(loss[0], loss[1]);
    EXPECT_EQ(values(m[0]->lora_params(), true), values(m[1]->lora_params(), true));
    h.step = step;
    for (int k = 0; k < 2; ++k) {
      auto& ps = m[k]->lora_params().all();
      for (size_t i = 0; i < ps.size(); ++i)
        adamw.step(ExecContext::host(), ps[i].value, ps[i].grad, mom[k][0][i], mom[k][1][i], h);
    }
  }
  EXPECT_EQ(values(m[0]->lora_params(), false), values(m[1]->lora_params(), false));
  // Scoring (forward only) reads the bf16 head as it is too.
  EXPECT_EQ(m[0]->forward(ids, labels), m[1]->forward(ids, labels));
}

std::vector<Case> cases() {
  std::vector<Case> v;
  for (const char* a : {"all_linear_r4", "qv_down_rslora"})  // a tied base; an untied one
    for (const char* k : {"reference", "cpu"})
      for (Checkpointing ck : {Checkpointing::None, Checkpointing::Full}) v.push_back({a, k, ck});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Lora, LoraBf16Base, ::testing::ValuesIn(cases()), [](const auto& info) {
  return info.param.adapter + "_" + info.param.kernels + (info.param.ckpt == Checkpointing::Full ? "_full_ac" : "");
});

// A bf16 base cannot compute in f32 (its values would be widened every step), nor train.
TEST(LoraBf16Base, RefusesF32ComputeAndATrainableBf16Model) {
  const std::string base = fixtures() + "/qwen3/tied_gqa2_hd16";
  auto m = load_hf_model(base, "cpu", /*frozen=*/true, DType::BF16);
  EXPECT_THROW(m->set_compute_dtype(DType::F32), Error);
  EXPECT_THROW(DecoderModel(m->config(), "cpu", false, /*frozen=*/false, DType::BF16), Error);
}

// A bf16 base initialised here (no HF load): each weight is its f32 init rounded once (RNE), the
// f32 parameters (norms, embedding) equal the f32 init, whole or one unit at a time (as a sharded
// base fills its units).
TEST(LoraBf16Base, InitIsTheF32InitRoundedOnce) {
  for (bool tied : {true, false}) {
    ModelConfig c = flavor_config("debug-tiny");
    c.tie_word_embeddings = tied;
    DecoderModel f32(c, "cpu");
    f32.init_weights(InitScheme::Torchtitan, 3);
    DecoderModel whole(c, "cpu", false, /*frozen=*/true, DType::BF16), units(c, "cpu", false, true, DType::BF16);
    whole.init_weights(InitScheme::Torchtitan, 3);
    for (int64_t u = 0; u < units.num_units(); ++u) units.init_weights(InitScheme::Torchtitan, 3, u);
    int bf16 = 0;
    for (size_t i = 0; i < f32.params().all().size(); ++i) {
      const Tensor& w = whole.params().all()[i].value;
      Tensor want = Tensor::empty(w.shape(), w.dtype());
      want.copy_(f32.params().all()[i].value);
      bf16 += w.dtype() == DType::BF16;
      EXPECT_EQ(0, std::memcmp(w.raw(), want.raw(), w.nbytes())) << whole.params().all()[i].name;
      EXPECT_EQ(0, std::memcmp(units.params().all()[i].value.raw(), want.raw(), w.nbytes())) << whole.params().all()[i].name;
    }
    EXPECT_GT(bf16, 0);
  }
}

}  // namespace
