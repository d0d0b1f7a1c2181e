// The tensor file format with pieces (tensor_file.h): what the writer writes and refuses, what
// the reader accepts and refuses (crafted indexes), chunked streaming, and mutated files.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "train/checkpoint_pieces.h"
#include "train/crc32c.h"
#include "unit/train/checkpoint_test_util.h"

using namespace titan;
using namespace titan::test;
namespace fs = std::filesystem;

namespace {

Tensor flat(const Tensor& t, int64_t off, int64_t n) { return t.view({t.numel()}).slice0(off, off + n); }

// A tensor file with a hand-written index: magic, `data` at byte 64, the index, the footer.
void craft(const std::string& path, int version, const nlohmann::json& entries, const std::string& data) {
  std::string b = "TTCKPT01" + std::string(56, '\0') + data;
  std::string idx = nlohmann::json{{"format", "titan-tensors"}, {"version", version}, {"tensors", entries}}.dump();
  b += idx;
  uint64_t n = idx.size();
  uint32_t crc = crc32c(idx.data(), idx.size());
  for (int i = 0; i < 8; ++i) b += char(uint8_t(n >> (8 * i)));
  for (int i = 0; i < 4; ++i) b += char(uint8_t(crc >> (8 * i)));
  b += "TTCKEND1";
  std::ofstream(path, std::ios::binary | std::ios::trunc) << b;
}

// An index entry for `count` f32 elements at `offset` bytes in the file.
nlohmann::json entry(const std::string& name, Shape shape, uint64_t offset, const std::string& data) {
  return {{"name", name},
          {"dtype", "f32"},
          {"shape", shape},
          {"offset", offset},
          {"nbytes", shape_numel(shape) * 4},
          {"crc32c", crc32c(data.data() + (offset - 64), size_t(shape_numel(shape) * 4))}};
}

}  // namespace

TEST(TensorPieces, WriterStoresPiecesAndWholeTensors) {
  std::string dir = temp_dir("tp_write");
  fs::create_directories(dir);
  Tensor a = random_f32({3, 5}, 1), b = random_f32({4}, 2), empty = Tensor::empty({0, 3}, DType::F32);
  std::string path = dir + "/p.tensors";
  write_tensor_pieces(path, {{"a", {3, 5}, 9, flat(a, 9, 6)},
                             {"b", {4}, 0, b},               // whole: written with its full shape
                             {"a", {3, 5}, 2, flat(a, 2, 4).view({2, 2})},  // any shape with that numel
                             {"a", {3, 5}, 15, Tensor::empty({0}, DType::F32)},  // empty: not written
                             {"z", {0, 3}, 0, empty}});     // an empty tensor: one empty whole entry
  TensorFileReader r(path);
  ASSERT_EQ(r.entries().size(), 4u);
  const auto& e = r.entries();
  EXPECT_TRUE(e[0].piece);
  EXPECT_EQ(e[0].shape, (Shape{6}));
  EXPECT_EQ(e[0].full_shape, (Shape{3, 5}));
  EXPECT_EQ(e[0].elem_offset, 9);
  EXPECT_FALSE(e[1].piece);
  EXPECT_EQ(e[1].shape, (Shape{4}));
  EXPECT_TRUE(e[2].piece);
  EXPECT_EQ(e[2].shape, (Shape{4}));
  EXPECT_EQ(e[2].elem_offset, 2);
  EXPECT_FALSE(e[3].piece);
  EXPECT_EQ(e[3].shape, (Shape{0, 3}));
  EXPECT_EQ(std::memcmp(r.read("b").raw(), b.raw(), b.nbytes()), 0);
  Tensor got = Tensor::empty({4}, DType::F32);
  r.read_entry(e[2], got.raw());
  EXPECT_EQ(std::memcmp(got.raw(), flat(a, 2, 4).raw(), 16), 0);
  std::string err = error_of([&] { r.read("a"); });
  EXPECT_NE(err.find(path + ": tensor 'a' is stored in pieces (elements [9, 15) of [3, 5]"), std::string::npos) << err;
  // Files with pieces are version 2; files without stay version 1 (readable by older titans).
  std::string idx = read_file(path);
  EXPECT_NE(idx.find("\"version\":2"), std::string::npos);
  write_tensor_pieces(dir + "/w.tensors", {{"b", {4}, 0, b}});
  EXPECT_NE(read_file(dir + "/w.tensors").find("\"version\":1"), std::string::npos);
  fs::remove_all(dir);
}

TEST(TensorPieces, WriterRefusesBadPieces) {
  std::string dir = temp_dir("tp_refuse");
  fs::create_directories(dir);
  std::string path = dir + "/x.tensors";
  Tensor a = random_f32({10}, 1);
  auto err = [&](const std::vector<TensorPiece>& ps) { return error_of([&] { write_tensor_pieces(path, ps); }); };
  std::string e = err({{"a", {10}, 0, flat(a, 0, 6)}, {"a", {10}, 5, flat(a, 5, 5)}});
  EXPECT_NE(e.find(path + ": pieces of tensor 'a' overlap (elements [0, 6) and [5, 10))"), std::string::npos) << e;
  e = err({{"a", {10}, 6, flat(a, 0, 6)}});
  EXPECT_NE(e.find(path + ": piece of tensor 'a' (elements [6, 12)) lies outside its full shape [10]"),
            std::string::npos)
      << e;
  e = err({{"a", {10}, -1, flat(a, 0, 2)}});
  EXPECT_NE(e.find("lies outside its full shape"), std::string::npos) << e;
  e = err({{"a", {10}, 0, flat(a, 0, 5)}, {"a", {2, 5}, 5, flat(a, 5, 5)}});
  EXPECT_NE(e.find(path + ": pieces of tensor 'a' disagree on dtype or full shape (f32[10] vs f32[2, 5])"),
            std::string::npos)
      << e;
  e = err({{"a", {10}, 0, flat(a, 0, 5)}, {"a", {10}, 5, flat(a, 5, 5).to(DType::BF16)}});
  EXPECT_NE(e.find("disagree on dtype"), std::string::npos) << e;
  e = err({{"a", {10, -1}, 0, flat(a, 0, 5)}});
  EXPECT_NE(e.find(path + ": tensor 'a' has a bad full shape"), std::string::npos) << e;
  e = err({{"", {10}, 0, a}});
  EXPECT_NE(e.find("empty name"), std::string::npos) << e;
  EXPECT_NE(error_of([&] { write_tensor_file(path, {{"a", a}, {"a", a}}); }).find("duplicate tensor name 'a'"),
            std::string::npos);
  fs::remove_all(dir);
}

TEST(TensorPieces, ReaderValidatesPieceFieldsStrictly) {
  std::string dir = temp_dir("tp_craft");
  fs::create_directories(dir);
  std::string path = dir + "/c.tensors";
  std::string data(128, '\x11');
  auto piece = [&](const std::string& name, Shape shape, uint64_t offset, Shape full, int64_t elem) {
    nlohmann::json e = entry(name, shape, offset, data);
    e["full_shape"] = full;
    e["elem_offset"] = elem;
    return e;
  };
  auto box = [&](const std::string& name, const Shape& shape, uint64_t offset, const Shape& full, const Shape& at) {
    nlohmann::json e = entry(name, shape, offset, data);
    e["full_shape"] = full;
    e["box_offset"] = at;
    return e;
  };
  auto err = [&](int version, const nlohmann::json& entries) {
    craft(path, version, entries, data);
    return error_of([&] { TensorFileReader r(path); });
  };
  // The control: a well-formed crafted file reads, so the refusals below are about the fields.
  EXPECT_EQ(err(2, {piece("p", {4}, 64, {5}, 1), piece("p", {1}, 128, {5}, 0)}), "");
  {
    TensorFileReader r(path);
    Tensor t = Tensor::empty({4}, DType::F32);
    r.read_entry(r.entries()[0], t.raw());
    EXPECT_EQ(std::memcmp(t.raw(), data.data(), 16), 0);
  }
  struct Case {
    int version;
    nlohmann::json entries;
    std::string want;
  } cases[] = {
      {2, {piece("p", {4}, 64, {5}, 2)}, "piece of tensor 'p' (elements [2, 6)) lies outside its full shape [5]"},
      {2, {piece("p", {4}, 64, {5}, -1)}, "piece of tensor 'p' (elements [-1, 3)) lies outside its full shape [5]"},
      {2, {piece("p", {2, 2}, 64, {5}, 0)}, "piece of tensor 'p' must be stored 1-D and non-empty"},
      {2, {piece("p", {0}, 64, {5}, 0)}, "piece of tensor 'p' must be stored 1-D and non-empty, got shape [0]"},
      {2, {piece("p", {4}, 64, {2, -2}, 0)}, "tensor 'p' has a bad full shape"},
      {1, {piece("p", {4}, 64, {5}, 0)}, "tensor 'p' is a piece in a version 1 file"},
      {4, {entry("p", {4}, 64, data)}, "unsupported index version 4"},
      {2, {box("p", {2, 2}, 64, {4, 4}, {0, 0})}, "tensor 'p' is a box piece in a version 2 file"},
      {3, {box("p", {2, 2}, 64, {4, 4}, {3, 0})}, "piece of tensor 'p': box [3:5, 0:2] lies outside its full shape [4, 4]"},
      {3, {box("p", {2, 2}, 64, {4, 4}, {0, 0}), box("p", {2, 2}, 128, {4, 4}, {1, 1})},
       "pieces of tensor 'p' overlap (elements [4, 6) and [5, 7))"},
      {2, {piece("p", {4}, 64, {8}, 0), piece("p", {4}, 128, {8}, 3)},
       "pieces of tensor 'p' overlap (elements [0, 4) and [3, 7))"},
      {2, {piece("p", {4}, 64, {8}, 0), piece("p", {4}, 128, {2, 4}, 4)},
       "pieces of tensor 'p' disagree on dtype or full shape (f32[8] vs f32[2, 4])"},
      {2, {entry("p", {4}, 64, data), entry("p", {4}, 128, data)}, "duplicate tensor 'p'"},
      {2, {entry("p", {4}, 64, data), piece("p", {4}, 128, {4}, 0)}, "duplicate tensor 'p'"},
  };
  for (auto& c : cases) {
    std::string e = err(c.version, c.entries);
    EXPECT_NE(e.find(path + ": " + c.want), std::string::npos) << "want '" << c.want << "', got: " << e;
  }
  nlohmann::json half = entry("p", {4}, 64, data);
  half["full_shape"] = Shape{5};  // elem_offset missing
  std::string e = err(2, {half});
  EXPECT_NE(e.find(path + ": malformed index"), std::string::npos) << e;
  fs::remove_all(dir);
}

// One entry bigger than the 4 MiB read chunk, read by pieces that take part of it (streamed in
// chunks, one piece across the chunk boundary) and by a piece that holds it all (read directly)
// with an overlapping piece copied from it.
TEST(TensorPieces, LargeEntriesStreamInChunks) {
  std::string dir = temp_dir("tp_large");
  fs::create_directories(dir);
  const int64_t n = 1500000;  // 6 MB of f32
  Tensor big = random_f32({3, n / 3}, 9);
  std::string path = dir + "/big.tensors";
  write_tensor_file(path, {{"big", big}});
  CheckpointPieces set({path}, path);
  std::vector<TensorPiece> ps;
  for (int64_t b : {int64_t(0), int64_t(500000), int64_t(1000000)})
    ps.push_back({"big", big.shape(), b, Tensor::zeros({500000}, DType::F32)});
  set.fill(ps);
  for (auto& p : ps)
    EXPECT_EQ(std::memcmp(p.data.raw(), flat(big, p.offset, 500000).raw(), p.data.nbytes()), 0) << p.offset;
  std::vector<TensorPiece> both = {{"big", big.shape(), 1048570, Tensor::zeros({20}, DType::F32)},
                                   {"big", big.shape(), 0, Tensor::zeros(big.shape(), DType::F32)}};
  set.fill(both);
  EXPECT_EQ(std::memcmp(both[1].data.raw(), big.raw(), big.nbytes()), 0);
  EXPECT_EQ(std::memcmp(both[0].data.raw(), flat(big, 1048570, 20).raw(), 80), 0);
  // A flipped byte in the last chunk fails the whole streamed entry.
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(64 + 4 * (n - 3));
    f.put('\x7f');
  }
  std::vector<TensorPiece> one = {{"big", big.shape(), 10, Tensor::zeros({5}, DType::F32)}};
  std::string e = error_of([&] { CheckpointPieces({path}, path).fill(one); });
  EXPECT_NE(e.find(path + ": tensor 'big' checksum mismatch"), std::string::npos) << e;
  fs::remove_all(dir);
}

// Every truncation and many single-byte corruptions of a file with pieces either raise an error
// naming the file or read back exactly what was written.
TEST(TensorPieces, MutatedPieceFilesFailCleanly) {
  std::string dir = temp_dir("tp_mutate");
  fs::create_directories(dir);
  auto m = model_tensors(4);
  std::vector<TensorPiece> ps = {{m[0].name, m[0].tensor.shape(), 11, flat(m[0].tensor, 11, 4)},
                                 {m[1].name, m[1].tensor.shape(), 0, m[1].tensor},
                                 {m[2].name, m[2].tensor.shape(), 0, flat(m[2].tensor, 0, 2)},
                                 {m[2].name, m[2].tensor.shape(), 5, flat(m[2].tensor, 5, 2)}};
  std::string good = dir + "/good.tensors", bad = dir + "/bad.tensors";
  write_tensor_pieces(good, ps);
  std::string bytes = read_file(good);
  auto check = [&](const std::string& mutated, const std::string& what) {
    std::ofstream(bad, std::ios::binary | std::ios::trunc) << mutated;
    try {
      TensorFileReader r(bad);
      ASSERT_EQ(r.entries().size(), ps.size()) << what;
      for (size_t i = 0; i < ps.size(); ++i) {
        const TensorFileEntry& e = r.entries()[i];
        ASSERT_EQ(e.name, ps[i].name) << what;
        ASSERT_EQ(e.elem_offset, ps[i].offset) << what;
        ASSERT_EQ(e.nbytes, ps[i].data.nbytes()) << what;
        std::string got(e.nbytes, '\0');
        r.read_entry(e, got.data());
        ASSERT_EQ(std::memcmp(got.data(), ps[i].data.raw(), e.nbytes), 0) << what << ": silent corruption";
      }
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << what << ": " << e.what();
    }
  };
  for_each_damaged(bytes, 6, check);
  fs::remove_all(dir);
}
