#include "model/hf_checkpoint.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "util/json_util.h"
#include "util/strings.h"

namespace titan {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string without_trailing_slashes(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir;
}

bool is_float_dtype(DType t) { return t == DType::F32 || t == DType::BF16 || t == DType::F16; }

// Bitwise equality of n values after conversion to f32, in chunks (never a full f32 copy of a
// [vocab, hidden] matrix). Inputs may sit at any byte offset, so chunks are copied out first.
bool equal_as_f32(const void* a, DType ta, const void* b, DType tb, size_t n) {
  if (ta == tb) return std::memcmp(a, b, n * dtype_size(ta)) == 0;
  const size_t chunk = size_t(1) << 14;
  std::vector<char> ra(chunk * 4), rb(chunk * 4);
  std::vector<float> fa(chunk), fb(chunk);
  for (size_t i = 0; i < n; i += chunk) {
    const size_t m = std::min(chunk, n - i);
    std::memcpy(ra.data(), static_cast<const char*>(a) + i * dtype_size(ta), m * dtype_size(ta));
    std::memcpy(rb.data(), static_cast<const char*>(b) + i * dtype_size(tb), m * dtype_size(tb));
    convert_floats(ra.data(), ta, fa.data(), DType::F32, m);
    convert_floats(rb.data(), tb, fb.data(), DType::F32, m);
    if (std::memcmp(fa.data(), fb.data(), m * 4) != 0) return false;
  }
  return true;
}

bool same_values(const SafetensorsFile& fa, const std::string& a, const SafetensorsFile& fb, const std::string& b) {
  std::string_view x = fa.bytes(a), y = fb.bytes(b);
  const DType ta = fa.dtype(a), tb = fb.dtype(b);
  if (x.size() / dtype_size(ta) != y.size() / dtype_size(tb)) return false;
  return equal_as_f32(x.data(), ta, y.data(), tb, x.size() / dtype_size(ta));
}

bool same_values(const Tensor& x_in, const Tensor& y_in) {
  if (x_in.shape() != y_in.shape()) return false;
  // A parameter on the GPU (a tied model's optional lm_head copy) is compared on a host copy.
  const auto host = [](const Tensor& t) { return t.device().type == DeviceType::CPU ? t : t.to(cpu()); };
  const Tensor x = host(x_in), y = host(y_in);
  if (x.raw() == y.raw() && x.dtype() == y.dtype()) return true;
  return equal_as_f32(x.raw(), x.dtype(), y.raw(), y.dtype(), size_t(x.numel()));
}

}  // namespace

HfCheckpoint HfCheckpoint::open(const std::string& dir_in) {
  const std::string dir = without_trailing_slashes(dir_in);
  struct stat st {};
  TITAN_CHECK(::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode), dir, ": not a checkpoint folder (not a directory)");
  HfCheckpoint ck;
  ck.dir_ = dir;
  ck.config_ = load_hf_config(dir + "/config.json");  // the config's errors before the weights'
  ck.specs_ = model_param_specs(ck.config_);
  ck.folder_ = SafetensorsFolder::open(dir);
  const SafetensorsFolder& folder = ck.folder_;
  // Qwen3.5's multimodal layout: the text model under model.language_model.
  if (ck.config_.is_qwen3_5() && !folder.contains("model.embed_tokens.weight") &&
      folder.contains("model.language_model.embed_tokens.weight"))
    ck.text_prefix_ = "model.language_model.";

  // Every parameter present with the config's shape, in a floating dtype.
  std::set<std::string> expected;
  const ModelConfig& mc = ck.config_;
  for (int64_t l = 0; l < mc.num_hidden_layers && mc.is_moe(); ++l) {  // fused expert layers first
    if (!mc.layer_is_sparse(l)) continue;
    const std::string p = ck.stored("model.layers." + std::to_string(l) + ".mlp.experts.");
    const std::string gu = p + "gate_up_proj", dn = p + "down_proj";
    const bool has_gu = folder.contains(gu), has_dn = folder.contains(dn);
    if (!has_gu && !has_dn) continue;
    TITAN_CHECK(has_gu && has_dn, dir, ": layer ", l, " has ", quote(has_gu ? gu : dn), " but not ", quote(has_gu ? dn : gu),
                " (the fused expert layout needs both)");
    const std::string spec_p = "model.layers." + std::to_string(l) + ".mlp.experts.";
    TITAN_CHECK(!folder.contains(p + "0.gate_proj.weight"), dir, ": layer ", l,
                " stores its experts both fused (", quote(gu), ") and per expert (", quote(p + "0.gate_proj.weight"), ")");
    const int64_t E = mc.num_experts, I = mc.moe_intermediate_size, H = mc.hidden_size;
    const std::pair<std::string, Shape> want[] = {{gu, {E, 2 * I, H}}, {dn, {E, H, I}}};
    for (const auto& [name, shape] : want) {
      const SafetensorsFile& f = folder.file_of(name);
      const SafetensorsEntry& e = *f.find(name);
      TITAN_CHECK(e.shape == shape, f.origin(), ": tensor ", quote(name), " has shape ", shape_str(e.shape),
                  " but config.json implies ", shape_str(shape));
      TITAN_CHECK(e.dtype == "F32" || e.dtype == "BF16" || e.dtype == "F16", f.origin(), ": tensor ", quote(name),
                  " has dtype ", e.dtype, "; parameters must be F32, BF16 or F16");
      expected.insert(name);
    }
    ck.fused_layers_[l] = FusedExperts{gu, dn};
    for (int64_t e = 0; e < E; ++e) {
      const std::string x = spec_p + std::to_string(e) + ".";
      ck.fused_[x + "gate_proj.weight"] = ExpertSlice{gu, e, 0, I};
      ck.fused_[x + "up_proj.weight"] = ExpertSlice{gu, e, I, I};
      ck.fused_[x + "down_proj.weight"] = ExpertSlice{dn, e, 0, H};
    }
  }
  for (const auto& s : ck.specs_) {
    if (ck.fused_.count(s.name)) continue;  // checked above as part of its fused tensor
    const std::string sn = ck.stored(s.name);
    expected.insert(sn);
    TITAN_CHECK(folder.contains(sn), dir, ": missing tensor ", quote(sn), " (shape ", shape_str(s.shape),
                ") in the checkpoint");
    const SafetensorsFile& f = folder.file_of(sn);
    const SafetensorsEntry& e = *f.find(sn);
    TITAN_CHECK(e.shape == s.shape, f.origin(), ": tensor ", quote(s.name), " has shape ", shape_str(e.shape),
                " but config.json implies ", shape_str(s.shape));
    TITAN_CHECK(e.dtype == "F32" || e.dtype == "BF16" || e.dtype == "F16", f.origin(), ": tensor ", quote(s.name),
                " has dtype ", e.dtype, "; parameters must be F32, BF16 or F16");
  }
  std::vector<std::string> unexpected;
  int64_t vision = 0, mtp = 0;
  for (const auto& [name, fi] : folder.tensors()) {
    if (expected.count(name)) continue;
    if (ck.config_.is_qwen3_5()) {  // not the text model: skipped, and said so below
      if (name.rfind("model.visual.", 0) == 0 || name.rfind("visual.", 0) == 0) {
        ++vision;
        continue;
      }
      if (name.rfind("mtp.", 0) == 0) {
        ++mtp;
        continue;
      }
    }
    if (name == "lm_head.weight" && ck.config_.tie_word_embeddings) {
      const std::string emb = ck.stored("model.embed_tokens.weight");
      const SafetensorsFile& f = folder.files()[fi];
      const SafetensorsFile& fe = folder.file_of(emb);
      TITAN_CHECK(f.find(name)->shape == fe.find(emb)->shape, f.origin(),
                  ": lm_head.weight has shape ", shape_str(f.find(name)->shape), " but the embedding is tied (",
                  shape_str(fe.find(emb)->shape), ")");
      TITAN_CHECK(f.dtype(name) == DType::F32 || f.dtype(name) == DType::BF16 || f.dtype(name) == DType::F16, f.origin(),
                  ": lm_head.weight has dtype ", f.find(name)->dtype);
      TITAN_CHECK(same_values(f, name, fe, emb), f.origin(),
                  ": tie_word_embeddings is true but lm_head.weight differs from model.embed_tokens.weight");
      continue;
    }
    unexpected.push_back(name);
  }
  if (!unexpected.empty()) {
    std::string list;
    for (size_t i = 0; i < unexpected.size() && i < 3; ++i) list += (i ? ", " : "") + quote(unexpected[i]);
    if (unexpected.size() > 3) list += " and " + std::to_string(unexpected.size() - 3) + " more";
    fail(dir, ": unexpected tensor", unexpected.size() > 1 ? "s " : " ", list, " (not parameters of this Qwen3 config)");
  }
  if (vision > 0 || mtp > 0)
    std::fprintf(stderr, "%s: skipping %lld vision-tower tensors (visual.*) and %lld multi-token-prediction tensors (mtp.*): "
                 "only the text model is loaded\n", dir.c_str(), static_cast<long long>(vision),
                 static_cast<long long>(mtp));
  return ck;
}

std::string HfCheckpoint::stored(const std::string& name) const {
  if (text_prefix_.empty() || name.rfind("model.", 0) != 0 || name.rfind(text_prefix_, 0) == 0) return name;
  return text_prefix_ + name.substr(6);
}

const SafetensorsFile& HfCheckpoint::file_of(const std::string& name) const {
  return folder_.file_of(stored(name));
}

Tensor HfCheckpoint::get(const std::string& name, DType dt) const {
  auto it = fused_.find(name);
  if (it == fused_.end()) return file_of(name).get(stored(name), dt);
  const ExpertSlice& x = it->second;
  Tensor all = file_of(x.fused).get(x.fused, dt);  // [E, R, C]
  const Tensor one = all.slice0(x.expert, x.expert + 1).view({all.dim(1), all.dim(2)});
  return one.slice0(x.row0, x.row0 + x.rows).clone();
}

void HfCheckpoint::read_into(const std::string& name, Tensor& dst, PinnedStaging* staging) const {
  if (!fused_.count(name)) return file_of(name).read_into(stored(name), dst, staging);
  Tensor src = get(name, dst.dtype());
  TITAN_CHECK(src.shape() == dst.shape(), dir_, ": tensor ", quote(name), " has shape ", shape_str(src.shape()),
              ", expected ", shape_str(dst.shape()));
  dst.copy_(src);
}

void HfCheckpoint::drop_pages(const std::string& name) const {
  if (!fused_.count(name)) file_of(name).drop_pages(stored(name));
}

void HfCheckpoint::prefault(const std::string& name) const {
  if (!fused_.count(name)) file_of(name).prefault(stored(name));
}

HfCheckpoint::FusedExperts HfCheckpoint::fused_experts(int64_t layer) const {
  auto it = fused_layers_.find(layer);
  return it == fused_layers_.end() ? FusedExperts{} : it->second;
}

TensorMap HfCheckpoint::load_all(DType dt) const {
  TensorMap m;
  for (const auto& s : specs_) m[s.name] = get(s.name, dt);
  return m;
}

TensorMap load_hf_weights(const std::string& dir, ModelConfig* config) {
  HfCheckpoint ck = HfCheckpoint::open(dir);
  if (config) *config = ck.config();
  return ck.load_all(DType::F32);
}

HfExportWriter::HfExportWriter(const std::string& dir, const ModelConfig& c, const HfExportOptions& opt)
    : dir_(without_trailing_slashes(dir)), config_(c), opt_(opt) {
  TITAN_CHECK(is_float_dtype(opt.dtype), "export to ", dir_, ": dtype ", dtype_name(opt.dtype), " is not f32, bf16 or f16");
  TITAN_CHECK(opt.max_shard_bytes > 0, "export to ", dir_, ": max shard size must be positive");
  c.validate("export to " + dir_);
  specs_ = model_param_specs(c);
  std::vector<SafetensorsSpec> layout;
  for (const auto& s : specs_) layout.push_back({s.name, opt.dtype, s.shape});
  folder_ = std::make_unique<OutputFolder>(dir_, opt.replace, "export to " + dir_);
  out_ = std::make_unique<SafetensorsFolderWriter>(folder_->path(), std::move(layout), opt.max_shard_bytes, "export to " + dir_);
}

HfExportWriter::~HfExportWriter() = default;

void HfExportWriter::add(const std::string& name, const Tensor& t) {
  TITAN_CHECK(!finished_, "export to ", dir_, ": parameter ", quote(name), " added after finish()");
  TITAN_CHECK(next_ < specs_.size(), "export to ", dir_, ": unexpected parameter ", quote(name), " (all ",
              specs_.size(), " parameters of the config were already added)");
  const ParamSpec& s = specs_[next_];
  TITAN_CHECK(name == s.name, "export to ", dir_, ": expected parameter ", quote(s.name), " (", next_ + 1, " of ",
              specs_.size(), " in model order), got ", quote(name));
  TITAN_CHECK(t.defined(), "export to ", dir_, ": parameter ", quote(name), " is undefined");
  TITAN_CHECK(t.shape() == s.shape, "export to ", dir_, ": parameter ", quote(name), " has shape ", shape_str(t.shape()),
              ", the config implies ", shape_str(s.shape));
  TITAN_CHECK(is_float_dtype(t.dtype()), "export to ", dir_, ": parameter ", quote(name), " is ", dtype_name(t.dtype()),
              "; parameters must be f32, bf16 or f16");
  out_->add(name, t);
  ++next_;
}

void HfExportWriter::finish() {
  TITAN_CHECK(!finished_, "export to ", dir_, ": finish() called twice");
  TITAN_CHECK(next_ == specs_.size(), "export to ", dir_, ": missing parameter ",
              quote(next_ < specs_.size() ? specs_[next_].name : ""), " (", next_, " of ", specs_.size(),
              " parameters were added)");
  out_->finish({{"total_parameters", model_param_count(config_)}});
  const std::string& tmp = folder_->path();
  write_file_atomic(tmp + "/config.json", hf_config_json(config_, opt_.dtype));

  if (!opt_.tokenizer_dir.empty()) {
    static const char* kTokenizerFiles[] = {"tokenizer.json",  "tokenizer_config.json", "special_tokens_map.json",
                                            "vocab.json",      "merges.txt",            "added_tokens.json",
                                            "generation_config.json", "chat_template.jinja"};
    std::error_code ec;
    int found = 0;
    for (const char* f : kTokenizerFiles) {  // from the old folder too when it is the one replaced
      const std::string src = opt_.tokenizer_dir + "/" + f;
      if (!fs::is_regular_file(src, ec)) continue;
      ++found;
      write_file_atomic(tmp + "/" + f, read_file(src));
    }
    TITAN_CHECK(found > 0, opt_.tokenizer_dir, ": no tokenizer files (tokenizer.json, tokenizer_config.json, ...) to copy");
  }
  folder_->commit();
  finished_ = true;
}

void export_hf_checkpoint(const std::string& dir_in, const ModelConfig& c, const TensorMap& params,
                          const HfExportOptions& opt) {
  // The parameters are checked first, then the writer takes the folder (refused when not empty).
  const std::string dir = without_trailing_slashes(dir_in);
  TITAN_CHECK(is_float_dtype(opt.dtype), "export to ", dir, ": dtype ", dtype_name(opt.dtype), " is not f32, bf16 or f16");
  c.validate("export to " + dir);
  const std::vector<ParamSpec> specs = model_param_specs(c);
  std::set<std::string> expected;
  for (const auto& s : specs) {
    expected.insert(s.name);
    auto it = params.find(s.name);
    TITAN_CHECK(it != params.end() && it->second.defined(), "export to ", dir, ": missing parameter ", quote(s.name));
    TITAN_CHECK(it->second.shape() == s.shape, "export to ", dir, ": parameter ", quote(s.name), " has shape ",
                shape_str(it->second.shape()), ", the config implies ", shape_str(s.shape));
    TITAN_CHECK(is_float_dtype(it->second.dtype()), "export to ", dir, ": parameter ", quote(s.name), " is ",
                dtype_name(it->second.dtype()), "; parameters must be f32, bf16 or f16");
  }
  for (const auto& [name, t] : params) {
    if (expected.count(name)) continue;
    TITAN_CHECK(name == "lm_head.weight" && c.tie_word_embeddings, "export to ", dir, ": unexpected parameter ", quote(name));
    TITAN_CHECK(same_values(t, params.at("model.embed_tokens.weight")), "export to ", dir,
                ": tie_word_embeddings is true but lm_head.weight differs from model.embed_tokens.weight");
  }
  HfExportWriter w(dir_in, c, opt);
  for (const auto& s : w.specs()) w.add(s.name, params.at(s.name));
  w.finish();
}

}  // namespace titan
