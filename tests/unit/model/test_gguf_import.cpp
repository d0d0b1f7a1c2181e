// titan import gguf on two tiny GGUF files (tools/oracle/gguf_fixtures.py) made from the Llama and
// Qwen2 goldens' weights, with llama.cpp's q/k row permutation applied for llama: the imported
// folder holds exactly the golden's weights (transformers' own GGUF loader gives the same, checked
// when the fixtures were made), so the goldens' logits, loss and gradients hold for it too.
// And two Qwen3.5 files (qwen35, qwen35moe) written as llama.cpp's converter writes them (value
// heads tiled, A_log as -exp(A_log), norm weights as 1 + w, conv squeezed, an MTP block): the
// import gives back the Qwen3.5 goldens' weights and so transformers' logits and gradients.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "data/tokenizer.h"
#include "io/safetensors.h"
#include "model/gguf_import.h"
#include "unit/io/gguf_writer.h"
#include "unit/io/io_test_util.h"
#include "unit/model/golden_check.h"

using namespace titan;

namespace {

std::string fixtures() { return std::string(TITAN_FIXTURES); }

class GgufImport : public ::testing::TestWithParam<std::string> {};

TEST_P(GgufImport, WeightsAreTheGoldensAndTheModelMatchesTransformers) {
  const std::string fam = GetParam();
  iotest::TempDir tmp;
  const std::string out = tmp / "model";
  GgufImportReport r = import_gguf(fixtures() + "/gguf/tiny_" + fam + ".gguf", out, DType::F32);
  EXPECT_EQ(r.config.model_type, fam);
  EXPECT_TRUE(r.config.tie_word_embeddings);
  const std::string golden_dir = fixtures() + "/" + fam + "/tied_gqa2";
  const ModelConfig want = load_hf_config(golden_dir + "/config.json");
  const ModelConfig got = load_hf_config(out + "/config.json");
  EXPECT_EQ(got.hidden_size, want.hidden_size);
  EXPECT_EQ(got.head_dim, want.head_dim);
  EXPECT_EQ(got.num_key_value_heads, want.num_key_value_heads);
  EXPECT_EQ(float(got.rms_norm_eps), float(want.rms_norm_eps));
  EXPECT_EQ(got.rope_theta, want.rope_theta);
  auto a = SafetensorsFile::open(golden_dir + "/model.safetensors");
  auto b = SafetensorsFile::open(out + "/model.safetensors");
  ASSERT_EQ(a.size(), b.size());
  for (const auto& e : a.entries()) {
    SCOPED_TRACE(e.name);
    ASSERT_TRUE(b.contains(e.name));
    Tensor x = a.get(e.name, DType::F32), y = b.get(e.name, DType::F32);
    ASSERT_EQ(x.shape(), y.shape());
    EXPECT_EQ(std::memcmp(x.raw(), y.raw(), size_t(x.numel()) * 4), 0) << "not bit-equal to the golden's weights";
  }
  // The goldens, run on the imported folder (its tokens and expected values beside it).
  for (const char* f : {"tokens.txt", "golden.safetensors", "golden.json"})
    std::filesystem::copy_file(golden_dir + "/" + f, out + "/" + f);
  titan::testing::expect_matches_golden(out, "cpu");

  // The rebuilt tokenizer: the merge, the control tokens, the chat template file.
  auto tok = data::Tokenizer::load(out);
  const int64_t V = r.config.vocab_size;
  EXPECT_EQ(tok.encode("ab"), (std::vector<uint32_t>{uint32_t(V - 3)}));
  EXPECT_EQ(tok.encode("<|im_start|>a"), (std::vector<uint32_t>{uint32_t(V - 2), uint32_t('a' - '!')}));
  const std::string cfg = read_file(out + "/tokenizer_config.json");
  EXPECT_NE(cfg.find("\"chat_template\""), std::string::npos);
  EXPECT_NE(cfg.find("\"eos_token\": \"<|im_end|>\""), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Families, GgufImport, ::testing::Values("llama", "qwen2"));

// Qwen3.5: every weight of the golden back (bit-equal but A_log, which goes through
// log(-(-exp(x))): within a few ulp, and the zero-centred norms' w, whose 1 + w is bit-equal),
// the configuration (mixers from full_attention_interval,
// partial RoPE, linear-attention shapes), the MTP block skipped, and the goldens on the result.
struct Qwen35Case {
  std::string file, golden, model_type;
  int64_t skipped;
};

class GgufImportQwen35 : public ::testing::TestWithParam<Qwen35Case> {};

TEST_P(GgufImportQwen35, WeightsAreTheGoldensAndTheModelMatchesTransformers) {
  const Qwen35Case& k = GetParam();
  iotest::TempDir tmp;
  const std::string out = tmp / "model";
  GgufImportReport r = import_gguf(fixtures() + "/gguf/" + k.file, out, DType::F32);
  EXPECT_EQ(r.config.model_type, k.model_type);
  EXPECT_EQ(r.skipped, k.skipped);
  const std::string golden_dir = fixtures() + "/qwen3_5/" + k.golden;
  const ModelConfig want = load_hf_config(golden_dir + "/config.json");
  const ModelConfig got = load_hf_config(out + "/config.json");
  EXPECT_EQ(got.model_type, want.model_type);
  EXPECT_EQ(got.num_hidden_layers, want.num_hidden_layers);
  for (int64_t i = 0; i < want.num_hidden_layers; ++i) EXPECT_EQ(got.layer_kind(i).mixer, want.layer_kind(i).mixer) << i;
  EXPECT_EQ(got.rotary_dim(), want.rotary_dim());
  EXPECT_EQ(got.head_dim, want.head_dim);
  EXPECT_EQ(got.linear_num_key_heads, want.linear_num_key_heads);
  EXPECT_EQ(got.linear_num_value_heads, want.linear_num_value_heads);
  EXPECT_EQ(got.linear_key_head_dim, want.linear_key_head_dim);
  EXPECT_EQ(got.linear_value_head_dim, want.linear_value_head_dim);
  EXPECT_EQ(got.linear_conv_kernel_dim, want.linear_conv_kernel_dim);
  EXPECT_EQ(got.tie_word_embeddings, want.tie_word_embeddings);
  EXPECT_EQ(got.num_experts, want.num_experts);
  EXPECT_EQ(got.shared_expert_intermediate_size, want.shared_expert_intermediate_size);
  auto a = SafetensorsFile::open(golden_dir + "/model.safetensors");
  auto b = SafetensorsFile::open(out + "/model.safetensors");
  ASSERT_EQ(a.size(), b.size());
  double alog_err = 0;
  for (const auto& e : a.entries()) {
    SCOPED_TRACE(e.name);
    ASSERT_TRUE(b.contains(e.name));
    Tensor x = a.get(e.name, DType::F32), y = b.get(e.name, DType::F32);
    ASSERT_EQ(x.shape(), y.shape());
    if (e.name.find("A_log") != std::string::npos) {
      for (int64_t i = 0; i < x.numel(); ++i)
        alog_err = std::max(alog_err, double(std::fabs(x.data<float>()[i] - y.data<float>()[i])));
      continue;
    }
    const bool zero_centred = e.name.find("norm.weight") != std::string::npos && e.name.find("linear_attn") == std::string::npos;
    if (zero_centred) {  // stored as 1 + w: (1 + w) - 1 rounds, the 1 + w the model uses does not
      for (int64_t i = 0; i < x.numel(); ++i)
        EXPECT_EQ(1.0f + x.data<float>()[i], 1.0f + y.data<float>()[i]) << i;
      continue;
    }
    EXPECT_EQ(std::memcmp(x.raw(), y.raw(), size_t(x.numel()) * 4), 0) << "not bit-equal to the golden's weights";
  }
  EXPECT_LE(alog_err, 1e-6) << "A_log = log(-ssm_a)";
  std::printf("[ %s ] max |A_log - golden| %.3g\n", k.file.c_str(), alog_err);
  for (const char* f : {"tokens.txt", "golden.safetensors", "golden.json"})
    std::filesystem::copy_file(golden_dir + "/" + f, out + "/" + f);
  titan::testing::expect_matches_golden(out, "cpu");
  auto tok = data::Tokenizer::load(out);
  // tokenizer.ggml.pre "qwen35": Qwen3.5's split expression, then the byte-level BPE.
  const int64_t V = r.config.vocab_size;
  EXPECT_EQ(tok.encode("ab"), (std::vector<uint32_t>{uint32_t(V - 3)}));
  EXPECT_EQ(tok.encode("ab!a"), (std::vector<uint32_t>{uint32_t(V - 3), 0, uint32_t('a' - '!')}));
  EXPECT_NE(read_file(out + "/tokenizer.json").find("\\p{M}"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Qwen35, GgufImportQwen35,
                         ::testing::Values(Qwen35Case{"tiny_qwen35.gguf", "dense_lin_lin_full", "qwen3_5", 4},
                                           Qwen35Case{"tiny_qwen35moe.gguf", "moe_lin_full", "qwen3_5_moe", 0}),
                         [](const auto& info) { return info.param.model_type; });

TEST(GgufImportParts, NamesAndPermutation) {
  EXPECT_EQ(gguf_to_hf_name("blk.12.attn_q.weight"), "model.layers.12.self_attn.q_proj.weight");
  EXPECT_EQ(gguf_to_hf_name("blk.0.attn_v.bias"), "model.layers.0.self_attn.v_proj.bias");
  EXPECT_EQ(gguf_to_hf_name("output.weight"), "lm_head.weight");
  EXPECT_EQ(gguf_to_hf_name("blk.x.attn_q.weight"), "");
  EXPECT_EQ(gguf_to_hf_name("rope_freqs.weight"), "");
  // One head of D = 4, 1 column: GGUF rows [r0, r2, r1, r3] (pairs interleaved) -> HF [r0, r1, r2, r3].
  const float src[8] = {0, 2, 1, 3, 10, 12, 11, 13};
  float dst[8];
  unpermute_qk_rows(src, dst, 2, 4, 1);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(dst[i], float(i % 4 + (i / 4) * 10));
}

TEST(GgufImportParts, RefusesWhatItCannotRepresent) {
  iotest::TempDir tmp;
  // The dequantizer fixture is a "llama" file without any model metadata.
  const std::string e = iotest::error_of([&] { import_gguf(fixtures() + "/gguf/quants.gguf", tmp / "m", DType::F32); });
  EXPECT_NE(e.find("missing metadata \"llama.block_count\""), std::string::npos) << e;
  EXPECT_FALSE(std::filesystem::exists(tmp / "m/model.safetensors"));
  EXPECT_NE(iotest::error_of([&] { import_gguf(fixtures() + "/gguf/tiny_llama.gguf", tmp / "m", DType::F16); })
                .find("--dtype must be f32 or bf16"),
            std::string::npos);
}

// llama.cpp's value-head reorder undone: 2 key heads, 3 value heads each, 2 rows per head.
TEST(GgufImportParts, Qwen35ValueHeadsBackToGroupedOrder) {
  // HF head h = g * 3 + j sits at GGUF head j * 2 + g.
  std::vector<float> src(12), dst(12);
  for (int g = 0; g < 2; ++g)
    for (int j = 0; j < 3; ++j)
      for (int row = 0; row < 2; ++row) src[size_t((j * 2 + g) * 2 + row)] = float((g * 3 + j) * 10 + row);
  untile_v_heads(src.data(), dst.data(), 2, 3, 2, 1);
  for (int h = 0; h < 6; ++h)
    for (int row = 0; row < 2; ++row) EXPECT_EQ(dst[size_t(h * 2 + row)], float(h * 10 + row));
}

// A qwen35 file without the linear-attention shapes, and one whose ssm_a is not -exp(.): refused
// in one line naming the file and what is wrong; nothing written.
TEST(GgufImportParts, Qwen35Refusals) {
  iotest::GgufWriter w;
  w.kv_string("general.architecture", "qwen35");
  w.kv_u32("qwen35.block_count", 3);
  w.kv_u32("qwen35.embedding_length", 48);
  w.kv_u32("qwen35.feed_forward_length", 96);
  w.kv_u32("qwen35.attention.head_count", 4);
  w.kv_u32("qwen35.attention.key_length", 16);
  w.kv_u32("qwen35.rope.dimension_count", 4);
  auto bytes = std::make_shared<std::string>(w.image());
  EXPECT_NE(iotest::error_of([&] { gguf_model_config(GgufFile::from_memory(bytes->data(), bytes->size(), bytes, "q.gguf")); })
                .find("q.gguf: missing metadata \"qwen35.ssm.conv_kernel\""),
            std::string::npos);
  // The fixture with blk.0.ssm_a[1] made positive.
  iotest::TempDir tmp;
  auto image = std::make_shared<std::string>(read_file(fixtures() + "/gguf/tiny_qwen35.gguf"));
  {
    GgufFile f = GgufFile::from_memory(image->data(), image->size(), image, "x");
    const GgufTensorInfo* a = f.find_tensor("blk.0.ssm_a");
    ASSERT_TRUE(a);
    const float one = 1.0f;
    std::memcpy(const_cast<char*>(f.bytes(*a).data()) + 4, &one, 4);
  }
  const std::string bad = tmp / "bad.gguf";
  write_file_atomic(bad, *image);
  const std::string e = iotest::error_of([&] { import_gguf(bad, tmp / "m", DType::F32); });
  EXPECT_NE(e.find("bad.gguf: tensor \"blk.0.ssm_a\" element 1 is 1 (ssm_a must be -exp(A_log) < 0)"), std::string::npos) << e;
  EXPECT_FALSE(std::filesystem::exists(tmp / "m/model.safetensors"));
}

// A 1M-token vocabulary: the tokenizer JSON is built in linear time (it looked every token up in
// an ordered JSON object: quadratic, > 120 s; the real 151,936-token Qwen3 vocabulary spent ~18 s
// there), and the text is what the tokenizer reads back.
TEST(GgufImportParts, AMillionTokenVocabularyBuildsInSeconds) {
  iotest::GgufWriter w;
  w.kv_string("tokenizer.ggml.model", "gpt2");
  std::vector<std::string> tokens;
  for (int k = 0; k < 1000000; ++k) tokens.push_back("t" + std::to_string(k));
  tokens[5] = "\"quoted\\";
  w.kv_strings("tokenizer.ggml.tokens", tokens);
  w.kv_strings("tokenizer.ggml.merges", {"t 1", "t1 0"});
  auto bytes = std::make_shared<std::string>(w.image());
  const auto t0 = std::chrono::steady_clock::now();
  GgufFile f = GgufFile::from_memory(bytes->data(), bytes->size(), bytes, "vocab.gguf");
  const std::string text = gguf_tokenizer_json(f);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 10.0) << "open + tokenizer.json of a 1M-token vocabulary";
  std::printf("1M-token vocabulary: open + tokenizer.json in %.2f s (%zu bytes)\n", s, text.size());
  const nlohmann::json j = nlohmann::json::parse(text);
  EXPECT_EQ(j["model"]["vocab"].size(), 1000000u);
  EXPECT_EQ(j["model"]["vocab"]["t999999"], 999999);
  EXPECT_EQ(j["model"]["vocab"]["\"quoted\\"], 5);
  EXPECT_EQ(j["model"]["merges"][1], nlohmann::json::array({"t1", "0"}));
  // A token spelled like the placeholders is just a token.
  iotest::GgufWriter d;
  d.kv_string("tokenizer.ggml.model", "gpt2");
  d.kv_strings("tokenizer.ggml.tokens", {"a", "b", "a"});
  d.kv_strings("tokenizer.ggml.merges", {});
  auto dup = std::make_shared<std::string>(d.image());
  EXPECT_NE(iotest::error_of([&] { gguf_tokenizer_json(GgufFile::from_memory(dup->data(), dup->size(), dup, "d.gguf")); })
                .find("d.gguf: token \"a\" appears twice (ids 0 and 2)"),
            std::string::npos);
}

}  // namespace
