// A PEFT adapter folder from anywhere: what cannot be right is refused with one line naming the
// file and the reason (not "[lora] rank must be positive" from deep inside, with no path).
#include <gtest/gtest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "model/hf_model.h"
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
