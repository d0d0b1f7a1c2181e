#include "io/hf_checkpoint.h"

#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "io/json_util.h"
#include "util/strings.h"

namespace titan {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const char* kSingleFile = "model.safetensors";
const char* kIndexFile = "model.safetensors.index.json";

bool is_file(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string real_path(const std::string& p) {
  char buf[PATH_MAX];
  return ::realpath(p.c_str(), buf) ? std::string(buf) : std::string();
}

// A weight_map value must name an existing file inside the folder, also after resolving symlinks.
std::string shard_path(const std::string& dir, const std::string& real_dir, const std::string& file,
                       const std::string& index_path) {
  TITAN_CHECK(!file.empty() && file.find('\0') == std::string::npos, index_path, ": weight_map has an invalid file name ",
              quote(file));
  TITAN_CHECK(file[0] != '/', index_path, ": weight_map file ", quote(file), " is an absolute path; shards must be inside the folder");
  for (const auto& part : split(file, '/'))
    TITAN_CHECK(part != "..", index_path, ": weight_map file ", quote(file), " escapes the folder (\"..\")");
  std::string p = dir + "/" + file;
  std::string real = real_path(p);
  TITAN_CHECK(!real.empty(), index_path, ": weight_map names shard ", quote(file), ", which does not exist (",
              std::strerror(errno), ")");
  TITAN_CHECK(real.compare(0, real_dir.size() + 1, real_dir + "/") == 0, index_path, ": weight_map file ", quote(file),
              " resolves to ", quote(real, 200), ", outside the folder");
  TITAN_CHECK(is_file(real), index_path, ": weight_map file ", quote(file), " is not a regular file");
  return p;
}

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

bool same_values(const Tensor& x, const Tensor& y) {
  if (x.shape() != y.shape()) return false;
  if (x.raw() == y.raw() && x.dtype() == y.dtype()) return true;
  return equal_as_f32(x.raw(), x.dtype(), y.raw(), y.dtype(), size_t(x.numel()));
}

}  // namespace

HfCheckpoint HfCheckpoint::open(const std::string& dir_in) {
  std::string dir = dir_in;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  struct stat st {};
  TITAN_CHECK(::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode), dir, ": not a checkpoint folder (not a directory)");
  HfCheckpoint ck;
  ck.dir_ = dir;
  ck.config_ = load_hf_config(dir + "/config.json");
  ck.specs_ = model_param_specs(ck.config_);

  const std::string single = dir + "/" + kSingleFile, index = dir + "/" + kIndexFile;
  if (is_file(single)) {  // transformers prefers the single file when both exist
    ck.files_.push_back(SafetensorsFile::open(single));
    for (const auto& e : ck.files_[0].entries()) ck.where_[e.name] = 0;
  } else if (is_file(index)) {
    json j = parse_json_strict(read_file(index), index);
    TITAN_CHECK(j.is_object(), index, ": must be a JSON object, got ", json_kind(j));
    TITAN_CHECK(j.contains("weight_map"), index, ": missing \"weight_map\"");
    const json& wm = j["weight_map"];
    TITAN_CHECK(wm.is_object(), index, ": weight_map must be an object, got ", json_kind(wm));
    if (j.contains("metadata"))
      TITAN_CHECK(j["metadata"].is_object() || j["metadata"].is_null(), index, ": metadata must be an object");
    const std::string real_dir = real_path(dir);
    std::map<std::string, std::vector<std::string>> by_file;  // shard file -> tensor names
    for (auto it = wm.begin(); it != wm.end(); ++it) {
      TITAN_CHECK(it->is_string(), index, ": weight_map value for ", quote(it.key()), " must be a file name, got ", json_kind(*it));
      by_file[it->get<std::string>()].push_back(it.key());
    }
    // Resolve and validate every shard first, so that a missing or escaping file is reported as
    // such rather than as a tensor the other shards lack.
    for (const auto& [file, names] : by_file) ck.files_.push_back(SafetensorsFile::open(shard_path(dir, real_dir, file, index)));
    size_t fi = 0;
    for (const auto& [file, names] : by_file) {
      const SafetensorsFile& sf = ck.files_[fi];
      for (const auto& n : names) {
        TITAN_CHECK(sf.contains(n), index, ": weight_map puts tensor ", quote(n), " in ", quote(file), ", which has no such tensor");
        ck.where_[n] = fi;
      }
      for (const auto& e : sf.entries()) {
        auto w = wm.find(e.name);
        TITAN_CHECK(w != wm.end() && *w == file, sf.origin(), ": tensor ", quote(e.name),
                    w == wm.end() ? " is not listed in " : " is listed under another shard in ", kIndexFile);
      }
      ++fi;
    }
  } else {
    fail(dir, ": no ", kSingleFile, " or ", kIndexFile, " in the checkpoint folder");
  }

  // Every parameter present with the config's shape, in a floating dtype.
  std::set<std::string> expected;
  const ModelConfig& mc = ck.config_;
  for (int64_t l = 0; l < mc.num_hidden_layers && mc.is_moe(); ++l) {  // fused expert layers first
    if (!mc.layer_is_sparse(l)) continue;
    const std::string p = "model.layers." + std::to_string(l) + ".mlp.experts.";
    const std::string gu = p + "gate_up_proj", dn = p + "down_proj";
    const bool has_gu = ck.where_.count(gu) > 0, has_dn = ck.where_.count(dn) > 0;
    if (!has_gu && !has_dn) continue;
    TITAN_CHECK(has_gu && has_dn, dir, ": layer ", l, " has ", quote(has_gu ? gu : dn), " but not ", quote(has_gu ? dn : gu),
                " (the fused expert layout needs both)");
    TITAN_CHECK(ck.where_.count(p + "0.gate_proj.weight") == 0, dir, ": layer ", l,
                " stores its experts both fused (", quote(gu), ") and per expert (", quote(p + "0.gate_proj.weight"), ")");
    const int64_t E = mc.num_experts, I = mc.moe_intermediate_size, H = mc.hidden_size;
    const std::pair<std::string, Shape> want[] = {{gu, {E, 2 * I, H}}, {dn, {E, H, I}}};
    for (const auto& [name, shape] : want) {
      const SafetensorsFile& f = ck.files_[ck.where_.at(name)];
      const SafetensorsEntry& e = *f.find(name);
      TITAN_CHECK(e.shape == shape, f.origin(), ": tensor ", quote(name), " has shape ", shape_str(e.shape),
                  " but config.json implies ", shape_str(shape));
      TITAN_CHECK(e.dtype == "F32" || e.dtype == "BF16" || e.dtype == "F16", f.origin(), ": tensor ", quote(name),
                  " has dtype ", e.dtype, "; parameters must be F32, BF16 or F16");
      expected.insert(name);
    }
    ck.fused_layers_[l] = FusedExperts{gu, dn};
    for (int64_t e = 0; e < E; ++e) {
      const std::string x = p + std::to_string(e) + ".";
      ck.fused_[x + "gate_proj.weight"] = ExpertSlice{gu, e, 0, I};
      ck.fused_[x + "up_proj.weight"] = ExpertSlice{gu, e, I, I};
      ck.fused_[x + "down_proj.weight"] = ExpertSlice{dn, e, 0, H};
    }
  }
  for (const auto& s : ck.specs_) {
    if (ck.fused_.count(s.name)) continue;  // checked above as part of its fused tensor
    expected.insert(s.name);
    auto it = ck.where_.find(s.name);
    TITAN_CHECK(it != ck.where_.end(), dir, ": missing tensor ", quote(s.name), " (shape ", shape_str(s.shape),
                ") in the checkpoint");
    const SafetensorsFile& f = ck.files_[it->second];
    const SafetensorsEntry& e = *f.find(s.name);
    TITAN_CHECK(e.shape == s.shape, f.origin(), ": tensor ", quote(s.name), " has shape ", shape_str(e.shape),
                " but config.json implies ", shape_str(s.shape));
    TITAN_CHECK(e.dtype == "F32" || e.dtype == "BF16" || e.dtype == "F16", f.origin(), ": tensor ", quote(s.name),
                " has dtype ", e.dtype, "; parameters must be F32, BF16 or F16");
  }
  std::vector<std::string> unexpected;
  for (const auto& [name, fi] : ck.where_) {
    if (expected.count(name)) continue;
    if (name == "lm_head.weight" && ck.config_.tie_word_embeddings) {
      const SafetensorsFile& f = ck.files_[fi];
      const SafetensorsFile& fe = ck.files_[ck.where_.at("model.embed_tokens.weight")];
      TITAN_CHECK(f.find(name)->shape == fe.find("model.embed_tokens.weight")->shape, f.origin(),
                  ": lm_head.weight has shape ", shape_str(f.find(name)->shape), " but the embedding is tied (",
                  shape_str(fe.find("model.embed_tokens.weight")->shape), ")");
      TITAN_CHECK(f.dtype(name) == DType::F32 || f.dtype(name) == DType::BF16 || f.dtype(name) == DType::F16, f.origin(),
                  ": lm_head.weight has dtype ", f.find(name)->dtype);
      TITAN_CHECK(same_values(f, name, fe, "model.embed_tokens.weight"), f.origin(),
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
  return ck;
}

const SafetensorsFile& HfCheckpoint::file_of(const std::string& name) const {
  auto it = where_.find(name);
  TITAN_CHECK(it != where_.end(), dir_, ": no tensor ", quote(name), " in the checkpoint");
  return files_[it->second];
}

Tensor HfCheckpoint::get(const std::string& name, DType dt) const {
  auto it = fused_.find(name);
  if (it == fused_.end()) return file_of(name).get(name, dt);
  const ExpertSlice& x = it->second;
  Tensor all = file_of(x.fused).get(x.fused, dt);  // [E, R, C]
  const Tensor one = all.slice0(x.expert, x.expert + 1).view({all.dim(1), all.dim(2)});
  return one.slice0(x.row0, x.row0 + x.rows).clone();
}

void HfCheckpoint::read_into(const std::string& name, Tensor& dst) const {
  if (!fused_.count(name)) return file_of(name).read_into(name, dst);
  Tensor src = get(name, dst.dtype());
  TITAN_CHECK(src.shape() == dst.shape(), dir_, ": tensor ", quote(name), " has shape ", shape_str(src.shape()),
              ", expected ", shape_str(dst.shape()));
  dst.copy_(src);
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

namespace {

std::string without_trailing_slashes(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir;
}

bool is_float_dtype(DType t) { return t == DType::F32 || t == DType::BF16 || t == DType::F16; }

}  // namespace

HfExportWriter::HfExportWriter(const std::string& dir, const ModelConfig& c, const HfExportOptions& opt)
    : dir_(without_trailing_slashes(dir)), config_(c), opt_(opt) {
  TITAN_CHECK(is_float_dtype(opt.dtype), "export to ", dir_, ": dtype ", dtype_name(opt.dtype), " is not f32, bf16 or f16");
  TITAN_CHECK(opt.max_shard_bytes > 0, "export to ", dir_, ": max shard size must be positive");
  c.validate("export to " + dir_);
  specs_ = model_param_specs(c);

  // Shards in module order: a new one starts when the next tensor would pass the limit.
  uint64_t shard_bytes = 0;
  for (size_t i = 0; i < specs_.size(); ++i) {
    uint64_t bytes = dtype_size(opt.dtype);
    for (int64_t d : specs_[i].shape) bytes *= uint64_t(d);
    if (shards_.empty() || (i > shards_.back().first && shard_bytes + bytes > opt.max_shard_bytes)) {
      shards_.push_back({"", i, i});
      shard_bytes = 0;
    }
    shards_.back().last = i;
    shard_of_.push_back(shards_.size() - 1);
    shard_bytes += bytes;
    total_bytes_ += bytes;
  }
  const size_t n = shards_.size();
  for (size_t k = 0; k < n; ++k) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", k + 1, n);
    shards_[k].file = n == 1 ? kSingleFile : name;
  }
}

HfExportWriter::~HfExportWriter() = default;

void HfExportWriter::open_shard(size_t k) {
  if (k == 0) {
    std::error_code ec;
    fs::create_directories(dir_, ec);
    TITAN_CHECK(!ec, dir_, ": cannot create the folder: ", ec.message());
    // An earlier index would otherwise describe a mix of its shards and ours until finish().
    if (shards_.size() > 1) fs::remove(dir_ + "/" + kIndexFile, ec);
  }
  std::vector<SafetensorsSpec> layout;
  for (size_t i = shards_[k].first; i <= shards_[k].last; ++i) layout.push_back({specs_[i].name, opt_.dtype, specs_[i].shape});
  open_ = std::make_unique<SafetensorsStreamWriter>(dir_ + "/" + shards_[k].file, layout);
}

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
  const size_t k = shard_of_[next_];
  if (!open_) open_shard(k);
  open_->write(name, t);
  if (next_ == shards_[k].last) {
    open_->commit();
    open_.reset();
  }
  ++next_;
}

void HfExportWriter::finish() {
  TITAN_CHECK(!finished_, "export to ", dir_, ": finish() called twice");
  TITAN_CHECK(next_ == specs_.size(), "export to ", dir_, ": missing parameter ",
              quote(next_ < specs_.size() ? specs_[next_].name : ""), " (", next_, " of ", specs_.size(),
              " parameters were added)");
  std::set<std::string> written;
  for (const auto& sh : shards_) written.insert(sh.file);
  if (shards_.size() > 1) {
    json wm = json::object();
    for (size_t i = 0; i < specs_.size(); ++i) wm[specs_[i].name] = shards_[shard_of_[i]].file;
    json index = {{"metadata", {{"total_size", total_bytes_}, {"total_parameters", model_param_count(config_)}}},
                  {"weight_map", wm}};
    write_file_atomic(dir_ + "/" + kIndexFile, index.dump(2) + "\n");
    written.insert(kIndexFile);
  }
  write_file_atomic(dir_ + "/config.json", hf_config_json(config_, opt_.dtype));

  // Remove what an earlier export left that would contradict this one.
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    const std::string name = entry.path().filename().string();
    unsigned a = 0, b = 0;
    char tail[32] = {0};
    bool is_shard = std::sscanf(name.c_str(), "model-%5u-of-%5u.%31s", &a, &b, tail) == 3 && std::string(tail) == "safetensors";
    if ((is_shard || name == kSingleFile || name == kIndexFile) && !written.count(name)) fs::remove(entry.path(), ec);
  }

  if (!opt_.tokenizer_dir.empty()) {
    static const char* kTokenizerFiles[] = {"tokenizer.json",  "tokenizer_config.json", "special_tokens_map.json",
                                            "vocab.json",      "merges.txt",            "added_tokens.json",
                                            "generation_config.json", "chat_template.jinja"};
    const bool same_dir = real_path(opt_.tokenizer_dir) == real_path(dir_);
    int found = 0;
    for (const char* f : kTokenizerFiles) {
      const std::string src = opt_.tokenizer_dir + "/" + f;
      if (!is_file(src)) continue;
      ++found;
      if (!same_dir) write_file_atomic(dir_ + "/" + f, read_file(src));
    }
    TITAN_CHECK(found > 0, opt_.tokenizer_dir, ": no tokenizer files (tokenizer.json, tokenizer_config.json, ...) to copy");
  }
  finished_ = true;
}

void export_hf_checkpoint(const std::string& dir_in, const ModelConfig& c, const TensorMap& params,
                          const HfExportOptions& opt) {
  HfExportWriter w(dir_in, c, opt);  // validates the options and the config; writes nothing yet
  const std::string dir = without_trailing_slashes(dir_in);
  std::set<std::string> expected;
  for (const auto& s : w.specs()) {
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
  for (const auto& s : w.specs()) w.add(s.name, params.at(s.name));
  w.finish();
}

}  // namespace titan
