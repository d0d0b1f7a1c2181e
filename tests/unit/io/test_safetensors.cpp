// safetensors: write/read round trips per dtype, zero-copy reads, and one test per malformed file,
// each checking the specific one-line error.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "io/safetensors.h"
#include "io_test_util.h"
#include "util/strings.h"

using namespace titan;
using namespace titan::iotest;

namespace {

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
}

// Error text of opening an image written to a file called "bad.safetensors".
std::string open_error(const std::string& image) {
  TempDir d;
  write_bytes(d / "bad.safetensors", image);
  std::string m = error_of([&] { SafetensorsFile::open(d / "bad.safetensors"); });
  // The in-memory entry point must agree with the file one.
  std::string m2 = error_of([&] { SafetensorsFile::from_memory(image.data(), image.size(), nullptr, d / "bad.safetensors"); });
  EXPECT_EQ(m, m2);
  return m;
}

#define EXPECT_OPEN_ERROR(image, needle)                                            \
  do {                                                                              \
    std::string m_ = open_error(image);                                             \
    EXPECT_NE(m_.find(needle), std::string::npos) << "error was: \"" << m_ << "\""; \
    EXPECT_NE(m_.find("bad.safetensors: "), std::string::npos) << m_;               \
    EXPECT_EQ(m_.find('\n'), std::string::npos) << m_;                              \
  } while (0)

const std::string k8(8, '\0'), k12(12, '\0'), k20(20, '\0');

}  // namespace

TEST(Safetensors, RoundTripEveryDtype) {
  TempDir d;
  Tensor f32 = exact_tensor({3, 5}, 1);
  Tensor bf = exact_tensor({7}, 2).to(DType::BF16);
  Tensor h = exact_tensor({2, 2, 2}, 3).to(DType::F16);
  Tensor i32 = Tensor::empty({4}, DType::I32);
  for (int i = 0; i < 4; ++i) i32.data<int32_t>()[i] = -i * 1000003;
  Tensor i64 = Tensor::empty({3}, DType::I64);
  for (int i = 0; i < 3; ++i) i64.data<int64_t>()[i] = (int64_t(1) << 40) * (i + 1);
  Tensor empty = Tensor::empty({0, 4}, DType::F32);
  save_safetensors(d / "a.safetensors", {{"w.f32", f32}, {"w.bf16", bf}, {"w.f16", h}, {"i32", i32}, {"i64", i64}, {"empty", empty}},
                   std::nullopt, {{"step", "7"}});

  SafetensorsFile f = SafetensorsFile::open(d / "a.safetensors");
  EXPECT_EQ(f.size(), 6u);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.metadata().at("step"), "7");
  for (const auto& [name, t] : std::vector<std::pair<std::string, Tensor>>{
           {"w.f32", f32}, {"w.bf16", bf}, {"w.f16", h}, {"i32", i32}, {"i64", i64}, {"empty", empty}}) {
    Tensor r = f.get(name);
    EXPECT_EQ(r.dtype(), t.dtype()) << name;
    EXPECT_EQ(r.shape(), t.shape()) << name;
    EXPECT_EQ(std::memcmp(r.raw(), t.raw(), t.nbytes()), 0) << name;
  }
  EXPECT_EQ(f.find("w.bf16")->dtype, "BF16");
  // Tensors are laid out in name order, contiguous from 0.
  std::vector<std::string> order;
  for (const auto& e : f.entries()) order.push_back(e.name);
  std::vector<std::string> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  // entries() is in data order; zero-size tensors may tie with a neighbour's offset.
  EXPECT_EQ(f.entries().front().begin, 0u);

  // Spec conformance of the bytes: u64 header length, multiple of 8, space padding.
  std::string bytes = read_file(d / "a.safetensors");
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(bytes[8], '{');
  std::string header = bytes.substr(8, n);
  EXPECT_EQ(header.find("\"__metadata__\":{\"format\":\"pt\""), 1u) << header;
  EXPECT_EQ(bytes.size(), 8 + n + f32.nbytes() + bf.nbytes() + h.nbytes() + i32.nbytes() + i64.nbytes());
  // No temporary file left behind.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(d.path), std::filesystem::directory_iterator()), 1);
}

TEST(Safetensors, WriteConvertsAndReadConverts) {
  TempDir d;
  Tensor a = exact_tensor({4, 6}, 5), b = exact_tensor({9}, 6);
  for (DType dt : {DType::BF16, DType::F16, DType::F32}) {
    save_safetensors(d / "c.safetensors", {{"a", a}, {"b", b}}, dt);
    SafetensorsFile f = SafetensorsFile::open(d / "c.safetensors");
    EXPECT_EQ(f.dtype("a"), dt);
    for (DType want : {DType::F32, DType::BF16, DType::F16}) {
      Tensor r = f.get("a", want).to(DType::F32);
      EXPECT_EQ(std::memcmp(r.raw(), a.raw(), a.nbytes()), 0) << dtype_name(dt) << " -> " << dtype_name(want);
    }
    Tensor into = Tensor::zeros({9}, DType::F32);
    f.read_into("b", into);
    EXPECT_EQ(std::memcmp(into.raw(), b.raw(), b.nbytes()), 0);
  }
  // Rounding on the way out is round-to-nearest-even, as PyTorch's .to(bfloat16).
  Tensor x = Tensor::empty({1}, DType::F32);
  x.data<float>()[0] = 1.00390625f;  // halfway between bf16 1.0 and 1.0078125
  save_safetensors(d / "r.safetensors", {{"x", x}}, DType::BF16);
  EXPECT_EQ(SafetensorsFile::open(d / "r.safetensors").get("x", DType::F32).data<float>()[0], 1.0f);
}

TEST(Safetensors, ZeroCopyWhenDtypeMatchesAndCopyOnWrite) {
  TempDir d;
  Tensor a = exact_tensor({64, 3}, 9).to(DType::BF16);
  save_safetensors(d / "z.safetensors", {{"a", a}});
  Tensor borrowed, converted;
  {
    SafetensorsFile f = SafetensorsFile::open(d / "z.safetensors");
    borrowed = f.get("a", DType::BF16);
    converted = f.get("a", DType::F32);
    EXPECT_TRUE(borrowed.is_borrowed());
    EXPECT_FALSE(converted.is_borrowed());
    EXPECT_EQ(borrowed.raw(), static_cast<const void*>(f.bytes("a").data()));
  }
  // The mapping outlives the file object through the tensor's keepalive.
  EXPECT_EQ(std::memcmp(borrowed.raw(), a.raw(), a.nbytes()), 0);
  // Writing to a borrowed tensor is private: the file keeps its bytes.
  borrowed.data<bf16>()[0].bits = 0x7f80;
  Tensor again = SafetensorsFile::open(d / "z.safetensors").get("a", DType::BF16);
  EXPECT_EQ(again.data<bf16>()[0].bits, a.data<bf16>()[0].bits);
}

TEST(Safetensors, MisalignedTensorIsCopiedNotBorrowed) {
  // A 1-element BF16 tensor first puts the F32 tensor at data offset 2 (legal in the format).
  std::string header = R"({"a":{"dtype":"BF16","shape":[1],"data_offsets":[0,2]},"b":{"dtype":"F32","shape":[2],"data_offsets":[2,10]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  float vals[2] = {1.5f, -2.25f};
  std::string data(10, '\0');
  uint16_t one = 0x3f80;
  std::memcpy(&data[0], &one, 2);
  std::memcpy(&data[2], vals, 8);
  std::string image = st_image(header, data);
  auto keep = std::make_shared<std::string>(image);
  SafetensorsFile f = SafetensorsFile::from_memory(keep->data(), keep->size(), keep, "mem");
  Tensor b = f.get("b", DType::F32);
  EXPECT_FALSE(b.is_borrowed());
  EXPECT_EQ(b.data<float>()[1], -2.25f);
  EXPECT_EQ(bf16_to_f32(f.get("b", DType::BF16).data<bf16>()[0].bits), 1.5f);
  EXPECT_EQ(f.get("a", DType::F32).data<float>()[0], 1.0f);
}

TEST(Safetensors, EmptyFileWithNoTensorsIsValid) {
  auto keep = std::make_shared<std::string>(st_image("{}      ", ""));
  EXPECT_EQ(SafetensorsFile::from_memory(keep->data(), keep->size(), keep, "mem").size(), 0u);
}

TEST(Safetensors, StreamWriterInAnyOrderEqualsSaveSafetensors) {
  TempDir d;
  Tensor a = exact_tensor({3, 5}, 1), b = exact_tensor({7}, 2), e = Tensor::empty({0, 4}, DType::F32);
  Tensor i = Tensor::zeros({2}, DType::I32);
  i.data<int32_t>()[1] = -9;
  save_safetensors(d / "whole.safetensors", {{"b", b}, {"a", a}, {"e", e}, {"i", i}}, std::nullopt, {{"k", "v"}});
  // The same layout declared up front, data arriving in reverse name order, bf16 input converted.
  SafetensorsStreamWriter w(d / "stream.safetensors",
                            {{"b", DType::F32, {7}}, {"a", DType::F32, {3, 5}}, {"e", DType::F32, {0, 4}}, {"i", DType::I32, {2}}},
                            {{"k", "v"}});
  EXPECT_EQ(w.file_size(), std::filesystem::file_size(d / "whole.safetensors"));
  w.write("i", i);
  w.write("e", e);
  w.write("b", b.to(DType::BF16));  // exact_tensor values are exact in bf16
  w.write("a", a);
  w.commit();
  EXPECT_EQ(read_file(d / "stream.safetensors"), read_file(d / "whole.safetensors"));
}

TEST(Safetensors, StreamWriterRefusesBadInput) {
  TempDir d;
  Tensor a = exact_tensor({2}, 1);
  {
    SafetensorsStreamWriter w(d / "x.safetensors", {{"a", DType::BF16, {2}}, {"b", DType::F32, {3}}});
    EXPECT_ERROR_CONTAINS(w.write("c", a), "x.safetensors: tensor \"c\" is not in the file's layout");
    EXPECT_ERROR_CONTAINS(w.write("b", a), "x.safetensors: tensor \"b\" has shape [2], the layout says [3]");
    EXPECT_ERROR_CONTAINS(w.write("a", Tensor::zeros({2}, DType::I32)), "is i32 and cannot be written as bf16");
    w.write("a", a);
    EXPECT_ERROR_CONTAINS(w.write("a", a), "x.safetensors: tensor \"a\" written twice");
    EXPECT_ERROR_CONTAINS(w.commit(), "x.safetensors: 1 tensor(s) never written (first: \"b\")");
  }
  // Abandoned: neither the file nor its temporary remains.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(d.path), std::filesystem::directory_iterator()), 0);
  EXPECT_ERROR_CONTAINS(SafetensorsStreamWriter(d / "y.safetensors", {{"a", DType::F32, {2}}, {"a", DType::F32, {2}}}),
                        "tensor name \"a\" given twice");
  // 2^62 f32 elements: a byte count that wraps to 0 in 64 bits is refused, not written as [0, 0].
  EXPECT_ERROR_CONTAINS(SafetensorsStreamWriter(d / "z.safetensors", {{"a", DType::F32, {int64_t(1) << 62, 1}}}),
                        "z.safetensors: tensor \"a\": tensor f32[4611686018427387904, 1] has too many elements");
  EXPECT_FALSE(std::filesystem::exists(d / "z.safetensors"));
}

TEST(Safetensors, WriterRefusesBadInput) {
  TempDir d;
  Tensor a = exact_tensor({2}, 1);
  Tensor i = Tensor::zeros({2}, DType::I32);
  EXPECT_ERROR_CONTAINS(save_safetensors(d / "x.safetensors", {{"a", a}, {"a", a}}), "tensor name \"a\" given twice");
  EXPECT_ERROR_CONTAINS(save_safetensors(d / "x.safetensors", {{"", a}}), "invalid tensor name \"\"");
  EXPECT_ERROR_CONTAINS(save_safetensors(d / "x.safetensors", {{"__metadata__", a}}), "invalid tensor name");
  EXPECT_ERROR_CONTAINS(save_safetensors(d / "x.safetensors", {{"i", i}}, DType::BF16), "is i32 and cannot be written as bf16");
  EXPECT_ERROR_CONTAINS(save_safetensors(d / "nodir/x.safetensors", {{"a", a}}), "cannot create");
  EXPECT_FALSE(std::filesystem::exists(d / "x.safetensors"));
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(d.path), std::filesystem::directory_iterator()), 0);
}

TEST(SafetensorsMalformed, ShorterThanEightBytes) {
  EXPECT_OPEN_ERROR(std::string(5, '\0'), "not a safetensors file: 5 bytes, shorter than the 8-byte header length");
  EXPECT_OPEN_ERROR("", "0 bytes, shorter than the 8-byte header length");
}

TEST(SafetensorsMalformed, HeaderLengthAbsurd) {
  std::string img = st_image("{}", "");
  uint64_t n = uint64_t(1) << 40;
  std::memcpy(&img[0], &n, 8);
  EXPECT_OPEN_ERROR(img, "header length 1099511627776 is absurd (limit 100000000 bytes)");
}

TEST(SafetensorsMalformed, HeaderLengthBeyondFile) {
  std::string img = st_image("{}", "");
  uint64_t n = 100;
  std::memcpy(&img[0], &n, 8);
  EXPECT_OPEN_ERROR(img, "header length 100 goes beyond the end of the file (10 bytes)");
}

TEST(SafetensorsMalformed, HeaderNotJson) {
  EXPECT_OPEN_ERROR(st_image("{\"a\":", ""), "bad.safetensors: header: invalid JSON: ");
  EXPECT_OPEN_ERROR(st_image(std::string("{\0}", 3), ""), "header: invalid JSON");
}

TEST(SafetensorsMalformed, HeaderNotObject) {
  EXPECT_OPEN_ERROR(st_image("[1,2]   ", ""), "header is not a JSON object (got array)");
}

TEST(SafetensorsMalformed, EntryMissingFields) {
  EXPECT_OPEN_ERROR(st_image(R"({"a":{"shape":[2],"data_offsets":[0,8]}})", k8), "tensor \"a\": missing \"dtype\"");
  EXPECT_OPEN_ERROR(st_image(R"({"a":{"dtype":"F32","data_offsets":[0,8]}})", k8), "tensor \"a\": missing \"shape\"");
  EXPECT_OPEN_ERROR(st_image(R"({"a":{"dtype":"F32","shape":[2]}})", k8), "tensor \"a\": missing \"data_offsets\"");
  EXPECT_OPEN_ERROR(st_image(R"({"a":[1]})", k8), "tensor \"a\": entry is not an object (got array)");
  EXPECT_OPEN_ERROR(st_image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"extra":1}})", k8),
                    "tensor \"a\": unexpected field \"extra\"");
}

TEST(SafetensorsMalformed, BadFieldTypes) {
  EXPECT_OPEN_ERROR(st_image(R"({"a":{"dtype":7,"shape":[2],"data_offsets":[0,8]}})", k8), "dtype must be a string, got integer");
  EXPECT_OPEN_ERROR(st_image(R"({"a":{"dtype":"F32","shape":2,"data_offsets":[0,8]}})", k8), "shape must be a list, got integer");
  EXPECT_OPEN_ERROR(st_image(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", k8),
                    "tensor \"a\" shape must hold non-negative integers, got -2");
  EXPECT_OPEN_ERROR(st_image(R"({"a":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", k8), "non-negative integers, got 2.0");
  EXPECT_OPEN_ERROR(st_image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4,8]}})", k8),
                    "data_offsets must be a list [begin, end], got [0,4,8]");
  EXPECT_OPEN_ERROR(st_image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", k8), "data_offsets [8, 0] are reversed");
}

TEST(SafetensorsMalformed, UnknownDtype) {
  EXPECT_OPEN_ERROR(st_image(R"({"a":{"dtype":"F128","shape":[2],"data_offsets":[0,8]}})", k8), "tensor \"a\": unknown dtype \"F128\"");
}

TEST(SafetensorsMalformed, ShapeDoesNotMatchOffsets) {
  EXPECT_OPEN_ERROR(st_image(R"({"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,12]}})", k12),
                    "tensor \"a\": shape [2, 2] of F32 needs 16 bytes but data_offsets [0, 12] span 12");
}

TEST(SafetensorsMalformed, ShapeOverflows) {
  EXPECT_OPEN_ERROR(st_image(R"({"a":{"dtype":"F32","shape":[4611686018427387904,8],"data_offsets":[0,8]}})", k8),
                    "shape [4611686018427387904, 8] is too large");
}

TEST(SafetensorsMalformed, OffsetsOverlap) {
  EXPECT_OPEN_ERROR(st_image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", k12),
                    "tensor \"b\" (bytes [4, 12)) overlaps tensor \"a\" (bytes [0, 8))");
}

TEST(SafetensorsMalformed, OffsetsNotContiguous) {
  EXPECT_OPEN_ERROR(st_image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[12,20]}})", k20),
                    "data_offsets are not contiguous: 4 unused bytes between tensor \"a\" and tensor \"b\"");
}

TEST(SafetensorsMalformed, OffsetsNotStartingAtZero) {
  EXPECT_OPEN_ERROR(st_image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", k12),
                    "data section does not start at offset 0: first tensor \"a\" begins at 4");
}

TEST(SafetensorsMalformed, DataSectionNotCovered) {
  EXPECT_OPEN_ERROR(st_image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", k12),
                    "the tensors cover 8 bytes but the data section has 12 (4 trailing bytes belong to no tensor)");
}

TEST(SafetensorsMalformed, OffsetsBeyondFile) {
  EXPECT_OPEN_ERROR(st_image(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", k8),
                    "tensor \"a\": data_offsets [0, 16] go beyond the end of the file (data section is 8 bytes)");
}

TEST(SafetensorsMalformed, DuplicateNames) {
  EXPECT_OPEN_ERROR(st_image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", k8),
                    "header: duplicate key \"a\" in JSON");
  EXPECT_OPEN_ERROR(st_image(R"({"a":{"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]}})", k8), "duplicate key \"dtype\"");
}

TEST(SafetensorsMalformed, MetadataNotStringToString) {
  EXPECT_OPEN_ERROR(st_image(R"({"__metadata__":{"format":"pt","step":3}})", ""),
                    "__metadata__ must map strings to strings (\"step\" is integer)");
  EXPECT_OPEN_ERROR(st_image(R"({"__metadata__":["pt"]})", ""), "__metadata__ must be an object mapping strings to strings, got array");
}

TEST(SafetensorsMalformed, NamesWithControlBytesStayOnOneLine) {
  EXPECT_OPEN_ERROR(st_image("{\"a\\nb\":{\"dtype\":\"F99\",\"shape\":[2],\"data_offsets\":[0,8]}}", k8),
                    "tensor \"a\\x0ab\": unknown dtype \"F99\"");
}

TEST(SafetensorsMalformed, UnloadableDtypeAndMissingTensor) {
  auto keep = std::make_shared<std::string>(st_image(R"({"d":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", k8));
  SafetensorsFile f = SafetensorsFile::from_memory(keep->data(), keep->size(), keep, "m.safetensors");
  EXPECT_ERROR_CONTAINS(f.get("d", DType::F32), "m.safetensors: tensor \"d\" has dtype F64, which titan cannot load");
  EXPECT_ERROR_CONTAINS(f.get("e", DType::F32), "m.safetensors: no tensor \"e\"");
  auto keep2 = std::make_shared<std::string>(st_image(R"({"i":{"dtype":"I32","shape":[2],"data_offsets":[0,8]}})", k8));
  SafetensorsFile g = SafetensorsFile::from_memory(keep2->data(), keep2->size(), keep2, "m.safetensors");
  EXPECT_ERROR_CONTAINS(g.get("i", DType::F32), "tensor \"i\" is I32 and cannot be converted to f32");
  Tensor wrong = Tensor::empty({3}, DType::I32);
  EXPECT_ERROR_CONTAINS(g.read_into("i", wrong), "tensor \"i\" has shape [2], expected [3]");
}

TEST(SafetensorsMalformed, NotAFile) {
  TempDir d;
  EXPECT_ERROR_CONTAINS(SafetensorsFile::open(d / "missing.safetensors"), "missing.safetensors: cannot open: No such file");
  EXPECT_ERROR_CONTAINS(SafetensorsFile::open(d.path), d.path + ": is a directory");
}

TEST(SafetensorsMalformed, DeeplyNestedHeaderIsRefusedWithoutRecursion) {
  // nlohmann-json parses and destroys iteratively; 200k levels must be an error, not a stack overflow.
  EXPECT_OPEN_ERROR(st_image(std::string(200000, '[') + std::string(200000, ']'), ""), "header is not a JSON object (got array)");
  EXPECT_OPEN_ERROR(st_image("{\"a\":" + std::string(200000, '['), ""), "header: invalid JSON");
}
