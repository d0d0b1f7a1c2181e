// titan import gguf on two tiny GGUF files (tools/oracle/gguf_fixtures.py) made from the Llama and
// Qwen2 goldens' weights, with llama.cpp's q/k row permutation applied for llama: the imported
// folder holds exactly the golden's weights (transformers' own GGUF loader gives the same, checked
// when the fixtures were made), so the goldens' logits, loss and gradients hold for it too.
#include <gtest/gtest.h>

#include <chrono>
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
