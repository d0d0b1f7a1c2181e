// Helpers shared by the checkpoint tests: temporary folders, error capture, small tensor sets
// (f32, bf16 and i64) and byte-exact comparison.
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "core/error.h"
#include "core/rng.h"
#include "train/checkpoint.h"
#include "util/strings.h"

namespace titan::test {

// Calls check(damaged_bytes, what) for every 7th truncation of `bytes` and for 300 single-byte
// flips at Philox{seed, seed} positions (the reader must refuse or read back exact data).
template <class F>
void for_each_damaged(const std::string& bytes, uint64_t seed, F&& check) {
  for (size_t n = 0; n < bytes.size(); n += 7) check(bytes.substr(0, n), "truncated to " + std::to_string(n));
  Philox rng{seed, seed};
  for (uint64_t i = 0; i < 300; ++i) {
    std::string b = bytes;
    size_t pos = size_t(rng.uniform(2 * i) * double(b.size())) % b.size();
    b[pos] ^= char(1 + int(rng.uniform(2 * i + 1) * 254));
    check(b, "byte " + std::to_string(pos) + " flipped");
  }
}

inline Tensor random_f32(const Shape& s, uint64_t stream) {
  Tensor t = Tensor::empty(s, DType::F32);
  fill_normal(t, 0.0, 1.0, Philox{1234, stream});
  return t;
}

// 15 + 5 + 7 + 4 = 31 elements in four dtypes-and-shapes.
inline std::vector<NamedTensor> model_tensors(uint64_t salt) {
  Tensor bf = random_f32({7}, salt + 3).to(DType::BF16);
  Tensor ids = Tensor::empty({2, 2}, DType::I64);
  for (int i = 0; i < 4; ++i) ids.data<int64_t>()[i] = int64_t(salt) * 10 + i;
  return {{"model.embed_tokens.weight", random_f32({3, 5}, salt + 1)},
          {"model.norm.weight", random_f32({5}, salt + 2)},
          {"model.bf16_thing", bf},
          {"model.ids", ids}};
}

inline std::vector<NamedTensor> optim_tensors(uint64_t salt) {
  return {{"exp_avg.model.embed_tokens.weight", random_f32({3, 5}, salt + 11)},
          {"exp_avg_sq.model.embed_tokens.weight", random_f32({3, 5}, salt + 12)}};
}

// Same names/shapes/dtypes, zero-filled: the destination a resumed run loads into.
inline std::vector<NamedTensor> zeros_like(const std::vector<NamedTensor>& ts) {
  std::vector<NamedTensor> out;
  for (auto& t : ts) out.push_back({t.name, Tensor::zeros(t.tensor.shape(), t.tensor.dtype())});
  return out;
}

inline void expect_same(const std::vector<NamedTensor>& a, const std::vector<NamedTensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].name, b[i].name);
    ASSERT_EQ(a[i].tensor.nbytes(), b[i].tensor.nbytes());
    EXPECT_EQ(std::memcmp(a[i].tensor.raw(), b[i].tensor.raw(), a[i].tensor.nbytes()), 0) << a[i].name;
  }
}

inline TrainState state_at(int64_t step) {
  TrainState st;
  st.step = step;
  st.config_hash = "0123456789abcdef";
  st.data_state = std::string("pos\0\xff\x01", 6) + std::to_string(step);  // arbitrary bytes
  st.rng_state = "philox:42:" + std::to_string(step * 7);
  st.extra = {{"tokens_seen", step * 1000}};
  return st;
}

// Rewrite a step's state.json as a test edits it, with a matching state_crc32c (so that the
// edit under test, not the checksum, is what the reader sees).
inline void write_state_json(const std::string& path, nlohmann::json j) {
  j["state_crc32c"] = state_json_checksum(j);
  write_file_atomic(path, j.dump());
}

inline void flip_byte(const std::string& path, int64_t from_end) {
  std::string b = read_file(path);
  b[b.size() - size_t(from_end)] ^= 0x20;
  write_file_atomic(path, b);
}

}  // namespace titan::test
