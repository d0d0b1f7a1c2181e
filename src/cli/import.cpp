// titan import gguf FILE --output DIR [--dtype f32|bf16]: a model published as GGUF (llama.cpp's
// container, quantized or not) to a Hugging Face folder that every other command reads
// (model/gguf_import.h has what is converted and how).
#include <cstdio>

#include "cli/command.h"
#include "core/error.h"
#include "model/gguf_import.h"

namespace titan::cli {

static int cmd_import(const std::vector<std::string>& argv) {
  Args args(argv, {"replace"});
  args.check_known({"output", "dtype", "replace"});
  const auto& pos = args.positional();
  TITAN_CHECK(pos.size() == 2 && pos[0] == "gguf", "usage: titan import gguf FILE --output DIR [--dtype f32|bf16]");
  const std::string out = args.require("output");
  DType dt = DType::F32;
  TITAN_CHECK(parse_dtype(args.get("dtype", "f32"), &dt) && (dt == DType::F32 || dt == DType::BF16),
              "--dtype must be f32 or bf16, got '", args.get("dtype"), "'");
  const GgufImportReport r = import_gguf(pos[1], out, dt, args.has("replace"));
  const ModelConfig& c = r.config;
  std::printf("imported %s (%s, %lld tensors) to %s: %s, %lld layers, hidden %lld, heads %lld/%lld, head_dim %lld, "
              "ffn %lld, vocab %lld, %s embeddings, %.1fM parameters (%s); tokenizer: %lld merges, pre-tokenizer %s\n",
              pos[1].c_str(), r.architecture.c_str(), (long long)r.tensors, out.c_str(), c.model_type.c_str(),
              (long long)c.num_hidden_layers, (long long)c.hidden_size, (long long)c.num_attention_heads,
              (long long)c.num_key_value_heads, (long long)c.head_dim, (long long)c.intermediate_size,
              (long long)c.vocab_size, c.tie_word_embeddings ? "tied" : "untied", double(r.params) / 1e6,
              dtype_name(dt), (long long)r.merges, r.pre_tokenizer.c_str());
  if (r.skipped > 0)
    std::printf("skipped %lld tensors of the multi-token-prediction layers (not part of the model)\n",
                (long long)r.skipped);
  return 0;
}

TITAN_COMMAND("import", "convert a GGUF model file to a Hugging Face folder", cmd_import);

}  // namespace titan::cli
