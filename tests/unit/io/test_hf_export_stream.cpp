// Streaming HF export (HfExportWriter): the folder it writes is byte for byte the one the
// whole-model exporter wrote before it was rebuilt on the writer (file digests recorded from that
// exporter, and an in-test reimplementation of its algorithm on save_safetensors), single-file and
// sharded, dense and MoE; the writer keeps no tensor; wrong order, wrong shape, missing tensors
// and an export abandoned part-way.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/allocator.h"
#include "model/hf_checkpoint.h"
#include "io_test_util.h"
#include "train/crc32c.h"
#include "util/strings.h"

using namespace titan;
using namespace titan::iotest;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Layer 0 dense, layer 1 sparse with 4 experts (per-expert names in the specs).
ModelConfig moe_config() {
  ModelConfig c = tiny_config(false);
  c.model_type = "qwen3_moe";
  c.vocab_size = 64;
  c.num_experts = 4;
  c.num_experts_per_tok = 2;
  c.moe_intermediate_size = 6;
  c.decoder_sparse_step = 2;
  return c;
}

// Values in (-1, 1) from integer arithmetic only (so the digests below hold on any libm), most of
// them not representable in bf16 or f16: the export's rounding is part of what is compared.
Tensor pattern_tensor(const Shape& shape, uint32_t seed) {
  Tensor t = Tensor::empty(shape, DType::F32);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    const uint32_t h = uint32_t(i) * 2654435761u + seed * 40503u + 12345u;
    p[i] = float(h % 1000003u) / 500001.5f - 1.0f;
  }
  return t;
}

TensorMap pattern_params(const ModelConfig& c) {
  TensorMap m;
  auto specs = model_param_specs(c);
  for (size_t k = 0; k < specs.size(); ++k) m[specs[k].name] = pattern_tensor(specs[k].shape, uint32_t(k));
  return m;
}

// "name size crc32c" per file of the folder, sorted, config.json left out (its text has its own
// tests; a change there must not read as a change of the weights).
std::string digest(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  std::string out;
  for (const auto& n : names) {
    if (n == "config.json") continue;
    std::string b = read_file(dir + "/" + n);
    char buf[160];
    std::snprintf(buf, sizeof buf, "%s %zu %08x\n", n.c_str(), b.size(), crc32c(b.data(), b.size()));
    out += buf;
  }
  return out;
}

// Number of safetensors files a digest lists.
size_t weight_files(const std::string& digest) {
  size_t n = 0;
  for (size_t at = digest.find(".safetensors "); at != std::string::npos; at = digest.find(".safetensors ", at + 1)) ++n;
  return n;
}

// Every file of both folders, byte for byte.
void expect_same_folder(const std::string& a, const std::string& b) {
  std::vector<std::string> na, nb;
  for (const auto& e : fs::directory_iterator(a)) na.push_back(e.path().filename().string());
  for (const auto& e : fs::directory_iterator(b)) nb.push_back(e.path().filename().string());
  std::sort(na.begin(), na.end());
  std::sort(nb.begin(), nb.end());
  ASSERT_EQ(na, nb);
  for (const auto& n : na) EXPECT_TRUE(read_file(a + "/" + n) == read_file(b + "/" + n)) << n << " differs";
}

// The exporter's algorithm before streaming: whole shards in memory, save_safetensors per shard.
void reference_export(const std::string& dir, const ModelConfig& c, const TensorMap& p, DType dt, uint64_t max) {
  fs::create_directories(dir);
  std::vector<std::vector<NamedTensor>> shards(1);
  uint64_t bytes_in = 0, total = 0;
  for (const auto& s : model_param_specs(c)) {
    const uint64_t b = uint64_t(p.at(s.name).numel()) * dtype_size(dt);
    if (!shards.back().empty() && bytes_in + b > max) shards.emplace_back(), bytes_in = 0;
    shards.back().push_back({s.name, p.at(s.name)});
    bytes_in += b, total += b;
  }
  if (shards.size() == 1) {
    save_safetensors(dir + "/model.safetensors", shards[0], dt);
  } else {
    json wm = json::object();
    for (size_t k = 0; k < shards.size(); ++k) {
      char name[64];
      std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", k + 1, shards.size());
      save_safetensors(dir + "/" + name, shards[k], dt);
      for (const auto& t : shards[k]) wm[t.name] = name;
    }
    json index = {{"metadata", {{"total_size", total}, {"total_parameters", model_param_count(c)}}}, {"weight_map", wm}};
    write_file_atomic(dir + "/model.safetensors.index.json", index.dump(2) + "\n");
  }
  write_file_atomic(dir + "/config.json", hf_config_json(c, dt));
}

struct Case {
  const char* what;
  ModelConfig config;
  DType dtype;
  uint64_t max_shard_bytes;
  const char* digest;  // of the folder export_hf_checkpoint wrote before HfExportWriter existed
};

std::vector<Case> cases() {
  return {
      {"dense untied bf16, one file", tiny_config(false), DType::BF16, 5'000'000'000,
       "model.safetensors 12416 953fa3c7\n"},
      {"dense tied f32, one file", tiny_config(true), DType::F32, 5'000'000'000, "model.safetensors 20240 905e24c0\n"},
      {"dense untied bf16, 2000-byte shards", tiny_config(false), DType::BF16, 2000,
       "model-00001-of-00006.safetensors 2248 5f516e0c\n"
       "model-00002-of-00006.safetensors 2232 9bdd218a\n"
       "model-00003-of-00006.safetensors 1896 ebb32d8e\n"
       "model-00004-of-00006.safetensors 2328 031cfb94\n"
       "model-00005-of-00006.safetensors 1768 c2cdfae1\n"
       "model-00006-of-00006.safetensors 2120 0615173f\n"
       "model.safetensors.index.json 2083 d25c991d\n"},
      {"dense tied f16, 3000-byte shards", tiny_config(true), DType::F16, 3000,
       "model-00001-of-00004.safetensors 3576 2b899c7c\n"
       "model-00002-of-00004.safetensors 3368 0b63c047\n"
       "model-00003-of-00004.safetensors 3448 f3ccb15e\n"
       "model-00004-of-00004.safetensors 1008 96b2a6ad\n"
       "model.safetensors.index.json 2025 2364aeca\n"},
      {"moe bf16, 1500-byte shards", moe_config(), DType::BF16, 1500,
       "model-00001-of-00009.safetensors 2176 c1424f64\n"
       "model-00002-of-00009.safetensors 1488 05c32ba8\n"
       "model-00003-of-00009.safetensors 1880 397256f5\n"
       "model-00004-of-00009.safetensors 904 ce106b20\n"
       "model-00005-of-00009.safetensors 1648 c5ac6188\n"
       "model-00006-of-00009.safetensors 2240 5cd8af3c\n"
       "model-00007-of-00009.safetensors 2120 465eea57\n"
       "model-00008-of-00009.safetensors 1336 0721b269\n"
       "model-00009-of-00009.safetensors 2168 e75efda2\n"
       "model.safetensors.index.json 2983 23d727e4\n"},
  };
}

}  // namespace

TEST(HfExportStream, EqualsTheWholeModelExporterByteForByte) {
  for (const Case& k : cases()) {
    SCOPED_TRACE(k.what);
    const HfExportOptions opt{k.dtype, k.max_shard_bytes, ""};
    TempDir streamed, whole, reference;
    {
      // One tensor alive at a time: created, added, freed.
      HfExportWriter w(streamed.path, k.config, opt);
      const auto specs = model_param_specs(k.config);
      EXPECT_EQ(w.specs().size(), specs.size());
      for (size_t i = 0; i < specs.size(); ++i) w.add(specs[i].name, pattern_tensor(specs[i].shape, uint32_t(i)));
      w.finish();
      EXPECT_EQ(w.shard_count(), weight_files(k.digest));
    }
    EXPECT_EQ(digest(streamed.path), k.digest);
    const TensorMap p = pattern_params(k.config);
    export_hf_checkpoint(whole.path, k.config, p, opt);
    reference_export(reference.path, k.config, p, k.dtype, k.max_shard_bytes);
    expect_same_folder(streamed.path, whole.path);
    expect_same_folder(streamed.path, reference.path);
  }
}

TEST(HfExportStream, AcceptsAnyFloatInputDtype) {
  // bf16 parameters into a bf16 export: written as they are, the same bytes as rounding f32 ones.
  const Case k = cases()[2];
  TempDir d;
  HfExportWriter w(d.path, k.config, {k.dtype, k.max_shard_bytes, ""});
  for (size_t i = 0; i < w.specs().size(); ++i) {
    const ParamSpec& s = w.specs()[i];
    Tensor t = pattern_tensor(s.shape, uint32_t(i));
    w.add(s.name, i % 2 ? t.to(DType::BF16) : t);
  }
  w.finish();
  EXPECT_EQ(digest(d.path), k.digest);
}

TEST(HfExportStream, HoldsNoTensorAfterAdd) {
  const ModelConfig c = tiny_config(false);
  TempDir d;
  HfExportWriter w(d.path, c, {DType::BF16, 2000, ""});
  const size_t live0 = cpu_allocator().stats().live_bytes;
  for (size_t i = 0; i < w.specs().size(); ++i) {
    {
      Tensor t = pattern_tensor(w.specs()[i].shape, uint32_t(i));
      w.add(w.specs()[i].name, t);
    }
    EXPECT_EQ(cpu_allocator().stats().live_bytes, live0) << "after " << w.specs()[i].name;
  }
  w.finish();
  EXPECT_EQ(w.added(), w.specs().size());
}

TEST(HfExportStream, WrongOrderShapeDtypeAndMissingTensorsAreErrors) {
  const ModelConfig c = tiny_config(true);
  const auto specs = model_param_specs(c);
  const std::string n = std::to_string(specs.size());
  TempDir d;
  {
    HfExportWriter w(d.path, c, {DType::BF16, 5'000'000'000, ""});
    EXPECT_ERROR_CONTAINS(w.add(specs[1].name, pattern_tensor(specs[1].shape, 1)),
                          "export to " + d.path + ": expected parameter \"model.embed_tokens.weight\" (1 of " + n +
                              " in model order), got \"" + specs[1].name + "\"");
    EXPECT_ERROR_CONTAINS(w.add(specs[0].name, pattern_tensor({32, 15}, 0)),
                          "parameter \"model.embed_tokens.weight\" has shape [32, 15], the config implies [32, 16]");
    EXPECT_ERROR_CONTAINS(w.add(specs[0].name, Tensor::zeros(specs[0].shape, DType::I32)),
                          "parameter \"model.embed_tokens.weight\" is i32; parameters must be f32, bf16 or f16");
    EXPECT_ERROR_CONTAINS(w.add(specs[0].name, Tensor()), "parameter \"model.embed_tokens.weight\" is undefined");
    w.add(specs[0].name, pattern_tensor(specs[0].shape, 0));
    w.add(specs[1].name, pattern_tensor(specs[1].shape, 1));
    EXPECT_ERROR_CONTAINS(w.finish(), "export to " + d.path + ": missing parameter \"" + specs[2].name + "\" (2 of " + n +
                                          " parameters were added)");
  }
  // Nothing of the abandoned export is left: the single file is committed only when complete.
  EXPECT_TRUE(fs::is_empty(d.path));
  {
    HfExportWriter w(d.path, c, {DType::BF16, 5'000'000'000, ""});
    for (size_t i = 0; i < specs.size(); ++i) w.add(specs[i].name, pattern_tensor(specs[i].shape, uint32_t(i)));
    EXPECT_ERROR_CONTAINS(w.add("lm_head.weight", pattern_tensor({32, 16}, 0)),
                          "unexpected parameter \"lm_head.weight\" (all " + n + " parameters of the config were already added)");
    w.finish();
    EXPECT_ERROR_CONTAINS(w.finish(), "finish() called twice");
    EXPECT_ERROR_CONTAINS(w.add(specs[0].name, pattern_tensor(specs[0].shape, 0)), "added after finish()");
  }
  EXPECT_ERROR_CONTAINS(HfExportWriter(d.path, c, {DType::I64, 1, ""}), "dtype i64 is not f32, bf16 or f16");
  EXPECT_ERROR_CONTAINS(HfExportWriter(d.path, c, {DType::BF16, 0, ""}), "max shard size must be positive");
  ModelConfig bad = c;
  bad.num_key_value_heads = 3;
  EXPECT_ERROR_CONTAINS(HfExportWriter(d.path, bad, {}), "export to " + d.path);
}

// An export that stops part-way over an existing sharded folder leaves that folder as it was (it
// deleted the index first: a kill left a folder that no longer loaded, and its temporary shards).
TEST(HfExportStream, AbandonedShardedExportLeavesTheOldFolderWhole) {
  const ModelConfig c = tiny_config(false);
  const auto specs = model_param_specs(c);
  TempDir d;
  export_hf_checkpoint(d.path, c, pattern_params(c), {DType::BF16, 2000, ""});
  ASSERT_TRUE(fs::exists(d / "model.safetensors.index.json"));
  const std::string first_shard_before = read_file(d / "model-00001-of-00006.safetensors");
  {
    // Same plan, other values: the first shard is replaced, then the export stops part-way.
    HfExportWriter w(d.path, c, {DType::BF16, 2000, "", true});
    size_t i = 0;
    for (; i < specs.size() && w.added() < 4; ++i) w.add(specs[i].name, pattern_tensor(specs[i].shape, uint32_t(i) + 7));
  }
  EXPECT_EQ(read_file(d / "model-00001-of-00006.safetensors"), first_shard_before);
  EXPECT_TRUE(fs::exists(d / "model.safetensors.index.json"));
  HfCheckpoint::open(d.path);  // still the earlier export, whole
  for (const auto& e : fs::directory_iterator(d.path))
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
  const std::string name = fs::path(d.path).filename().string();
  for (const auto& e : fs::directory_iterator(fs::path(d.path).parent_path()))
    EXPECT_NE(e.path().filename().string().rfind("." + name + ".titan-partial-", 0), 0u) << e.path();
}
