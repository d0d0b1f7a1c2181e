// PinnedStaging (core/pinned_staging.h): device bytes to and from the host through one buffer of
// pinned memory no larger than the bound, in order and in whole elements, with nothing left
// allocated. Under the emulator device and pinned memory are host memory, counted apart
// (cuda_emu::device_live_bytes, pinned_live_bytes).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "core/cuda_emu/runtime.h"
#include "core/gpu_memory.h"
#include "core/pinned_staging.h"

using namespace titan;

namespace {

struct ScopedChunk {
  explicit ScopedChunk(uint64_t bytes) { PinnedStaging::set_chunk_bytes(bytes); }
  ~ScopedChunk() { PinnedStaging::set_chunk_bytes(0); }
};

std::string pattern(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = char((i * 131 + 7) % 251);
  return s;
}

}  // namespace

TEST(PinnedStaging, FromDeviceInBoundedOrderedWholeElementChunks) {
  const uint64_t pinned0 = cuda_emu::pinned_live_bytes(), live0 = PinnedStaging::stats().live_bytes;
  const std::string src = pattern(1003);
  void* dev = gpu::alloc(src.size());
  gpu::copy_to_device(dev, src.data(), src.size());
  for (uint64_t unit : {1, 2, 4, 8}) {
    ScopedChunk bound(40);
    PinnedStaging::reset_peak();
    std::string got;
    std::vector<uint64_t> sizes;
    {
      PinnedStaging st;
      const uint64_t bytes = src.size() / unit * unit;
      st.from_device(
          dev, bytes,
          [&](const char* chunk, uint64_t n, uint64_t at) {
            EXPECT_EQ(at, got.size());    // in order, no gap
            EXPECT_EQ(chunk, st.data());  // the one buffer
            got.append(chunk, n);
            sizes.push_back(n);
          },
          unit);
      EXPECT_EQ(got, src.substr(0, bytes));
      EXPECT_EQ(st.size(), 40u);
      EXPECT_EQ(cuda_emu::pinned_live_bytes(), pinned0 + 40);
    }
    for (size_t i = 0; i + 1 < sizes.size(); ++i) EXPECT_EQ(sizes[i] % unit, 0u) << "unit " << unit;
    EXPECT_GT(sizes.size(), 20u);
    EXPECT_EQ(PinnedStaging::stats().peak_bytes, live0 + 40);  // the bound, not the 1003 bytes
    EXPECT_EQ(PinnedStaging::stats().live_bytes, live0);
    EXPECT_EQ(cuda_emu::pinned_live_bytes(), pinned0);
  }
  gpu::free(dev);
}

TEST(PinnedStaging, ToDeviceFillsEveryByte) {
  const uint64_t pinned0 = cuda_emu::pinned_live_bytes();
  ScopedChunk bound(64);
  const std::string src = pattern(517);
  void* dev = gpu::alloc(src.size());
  gpu::zero(dev, src.size());
  {
    PinnedStaging st;
    st.to_device(
        dev, src.size(), [&](char* chunk, uint64_t n, uint64_t at) { std::memcpy(chunk, src.data() + at, n); }, 1);
    EXPECT_EQ(st.size(), 64u);
  }
  std::string back(src.size(), '\0');
  gpu::copy_to_host(back.data(), dev, back.size());
  EXPECT_EQ(back, src);
  gpu::free(dev);
  EXPECT_EQ(cuda_emu::pinned_live_bytes(), pinned0);
}

TEST(PinnedStaging, GrowsToTheBoundAndNoFurther) {
  ScopedChunk bound(1024);
  const uint64_t buffers0 = PinnedStaging::stats().buffers;
  PinnedStaging st;
  EXPECT_EQ(st.size(), 0u);
  EXPECT_EQ(st.data(), nullptr);
  st.reserve(12);  // a small tensor: what it needs
  EXPECT_EQ(st.size(), 12u);
  st.reserve(10);  // never shrinks
  EXPECT_EQ(st.size(), 12u);
  st.reserve(20);  // at least doubles
  EXPECT_EQ(st.size(), 24u);
  st.reserve(1 << 20);
  EXPECT_EQ(st.size(), 1024u);
  EXPECT_EQ(PinnedStaging::stats().buffers, buffers0 + 3);
  EXPECT_EQ(PinnedStaging::stats().live_bytes, 1024u);  // one buffer held, the old ones freed
}

TEST(PinnedStaging, RefusesABoundThatIsNotWholeWords) {
  EXPECT_ERROR_HAS(PinnedStaging::set_chunk_bytes(20), "pinned staging: chunk of 20 bytes is not a multiple of 8");
  EXPECT_EQ(PinnedStaging::chunk_bytes(), PinnedStaging::kDefaultChunkBytes);
}
