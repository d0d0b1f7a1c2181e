// LoRA on Qwen3.5-MoE (model/lora.h) without an oracle, on the tiny transformers fixture
// tests/fixtures/qwen3_5/moe_lin_full (layers: Gated DeltaNet, gated attention; every layer routed
// experts + a shared expert with its sigmoid gate): adapters on every mixer projection, on the
// shared expert's gate/up/down_proj and on shared_expert_gate (target_modules), and on the router
// and the fused experts (target_parameters, PEFT's ParamWrapper), with random non-zero B. The
// adapted logits equal the base with W + scale B A written into its HF weights by a naive loop;
// every adapter gradient equals central differences; checkpointing none/selective/full give the
// same gradients bit for bit; a PEFT folder keeps PEFT's names both ways; a dense-MLP pattern and
// an expert named as a module are one-line errors.
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
#include "util/strings.h"
#include "unit/model/golden_check.h"

using namespace titan;

namespace {

const std::string kName = "moe_lin_full";
std::string fixture(const std::string& f) { return std::string(TITAN_FIXTURES) + "/qwen3_5/" + kName + f; }

const std::vector<std::string> kModules = {
    "model.layers.*.self_attn.[qkvo]_proj", "model.layers.*.linear_attn.*", "model.layers.*.mlp.**_proj",
    "model.layers.*.mlp.shared_expert_gate"};
const std::vector<std::string> kParams = {"model.layers.*.mlp.gate.weight", "model.layers.*.mlp.experts.*"};

LoraConfig lora_config(bool params, double dropout = 0) {
  LoraConfig c;
  c.rank = 3, c.alpha = 6, c.dropout = dropout;
  c.target_modules = kModules;
  if (params) c.target_parameters = kParams;
  return c;
}

// B drawn U(-0.02, 0.02) (PEFT's init leaves it zero: a no-op).
std::unique_ptr<DecoderModel> adapted(const std::string& kernels = "cpu", bool params = true, double dropout = 0) {
  auto m = load_hf_model(fixture(""), kernels);
  m->enable_lora(lora_config(params, dropout), 7);
  for (auto& p : m->lora_params().all())
    if (p.name.find(".lora_B.") != std::string::npos) fill_uniform(p.value, -0.02, 0.02, Philox{11, stream_id(p.name.c_str())});
  m->freeze_base();
  return m;
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

// w [rows, in] += scale * sum_j B[row0 + o, j*E + e] A[e*r + j, i] (PEFT's layout, model/lora.h;
// E = 1, e = 0: an ordinary adapter's B A).
void naive_add(Tensor& w, const Tensor& A, const Tensor& B, int64_t E, int64_t e, int64_t row0, double scale) {
  const int64_t r = A.dim(0) / E, in = A.dim(1), rows = w.dim(0);
  ASSERT_EQ(w.dim(1), in);
  for (int64_t o = 0; o < rows; ++o)
    for (int64_t i = 0; i < in; ++i) {
      double d = 0;
      for (int64_t j = 0; j < r; ++j)
        d += double(B.data<float>()[(row0 + o) * r * E + j * E + e]) * A.data<float>()[(e * r + j) * in + i];
      w.data<float>()[o * in + i] += float(scale * d);
    }
}

}  // namespace

TEST(LoraQwen3_5Moe, SelectsTheSharedExpertAndItsGate) {
  auto m = adapted();
  std::set<std::string> got;
  for (const LoraAdapter& a : m->lora_adapters()) got.insert(a.module);
  for (int l : {0, 1}) {
    const std::string p = "model.layers." + std::to_string(l) + ".mlp.";
    for (const char* s : {"shared_expert.gate_proj", "shared_expert.up_proj", "shared_expert.down_proj",
                          "shared_expert_gate", "gate.weight", "experts.gate_up_proj", "experts.down_proj"})
      EXPECT_TRUE(got.count(p + s)) << p + s;
  }
  // layer 0: 5 Gated DeltaNet projections, layer 1: 4 attention projections; 4 + 3 per MLP
  EXPECT_EQ(m->lora_adapters().size(), size_t(5 + 4 + 2 * (4 + 3)));
  // The default target_modules ([lora] in train/job_config.h) take the shared expert, not its gate.
  LoraConfig c;
  c.target_modules = {"model.layers.*.self_attn.[qkvo]_proj", "model.layers.*.mlp.**_proj"};
  size_t shared = 0;
  for (const LoraAdapter& a : lora_select(m->config(), c)) shared += a.module.find("shared_expert.") != std::string::npos;
  EXPECT_EQ(shared, 6u);
}

TEST(LoraQwen3_5Moe, ForwardEqualsNaiveMergeIntoTheHfWeights) {
  Tensor ids = read_token_lines(fixture("/tokens.txt"));
  Tensor labels = next_token_labels(ids);
  for (const char* kernels : {"reference", "cpu"}) {
    SCOPED_TRACE(kernels);
    auto m = adapted(kernels);
    const Tensor want = logits_of(*m, ids, labels);
    auto plain = load_hf_model(fixture(""), kernels);
    const double base_diff = titan::testing::max_abs_diff(want, logits_of(*plain, ids, labels));
    const double scale = m->lora_config().scale();
    const int64_t E = m->config().num_experts, I = m->config().moe_intermediate_size;
    int64_t shared = 0;
    for (const LoraAdapter& a : m->lora_adapters()) {
      const Tensor& A = m->lora_params().at(lora_a_name(a.module)).value;
      const Tensor& B = m->lora_params().at(lora_b_name(a.module)).value;
      const std::string p = "model.layers." + std::to_string(a.layer) + ".mlp.";
      if (!a.is_parameter()) {
        naive_add(plain->params().at(a.module + ".weight").value, A, B, 1, 0, 0, scale);
        shared += a.module.find("shared_expert") != std::string::npos;
      } else if (a.group == LoraGroup::Router) {
        naive_add(plain->params().at(p + "gate.weight").value, A, B, 1, 0, 0, scale);
      } else {
        for (int64_t e = 0; e < E; ++e) {
          const std::string x = p + "experts." + std::to_string(e) + ".";
          if (a.group == LoraGroup::ExpertGateUp) {
            naive_add(plain->params().at(x + "gate_proj.weight").value, A, B, E, e, 0, scale);
            naive_add(plain->params().at(x + "up_proj.weight").value, A, B, E, e, I, scale);
          } else {
            naive_add(plain->params().at(x + "down_proj.weight").value, A, B, E, e, 0, scale);
          }
        }
      }
    }
    EXPECT_EQ(shared, 8);
    const double diff = titan::testing::max_abs_diff(want, logits_of(*plain, ids, labels));
    double peak = 0;
    for (int64_t i = 0; i < want.numel(); ++i) peak = std::max(peak, double(std::fabs(want.data<float>()[i])));
    m->merge_lora();
    EXPECT_FALSE(m->lora_enabled());
    const double merged = titan::testing::max_abs_diff(want, logits_of(*m, ids, labels));
    std::printf("%s: logits (peak %.2f) adapted vs naive merge %.2e, vs merge_lora %.2e (adapters move them by "
                "%.2e)\n", kernels, peak, diff, merged, base_diff);
    EXPECT_GT(base_diff, 1e-1);  // the adapters do something
    EXPECT_LE(diff, 1e-5 * std::max(1.0, peak));
    EXPECT_LE(merged, 1e-5 * std::max(1.0, peak));
  }
}

// Every adapter tensor (4 elements each, 8 for the shared expert's and its gate's), against its
// own gradient's peak: a missing shared-expert adapter backward leaves those gradients zero.
TEST(LoraQwen3_5Moe, AdapterGradientsEqualCentralDifferences) {
  Tensor ids = read_token_lines(fixture("/tokens.txt"));
  Tensor labels = next_token_labels(ids);
  const double count = double(count_labels(labels));
  for (const char* kernels : {"reference", "cpu"}) {
    SCOPED_TRACE(kernels);
    auto m = adapted(kernels);
    m->lora_params().zero_grad();
    m->forward_backward(ids, labels, float(1.0 / count));
    double worst = 0, worst_shared = 0;
    std::string worst_name;
    for (auto& p : m->lora_params().all()) {
      SCOPED_TRACE(p.name);
      const bool shared = p.name.find("shared_expert") != std::string::npos;
      const double w = test::adapter_grad_vs_central_difference(*m, p, ids, labels, count, 1e-3, shared ? 8 : 4);
      if (w > worst) worst = w, worst_name = p.name;
      if (shared) worst_shared = std::max(worst_shared, w);
    }
    std::printf("%s: %zu adapter tensors, worst |grad - central difference| / peak %.2e (%s; the shared expert's "
                "and its gate's worst: %.2e)\n", kernels, m->lora_params().all().size(), worst, worst_name.c_str(),
                worst_shared);
  }
}

// Dropout on (target_modules only: PEFT refuses it with target_parameters) and off with every
// target, f32 and bf16 GEMMs: recomputation gives the same adapter gradients bit for bit.
TEST(LoraQwen3_5Moe, CheckpointingRecomputesTheSameGradients) {
  Tensor ids = read_token_lines(fixture("/tokens.txt"));
  Tensor labels = next_token_labels(ids);
  for (double dropout : {0.0, 0.25})
    for (DType compute : {DType::F32, DType::BF16}) {
      SCOPED_TRACE(std::to_string(dropout) + (compute == DType::BF16 ? " bf16" : " f32"));
      std::vector<std::vector<float>> ref;
      for (Checkpointing ck : {Checkpointing::None, Checkpointing::Selective, Checkpointing::Full}) {
        SCOPED_TRACE(int(ck));
        auto m = adapted("cpu", /*params=*/dropout == 0, dropout);
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

TEST(LoraQwen3_5Moe, PeftFolderRoundTripKeepsPeftNames) {
  auto m = adapted();
  const std::string dir = ::testing::TempDir() + "/lora_qwen3_5_moe_roundtrip";
  std::filesystem::remove_all(dir);
  save_peft_adapter(*m, dir, "base");
  std::set<std::string> want, got;
  const std::string P = "base_model.model.model.layers.";
  auto add = [&](const std::string& module) {
    for (const char* ab : {"A", "B"}) want.insert(P + module + ".lora_" + ab + ".weight");
  };
  for (const char* p : {"in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a", "out_proj"})
    add(std::string("0.linear_attn.") + p);
  for (const char* p : {"q_proj", "k_proj", "v_proj", "o_proj"}) add(std::string("1.self_attn.") + p);
  for (const char* l : {"0", "1"})
    for (const char* p : {"shared_expert.gate_proj", "shared_expert.up_proj", "shared_expert.down_proj",
                          "shared_expert_gate", "gate", "experts", "experts.base_layer"})
      add(std::string(l) + ".mlp." + p);
  auto file = SafetensorsFile::open(dir + "/adapter_model.safetensors");
  for (const auto& e : file.entries()) got.insert(e.name);
  EXPECT_EQ(got, want);
  const ModelConfig& c = m->config();
  const int64_t SI = c.shared_expert_intermediate_size;
  EXPECT_EQ(file.get(P + "0.mlp.shared_expert.gate_proj.lora_B.weight", DType::F32).dim(0), SI);
  EXPECT_EQ(file.get(P + "0.mlp.shared_expert.down_proj.lora_A.weight", DType::F32).dim(1), SI);
  EXPECT_EQ(file.get(P + "1.mlp.shared_expert_gate.lora_B.weight", DType::F32).dim(0), 1);
  EXPECT_EQ(file.get(P + "1.mlp.shared_expert_gate.lora_A.weight", DType::F32).dim(1), c.hidden_size);
  Tensor ids = read_token_lines(fixture("/tokens.txt"));
  Tensor labels = next_token_labels(ids);
  const Tensor want_logits = logits_of(*m, ids, labels);
  // As written; PEFT's "all-linear" (the shared expert's gate is an nn.Linear, the router is not);
  // PEFT's short names, which name the shared expert's projections by their last part.
  const std::vector<nlohmann::json> targets = {
      nlohmann::json(), "all-linear",
      nlohmann::json::array({"q_proj", "k_proj", "v_proj", "o_proj", "in_proj_qkv", "in_proj_z", "in_proj_b",
                             "in_proj_a", "out_proj", "gate_proj", "up_proj", "down_proj", "shared_expert_gate"})};
  for (const auto& t : targets) {
    SCOPED_TRACE(t.is_null() ? std::string("as written") : t.dump());
    if (!t.is_null()) {
      const std::string cpath = dir + "/adapter_config.json";
      auto j = nlohmann::json::parse(read_file(cpath));
      j["target_modules"] = t;
      std::ofstream(cpath) << j.dump(2);
    }
    auto back = load_hf_model(fixture(""), "cpu");
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

// Refused in one line each: a dense-MLP pattern (mlp.*_proj: a glob's * stops at a dot, and a
// qwen3_5_moe MLP's linears are one level down, in its shared expert), and a routed expert or the
// router named as a module (they are parameters in transformers 5: target_parameters).
TEST(LoraQwen3_5Moe, DenseMlpPatternAndExpertModulesAreOneLineErrors) {
  const ModelConfig cfg = load_hf_model(fixture(""), "cpu")->config();
  auto msg = [&](const std::string& pat) {
    LoraConfig c;
    c.target_modules = {pat};
    try {
      lora_select(cfg, c);
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  for (const char* dense : {"model.layers.*.mlp.*_proj", "model.layers.0.mlp.gate_proj"}) {
    const std::string e = msg(dense);
    SCOPED_TRACE(e);
    EXPECT_NE(e.find(std::string("'") + dense + "' matches no module"), std::string::npos);
    EXPECT_NE(e.find("shared_expert.gate_proj"), std::string::npos);
    EXPECT_NE(e.find("model.layers.*.mlp.**_proj"), std::string::npos);
    EXPECT_EQ(e.find('\n'), std::string::npos);
  }
  for (const char* expert : {"model.layers.*.mlp.experts", "model.layers.*.mlp.experts.*.gate_proj",
                             "model.layers.0.mlp.gate"}) {
    const std::string e = msg(expert);
    SCOPED_TRACE(e);
    EXPECT_NE(e.find("target_parameters"), std::string::npos);
    EXPECT_EQ(e.find('\n'), std::string::npos);
  }
  EXPECT_EQ(msg("model.layers.*.mlp.shared_expert.*_proj"), "");
  EXPECT_EQ(msg("model.layers.1.mlp.shared_expert_gate"), "");
}
