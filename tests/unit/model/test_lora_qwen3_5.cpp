// LoRA on dense Qwen3.5 (model/lora.h) without an oracle, on the tiny transformers fixtures
// (tests/fixtures/qwen3_5): adapters on every projection of both mixers (gated attention's
// q_proj [query | gate rows], k/v/o_proj; Gated DeltaNet's in_proj_qkv/z/b/a and out_proj) and
// the MLP, with random non-zero B. The adapted model's logits equal the base with W + scale B A
// written into its HF weights by a naive loop; every adapter gradient equals central differences
// of the loss; checkpointing none/selective/full give the same gradients; a PEFT folder keeps
// PEFT's names both ways; a few AdamW steps on the adapters lower the loss.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "lora_fd_check.h"
#include "core/rng.h"
#include "io/safetensors.h"
#include "io/token_lines.h"
#include "model/hf_model.h"
#include "model/peft_adapter.h"
#include "ops/adamw/adamw.h"
#include "util/strings.h"
#include "unit/model/golden_check.h"

using namespace titan;

namespace {

std::string fixture(const std::string& name) { return std::string(TITAN_FIXTURES) + "/qwen3_5/" + name; }

const std::vector<std::string> kTargets = {
    "model.layers.*.self_attn.q_proj",         "model.layers.*.self_attn.k_proj",
    "model.layers.*.self_attn.v_proj",         "model.layers.*.self_attn.o_proj",
    "model.layers.*.linear_attn.in_proj_qkv",  "model.layers.*.linear_attn.in_proj_z",
    "model.layers.*.linear_attn.in_proj_b",    "model.layers.*.linear_attn.in_proj_a",
    "model.layers.*.linear_attn.out_proj",     "model.layers.*.mlp.gate_proj",
    "model.layers.*.mlp.up_proj",              "model.layers.*.mlp.down_proj"};

LoraConfig lora_config(double dropout = 0) {
  LoraConfig c;
  c.rank = 3, c.alpha = 6, c.dropout = dropout;
  c.target_modules = kTargets;
  return c;
}

// Adapters on every projection, B drawn U(-0.02, 0.02) (PEFT's init leaves it zero: a no-op).
std::unique_ptr<DecoderModel> adapted(const std::string& name, const std::string& kernels = "cpu",
                                      double dropout = 0, DType base = DType::F32, bool freeze = true) {
  auto m = base == DType::F32 ? load_hf_model(fixture(name), kernels)
                              : load_hf_model(fixture(name), kernels, /*frozen=*/true, base);
  m->enable_lora(lora_config(dropout), 7);
  for (auto& p : m->lora_params().all())
    if (p.name.find(".lora_B.") != std::string::npos) fill_uniform(p.value, -0.02, 0.02, Philox{11, stream_id(p.name.c_str())});
  if (freeze) m->freeze_base();
  return m;
}

// |got - want| / |want| in the L2 norm.
double rel_l2(const Tensor& want, const Tensor& got) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double d = double(want.data<float>()[i]) - got.data<float>()[i];
    num += d * d, den += double(want.data<float>()[i]) * want.data<float>()[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

Tensor logits_of(DecoderModel& m, const Tensor& ids, const Tensor& labels) {
  Tensor logits = Tensor::empty({ids.numel(), m.config().vocab_size}, DType::F32);
  m.forward(ids, labels, &logits);
  return logits;
}

std::vector<std::vector<float>> grads_of(DecoderModel& m) {
  std::vector<std::vector<float>> g;
  for (auto& p : m.lora_params().all()) g.emplace_back(p.grad.data<float>(), p.grad.data<float>() + p.grad.numel());
  return g;
}

// Modules per layer kind: Gated DeltaNet 5, gated attention 4, dense MLP 3.
size_t expected_adapters(const ModelConfig& c) {
  size_t n = 0;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    n += (c.layer_kind(l).mixer == MixerKind::GatedDeltaNet ? 5 : 4) + 3;
  return n;
}

}  // namespace

TEST(LoraQwen3_5, ForwardEqualsNaiveMergeIntoTheHfWeights) {
  for (const char* name : {"dense_lin_lin_full", "dense_full_lin_gqa1"})
    for (const char* kernels : {"reference", "cpu"}) {
      SCOPED_TRACE(std::string(name) + "/" + kernels);
      Tensor ids = read_token_lines(fixture(name) + "/tokens.txt");
      Tensor labels = next_token_labels(ids);
      auto m = adapted(name, kernels);
      ASSERT_EQ(m->lora_adapters().size(), expected_adapters(m->config()));
      const Tensor want = logits_of(*m, ids, labels);
      auto plain = load_hf_model(fixture(name), kernels);
      const double base_diff = titan::testing::max_abs_diff(want, logits_of(*plain, ids, labels));
      const double scale = m->lora_config().scale();
      const int64_t r = m->lora_config().rank;
      for (const LoraAdapter& a : m->lora_adapters()) {
        const Tensor& A = m->lora_params().at(lora_a_name(a.module)).value;
        const Tensor& B = m->lora_params().at(lora_b_name(a.module)).value;
        Tensor& w = plain->params().at(a.module + ".weight").value;
        ASSERT_EQ(w.dim(0), a.out) << a.module;
        ASSERT_EQ(w.dim(1), a.in) << a.module;
        for (int64_t o = 0; o < a.out; ++o)
          for (int64_t i = 0; i < a.in; ++i) {
            double d = 0;
            for (int64_t j = 0; j < r; ++j) d += double(B.data<float>()[o * r + j]) * A.data<float>()[j * a.in + i];
            w.data<float>()[o * a.in + i] += float(scale * d);
          }
      }
      const double diff = titan::testing::max_abs_diff(want, logits_of(*plain, ids, labels));
      double peak = 0;
      for (int64_t i = 0; i < want.numel(); ++i) peak = std::max(peak, double(std::fabs(want.data<float>()[i])));
      m->merge_lora();
      EXPECT_FALSE(m->lora_enabled());
      const double merged = titan::testing::max_abs_diff(want, logits_of(*m, ids, labels));
      std::printf("%s/%s: logits (peak %.2f) adapted vs naive merge %.2e, vs merge_lora %.2e (adapters move them "
                  "by %.2e)\n", name, kernels, peak, diff, merged, base_diff);
      // f32 rounding only: x W^T + s (x A^T) B^T and x (W + s B A)^T sum in different orders, through
      // the chunked delta rule and three layers (the base goldens' bar is 1e-4 absolute).
      EXPECT_GT(base_diff, 1e-1);  // the adapters do something
      EXPECT_LE(diff, 1e-5 * std::max(1.0, peak));
      EXPECT_LE(merged, 1e-5 * std::max(1.0, peak));
    }
}

TEST(LoraQwen3_5, AdapterGradientsEqualCentralDifferences) {
  const std::string name = "dense_lin_lin_full";
  Tensor ids = read_token_lines(fixture(name) + "/tokens.txt");
  Tensor labels = next_token_labels(ids);
  const double count = double(count_labels(labels));
  for (const char* kernels : {"reference", "cpu"}) {
    SCOPED_TRACE(kernels);
    auto m = adapted(name, kernels);
    m->lora_params().zero_grad();
    m->forward_backward(ids, labels, float(1.0 / count));
    double worst = 0;
    for (auto& p : m->lora_params().all()) {
      SCOPED_TRACE(p.name);
      const double h = 1e-3;  // B is small: 1e-2 steps into the curvature
      worst = std::max(worst, test::adapter_grad_vs_central_difference(*m, p, ids, labels, count, h, 4));
    }
    std::printf("%s: %zu adapter tensors, worst |grad - central difference| / peak %.2e\n", kernels,
                m->lora_params().all().size(), worst);
  }
}

// The dropout masks are functions of (seed, step, row, position, feature): recomputation under
// checkpointing draws the same ones, so dropout is on here too.
TEST(LoraQwen3_5, CheckpointingRecomputesTheSameGradients) {
  const std::string name = "dense_lin_lin_full";
  Tensor ids = read_token_lines(fixture(name) + "/tokens.txt");
  Tensor labels = next_token_labels(ids);
  for (double dropout : {0.0, 0.25})
    for (DType compute : {DType::F32, DType::BF16}) {
      SCOPED_TRACE(std::to_string(dropout) + (compute == DType::BF16 ? " bf16" : " f32"));
      std::vector<std::vector<float>> ref;
      for (Checkpointing ck : {Checkpointing::None, Checkpointing::Selective, Checkpointing::Full}) {
        SCOPED_TRACE(int(ck));
        auto m = adapted(name, "cpu", dropout);
        m->set_compute_dtype(compute);
        m->set_checkpointing(ck);
        m->set_lora_dropout_rows(3, 0);
        m->forward_backward(ids, labels, 0.01f);
        auto got = grads_of(*m);
        if (ref.empty()) ref = got;
        else EXPECT_EQ(got, ref);
      }
    }
}

// A bf16 frozen base ([lora] base_dtype) computing in bf16 is bit-identical to the f32 base with
// bf16 GEMMs, and near the f32 model: loss within 2%; each adapter's gradient as near the f32 one
// as its module's base-weight gradient is in the same bf16 run (relative L2; on this tiny Qwen3.5
// the base's own bf16 gradients are 0.05-0.2 off f32, LoRA or not), within 1.5x + 0.02.
TEST(LoraQwen3_5, Bf16BaseStaysNearF32) {
  const std::string name = "dense_lin_lin_full";
  Tensor ids = read_token_lines(fixture(name) + "/tokens.txt");
  Tensor labels = next_token_labels(ids);
  auto f32 = adapted(name, "cpu", 0, DType::F32, /*freeze=*/false);
  f32->params().zero_grad();
  const double l32 = f32->forward_backward(ids, labels, 0.01f);
  auto g16 = adapted(name, "cpu", 0, DType::F32, /*freeze=*/false);
  g16->set_compute_dtype(DType::BF16);
  g16->params().zero_grad();
  const double l16 = g16->forward_backward(ids, labels, 0.01f);
  auto m = adapted(name, "cpu", 0, DType::BF16);
  m->set_compute_dtype(DType::BF16);
  const double l = m->forward_backward(ids, labels, 0.01f);
  EXPECT_EQ(l, l16);
  EXPECT_EQ(grads_of(*m), grads_of(*g16));
  double worst = 0, worst_ratio = 0;
  for (const LoraAdapter& a : m->lora_adapters()) {
    const double base = rel_l2(f32->params().at(a.module + ".weight").grad, g16->params().at(a.module + ".weight").grad);
    for (const std::string& n : {lora_a_name(a.module), lora_b_name(a.module)}) {
      const double rel = rel_l2(f32->lora_params().at(n).grad, m->lora_params().at(n).grad);
      EXPECT_LE(rel, 1.5 * base + 0.02) << n << " (its base weight's gradient: " << base << ")";
      worst = std::max(worst, rel), worst_ratio = std::max(worst_ratio, rel / base);
    }
  }
  std::printf("bf16 base: |loss - f32| / loss %.2e, worst adapter grad relative L2 to f32 %.2e (at most %.2fx its "
              "base weight's)\n", std::fabs(l - l32) / l32, worst, worst_ratio);
  EXPECT_NEAR(l, l32, 0.02 * std::fabs(l32));
}

TEST(LoraQwen3_5, PeftFolderRoundTripKeepsPeftNames) {
  const std::string name = "dense_lin_lin_full";  // layers: linear, linear, full
  auto m = adapted(name);
  const std::string dir = ::testing::TempDir() + "/lora_qwen3_5_roundtrip";
  std::filesystem::remove_all(dir);
  save_peft_adapter(*m, dir, "base");
  std::set<std::string> want, got;
  const std::string P = "base_model.model.model.layers.";
  for (int l : {0, 1}) {
    for (const char* p : {"in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a", "out_proj"})
      for (const char* ab : {"A", "B"})
        want.insert(P + std::to_string(l) + ".linear_attn." + p + ".lora_" + ab + ".weight");
  }
  for (const char* p : {"q_proj", "k_proj", "v_proj", "o_proj"})
    for (const char* ab : {"A", "B"}) want.insert(P + "2.self_attn." + p + ".lora_" + ab + ".weight");
  for (int l : {0, 1, 2})
    for (const char* p : {"gate_proj", "up_proj", "down_proj"})
      for (const char* ab : {"A", "B"}) want.insert(P + std::to_string(l) + ".mlp." + p + ".lora_" + ab + ".weight");
  auto file = SafetensorsFile::open(dir + "/adapter_model.safetensors");
  for (const auto& e : file.entries()) got.insert(e.name);
  EXPECT_EQ(got, want);
  // shapes as PEFT's: q_proj's B covers query and gate rows; in_proj_b / in_proj_a one row per value head
  const ModelConfig& c = m->config();
  EXPECT_EQ(file.get(P + "2.self_attn.q_proj.lora_B.weight", DType::F32).dim(0), 2 * c.q_dim());
  EXPECT_EQ(file.get(P + "0.linear_attn.in_proj_qkv.lora_B.weight", DType::F32).dim(0), c.linear_conv_dim());
  EXPECT_EQ(file.get(P + "0.linear_attn.in_proj_b.lora_B.weight", DType::F32).dim(0), c.linear_num_value_heads);
  EXPECT_EQ(file.get(P + "1.linear_attn.out_proj.lora_A.weight", DType::F32).dim(1), c.linear_value_dim());
  Tensor ids = read_token_lines(fixture(name) + "/tokens.txt");
  Tensor labels = next_token_labels(ids);
  const Tensor want_logits = logits_of(*m, ids, labels);
  for (bool all_linear : {false, true}) {
    SCOPED_TRACE(all_linear ? "target_modules \"all-linear\"" : "target_modules as written");
    if (all_linear) {  // PEFT's shorthand in adapter_config.json selects the same modules
      const std::string cpath = dir + "/adapter_config.json";
      auto j = nlohmann::json::parse(read_file(cpath));
      j["target_modules"] = "all-linear";
      std::ofstream(cpath) << j.dump(2);
    }
    auto back = load_hf_model(fixture(name), "cpu");
    load_peft_adapter(*back, dir);
    ASSERT_EQ(back->lora_params().all().size(), m->lora_params().all().size());
    for (auto& p : back->lora_params().all()) {
      SCOPED_TRACE(p.name);
      EXPECT_EQ(titan::testing::max_abs_diff(p.value, m->lora_params().at(p.name).value), 0.0);
    }
    EXPECT_EQ(titan::testing::max_abs_diff(want_logits, logits_of(*back, ids, labels)), 0.0);
  }
  std::filesystem::remove_all(dir);
}

TEST(LoraQwen3_5, TargetsThatNameNoModuleAreErrors) {
  const ModelConfig cfg = load_hf_model(fixture("dense_lin_lin_full"), "cpu")->config();
  auto msg = [&](const std::string& pat) {
    LoraConfig c = lora_config();
    c.target_modules = {pat};
    try {
      lora_select(cfg, c);
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  for (const char* bad : {"model.layers.2.linear_attn.in_proj_qkv", "model.layers.0.self_attn.q_proj",
                          "model.layers.*.linear_attn.conv1d", "model.layers.*.linear_attn.in_proj_ba"}) {
    SCOPED_TRACE(bad);
    const std::string e = msg(bad);
    EXPECT_NE(e.find("matches no module"), std::string::npos) << e;
    EXPECT_NE(e.find(bad), std::string::npos) << e;
  }
  EXPECT_EQ(msg("model.layers.0.linear_attn.in_proj_z"), "");
  // qwen3_5_moe takes adapters (test_lora_qwen3_5_moe.cpp), but these dense targets name mlp.gate_proj,
  // which it lacks: the error points to its shared expert's projections.
  auto moe = load_hf_model(fixture("moe_lin_full"), "cpu");
  try {
    moe->enable_lora(lora_config(), 0);
    ADD_FAILURE() << "mlp.gate_proj accepted on qwen3_5_moe";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("'model.layers.*.mlp.gate_proj' matches no module: a qwen3_5_moe layer's "
                                         "MLP linears are its shared expert's"), std::string::npos) << e.what();
  }
}

// A few AdamW steps on the adapters alone (PEFT's init: B = 0) lower the loss of a batch.
TEST(LoraQwen3_5, AdamWOnTheAdaptersLowersTheLoss) {
  const std::string name = "dense_lin_lin_full";
  Tensor ids = read_token_lines(fixture(name) + "/tokens.txt");
  Tensor labels = next_token_labels(ids);
  const double count = double(count_labels(labels));
  auto m = load_hf_model(fixture(name), "cpu");
  m->enable_lora(lora_config(0.05), 7);
  m->freeze_base();
  const auto& adamw = kernel<AdamWKernel>("cpu");
  AdamWParams h;
  h.lr = 1e-2f, h.weight_decay = 0.f;
  auto& ps = m->lora_params().all();
  std::vector<Tensor> mo, v;
  for (auto& p : ps)
    mo.push_back(Tensor::zeros(p.value.shape(), DType::F32)), v.push_back(Tensor::zeros(p.value.shape(), DType::F32));
  std::vector<double> losses;
  for (int s = 0; s < 8; ++s) {
    m->lora_params().zero_grad();
    m->set_lora_dropout_rows(s, 0);
    losses.push_back(m->forward_backward(ids, labels, float(1.0 / count)) / count);
    h.step = s + 1;
    for (size_t i = 0; i < ps.size(); ++i) adamw.step(ExecContext::host(), ps[i].value, ps[i].grad, mo[i], v[i], h);
  }
  const double final_loss = m->forward(ids, labels) / count;
  std::printf("loss %.4f -> %.4f after %zu steps (scored without dropout: %.4f)\n", losses.front(), losses.back(),
              losses.size(), final_loss);
  EXPECT_LT(losses.back(), losses.front() - 0.05);
  EXPECT_LT(final_loss, losses.front() - 0.05);
}
