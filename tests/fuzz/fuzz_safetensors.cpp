// libFuzzer target: the safetensors reader on arbitrary bytes, through the in-memory entry point.
// Every input must either be refused with a titan::Error or yield tensors whose every element
// can be read and converted; a crash, sanitizer report or any other exception is a finding.
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "core/error.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto bytes = std::make_shared<std::vector<uint8_t>>(data, data + size);
  try {
    titan::SafetensorsFile f = titan::SafetensorsFile::from_memory(bytes->data(), bytes->size(), bytes, "fuzz.safetensors");
    uint64_t covered = 0;
    for (const auto& e : f.entries()) {
      covered += e.end - e.begin;
      try {
        titan::Tensor t = f.get(e.name, titan::DType::F32);
        float acc = 0;
        for (int64_t i = 0; i < t.numel(); ++i) acc += t.data<float>()[i];
        titan::Tensor b = f.get(e.name, titan::DType::BF16);
        if (b.numel() != t.numel()) __builtin_trap();
        (void)acc;
      } catch (const titan::Error&) {
        // Integer or unloadable dtypes: refused per tensor, which is fine.
      }
      std::string_view raw = f.bytes(e.name);
      if (raw.size() != e.end - e.begin) __builtin_trap();
    }
    // A file that validates is tiled exactly by its tensors.
    if (covered > size) __builtin_trap();
  } catch (const titan::Error&) {
  }
  return 0;
}
