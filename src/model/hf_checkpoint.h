// Hugging Face checkpoint folders of Qwen3 / Qwen3-MoE models: config.json plus a folder of
// safetensors weights (io/safetensors_folder.h: the single file or the index and its shards).
// This is the state-dict adapter (torchtitan's role): it maps HF tensor names and layouts to the
// model's parameters (model_param_specs) and back.
//
// Loading validates everything before any weight is used: the config (load_hf_config), the folder
// (SafetensorsFolder::open), and the tensors against model_param_specs (missing, unexpected,
// shape, dtype).
//
// Tied embeddings: transformers saves a tied model without lm_head.weight. If a tied checkpoint
// does carry lm_head.weight, it is accepted only when it equals model.embed_tokens.weight
// bit for bit (after conversion to f32 when their dtypes differ) and then ignored; a differing
// copy is an error, since using either one silently would change the model.
//
// Qwen3-MoE experts: a sparse layer's experts may be stored per expert
// (mlp.experts.E.gate_proj.weight [I, H], up_proj [I, H], down_proj [H, I]: what transformers'
// save_pretrained writes) or fused (mlp.experts.gate_up_proj [E, 2I, H], rows [0, I) gate and
// [I, 2I) up; mlp.experts.down_proj [E, H, I]: transformers 5's in-memory layout), chosen per layer;
// a layer holding both, or a partial fused pair, is an error. specs() stays the per-expert list,
// and get / read_into serve per-expert names from a fused layer (a copy of the expert's slice).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/safetensors_folder.h"
#include "model/config.h"
#include "util/output_folder.h"

namespace titan {

using TensorMap = std::map<std::string, Tensor>;

class HfCheckpoint {
 public:
  // Opens and validates the folder; errors name the file at fault and the reason.
  static HfCheckpoint open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  const ModelConfig& config() const { return config_; }
  // The parameters the model needs, in module order (model_param_specs(config())).
  const std::vector<ParamSpec>& specs() const { return specs_; }
  // The file holding `name` (for messages) and the stored dtype string ("BF16", ...).
  const SafetensorsFile& file_of(const std::string& name) const;

  // One parameter in dtype dt (zero-copy when stored in dt: it then borrows the mapping).
  Tensor get(const std::string& name, DType dt = DType::F32) const;
  // Copies (converting) a parameter into a caller-provided tensor of the spec's shape; one on
  // cuda:0 through pinned staging (SafetensorsFile::read_into: `staging`, or the call's own).
  void read_into(const std::string& name, Tensor& dst, PinnedStaging* staging = nullptr) const;
  // Gives back the mapped file pages of a stored tensor (a parameter, or a fused expert tensor's
  // name) once a copy of it has been taken (SafetensorsFile::drop_pages); per-expert names of a
  // fused layer: nothing (their bytes lie inside the fused tensor).
  void drop_pages(const std::string& name) const;
  // Maps in the file pages of a stored tensor that a model borrows (SafetensorsFile::prefault).
  void prefault(const std::string& name) const;
  // All parameters of specs() in dtype dt.
  TensorMap load_all(DType dt = DType::F32) const;
  // Names of a sparse layer's fused expert tensors when the checkpoint stores that layer fused,
  // else empty strings (the per-expert layout, or a dense layer).
  struct FusedExperts {
    std::string gate_up, down;
  };
  FusedExperts fused_experts(int64_t layer) const;

 private:
  std::string dir_;
  ModelConfig config_;
  std::vector<ParamSpec> specs_;
  SafetensorsFolder folder_;
  struct ExpertSlice {
    std::string fused;  // the fused tensor holding it
    int64_t expert = 0, row0 = 0, rows = 0;  // rows [row0, row0 + rows) of fused[expert]
  };
  std::map<std::string, ExpertSlice> fused_;  // per-expert name -> where it lives in a fused tensor
  std::map<int64_t, FusedExperts> fused_layers_;
  // Qwen3_5ForConditionalGeneration stores its text model under "model.language_model." (and the
  // vision tower under "model.visual.", skipped): the prefix the text parameters' "model." is
  // stored as ("" for a text-only checkpoint). stored(name) is the tensor's name in the files.
  std::string text_prefix_;
  std::string stored(const std::string& name) const;
};

// Shortcut: open `dir`, return all parameters as f32 and, when config is given, the config.
TensorMap load_hf_weights(const std::string& dir, ModelConfig* config = nullptr);

struct HfExportOptions {
  DType dtype = DType::BF16;                  // dtype of the written tensors (f32, bf16, f16)
  uint64_t max_shard_bytes = 5'000'000'000;   // HF's default max_shard_size "5GB"
  std::string tokenizer_dir;                  // copy tokenizer files from here ("" = none)
  bool replace = false;                       // replace a non-empty folder (else refused: --replace)
};

// Writes an HF folder loadable by transformers' from_pretrained, one tensor at a time, so that no
// caller needs the whole model in memory (a sharded run gathers, adds and frees one parameter
// after another): config.json (torch_dtype = opt.dtype) and the weights in module order through
// SafetensorsFolderWriter (io/safetensors_folder.h: shards of at most max_shard_bytes, each file
// atomic, the index with metadata.total_size and total_parameters, stale files of an earlier
// export removed). Since every size follows from the config and the dtype, the whole plan is
// fixed by the constructor and each tensor goes to disk as it is added. A tied model writes only
// model.embed_tokens.weight. Memory: the writer holds no tensor, only a bounded conversion
// buffer. The folder is written whole or not at all (util/output_folder.h): everything goes into
// a temporary sibling that finish() swaps into place; destroyed without finish(), the temporary
// is removed and `dir` is as it was. A non-empty `dir` is refused unless opt.replace.
// config.json and the tokenizer files are written (atomically) by finish(). Tokenizer files copied
// when present: tokenizer.json, tokenizer_config.json, special_tokens_map.json, vocab.json,
// merges.txt, added_tokens.json, generation_config.json, chat_template.jinja (at least one must
// exist).
class HfExportWriter {
 public:
  // Validates the options and the config and plans the shards; nothing is written before the
  // first add() (which creates `dir`).
  HfExportWriter(const std::string& dir, const ModelConfig& c, const HfExportOptions& opt = {});
  ~HfExportWriter();
  HfExportWriter(const HfExportWriter&) = delete;
  HfExportWriter& operator=(const HfExportWriter&) = delete;

  // The next parameter of model_param_specs(c), in that order (an error names the expected one),
  // in a floating dtype with the spec's shape; converted to opt.dtype and written now. The caller
  // may free `t` as soon as this returns.
  void add(const std::string& name, const Tensor& t);
  // Writes the index (sharded), config.json and the tokenizer files and removes stale files;
  // error when parameters are missing.
  void finish();

  const std::vector<ParamSpec>& specs() const { return specs_; }  // the order add() expects
  size_t added() const { return next_; }
  size_t shard_count() const { return out_->shard_count(); }

 private:
  std::string dir_;
  ModelConfig config_;
  HfExportOptions opt_;
  std::vector<ParamSpec> specs_;
  std::unique_ptr<OutputFolder> folder_;
  std::unique_ptr<SafetensorsFolderWriter> out_;
  size_t next_ = 0;
  bool finished_ = false;
};

// The whole-model form: `params` must hold exactly model_param_specs(c) (plus, for a tied model,
// optionally an lm_head.weight equal to the embedding); checked before anything is written, then
// streamed through HfExportWriter.
void export_hf_checkpoint(const std::string& dir, const ModelConfig& c, const TensorMap& params,
                          const HfExportOptions& opt = {});

}  // namespace titan
