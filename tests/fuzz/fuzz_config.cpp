// libFuzzer target: the config.json parser on arbitrary text. An accepted config must validate,
// produce its parameter list, and survive an export/parse round trip unchanged.
#include <cstdint>
#include <string>

#include "core/error.h"
#include "model/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  titan::ModelConfig c;
  try {
    c = titan::parse_hf_config(text, "fuzz/config.json");
  } catch (const titan::Error&) {
    return 0;
  }
  c.validate("fuzz");
  (void)titan::model_param_count(c);
  titan::ModelConfig back = titan::parse_hf_config(titan::hf_config_json(c, c.torch_dtype), "roundtrip");
  if (back.vocab_size != c.vocab_size || back.hidden_size != c.hidden_size ||
      back.intermediate_size != c.intermediate_size || back.num_hidden_layers != c.num_hidden_layers ||
      back.num_attention_heads != c.num_attention_heads || back.num_key_value_heads != c.num_key_value_heads ||
      back.head_dim != c.head_dim || back.rope_theta != c.rope_theta || back.rms_norm_eps != c.rms_norm_eps ||
      back.tie_word_embeddings != c.tie_word_embeddings || back.max_position_embeddings != c.max_position_embeddings ||
      back.torch_dtype != c.torch_dtype || back.bos_token_id != c.bos_token_id || back.eos_token_id != c.eos_token_id)
    __builtin_trap();
  return 0;
}
