// GGUF container and dequantizers: every dequantized type equals, bit for bit, what the gguf
// Python package gives (tests/fixtures/gguf, tools/oracle/gguf_fixtures.py), and hostile files
// get one clear error.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "io/gguf.h"
#include "io/gguf_quants.h"
#include "io/safetensors.h"
#include "unit/io/io_test_util.h"
#include "util/strings.h"

using namespace titan;

namespace {

std::string fixture(const char* name) { return std::string(TITAN_FIXTURES) + "/gguf/" + name; }

TEST(Gguf, EveryTypeDequantizesExactlyAsTheGgufPackage) {
  GgufFile f = GgufFile::open(fixture("quants.gguf"));
  auto want = SafetensorsFile::open(fixture("quants_expected.safetensors"));
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.string("general.architecture").value_or(""), "llama");
  const char* types[] = {"F32",  "F16",  "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1",
                         "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K"};
  ASSERT_EQ(f.tensors().size(), std::size(types));
  for (const char* name : types) {
    SCOPED_TRACE(name);
    const GgufTensorInfo* t = f.find_tensor(name);
    ASSERT_NE(t, nullptr);
    ASSERT_STREQ(ggml_type_info(t->type)->name, name);
    EXPECT_EQ(t->torch_shape(), (std::vector<int64_t>{2, 512}));
    std::vector<float> got(size_t(t->numel));
    ggml_dequantize(t->type, f.bytes(*t).data(), t->numel, got.data());
    Tensor ref = want.get(name, DType::F32);
    ASSERT_EQ(ref.numel(), t->numel);
    int64_t differ = 0;
    for (int64_t i = 0; i < t->numel; ++i) differ += std::memcmp(&got[size_t(i)], ref.data<float>() + i, 4) != 0;
    EXPECT_EQ(differ, 0) << "elements not bit-equal to gguf-py";
  }
}

// The fixture's bytes, for mutation.
std::string image() { return read_file(fixture("quants.gguf")); }

std::string open_error(const std::string& bytes) {
  auto keep = std::make_shared<std::string>(bytes);
  return iotest::error_of([&] { GgufFile::from_memory(keep->data(), keep->size(), keep, "x.gguf"); });
}

void put_u64(std::string& s, size_t at, uint64_t v) { std::memcpy(&s[at], &v, 8); }
void put_u32(std::string& s, size_t at, uint32_t v) { std::memcpy(&s[at], &v, 4); }

TEST(Gguf, HostileHeadersGetOneLineErrors) {
  const std::string good = image();
  ASSERT_EQ(open_error(good), "");
  auto expect_err = [](const std::string& bytes, const std::string& part) {
    const std::string e = open_error(bytes);
    EXPECT_NE(e.find(part), std::string::npos) << "error: " << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
    EXPECT_EQ(e.rfind("x.gguf", 0), 0u) << "error names the file: " << e;
  };
  expect_err("", "not a GGUF file");
  expect_err(std::string("GGML") + good.substr(4), "not a GGUF file");
  std::string v = good;
  put_u32(v, 4, 1);
  expect_err(v, "version 1 is not supported");
  std::string t = good;
  put_u64(t, 8, uint64_t(1) << 40);
  expect_err(t, "tensor count");
  std::string k = good;
  put_u64(k, 16, 100000);
  expect_err(k, "metadata count");
  for (size_t cut : {size_t(30), good.size() / 4, good.size() - 100}) expect_err(good.substr(0, cut), "");
  // The first key's length made absurd.
  std::string kl = good;
  put_u64(kl, 24, uint64_t(1) << 62);
  expect_err(kl, "absurd length");
}

// Every truncation and every single-byte corruption of the header: an error or a valid file,
// never a crash (run under the sanitizers by the fuzz target too).
TEST(Gguf, EveryTruncationAndByteFlipIsHandled) {
  const std::string good = image();
  GgufFile f = GgufFile::open(fixture("quants.gguf"));
  const size_t header = good.size() - 14 * 100;  // well inside the tensor infos
  for (size_t cut = 0; cut < good.size(); cut += 7) open_error(good.substr(0, cut));
  for (size_t i = 0; i < std::min(header, good.size()); ++i) {
    std::string b = good;
    b[i] = char(b[i] ^ 0x5A);
    open_error(b);
  }
}

}  // namespace
