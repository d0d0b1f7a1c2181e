// GGUF container and dequantizers: every dequantized type equals, bit for bit, what the gguf
// Python package gives (tests/fixtures/gguf, tools/oracle/gguf_fixtures.py), and hostile files
// get one clear error.
#include <gtest/gtest.h>

#include <malloc.h>

#include <cstring>
#include <memory>
#include <vector>

#include "io/gguf.h"
#include "io/gguf_quants.h"
#include "io/safetensors.h"
#include "unit/io/gguf_writer.h"
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

namespace {

size_t heap_in_use() { return mallinfo2().uordblks + mallinfo2().hblkhd; }

// 4 arrays of 4 Mi u8 each (16 MiB of file) and 1 Mi strings: the reader's memory stays within
// about 2 bytes per byte of file (it took 88 per byte: a GgufValue per element).
TEST(Gguf, MemoryStaysProportionalToTheFile) {
  iotest::GgufWriter w;
  for (int k = 0; k < 4; ++k) w.kv_array("big." + std::to_string(k), GgufType::U8, uint64_t(4) << 20, 1, char(k));
  std::vector<std::string> strs;
  for (int k = 0; k < (1 << 20); ++k) strs.push_back(std::to_string(k % 10));
  w.kv_strings("many", strs);
  strs.clear();
  auto bytes = std::make_shared<std::string>(w.image());
  const size_t before = heap_in_use();
  GgufFile f = GgufFile::from_memory(bytes->data(), bytes->size(), bytes, "big.gguf");
  const size_t used = heap_in_use() - before;
  std::printf("GGUF of %zu bytes: %zu bytes of memory to open\n", bytes->size(), used);
  EXPECT_LT(double(used), 2.0 * double(bytes->size())) << used << " bytes of memory for a file of " << bytes->size();
  const GgufValue* a = f.array("big.3", GgufType::U8);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->size(), size_t(4) << 20);
  EXPECT_EQ(a->int_at(12345), 3);
  EXPECT_EQ(f.array("many", GgufType::STRING)->str_at(17), "7");
}

// Found by fuzz_gguf: dimensions whose product passes 2^64 wrapped past the shape check and
// overflowed the element count (undefined behaviour).
TEST(Gguf, ShapesWhoseProductWrapsAreRefused) {
  iotest::GgufWriter w;
  w.tensor("t", {uint64_t(1) << 33, uint64_t(3) << 32}, 0, 0);
  EXPECT_NE(open_error(w.image()).find("x.gguf: tensor \"t\" has an absurd shape"), std::string::npos) << open_error(w.image());
  iotest::GgufWriter v;
  v.tensor("t", {uint64_t(1) << 20, uint64_t(1) << 20, uint64_t(1) << 20, uint64_t(1) << 30}, 0, 0);
  EXPECT_NE(open_error(v.image()).find("has an absurd shape"), std::string::npos);
}

TEST(Gguf, ArrayElementsAreCheckedLikeScalars) {
  iotest::GgufWriter w;
  w.kv_array("flags", GgufType::BOOL, 3, 1, 2);
  EXPECT_NE(open_error(w.image()).find("metadata \"flags\": bool element 0 is neither 0 nor 1"), std::string::npos);
  iotest::GgufWriter u;
  u.kv_array("ids", GgufType::U64, 2, 8, char(0xFF));
  EXPECT_NE(open_error(u.image()).find("u64 element 0"), std::string::npos);
}

// Invalid UTF-8 in any string (a key, a value, an element) is the file's error, not a JSON
// library's message later ([json.exception.type_error.316]).
TEST(Gguf, InvalidUtf8IsAnErrorNamingTheFile) {
  for (const std::string bad : {"\xff", "a\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "ok\xe2\x82"}) {
    iotest::GgufWriter w;
    w.kv_strings("tokenizer.ggml.tokens", {"a", bad});
    const std::string e = open_error(w.image());
    EXPECT_EQ(e.rfind("x.gguf: a metadata string at offset", 0), 0u) << e;
    EXPECT_NE(e.find("is not valid UTF-8"), std::string::npos) << e;
    iotest::GgufWriter k;
    k.kv_string(bad, "x");
    EXPECT_NE(open_error(k.image()).find("is not valid UTF-8"), std::string::npos);
  }
  iotest::GgufWriter ok;
  ok.kv_strings("t", {"é", "日本", "🙂", ""});
  EXPECT_EQ(open_error(ok.image()), "");
}

}  // namespace
