// Helpers shared by the io tests: temporary folders, hand-made safetensors images, error capture.
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>

#include "common/test_util.h"
#include "core/error.h"
#include "core/tensor.h"
#include "model/config.h"

namespace titan::iotest {

using test::error_of;

// A fresh folder under the system temp dir, removed at scope exit.
struct TempDir {
  std::string path;
  TempDir() {
    static int n = 0;
    path = (std::filesystem::temp_directory_path() /
            ("titan_io_" + std::to_string(::getpid()) + "_" + std::to_string(n++)))
               .string();
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string operator/(const std::string& name) const { return path + "/" + name; }
};

// 8-byte little-endian length + header text + data bytes.
inline std::string st_image(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[size_t(i)] = char(n >> (8 * i));
  return out + header + data;
}

// f32 tensor with distinct values exactly representable in bf16 and f16 (k/8, |k| <= 125).
inline Tensor exact_tensor(const Shape& shape, int seed) {
  Tensor t = Tensor::empty(shape, DType::F32);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = float((i * 7 + seed * 13) % 251 - 125) / 8.0f;
  return t;
}

// The shapes of tools/oracle/io_fixtures.py: a 2-layer dense model small enough to write by hand.
inline ModelConfig tiny_config(bool tied) {
  ModelConfig c;
  c.vocab_size = 32;
  c.hidden_size = 16;
  c.intermediate_size = 24;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 2;
  c.num_key_value_heads = 1;
  c.head_dim = 8;
  c.max_position_embeddings = 128;
  c.rope_theta = 10000.0;
  c.tie_word_embeddings = tied;
  return c;
}

}  // namespace titan::iotest

#define EXPECT_ERROR_CONTAINS(expr, needle)                                           \
  do {                                                                                \
    std::string m_ = ::titan::iotest::error_of([&] { expr; });                        \
    EXPECT_NE(m_.find(needle), std::string::npos) << "error was: \"" << m_ << "\"";   \
    EXPECT_EQ(m_.find('\n'), std::string::npos) << "multi-line error: " << m_;        \
  } while (0)
