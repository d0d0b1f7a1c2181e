// What the tests of GPU models, checkpoints and exports share (docs/cuda.md): cuda:0, host copies
// of a tensor wherever it lives, a model built there, the pinned staging bound set for one scope,
// and the byte comparison of two folders. Header-only: the test binaries that include it link the
// model and the core already.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "core/pinned_staging.h"
#include "model/decoder.h"
#include "util/strings.h"

namespace titan::test {

inline const Device kGpu{DeviceType::CUDA, 0};

// t's elements (f32) / bytes on the host, copied there when t is on the GPU.
inline std::vector<float> host_floats(const Tensor& t) {
  const Tensor h = t.device().type == DeviceType::CPU ? t : t.to(cpu());
  return std::vector<float>(h.data<float>(), h.data<float>() + h.numel());
}
inline std::string host_bytes(const Tensor& t) {
  const Tensor h = t.device().type == DeviceType::CPU ? t : t.to(cpu());
  return std::string(static_cast<const char*>(h.raw()), h.nbytes());
}

// A trainable f32 model on cuda:0 with the cuda kernel set.
inline DecoderModel gpu_model(const ModelConfig& c) {
  return DecoderModel(c, "cuda", false, false, DType::F32, {}, {}, {}, kGpu);
}

// PinnedStaging's chunk bound for the scope (0, the default, after it).
struct ScopedChunk {
  explicit ScopedChunk(uint64_t bytes) { PinnedStaging::set_chunk_bytes(bytes); }
  ~ScopedChunk() { PinnedStaging::set_chunk_bytes(0); }
};

// The two folders hold the same file names with the same bytes.
inline void expect_same_files(const std::string& a, const std::string& b) {
  namespace fs = std::filesystem;
  std::vector<std::string> na, nb;
  for (auto& e : fs::directory_iterator(a)) na.push_back(e.path().filename().string());
  for (auto& e : fs::directory_iterator(b)) nb.push_back(e.path().filename().string());
  std::sort(na.begin(), na.end());
  std::sort(nb.begin(), nb.end());
  ASSERT_EQ(na, nb);
  for (auto& n : na) EXPECT_TRUE(read_file(a + "/" + n) == read_file(b + "/" + n)) << n << " differs";
}

}  // namespace titan::test
