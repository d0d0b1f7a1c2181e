#include "model/base_fingerprint.h"

#include <cstdio>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/safetensors_folder.h"
#include "util/json_util.h"
#include "util/strings.h"

namespace titan {
namespace {

struct Fnv {
  uint64_t h = 0xcbf29ce484222325ull;
  void add(std::string_view s) {
    for (unsigned char c : s) {
      h ^= c;
      h *= 0x100000001b3ull;
    }
    add_sep();
  }
  void add_sep() {
    h ^= 0xff;
    h *= 0x100000001b3ull;
  }
};

}  // namespace

std::string base_fingerprint(const std::string& hf_dir) {
  Fnv f;
  const std::string cfg = hf_dir + "/config.json";
  f.add(parse_json_strict(read_regular_file(cfg), cfg).dump());
  const SafetensorsFolder folder = SafetensorsFolder::open(hf_dir);
  for (const auto& [name, file] : folder.tensors()) {
    const SafetensorsFile& sf = folder.files()[file];
    const SafetensorsEntry* e = sf.find(name);
    f.add(name);
    f.add(e->dtype);
    for (int64_t d : e->shape) f.add(std::to_string(d));
    const std::string_view b = sf.bytes(name);
    f.add(std::to_string(b.size()));
    constexpr size_t kSamples = 16, kBytes = 64;
    if (b.size() <= kSamples * kBytes) {
      f.add(b);
    } else {
      for (size_t k = 0; k < kSamples; ++k) f.add(b.substr((b.size() - kBytes) * k / (kSamples - 1), kBytes));
    }
  }
  char out[32];
  std::snprintf(out, sizeof out, "fnv1a64:%016llx", static_cast<unsigned long long>(f.h));
  return out;
}

std::string adapter_base_fingerprint(const std::string& adapter_dir) {
  const std::string path = adapter_dir + kAdapterBaseFile;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return "";
  const nlohmann::json j = parse_json_strict(read_regular_file(path), path);
  TITAN_CHECK(j.is_object() && j.contains("base_fingerprint") && j["base_fingerprint"].is_string(), path,
              ": no \"base_fingerprint\" string");
  return j["base_fingerprint"].get<std::string>();
}

void check_base_fingerprint(const std::string& what, const std::string& recorded, const std::string& base_dir,
                            bool allow, const std::string& flag) {
  if (recorded.empty() || allow) return;
  const std::string now = base_fingerprint(base_dir);
  TITAN_CHECK(now == recorded, what, ": trained on a base with fingerprint ", recorded, "; ", base_dir,
              " has fingerprint ", now, " (another model, or its weights were replaced); pass ", flag,
              " to use it anyway");
}

}  // namespace titan
