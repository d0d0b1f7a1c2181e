// libFuzzer entry point; the body is titan::fuzz::parquet in data_harness.h.
#include <cstddef>
#include <cstdint>

#include "data_harness.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  titan::fuzz::parquet(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
