// A PEFT adapter folder from anywhere: what cannot be right is refused with one line naming the
// file and the reason (not "[lora] rank must be positive" from deep inside, with no path); and a
// base's fingerprint (model/base_fingerprint.h) tells other weights of the same shapes apart.
#include <gtest/gtest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "model/base_fingerprint.h"
#include "model/hf_checkpoint.h"
#include "model/hf_model.h"
#include "model/lora.h"
#include "model/peft_adapter.h"
#include "unit/io/io_test_util.h"
#include "util/strings.h"

using namespace titan;
namespace fs = std::filesystem;

namespace {

const std::string kFixture = std::string(TITAN_FIXTURES) + "/lora/all_linear_r4";
const std::string kBase = std::string(TITAN_FIXTURES) + "/qwen3/tied_gqa2_hd16";

// A copy of the fixture adapter with its config edited by `edit`; returns the folder.
std::string adapter_with(const iotest::TempDir& tmp, const std::function<void(nlohmann::json&)>& edit) {
  const std::string dir = tmp / "adapter";
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy_file(kFixture + "/adapter/adapter_model.safetensors", dir + "/adapter_model.safetensors");
  nlohmann::json j = nlohmann::json::parse(read_file(kFixture + "/adapter/adapter_config.json"));
  edit(j);
  write_file_atomic(dir + "/adapter_config.json", j.dump(2));
  return dir;
}

TEST(PeftRefusals, RankAndAlphaMustBePositiveNamingTheFile) {
  iotest::TempDir tmp;
  const ModelConfig base = load_hf_config(kBase + "/config.json");
  auto err = [&](const std::function<void(nlohmann::json&)>& edit) {
    const std::string dir = adapter_with(tmp, edit);
    return iotest::error_of([&] { read_peft_adapter_config(dir, base); });
  };
  const std::string cfg = tmp / "adapter/adapter_config.json";
  EXPECT_EQ(err([](auto&) {}), "");
  EXPECT_EQ(err([](auto& j) { j["r"] = 0; }), cfg + ": r is 0 (the adapters' rank must be a positive integer)");
  EXPECT_EQ(err([](auto& j) { j["r"] = -4; }).rfind(cfg + ": r is -4", 0), 0u);
  EXPECT_EQ(err([](auto& j) { j["lora_alpha"] = 0; }), cfg + ": lora_alpha is 0 (the scale alpha / r must be positive)");
  EXPECT_EQ(err([](auto& j) { j["lora_alpha"] = -8.0; }).rfind(cfg + ": lora_alpha is -8", 0), 0u);
}

}  // namespace

namespace {

// An adapter whose target_modules do not match the tensors it holds is refused (PEFT refuses
// targets that match nothing; titan any disagreement), naming both files.
TEST(PeftRefusals, TargetModulesMustMatchTheTensorsHeld) {
  iotest::TempDir tmp;
  const ModelConfig base = load_hf_config(kBase + "/config.json");
  auto err = [&](const nlohmann::json& targets) {
    const std::string dir = adapter_with(tmp, [&](nlohmann::json& j) { j["target_modules"] = targets; });
    return iotest::error_of([&] { read_peft_adapter_config(dir, base); });
  };
  const std::string cfg = tmp / "adapter/adapter_config.json";
  EXPECT_EQ(err(nlohmann::json::array({"gate_proj", "down_proj", "up_proj", "q_proj", "o_proj", "v_proj", "k_proj"})), "");
  EXPECT_EQ(err("all-linear"), "");
  EXPECT_EQ(err(".*_proj"), "");
  std::string e = err(nlohmann::json::array({"q_proj", "v_proj"}));
  EXPECT_EQ(e.rfind(cfg + ": target_modules [\"q_proj\",\"v_proj\"] does not name module 'model.layers.0.", 0), 0u) << e;
  EXPECT_NE(e.find("whose adapters " + tmp / "adapter/adapter_model.safetensors holds"), std::string::npos) << e;
  EXPECT_NE(err(nullptr).find("does not name module"), std::string::npos);
  EXPECT_NE(err(".*q_proj").find("does not name module"), std::string::npos);
  EXPECT_NE(err("([").find("is not a regular expression"), std::string::npos);

  // Targets the weights hold no adapters for: an adapter on q_proj only, whose config names v_proj too.
  auto model = load_hf_model(kBase);
  LoraConfig lc;
  lc.rank = 2, lc.alpha = 4;
  lc.target_modules = {"model.layers.*.self_attn.q_proj"};
  model->enable_lora(lc, 0);
  save_peft_adapter(*model, tmp / "q_only", kBase);
  nlohmann::json j = nlohmann::json::parse(read_file(tmp / "q_only/adapter_config.json"));
  read_peft_adapter_config(tmp / "q_only", base);  // as written: fine
  j["target_modules"] = {"q_proj", "v_proj"};
  write_file_atomic(tmp / "q_only/adapter_config.json", j.dump());
  e = iotest::error_of([&] { read_peft_adapter_config(tmp / "q_only", base); });
  EXPECT_NE(e.find("names module 'model.layers.0.self_attn.v_proj', but"), std::string::npos) << e;
  EXPECT_NE(e.find("holds no adapters for it"), std::string::npos) << e;
}

// The fingerprint follows the weights, not only their shapes, and not the folder's path or
// formatting.
TEST(BaseFingerprint, ChangesWithTheWeightsNotWithACopy) {
  iotest::TempDir tmp;
  const std::string fp = base_fingerprint(kBase);
  EXPECT_EQ(fp.rfind("fnv1a64:", 0), 0u);
  EXPECT_EQ(fp.size(), 8u + 16u);
  fs::copy(kBase, tmp / "copy");
  EXPECT_EQ(base_fingerprint(tmp / "copy"), fp);
  // Same config and shapes, other values (another fine-tune of the same architecture).
  ModelConfig c;
  TensorMap w = load_hf_weights(kBase, &c);
  for (auto& [name, t] : w)
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = t.data<float>()[i] * 0.5f + 0.001f;
  HfExportOptions eo;
  eo.dtype = c.torch_dtype;
  export_hf_checkpoint(tmp / "other", c, w, eo);
  fs::copy_file(kBase + "/config.json", tmp / "other/config.json", fs::copy_options::overwrite_existing);
  const std::string other = base_fingerprint(tmp / "other");
  EXPECT_NE(other, fp);
  EXPECT_EQ(iotest::error_of([&] { check_base_fingerprint("ck", fp, tmp / "copy", false, "--allow-other-base"); }), "");
  EXPECT_EQ(iotest::error_of([&] { check_base_fingerprint("ck", fp, tmp / "other", false, "--allow-other-base"); }),
            "ck: trained on a base with fingerprint " + fp + "; " + tmp / "other" + " has fingerprint " + other +
                " (another model, or its weights were replaced); pass --allow-other-base to use it anyway");
  EXPECT_EQ(iotest::error_of([&] { check_base_fingerprint("ck", fp, tmp / "other", true, "--allow-other-base"); }), "");
}

}  // namespace
