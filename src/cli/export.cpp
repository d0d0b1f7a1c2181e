// titan export: a training checkpoint (or an HF folder, to convert dtype / resharding) to a
// Hugging Face folder: safetensors (sharded above --max-shard-bytes, with index.json),
// config.json and the tokenizer files. A LoRA run's checkpoint: --adapter writes its adapters
// as a PEFT folder, --merge-lora the base with the adapters merged. The written dtype is the
// source's unless --dtype says otherwise (one rule with [checkpoint] export_dtype: a training
// checkpoint's f32), and the summary line says which.
#include <cstdio>

#include "cli/command.h"
#include "data/tokenizer.h"
#include "model/hf_checkpoint.h"
#include "model/hf_model.h"
#include "model/config.h"
#include "model/peft_adapter.h"
#include "train/checkpoint_model.h"

namespace titan::cli {

static int cmd_export(const std::vector<std::string>& argv) {
  Args args(argv, {"adapter", "merge-lora", "replace", "allow-other-base"});
  args.check_known({"from", "output", "dtype", "tokenizer", "max-shard-bytes", "adapter", "merge-lora", "replace",
                    "allow-other-base"});
  const std::string from = args.require("from"), out = args.require("output");
  const bool adapter = args.has("adapter"), merge = args.has("merge-lora");
  TITAN_CHECK(!(adapter && merge), "--adapter and --merge-lora exclude each other");
  HfExportOptions eo;
  // The written dtype: --dtype, else the source's (an HF folder's torch_dtype, a training
  // checkpoint's f32 as [checkpoint] export_dtype writes it, a merged LoRA export its base's).
  const bool dtype_given = args.has("dtype");
  if (dtype_given)
    TITAN_CHECK(parse_dtype(args.get("dtype"), &eo.dtype) && eo.dtype != DType::I32 && eo.dtype != DType::I64,
                "--dtype must be f32, bf16 or f16, got '", args.get("dtype"), "'");
  auto kept = [&](const std::string& folder) {
    if (dtype_given) return;
    eo.dtype = is_hf_folder(folder) ? load_hf_config(folder + "/config.json").torch_dtype : DType::F32;
  };
  auto dtype_said = [&] {
    return std::string(dtype_name(eo.dtype)) + (dtype_given ? ", as --dtype asked" : ", the source's dtype (--dtype to change)");
  };
  eo.replace = args.has("replace");
  eo.max_shard_bytes = args.get_uint64("max-shard-bytes", eo.max_shard_bytes, 1, UINT64_MAX);
  eo.tokenizer_dir = args.get("tokenizer", is_hf_folder(from) ? from : data::Tokenizer::default_dir());
  if (adapter || merge) {  // a LoRA run's checkpoint: its adapters, or its base with them merged
    TITAN_CHECK(!is_hf_folder(from), from, ": --adapter / --merge-lora export a LoRA training checkpoint, not an HF folder");
    std::string base, fingerprint;
    auto model = load_checkpoint_model(from, nullptr, &base, args.has("allow-other-base"), &fingerprint);
    TITAN_CHECK(model->lora_enabled(), from, ": not a LoRA checkpoint (no adapters); export it without --adapter / --merge-lora");
    if (adapter) {
      save_peft_adapter(*model, out, base, eo.replace, fingerprint);
      std::printf("exported the LoRA adapters of %s to %s (PEFT folder, base %s)\n", from.c_str(), out.c_str(),
                  base.c_str());
      return 0;
    }
    model->merge_lora();
    if (!args.has("tokenizer") && is_hf_folder(base)) eo.tokenizer_dir = base;
    kept(base);
    export_hf_checkpoint(out, model->config(), model_state(*model), eo);
    std::printf("exported %s with its LoRA adapters merged into %s to %s (%s)\n", from.c_str(), base.c_str(),
                out.c_str(), dtype_said().c_str());
    return 0;
  }
  const FolderWeights w = load_folder_weights(from);
  if (!dtype_given) eo.dtype = is_hf_folder(from) ? w.config.torch_dtype : DType::F32;
  export_hf_checkpoint(out, w.config, w.tensors, eo);
  std::printf("exported %s to %s (%s)\n", from.c_str(), out.c_str(), dtype_said().c_str());
  return 0;
}

TITAN_COMMAND("export", "write a training checkpoint as a Hugging Face folder", cmd_export);

}  // namespace titan::cli
