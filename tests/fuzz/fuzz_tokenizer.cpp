// libFuzzer entry point; the body is titan::fuzz::tokenizer_round_trip in data_harness.h.
#include <cstddef>
#include <cstdint>

#include "data_harness.h"

// The bundled 151k-token tokenizer loads once before fuzzing: under ASan on a busy machine its
// load alone can outlast libFuzzer's per-input timeout, which would be reported against input 1.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)titan::fuzz::bundled_tokenizer();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  titan::fuzz::tokenizer_round_trip(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
