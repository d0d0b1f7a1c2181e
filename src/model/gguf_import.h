// GGUF -> Hugging Face folder (`titan import gguf`): config.json, model.safetensors,
// tokenizer.json and tokenizer_config.json, so that every other command (train, score, generate,
// export) reads a model published as GGUF like any HF checkpoint.
//
//   config       from the {arch}.* metadata; architectures llama, qwen2, qwen3, qwen3moe, qwen35,
//                qwen35moe; tie_word_embeddings when there is no output.weight
//   weights      every tensor dequantized (io/gguf_quants.h) to f32, stored as f32 or bf16 under
//                its HF name; for llama, the rows of q_proj and k_proj are put back in HF's order
//                (llama.cpp's converter interleaves the two rotary halves of each head); for
//                qwen35 the converter's transforms are undone (norm weights - 1, A_log =
//                log(-ssm_a), value heads back from tiled to grouped order) and the MTP layers skipped
//   tokenizer    byte-level BPE (tokenizer.ggml.model "gpt2"): vocabulary, merges, the control
//                and user-defined tokens as added tokens, and the pre-tokenizer named by
//                tokenizer.ggml.pre; tokenizer_config.json carries the chat template and the
//                bos / eos / pad / unk tokens
// Anything the engine cannot represent (another architecture or tokenizer, rope_freqs, an
// unknown tensor) is an error naming it; nothing is written then.
#pragma once
#include <string>

#include "core/dtype.h"
#include "io/gguf.h"
#include "model/config.h"

namespace titan {

struct GgufImportReport {
  ModelConfig config;
  int64_t tensors = 0, params = 0, vocab = 0, merges = 0;
  int64_t skipped = 0;  // qwen35: tensors of the multi-token-prediction layers (not imported)
  std::string architecture, pre_tokenizer;
};

// The model configuration a GGUF file describes (the fuzzing and unit-test entry point).
ModelConfig gguf_model_config(const GgufFile& f);
// HF name of a GGUF tensor name of a `layers`-layer model ("" when not a known name).
std::string gguf_to_hf_name(const std::string& gguf_name);
// Inverse of llama.cpp's Qwen3.5 value-head reorder: `k_heads * v_per_k` heads of `head_rows` rows
// (row length `cols`) from llama.cpp's tiled order (GGUF head j * k_heads + g) back to HF's order
// grouped by key head (HF head g * v_per_k + j).
void untile_v_heads(const float* src, float* dst, int64_t k_heads, int64_t v_per_k, int64_t head_rows, int64_t cols);
// Inverse of llama.cpp's q/k row permutation: rows [n_heads * head_dim] of `w` (row length `cols`)
// from the GGUF order (each head's rows as pairs (i, i + D/2) interleaved) back to HF's order.
void unpermute_qk_rows(const float* src, float* dst, int64_t n_heads, int64_t head_dim, int64_t cols);
// tokenizer.json / tokenizer_config.json texts from the tokenizer.* metadata.
std::string gguf_tokenizer_json(const GgufFile& f);
std::string gguf_tokenizer_config_json(const GgufFile& f, const ModelConfig& c);

// Writes the folder `out_dir` whole or not at all (util/output_folder.h); a non-empty one is
// refused unless `replace` (then nothing of what it held survives).
GgufImportReport import_gguf(const std::string& gguf_path, const std::string& out_dir, DType dtype, bool replace = false);

}  // namespace titan
