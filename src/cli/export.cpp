// titan export: a training checkpoint (or an HF folder, to convert dtype / resharding) to a
// Hugging Face folder: safetensors (sharded above --max-shard-bytes, with index.json),
// config.json and the tokenizer files.
#include <cstdio>

#include "cli/command.h"
#include "data/tokenizer.h"
#include "model/hf_checkpoint.h"
#include "train/checkpoint_model.h"

namespace titan::cli {

static int cmd_export(const std::vector<std::string>& argv) {
  Args args(argv, {});
  args.check_known({"from", "output", "dtype", "tokenizer", "max-shard-bytes"});
  const std::string from = args.require("from"), out = args.require("output");
  HfExportOptions eo;
  TITAN_CHECK(parse_dtype(args.get("dtype", "bf16"), &eo.dtype) && eo.dtype != DType::I32 && eo.dtype != DType::I64,
              "--dtype must be f32, bf16 or f16, got '", args.get("dtype"), "'");
  eo.max_shard_bytes = args.get_uint64("max-shard-bytes", eo.max_shard_bytes, 1, UINT64_MAX);
  eo.tokenizer_dir = args.get("tokenizer", is_hf_folder(from) ? from : data::Tokenizer::default_dir());
  const FolderWeights w = load_folder_weights(from);
  export_hf_checkpoint(out, w.config, w.tensors, eo);
  std::printf("exported %s to %s (%s)\n", from.c_str(), out.c_str(), dtype_name(eo.dtype));
  return 0;
}

TITAN_COMMAND("export", "write a training checkpoint as a Hugging Face folder", cmd_export);

}  // namespace titan::cli
