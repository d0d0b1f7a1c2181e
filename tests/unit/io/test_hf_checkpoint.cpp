// HF checkpoint folders: reading folders written by transformers (fixtures from
// tools/oracle/io_fixtures.py), export/load round trips (single file, sharded, tied, each dtype),
// and one test per malformed folder with its error.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "model/hf_checkpoint.h"
#include "io_test_util.h"
#include "util/strings.h"

using namespace titan;
using namespace titan::iotest;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const std::string kFixtures = std::string(TITAN_FIXTURES) + "/io";

// Parameter k (module order) holds exact_tensor(shape, k), as the fixture script writes them.
TensorMap tiny_params(const ModelConfig& c) {
  TensorMap m;
  auto specs = model_param_specs(c);
  for (size_t k = 0; k < specs.size(); ++k) m[specs[k].name] = exact_tensor(specs[k].shape, int(k));
  return m;
}

void expect_params_equal(const TensorMap& got, const TensorMap& want) {
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [name, t] : want) {
    ASSERT_TRUE(got.count(name)) << name;
    Tensor g = got.at(name).to(DType::F32);
    ASSERT_EQ(g.shape(), t.shape()) << name;
    EXPECT_EQ(std::memcmp(g.raw(), t.raw(), t.nbytes()), 0) << name;
  }
}

// A single-file checkpoint folder from explicit tensors and config text.
void write_folder(const std::string& dir, const std::string& config_text, const std::vector<NamedTensor>& tensors) {
  fs::create_directories(dir);
  write_file_atomic(dir + "/config.json", config_text);
  save_safetensors(dir + "/model.safetensors", tensors);
}

std::vector<NamedTensor> as_list(const TensorMap& m) {
  std::vector<NamedTensor> v;
  for (const auto& [n, t] : m) v.push_back({n, t});
  return v;
}

}  // namespace

TEST(HfFixtures, TiedBf16WrittenByTransformers) {
  HfCheckpoint ck = HfCheckpoint::open(kFixtures + "/tied_bf16");
  ModelConfig want = tiny_config(true);
  EXPECT_TRUE(ck.config().tie_word_embeddings);
  EXPECT_EQ(ck.config().head_dim, 8);
  EXPECT_EQ(ck.specs().size(), model_param_specs(want).size());
  expect_params_equal(ck.load_all(), tiny_params(want));
  Tensor e = ck.get("model.embed_tokens.weight", DType::BF16);
  EXPECT_TRUE(e.is_borrowed());  // stored bf16, requested bf16: zero-copy
  EXPECT_FALSE(ck.get("model.embed_tokens.weight").is_borrowed());
  Tensor into = Tensor::empty({16}, DType::F32);
  ck.read_into("model.norm.weight", into);
  EXPECT_EQ(std::memcmp(into.raw(), tiny_params(want).at("model.norm.weight").raw(), into.nbytes()), 0);
}

TEST(HfFixtures, UntiedShardedF32WrittenByTransformers) {
  ModelConfig cfg;
  TensorMap got = load_hf_weights(kFixtures + "/untied_sharded", &cfg);
  EXPECT_FALSE(cfg.tie_word_embeddings);
  expect_params_equal(got, tiny_params(tiny_config(false)));
  EXPECT_TRUE(got.at("lm_head.weight").is_borrowed());  // f32 on disk, f32 wanted
}

TEST(HfExport, RoundTripSingleFileEachDtype) {
  for (bool tied : {true, false}) {
    ModelConfig c = tiny_config(tied);
    TensorMap p = tiny_params(c);
    for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
      TempDir d;
      export_hf_checkpoint(d.path, c, p, {dt, 5'000'000'000, ""});
      EXPECT_TRUE(fs::exists(d / "model.safetensors"));
      EXPECT_FALSE(fs::exists(d / "model.safetensors.index.json"));
      HfCheckpoint ck = HfCheckpoint::open(d.path);
      EXPECT_EQ(ck.config().torch_dtype, dt);
      EXPECT_EQ(ck.file_of("model.norm.weight").find("model.norm.weight")->dtype, safetensors_dtype_name(dt));
      // A tied model stores the embedding once, as transformers does.
      EXPECT_EQ(ck.file_of("model.norm.weight").contains("lm_head.weight"), !tied);
      expect_params_equal(ck.load_all(), p);
    }
  }
}

TEST(HfExport, ShardedRoundTripAndIndex) {
  ModelConfig c = tiny_config(false);
  TensorMap p = tiny_params(c);
  TempDir d;
  export_hf_checkpoint(d.path, c, p, {DType::BF16, 2000, ""});
  json index = json::parse(read_file(d / "model.safetensors.index.json"));
  std::set<std::string> files;
  for (auto& [name, file] : index["weight_map"].items()) files.insert(file.get<std::string>());
  // Largest tensors are 32x16 bf16 = 1024 bytes, so shards of <= 2000 bytes need several.
  EXPECT_GE(files.size(), 4u);
  const std::string last = "model-" + std::string(5 - std::to_string(files.size()).size(), '0') +
                           std::to_string(files.size()) + "-of-" + std::string(5 - std::to_string(files.size()).size(), '0') +
                           std::to_string(files.size()) + ".safetensors";
  EXPECT_TRUE(files.count(last)) << last;
  EXPECT_EQ(index["metadata"]["total_size"].get<uint64_t>(), uint64_t(model_param_count(c)) * 2);
  EXPECT_EQ(index["weight_map"].size(), model_param_specs(c).size());
  for (const auto& f : files) EXPECT_LE(fs::file_size(d / f), 2000u + 4096u);  // tensor bytes + header
  EXPECT_FALSE(fs::exists(d / "model.safetensors"));
  expect_params_equal(HfCheckpoint::open(d.path).load_all(), p);

  // Re-exporting as one file (replacing the folder) leaves nothing of the earlier export.
  EXPECT_ERROR_CONTAINS(export_hf_checkpoint(d.path, c, p, {DType::F32, 5'000'000'000, ""}), "is not empty; pass --replace");
  export_hf_checkpoint(d.path, c, p, {DType::F32, 5'000'000'000, "", true});
  for (const auto& f : files) EXPECT_FALSE(fs::exists(d / f)) << f;
  EXPECT_FALSE(fs::exists(d / "model.safetensors.index.json"));
  expect_params_equal(HfCheckpoint::open(d.path).load_all(), p);
}

TEST(HfExport, CopiesTokenizerFiles) {
  TempDir tok, out;
  write_file_atomic(tok / "tokenizer.json", "{\"model\": {}}");
  write_file_atomic(tok / "tokenizer_config.json", "{}");
  write_file_atomic(tok / "unrelated.txt", "x");
  ModelConfig c = tiny_config(true);
  export_hf_checkpoint(out.path, c, tiny_params(c), {DType::BF16, 5'000'000'000, tok.path});
  EXPECT_EQ(read_file(out / "tokenizer.json"), "{\"model\": {}}");
  EXPECT_TRUE(fs::exists(out / "tokenizer_config.json"));
  EXPECT_FALSE(fs::exists(out / "unrelated.txt"));
  TempDir empty;
  EXPECT_ERROR_CONTAINS(export_hf_checkpoint(out.path, c, tiny_params(c), {DType::BF16, 5'000'000'000, empty.path, true}),
                        "no tokenizer files");
}

TEST(HfExport, RefusesParametersThatDoNotMatchTheConfig) {
  TempDir d;
  ModelConfig c = tiny_config(true);
  TensorMap p = tiny_params(c);
  TensorMap missing = p;
  missing.erase("model.layers.1.mlp.up_proj.weight");
  EXPECT_ERROR_CONTAINS(export_hf_checkpoint(d.path, c, missing), "missing parameter \"model.layers.1.mlp.up_proj.weight\"");
  TensorMap wrong = p;
  wrong["model.norm.weight"] = exact_tensor({15}, 0);
  EXPECT_ERROR_CONTAINS(export_hf_checkpoint(d.path, c, wrong), "parameter \"model.norm.weight\" has shape [15], the config implies [16]");
  TensorMap extra = p;
  extra["model.layers.0.self_attn.q_proj.bias"] = exact_tensor({16}, 0);
  EXPECT_ERROR_CONTAINS(export_hf_checkpoint(d.path, c, extra), "unexpected parameter \"model.layers.0.self_attn.q_proj.bias\"");
  TensorMap tied_same = p;
  tied_same["lm_head.weight"] = p.at("model.embed_tokens.weight");
  export_hf_checkpoint(d.path, c, tied_same);  // the same tensor under both names is fine
  EXPECT_FALSE(HfCheckpoint::open(d.path).file_of("model.norm.weight").contains("lm_head.weight"));
  TensorMap tied_diff = p;
  tied_diff["lm_head.weight"] = exact_tensor({32, 16}, 99);
  EXPECT_ERROR_CONTAINS(export_hf_checkpoint(d.path, c, tied_diff), "lm_head.weight differs from model.embed_tokens.weight");
  EXPECT_ERROR_CONTAINS(export_hf_checkpoint(d.path, c, p, {DType::I32, 1, ""}), "dtype i32 is not f32, bf16 or f16");
}

TEST(HfLoadMalformed, FolderConfigAndWeightsFile) {
  TempDir d;
  EXPECT_ERROR_CONTAINS(HfCheckpoint::open(d / "nope"), "nope: not a checkpoint folder");
  EXPECT_ERROR_CONTAINS(HfCheckpoint::open(d.path), "config.json: cannot open");
  write_file_atomic(d / "config.json", hf_config_json(tiny_config(true), DType::BF16));
  EXPECT_ERROR_CONTAINS(HfCheckpoint::open(d.path), "no model.safetensors or model.safetensors.index.json in the checkpoint folder");
  write_file_atomic(d / "config.json", "{\"model_type\": \"qwen3_moe\"}");
  EXPECT_ERROR_CONTAINS(HfCheckpoint::open(d.path), "config.json: missing required field \"vocab_size\"");
}

TEST(HfLoadMalformed, MissingUnexpectedShapeDtype) {
  ModelConfig c = tiny_config(false);
  TensorMap p = tiny_params(c);
  const std::string cfg = hf_config_json(c, DType::F32);
  {
    TempDir d;
    TensorMap m = p;
    m.erase("model.layers.1.self_attn.k_norm.weight");
    write_folder(d.path, cfg, as_list(m));
    EXPECT_ERROR_CONTAINS(HfCheckpoint::open(d.path), "missing tensor \"model.layers.1.self_attn.k_norm.weight\" (shape [8])");
  }
  {
    TempDir d;
    TensorMap m = p;
    m["model.layers.2.input_layernorm.weight"] = exact_tensor({16}, 1);
    m["model.rotary_emb.inv_freq"] = exact_tensor({4}, 1);
    write_folder(d.path, cfg, as_list(m));
    EXPECT_ERROR_CONTAINS(HfCheckpoint::open(d.path),
                          "unexpected tensors \"model.layers.2.input_layernorm.weight\", \"model.rotary_emb.inv_freq\" (not parameters of this Qwen3 config)");
  }
  {
    TempDir d;
    ModelConfig c2 = c;
    c2.intermediate_size = 20;
    write_folder(d.path, hf_config_json(c2, DType::F32), as_list(p));
    EXPECT_ERROR_CONTAINS(HfCheckpoint::open(d.path),
                          "model.safetensors: tensor \"model.layers.0.mlp.gate_proj.weight\" has shape [24, 16] but config.json implies [20, 16]");
  }
  {
    TempDir d;
    TensorMap m = p;
    m["model.norm.weight"] = Tensor::zeros({16}, DType::I32);
    write_folder(d.path, cfg, as_list(m));
    EXPECT_ERROR_CONTAINS(HfCheckpoint::open(d.path), "tensor \"model.norm.weight\" has dtype I32; parameters must be F32, BF16 or F16");
  }
}

TEST(HfLoadMalformed, TiedCheckpointWithLmHead) {
  ModelConfig c = tiny_config(true);
  c.vocab_size = 1100;  // 17600 embedding values: the comparison runs over more than one chunk
  TensorMap p = tiny_params(c);
  const std::string cfg = hf_config_json(c, DType::F32);
  TempDir same, diff;
  // Equal copy (stored in another dtype): accepted, and the model gets only the embedding.
  std::vector<NamedTensor> l = as_list(p);
  l.push_back({"lm_head.weight", p.at("model.embed_tokens.weight").to(DType::BF16)});
  write_folder(same.path, cfg, l);
  TensorMap got = HfCheckpoint::open(same.path).load_all();
  EXPECT_FALSE(got.count("lm_head.weight"));
  expect_params_equal(got, p);
  // One value differing, in the last chunk.
  Tensor other = p.at("model.embed_tokens.weight").to(DType::BF16);
  other.data<bf16>()[other.numel() - 1].bits ^= 0x0100;
  l.back().tensor = other;
  write_folder(diff.path, cfg, l);
  EXPECT_ERROR_CONTAINS(HfCheckpoint::open(diff.path),
                        "tie_word_embeddings is true but lm_head.weight differs from model.embed_tokens.weight");
  l.back().tensor = exact_tensor({1100, 15}, 0);
  write_folder(diff.path, cfg, l);
  EXPECT_ERROR_CONTAINS(HfCheckpoint::open(diff.path), "lm_head.weight has shape [1100, 15] but the embedding is tied ([1100, 16])");
}

TEST(HfLoadMalformed, IndexProblems) {
  ModelConfig c = tiny_config(false);
  TensorMap p = tiny_params(c);
  TempDir outside;
  save_safetensors(outside / "evil.safetensors", {{"model.norm.weight", p.at("model.norm.weight")}});
  // A valid sharded folder, then each entry of the index spoiled in turn.
  auto make = [&](const TempDir& d) {
    export_hf_checkpoint(d.path, c, p, {DType::F32, 3000, ""});
    return json::parse(read_file(d / "model.safetensors.index.json"));
  };
  auto with_index = [&](const std::function<void(json&, const TempDir&)>& spoil, const std::string& needle) {
    TempDir d;
    json j = make(d);
    spoil(j, d);
    write_file_atomic(d / "model.safetensors.index.json", j.dump());
    EXPECT_ERROR_CONTAINS(HfCheckpoint::open(d.path), needle);
  };
  with_index([&](json& j, const TempDir&) { j["weight_map"]["model.norm.weight"] = outside / "evil.safetensors"; },
             "model.safetensors.index.json: weight_map file \"" + (outside / "evil.safetensors") +
                 "\" is an absolute path; shards must be inside the folder");
  with_index([&](json& j, const TempDir&) { j["weight_map"]["model.norm.weight"] = "../x/evil.safetensors"; },
             "weight_map file \"../x/evil.safetensors\" escapes the folder (\"..\")");
  with_index(
      [&](json& j, const TempDir& d) {
        fs::create_symlink(outside / "evil.safetensors", d / "link.safetensors");
        j["weight_map"]["model.norm.weight"] = "link.safetensors";
      },
      "weight_map file \"link.safetensors\" resolves to");
  with_index([&](json& j, const TempDir&) { j["weight_map"]["model.norm.weight"] = "model-00099-of-00099.safetensors"; },
             "weight_map names shard \"model-00099-of-00099.safetensors\", which does not exist");
  with_index(
      [&](json& j, const TempDir&) {
        std::string other = j["weight_map"]["model.embed_tokens.weight"];
        std::string own = j["weight_map"]["model.norm.weight"];
        ASSERT_NE(other, own);
        j["weight_map"]["model.norm.weight"] = other;
      },
      "which has no such tensor");
  with_index([&](json& j, const TempDir&) { j["weight_map"].erase("model.norm.weight"); }, "tensor \"model.norm.weight\" is not listed in model.safetensors.index.json");
  with_index([&](json& j, const TempDir&) { j["weight_map"] = json::array(); }, "weight_map must be an object, got array");
  with_index([&](json& j, const TempDir&) { j.erase("weight_map"); }, "model.safetensors.index.json: missing \"weight_map\"");
  with_index([&](json& j, const TempDir&) { j["weight_map"]["model.norm.weight"] = 3; }, "weight_map value for \"model.norm.weight\" must be a file name");
  {
    TempDir d;
    make(d);
    write_file_atomic(d / "model.safetensors.index.json", "{\"weight_map\": {\"a\": \"x\", \"a\": \"y\"}}");
    EXPECT_ERROR_CONTAINS(HfCheckpoint::open(d.path), "model.safetensors.index.json: duplicate key \"a\"");
    write_file_atomic(d / "model.safetensors.index.json", "{\"weight_map\": ");
    EXPECT_ERROR_CONTAINS(HfCheckpoint::open(d.path), "model.safetensors.index.json: invalid JSON");
  }
  {
    // A corrupt shard names itself.
    TempDir d;
    json j = make(d);
    std::string shard = j["weight_map"]["model.norm.weight"];
    write_file_atomic(d / shard, "junk");
    EXPECT_ERROR_CONTAINS(HfCheckpoint::open(d.path), shard + ": not a safetensors file: 4 bytes");
  }
}
