// Qwen3.5 (dense and MoE) against transformers' goldens (tools/oracle/qwen3_5_goldens.py, under
// tests/fixtures/qwen3_5/<case>): logits, loss and every parameter gradient on both kernel sets,
// 64 greedy tokens through the inference state equal to transformers' cached generate, a packed
// row equal to its documents run alone; and the config parser's Qwen3.5 keys and refusals.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "model/config.h"
#include "model/hf_model.h"
#include "model/inference_state.h"
#include "common/test_util.h"
#include "unit/model/golden_check.h"

using namespace titan;

namespace {

std::string fixture(const std::string& name) { return std::string(TITAN_FIXTURES) + "/qwen3_5/" + name; }

const char* const kCases[] = {"dense_lin_lin_full", "dense_full_lin_gqa1", "moe_lin_full"};

struct Case {
  std::string name, kernels;
};

class Qwen3_5Golden : public ::testing::TestWithParam<Case> {};

TEST_P(Qwen3_5Golden, LogitsLossAndGradientsMatchTransformers) {
  titan::testing::expect_matches_golden(fixture(GetParam().name), GetParam().kernels);
}

std::vector<Case> cases() {
  std::vector<Case> v;
  for (const char* n : kCases)
    for (const char* k : {"reference", "cpu"}) v.push_back({n, k});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Qwen3_5, Qwen3_5Golden, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name + "_" + info.param.kernels; });

// Greedy decoding through forward_cached: the prompt as one prefill (chunked delta rule), then one
// token per call (the recurrence on the held conv and recurrent states, the KV cache of the full
// layers), against transformers' generate(use_cache=True).
TEST(Qwen3_5Generate, GreedyTokensMatchTransformersCachedGenerate) {
  for (const char* name : kCases) {
    SCOPED_TRACE(name);
    const auto meta = nlohmann::json::parse(read_file(fixture(name) + "/golden.json"));
    auto model = load_hf_model(fixture(name), "cpu");
    std::vector<int64_t> prompt = meta["prompt"].get<std::vector<int64_t>>();
    const std::vector<int64_t> want = meta["generate"].get<std::vector<int64_t>>();
    InferenceState st;
    st.reset({0});
    Tensor ids = Tensor::empty({1, int64_t(prompt.size())}, DType::I64);
    for (size_t i = 0; i < prompt.size(); ++i) ids.data<int64_t>()[i] = prompt[i];
    std::vector<int64_t> got;
    const int64_t V = model->config().vocab_size;
    for (size_t step = 0; step < want.size(); ++step) {
      Tensor logits;
      model->forward_cached(ids, st, logits);
      const float* l = logits.data<float>();
      int64_t best = 0;
      for (int64_t v = 1; v < V; ++v)
        if (l[v] > l[best]) best = v;
      got.push_back(best);
      ids = Tensor::empty({1, 1}, DType::I64);
      ids.data<int64_t>()[0] = best;
    }
    EXPECT_EQ(got, want);
  }
}

// Two documents packed in one row (positions restart at the second) give the logits of each run alone:
// the delta rule and the conv restart at the document start, attention is block-causal.
TEST(Qwen3_5Packing, PackedRowEqualsItsDocumentsRunAlone) {
  for (const char* kernels : {"reference", "cpu"}) {
    auto model = load_hf_model(fixture("dense_lin_lin_full"), kernels);
    const int64_t V = model->config().vocab_size, n1 = 23, n2 = 14, S = n1 + n2;
    Tensor ids = Tensor::empty({1, S}, DType::I64), pos = Tensor::empty({1, S}, DType::I64);
    for (int64_t s = 0; s < S; ++s) {
      ids.data<int64_t>()[s] = (s * 37 + 5) % V;
      pos.data<int64_t>()[s] = s < n1 ? s : s - n1;
    }
    auto ignored = [](int64_t n) {
      Tensor t = Tensor::empty({1, n}, DType::I64);
      for (int64_t i = 0; i < n; ++i) t.data<int64_t>()[i] = -100;
      return t;
    };
    Tensor labels = ignored(S);
    Tensor packed = Tensor::empty({S, V}, DType::F32);
    model->forward(ids, labels, &packed, &pos);
    double worst = 0;
    for (auto [b, n] : {std::pair<int64_t, int64_t>{0, n1}, {n1, n2}}) {
      Tensor one = Tensor::empty({1, n}, DType::I64);
      for (int64_t i = 0; i < n; ++i) one.data<int64_t>()[i] = ids.data<int64_t>()[b + i];
      Tensor lab = ignored(n);
      Tensor lo = Tensor::empty({n, V}, DType::F32);
      model->forward(one, lab, &lo);
      for (int64_t i = 0; i < n * V; ++i)
        worst = std::max(worst, double(std::fabs(lo.data<float>()[i] - packed.data<float>()[b * V + i])));
    }
    EXPECT_LE(worst, 1e-4) << kernels;
  }
}

// A Qwen3_5ForConditionalGeneration checkpoint: the text model under model.language_model., the
// vision tower and the MTP head beside it (skipped), the config's text part in text_config: it
// loads as the text model and computes the same logits.
TEST(Qwen3_5Checkpoint, MultimodalLayoutLoadsTheTextModel) {
  const std::string src = fixture("dense_lin_lin_full"), dir = titan::test::temp_dir("qwen3_5_mm");
  auto text = SafetensorsFile::open(src + "/model.safetensors");
  std::vector<NamedTensor> renamed;
  std::vector<Tensor> keep;
  for (const auto& e : text.entries()) {
    const std::string& n = e.name;
    keep.push_back(text.get(n, DType::F32));
    renamed.push_back({n.rfind("model.", 0) == 0 ? "model.language_model." + n.substr(6) : n, keep.back()});
  }
  keep.push_back(Tensor::zeros({4, 3}, DType::F32));
  renamed.push_back({"model.visual.patch_embed.proj.weight", keep.back()});
  keep.push_back(Tensor::zeros({2}, DType::F32));
  renamed.push_back({"mtp.norm.weight", keep.back()});
  save_safetensors(dir + "/model.safetensors", renamed);
  auto cfg = nlohmann::json::parse(read_file(src + "/config.json"));
  nlohmann::json top = {{"model_type", "qwen3_5"},
                        {"architectures", {"Qwen3_5ForConditionalGeneration"}},
                        {"tie_word_embeddings", cfg["tie_word_embeddings"]},
                        {"vision_config", {{"depth", 1}}},
                        {"text_config", cfg}};
  top["text_config"].erase("architectures");
  {
    std::ofstream f(dir + "/config.json");
    f << top.dump(1);
  }
  auto a = load_hf_model(src, "cpu"), b = load_hf_model(dir, "cpu");
  EXPECT_TRUE(b->config().from_multimodal);
  Tensor ids = read_token_lines(src + "/tokens.txt"), labels = next_token_labels(ids);
  const int64_t N = ids.numel(), V = a->config().vocab_size;
  Tensor la = Tensor::empty({N, V}, DType::F32), lb = Tensor::empty({N, V}, DType::F32);
  EXPECT_EQ(a->forward(ids, labels, &la), b->forward(ids, labels, &lb));
  EXPECT_EQ(titan::testing::max_abs_diff(la, lb), 0.0);
}

TEST(Qwen3_5Config, MultimodalTextConfigAndRefusals) {
  const std::string text = R"({"model_type": "qwen3_5_text", "vocab_size": 64, "hidden_size": 32,
    "intermediate_size": 64, "num_hidden_layers": 4, "num_attention_heads": 2, "num_key_value_heads": 1,
    "head_dim": 16, "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 8,
    "linear_value_head_dim": 8, "rope_parameters": {"rope_type": "default", "rope_theta": 1e6,
    "partial_rotary_factor": 0.25, "mrope_section": [11, 11, 10], "mrope_interleaved": true}})";
  ModelConfig c = parse_hf_config(text, "t");
  EXPECT_EQ(c.model_type, "qwen3_5");
  EXPECT_EQ(c.rotary_dim(), 4);
  // full_attention_interval 4 (the default): layers 0-2 linear, 3 full
  ASSERT_EQ(c.layer_mixers.size(), 4u);
  EXPECT_EQ(c.layer_kind(0).mixer, MixerKind::GatedDeltaNet);
  EXPECT_EQ(c.layer_kind(3).mixer, MixerKind::GatedAttention);
  EXPECT_EQ(c.rope_theta, 1e6);
  // the text part of Qwen3_5ForConditionalGeneration (the top level's tie_word_embeddings wins)
  const std::string mm = R"({"model_type": "qwen3_5", "architectures": ["Qwen3_5ForConditionalGeneration"],
    "tie_word_embeddings": true, "vision_config": {"depth": 2}, "text_config": )" + text + "}";
  ModelConfig m = parse_hf_config(mm, "mm");
  EXPECT_TRUE(m.from_multimodal);
  EXPECT_TRUE(m.tie_word_embeddings);
  EXPECT_EQ(m.linear_num_value_heads, 4);
  // export writes the text model, which parses back to the same computation
  ModelConfig back = parse_hf_config(hf_config_json(m, DType::BF16), "export");
  EXPECT_EQ(back.layer_mixers, m.layer_mixers);
  EXPECT_EQ(back.rotary_dim(), m.rotary_dim());
  EXPECT_EQ(back.linear_conv_dim(), m.linear_conv_dim());
  EXPECT_TRUE(back.tie_word_embeddings);
  // an unknown key is refused by name; so is a rope type this engine does not implement
  auto refuses = [&](const std::string& key_value, const std::string& needle) {
    std::string bad = text;
    if (key_value[0] == '"') bad.insert(1, key_value + ", ");
    else bad.replace(bad.find("\"linear_num_key_heads\": 2"), 25, "\"linear_num_key_heads\": 3");
    try {
      parse_hf_config(bad, "bad.json");
      ADD_FAILURE() << "accepted " << key_value;
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  refuses(R"("sliding_window_size": 8)", "sliding_window_size");
  refuses(R"("attn_output_gate": false)", "attn_output_gate");
  refuses("replace", "linear_num_value_heads");
}

}  // namespace
