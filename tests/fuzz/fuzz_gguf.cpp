// libFuzzer target: the GGUF reader (io/gguf.h) on arbitrary bytes, then everything import does
// with a file that validates: dequantize every tensor it can, build the model config and the
// tokenizer files (model/gguf_import.h). Every input must be refused with a titan::Error or
// processed; a crash, sanitizer report or any other exception is a finding.
#include <cstdint>
#include <memory>
#include <vector>

#include "core/error.h"
#include "io/gguf.h"
#include "io/gguf_quants.h"
#include "model/gguf_import.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto bytes = std::make_shared<std::vector<uint8_t>>(data, data + size);
  try {
    titan::GgufFile f = titan::GgufFile::from_memory(bytes->data(), bytes->size(), bytes, "fuzz.gguf");
    for (const auto& t : f.tensors()) {
      if (t.offset + t.nbytes > size || t.numel > (1 << 22)) __builtin_trap();  // validated: inside the input
      const titan::GgmlTypeInfo* ti = titan::ggml_type_info(t.type);
      if (!ti) __builtin_trap();
      if (!ti->dequantizable) continue;
      std::vector<float> out(size_t(t.numel));
      titan::ggml_dequantize(t.type, f.bytes(t).data(), t.numel, out.data());
    }
    try {
      titan::ModelConfig c = titan::gguf_model_config(f);
      (void)titan::gguf_tokenizer_config_json(f, c);
    } catch (const titan::Error&) {
    }
    try {
      (void)titan::gguf_tokenizer_json(f);
    } catch (const titan::Error&) {
    }
  } catch (const titan::Error&) {
  }
  return 0;
}
