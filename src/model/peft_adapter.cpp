#include "model/peft_adapter.h"

#include <filesystem>
#include <set>

#include "util/json_util.h"
#include "io/safetensors.h"
#include "util/strings.h"

namespace titan {
namespace {

const char* kPrefix = "base_model.model.";
const std::string kConfig = "/adapter_config.json", kWeights = "/adapter_model.safetensors";

bool ends_with(const std::string& s, const std::string& t) {
  return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
}

// The json value at key, or `def` when absent or null.
template <class T>
T get_or(const nlohmann::json& j, const char* key, T def) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? def : it->get<T>();
}

bool empty_or_null(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() || it->empty();
}

// PEFT's module name of a targeted MoE parameter's adapter (its ParamWrapper): the router's is
// mlp.gate; the experts' wrappers nest in the experts' parameter order (gate_up_proj wrapped
// first), the outermost at mlp.experts, the one inside it at mlp.experts.base_layer.
std::string peft_module(const LoraAdapter& a, const std::vector<LoraAdapter>& all) {
  if (!a.is_parameter()) return a.module;
  const std::string p = "model.layers." + std::to_string(a.layer) + ".mlp.";
  if (a.group == LoraGroup::Router) return p + "gate";
  if (a.group == LoraGroup::ExpertDown) return p + "experts";
  for (const auto& b : all)
    if (b.layer == a.layer && b.group == LoraGroup::ExpertDown) return p + "experts.base_layer";
  return p + "experts";
}

}  // namespace

PeftAdapterConfig read_peft_adapter_config(const std::string& dir, const ModelConfig& base) {
  const std::string cpath = dir + kConfig;
  nlohmann::json j = parse_json_strict(read_file(cpath), cpath);
  PeftAdapterConfig out;
  try {
    TITAN_CHECK(j.is_object(), "not a JSON object");
    const std::string type = get_or<std::string>(j, "peft_type", "");
    TITAN_CHECK(type == "LORA", "peft_type is '", type, "' (only LORA is supported)");
    TITAN_CHECK(!get_or<bool>(j, "use_dora", false), "use_dora (DoRA) is not supported");
    TITAN_CHECK(!get_or<bool>(j, "fan_in_fan_out", false), "fan_in_fan_out is not supported");
    TITAN_CHECK(get_or<std::string>(j, "bias", "none") == "none", "bias must be \"none\"");
    TITAN_CHECK(!get_or<bool>(j, "lora_bias", false), "lora_bias is not supported");
    TITAN_CHECK(empty_or_null(j, "rank_pattern") && empty_or_null(j, "alpha_pattern"),
                "rank_pattern / alpha_pattern are not supported");
    TITAN_CHECK(empty_or_null(j, "modules_to_save"), "modules_to_save is not supported");
    TITAN_CHECK(empty_or_null(j, "layers_to_transform"), "layers_to_transform is not supported");
    // PEFT's rule: a parameter is targeted when its full name is an entry or ends with "." + entry.
    if (!empty_or_null(j, "target_parameters")) {
      const auto targets = j["target_parameters"].get<std::vector<std::string>>();
      for (const auto& a : lora_parameter_candidates(base))
        for (const auto& t : targets)
          if (a.module == t || ends_with(a.module, "." + t)) {
            out.lora.target_parameters.push_back(a.module);
            break;
          }
      TITAN_CHECK(!out.lora.target_parameters.empty(), "target_parameters names no MoE parameter of this base model");
      TITAN_CHECK(get_or<double>(j, "lora_dropout", 0.0) == 0, "lora_dropout must be 0 with target_parameters");
    }
    TITAN_CHECK(j.contains("r") && j["r"].is_number_integer(), "r is missing or not an integer");
    out.lora.rank = j["r"].get<int64_t>();
    TITAN_CHECK(j.contains("lora_alpha") && j["lora_alpha"].is_number(), "lora_alpha is missing or not a number");
    out.lora.alpha = j["lora_alpha"].get<double>();
    out.lora.use_rslora = get_or<bool>(j, "use_rslora", false);
    out.base_model = get_or<std::string>(j, "base_model_name_or_path", "");
  } catch (const nlohmann::json::exception& e) {
    fail(cpath, ": ", e.what());
  } catch (const Error& e) {
    fail(cpath, ": ", e.what());
  }
  // The adapted modules are the weights file's: each with lora_A and lora_B of consistent shapes.
  const std::string wpath = dir + kWeights;
  auto f = SafetensorsFile::open(wpath);
  std::set<std::string> modules;
  for (const auto& e : f.entries()) {
    const std::string& n = e.name;
    TITAN_CHECK(n.rfind(kPrefix, 0) == 0, wpath, ": tensor '", n, "' does not start with '", kPrefix, "'");
    std::string m = n.substr(std::string(kPrefix).size());
    if (ends_with(m, ".lora_A.weight")) m.resize(m.size() - 14);
    else if (ends_with(m, ".lora_B.weight")) m.resize(m.size() - 14);
    else fail(wpath, ": tensor '", n, "' is not a LoRA A or B weight");
    modules.insert(m);
  }
  TITAN_CHECK(!modules.empty(), wpath, ": no adapter tensors");
  // The targeted parameters' adapters, under PEFT's names.
  {
    LoraConfig pc = out.lora;
    const std::vector<LoraAdapter> params = lora_select(base, pc);
    for (const auto& a : params) {
      const std::string m = peft_module(a, params);
      const std::string an = kPrefix + lora_a_name(m), bn = kPrefix + lora_b_name(m);
      TITAN_CHECK(f.contains(an) && f.contains(bn), wpath, ": target_parameters names ", a.module, " but ", an,
                  " or its lora_B is missing");
      const int64_t R = out.lora.rank * a.experts;
      const Shape want_a{R, a.in}, want_b{a.out, R};
      TITAN_CHECK(f.find(an)->shape == want_a, wpath, ": ", an, " has shape ", shape_str(f.find(an)->shape),
                  ", expected ", shape_str(want_a), " (", a.module, ", r = ", out.lora.rank, ")");
      TITAN_CHECK(f.find(bn)->shape == want_b, wpath, ": ", bn, " has shape ", shape_str(f.find(bn)->shape),
                  ", expected ", shape_str(want_b), " (", a.module, ")");
      modules.erase(m);
    }
  }
  std::map<std::string, LoraAdapter> known;
  for (const auto& a : lora_candidates(base)) known[a.module] = a;
  for (const auto& m : modules) {
    auto it = known.find(m);
    TITAN_CHECK(it != known.end(), wpath, ": module '", m, "' is not a LoRA-targetable linear of this base model");
    const std::string an = kPrefix + lora_a_name(m), bn = kPrefix + lora_b_name(m);
    TITAN_CHECK(f.contains(an) && f.contains(bn), wpath, ": module '", m, "' lacks its lora_A or lora_B");
    const Shape want_a{out.lora.rank, it->second.in}, want_b{it->second.out, out.lora.rank};
    TITAN_CHECK(f.find(an)->shape == want_a, wpath, ": ", an, " has shape ", shape_str(f.find(an)->shape),
                ", expected ", shape_str(want_a), " (r = ", out.lora.rank, " from ", cpath, ")");
    TITAN_CHECK(f.find(bn)->shape == want_b, wpath, ": ", bn, " has shape ", shape_str(f.find(bn)->shape),
                ", expected ", shape_str(want_b));
    out.lora.target_modules.push_back(m);
  }
  return out;
}

void load_peft_adapter(DecoderModel& model, const std::string& dir) {
  const PeftAdapterConfig pc = read_peft_adapter_config(dir, model.config());
  model.enable_lora(pc.lora, 0);
  auto f = SafetensorsFile::open(dir + kWeights);
  const auto& ads = model.lora_adapters();
  auto& ps = model.lora_params().all();
  for (const auto& a : ads) {
    const std::string m = peft_module(a, ads);
    f.read_into(kPrefix + lora_a_name(m), ps[a.param].value);
    f.read_into(kPrefix + lora_b_name(m), ps[a.param + 1].value);
  }
}

void save_peft_adapter(const DecoderModel& model, const std::string& dir, const std::string& base_model) {
  TITAN_CHECK(model.lora_enabled(), "save_peft_adapter: the model has no LoRA adapters");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  TITAN_CHECK(!ec, dir, ": cannot create the adapter folder (", ec.message(), ")");
  const LoraConfig& c = model.lora_config();
  std::vector<std::string> modules, params;
  for (const auto& a : model.lora_adapters()) (a.is_parameter() ? params : modules).push_back(a.module);
  nlohmann::json j = {
      {"peft_type", "LORA"}, {"task_type", "CAUSAL_LM"}, {"base_model_name_or_path", base_model},
      {"r", c.rank}, {"lora_alpha", c.alpha}, {"lora_dropout", c.dropout}, {"use_rslora", c.use_rslora},
      {"target_modules", modules}, {"bias", "none"}, {"fan_in_fan_out", false}, {"use_dora", false},
      {"init_lora_weights", true}, {"inference_mode", true}, {"modules_to_save", nullptr},
      {"rank_pattern", nlohmann::json::object()}, {"alpha_pattern", nlohmann::json::object()},
      {"layers_to_transform", nullptr}, {"layers_pattern", nullptr}, {"revision", nullptr}};
  if (!params.empty()) j["target_parameters"] = params;
  std::vector<NamedTensor> ts;
  const auto& ads = model.lora_adapters();
  const auto& ps = model.lora_params().all();
  for (const auto& a : ads) {
    const std::string m = peft_module(a, ads);
    ts.push_back({kPrefix + lora_a_name(m), ps[a.param].value});
    ts.push_back({kPrefix + lora_b_name(m), ps[a.param + 1].value});
  }
  save_safetensors(dir + kWeights, ts);
  write_file_atomic(dir + kConfig, j.dump(2) + "\n");
}

}  // namespace titan
