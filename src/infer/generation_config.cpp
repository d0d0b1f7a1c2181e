#include "infer/generation_config.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "util/strings.h"

namespace titan::infer {
namespace fs = std::filesystem;
using nlohmann::json;

GenerationDefaults parse_generation_defaults(const std::string& json_text, const std::string& origin) {
  json j = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  TITAN_CHECK(!j.is_discarded() && j.is_object(), origin, ": not a JSON object");
  GenerationDefaults g;
  g.origin = origin;
  auto id = [&](const json& v, const char* key) {
    TITAN_CHECK(v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() <= int64_t(UINT32_MAX), origin,
                ": ", key, " must be a non-negative integer or a list of them");
    return uint32_t(v.get<int64_t>());
  };
  if (j.contains("eos_token_id") && !j["eos_token_id"].is_null()) {
    const json& e = j["eos_token_id"];
    if (e.is_array())
      for (const json& v : e) g.eos_ids.push_back(id(v, "eos_token_id"));
    else
      g.eos_ids.push_back(id(e, "eos_token_id"));
  }
  if (j.contains("pad_token_id") && !j["pad_token_id"].is_null()) g.pad_id = id(j["pad_token_id"], "pad_token_id");
  auto number = [&](const char* key, std::optional<double>& out) {
    if (!j.contains(key) || j[key].is_null()) return;
    TITAN_CHECK(j[key].is_number(), origin, ": ", key, " must be a number");
    out = j[key].get<double>();
  };
  auto integer = [&](const char* key, std::optional<int64_t>& out) {
    if (!j.contains(key) || j[key].is_null()) return;
    TITAN_CHECK(j[key].is_number_integer(), origin, ": ", key, " must be an integer");
    out = j[key].get<int64_t>();
  };
  if (j.contains("do_sample") && !j["do_sample"].is_null()) {
    TITAN_CHECK(j["do_sample"].is_boolean(), origin, ": do_sample must be true or false");
    g.do_sample = j["do_sample"].get<bool>();
  }
  number("temperature", g.temperature);
  number("top_p", g.top_p);
  number("min_p", g.min_p);
  number("repetition_penalty", g.repetition_penalty);
  integer("top_k", g.top_k);
  integer("max_new_tokens", g.max_new_tokens);
  return g;
}

GenerationDefaults read_generation_defaults(const std::string& model_dir) {
  for (const char* name : {"generation_config.json", "config.json"}) {
    const std::string path = (fs::path(model_dir) / name).string();
    if (fs::exists(path)) {
      GenerationDefaults g = parse_generation_defaults(read_regular_file(path), path);
      if (std::string(name) == "config.json") {  // sampling settings live in generation_config.json only
        g.do_sample.reset();
        g.temperature = g.top_p = g.min_p = g.repetition_penalty = std::nullopt;
        g.top_k = g.max_new_tokens = std::nullopt;
      }
      return g;
    }
  }
  return {};
}

}  // namespace titan::infer
