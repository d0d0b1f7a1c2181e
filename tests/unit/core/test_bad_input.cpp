// Core and util under input a user controls: each bad value is one clear titan::Error naming it,
// never a crash or a silently wrong result.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "common/test_util.h"
#include "core/error.h"
#include "core/tensor.h"
#include "core/threading.h"
#include "util/numbers.h"
#include "util/strings.h"

using namespace titan;
using namespace titan::test;

namespace {

struct TempDir {
  std::filesystem::path path;
  TempDir() {
    static int n = 0;
    path = std::filesystem::temp_directory_path() / ("titan_core_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

}  // namespace

TEST(Overflow, ShapeNumelRefusesProductsBeyond64Bits) {
  const int64_t big = int64_t(1) << 32;
  EXPECT_ERROR_HAS(shape_numel({big, big}), "[4294967296, 4294967296]");
  EXPECT_ERROR_HAS(shape_numel({3, INT64_MAX}), "too many elements");
  EXPECT_EQ(shape_numel({big, big, 0}), 0);  // a zero dimension: nothing to count, nothing to overflow
  EXPECT_EQ(shape_numel({big, big / 2 - 1}), big * (big / 2 - 1));
  EXPECT_ERROR_HAS(shape_numel({2, -3}), "negative dimension in shape [2, -3]");
}

TEST(Overflow, TensorByteCountIsCheckedBeforeAllocating) {
  // 2^62 f32 elements are 2^64 bytes: the size_t product wraps to 0, which must not become a
  // zero-byte buffer behind a 2^62-element tensor.
  const int64_t n = int64_t(1) << 62;
  EXPECT_ERROR_HAS(Tensor::empty({n, 1}, DType::F32), "f32[4611686018427387904, 1]");
  EXPECT_ERROR_HAS(Tensor::deferred({n / 2, 2}, DType::BF16), "bf16[2305843009213693952, 2]");
  EXPECT_ERROR_HAS(Tensor::empty({int64_t(1) << 32, int64_t(1) << 32}, DType::I64), "too many elements");
  EXPECT_EQ(shape_nbytes({n / 4, 1}, DType::F32), uint64_t(n));
  // Within 64 bits but beyond any memory: the allocator's error, not a crash.
  EXPECT_ERROR_HAS(Tensor::empty({int64_t(1) << 40, int64_t(1) << 20}, DType::F32), "out of memory");
}

TEST(Overflow, ViewWithAnOverflowingShapeIsAnError) {
  Tensor t = Tensor::zeros({4}, DType::F32);
  const int64_t big = int64_t(1) << 32;
  EXPECT_ERROR_HAS(t.view({big, big, -1}), "too many elements");
  EXPECT_ERROR_HAS(t.view({3, -1}), "view [3, -1] of f32[4]");
  EXPECT_EQ(t.view({2, -1}).dim(1), 2);
}

TEST(Threads, SetNumThreadsRefusesAbsurdCounts) {
  const int before = num_threads();
  EXPECT_ERROR_HAS(set_num_threads(100000), "100000");
  EXPECT_EQ(num_threads(), before);
  EXPECT_GE(max_num_threads(), 64);
  set_num_threads(max_num_threads());  // the bound itself is accepted
  EXPECT_EQ(num_threads(), max_num_threads());
  set_num_threads(before);
  EXPECT_EQ(num_threads(), before);
}

TEST(ReadFile, RefusesADirectoryAndOtherNonRegularFiles) {
  TempDir d;
  EXPECT_ERROR_HAS(read_file(d.path.string()), d.path.string() + ": is a directory");
  EXPECT_ERROR_HAS(read_file("/dev/null"), "/dev/null: is not a regular file");
  EXPECT_ERROR_HAS(read_file((d.path / "missing").string()), "missing: cannot open");
  std::ofstream((d.path / "x.txt").string()) << "abc";
  EXPECT_EQ(read_file((d.path / "x.txt").string()), "abc");
  // A named pipe is a stream that ends: `--config <(...)` keeps working.
  const std::string fifo = (d.path / "fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  pid_t child = ::fork();
  if (child == 0) {  // only async-signal-safe calls between fork and _exit
    int fd = ::open(fifo.c_str(), O_WRONLY);
    ssize_t w = fd >= 0 ? ::write(fd, "from a pipe", 11) : -1;
    ::_exit(w == 11 ? 0 : 1);
  }
  EXPECT_EQ(read_file(fifo), "from a pipe");
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

TEST(ParseNumbers, WholeTextMustBeTheNumber) {
  EXPECT_EQ(to_int64("42"), 42);
  EXPECT_EQ(to_int64("-7"), -7);
  EXPECT_EQ(to_int64("9223372036854775807"), INT64_MAX);
  for (const char* bad : {"", "abc", "12abc", " 1", "1 ", "+1", "0x10", "1e3", "9223372036854775808"})
    EXPECT_FALSE(to_int64(bad).has_value()) << bad;
  EXPECT_FALSE(to_int64(std::string_view("1\0002", 3)).has_value());
  EXPECT_EQ(to_uint64("18446744073709551615"), UINT64_MAX);
  EXPECT_FALSE(to_uint64("-1").has_value());  // never read as 2^64 - 1
  EXPECT_FALSE(to_uint64("18446744073709551616").has_value());
  EXPECT_EQ(to_double("3e-4"), 3e-4);
  EXPECT_EQ(to_double("-2.5"), -2.5);
  for (const char* bad : {"", "nan", "inf", "-inf", "1e999", "1.5x", "."}) EXPECT_FALSE(to_double(bad).has_value()) << bad;
}

TEST(ParseNumbers, ErrorsNameTheOptionTheValueAndTheRange) {
  EXPECT_EQ(parse_int("8", "--threads", 0, 64), 8);
  EXPECT_ERROR_HAS(parse_int("abc", "--threads", 0, 64), "--threads: 'abc' is not an integer");
  EXPECT_ERROR_HAS(parse_int("65", "--threads", 0, 64), "--threads: 65 is out of range [0, 64]");
  EXPECT_ERROR_HAS(parse_int("99999999999999999999", "--dp", 1, 8), "--dp: 99999999999999999999 is out of range [1, 8]");
  EXPECT_ERROR_HAS(parse_uint64("-1", "--max-shard-bytes", 1, UINT64_MAX),
                   "--max-shard-bytes: '-1' is not a non-negative integer");
  EXPECT_ERROR_HAS(parse_uint64("0", "--max-shard-bytes", 1, UINT64_MAX), "--max-shard-bytes: 0 is out of range [1, ");
  EXPECT_ERROR_HAS(parse_double("fast", "--lr", 0, 1), "--lr: 'fast' is not a number");
  EXPECT_ERROR_HAS(parse_double("2", "--lr", 0, 1), "--lr: 2 is out of range [0, 1]");
  EXPECT_EQ(parse_double("0.5", "--lr", 0, 1), 0.5);
  // A control byte in the text stays visible and on one line.
  const std::string msg = error_of([] { parse_int(std::string_view("1\n2", 3), "X", 0, 9); });
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  EXPECT_NE(msg.find("'1\\x0a2'"), std::string::npos) << msg;
}
