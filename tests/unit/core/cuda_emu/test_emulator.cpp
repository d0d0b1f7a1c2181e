// The grid emulator (core/cuda_emu): the CUDA semantics kernels rely on, and each check it adds
// (deadlock, warp masks, NaN shared memory, launch limits, shuffled orders), shown to fire.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "core/cuda_emu/cuda.h"
#include "core/error.h"

namespace {

using titan::Error;
namespace emu = titan::cuda_emu;

// The message of the titan::Error that f throws ("" when it throws none).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// ---- kernels -------------------------------------------------------------------------------

__global__ void block_sum(const float* x, float* out, int n) {
  TITAN_SHARED(float, partial, 32);
  const int tid = int(threadIdx.x), lane = tid % 32, warp = tid / 32;
  float v = 0;
  for (int i = int(blockIdx.x * blockDim.x) + tid; i < n; i += int(gridDim.x * blockDim.x)) v += x[i];
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < int(blockDim.x / 32) ? partial[lane] : 0.0f;
    for (int o = 16; o > 0; o /= 2) v += __shfl_down_sync(0xffffffffu, v, o);
    if (lane == 0) out[blockIdx.x] = v;
  }
}

__global__ void write_ids(int* ids, int* order, int* counter) {
  const int t = int(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z));
  const int b = int(blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z));
  const int nt = int(blockDim.x * blockDim.y * blockDim.z);
  ids[b * nt + t] = b * nt + t;
  order[atomicAdd(counter, 1)] = b * nt + t;
}

int g_partial_barrier_line = 0;
__global__ void partial_barrier(int* out) {
  if (threadIdx.x >= 16) return;
  g_partial_barrier_line = __LINE__ + 1;
  __syncthreads();
  out[threadIdx.x] = 1;
}

__global__ void two_barriers(int* out) {
  if (threadIdx.x % 2) {
    __syncthreads();
  } else {
    __syncthreads();
  }
  out[threadIdx.x] = 1;
}

int g_warp_line = 0;
__global__ void half_warp_shuffle(float* out) {
  float v = float(threadIdx.x);
  if (threadIdx.x < 16) {
    g_warp_line = __LINE__ + 1;
    v += __shfl_xor_sync(0xffffffffu, v, 1);
  }
  out[threadIdx.x] = v;
}

__global__ void half_warp_shuffle_ok(float* out) {
  float v = float(threadIdx.x);
  if (threadIdx.x < 16) v += __shfl_xor_sync(0x0000ffffu, v, 1);
  out[threadIdx.x] = v;
}

__global__ void shuffle_outside_mask(float* out) {
  float v = float(threadIdx.x);
  if (threadIdx.x < 16) v += __shfl_xor_sync(0x0000ffffu, v, 16);
  out[threadIdx.x] = v;
}

__global__ void mask_without_caller(float* out) {
  out[threadIdx.x] = __shfl_sync(0x1u, float(threadIdx.x), 0);
}

__global__ void warp_votes(unsigned* ballot, int* any, int* all, float* idx, float* up, float* down) {
  const int t = int(threadIdx.x);
  ballot[t] = __ballot_sync(0xffffffffu, t % 3 == 0);
  any[t] = __any_sync(0xffffffffu, t == 5);
  all[t] = __all_sync(0xffffffffu, t < 31);
  idx[t] = __shfl_sync(0xffffffffu, float(t), 3, 8);  // lane 3 of each group of 8
  up[t] = __shfl_up_sync(0xffffffffu, float(t), 2, 16);
  down[t] = __shfl_down_sync(0xffffffffu, float(t), 2, 16);
  __syncwarp();
}

__global__ void read_shared_first(float* out) {
  TITAN_SHARED(float, s, 64);
  out[threadIdx.x] = s[threadIdx.x];  // never written: NaN
  __syncthreads();
  s[threadIdx.x] = 1.0f;
}

__global__ void read_dynamic_first(float* out) {
  TITAN_SHARED_DYNAMIC(float, s);
  out[threadIdx.x] = s[threadIdx.x];
}

__global__ void shared_is_per_block(float* out) {
  TITAN_SHARED(float, s, 1);
  if (threadIdx.x == 0) s[0] = float(blockIdx.x);
  __syncthreads();
  out[blockIdx.x * blockDim.x + threadIdx.x] = s[0];
  __syncthreads();
}

__global__ void big_static_shared(float* out) {
  TITAN_SHARED(float, a, 8192);  // 32 KiB
  TITAN_SHARED(float, b, 8192);  // 32 KiB more: 64 KiB in all
  a[threadIdx.x] = 1, b[threadIdx.x] = 2;
  out[threadIdx.x] = a[threadIdx.x] + b[threadIdx.x];
}

__global__ void noop(int* out) {
  if (out) out[0] = 1;
}

__global__ void syncthreads_count_kernel(int* out) {
  out[threadIdx.x] = __syncthreads_count(threadIdx.x % 4 == 0);
}

// ---- tests ---------------------------------------------------------------------------------

TEST(CudaEmu, BlockReductionWithSharedMemoryAndShuffles) {
  const int n = 1000, blocks = 3, threads = 128;
  std::vector<float> x(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) x[size_t(i)] = float(i % 17) - 8.0f;
  std::vector<float> out(blocks, -1.0f);
  TITAN_LAUNCH(block_sum, dim3(blocks), dim3(threads), 0, nullptr, x.data(), out.data(), n);
  double want = 0;
  for (float v : x) want += v;
  EXPECT_NEAR(out[0] + out[1] + out[2], want, 1e-3);
  // Each block's part is its grid-stride slice.
  for (int b = 0; b < blocks; ++b) {
    double part = 0;
    for (int i = b * threads; i < n; i += blocks * threads)
      for (int j = i; j < std::min(n, i + threads); ++j) part += x[size_t(j)];
    EXPECT_NEAR(out[size_t(b)], part, 1e-3) << "block " << b;
  }
}

TEST(CudaEmu, EveryThreadOfA3dGridRunsOnce) {
  const dim3 grid(3, 2, 2), block(4, 3, 2);
  const int total = 12 * 24;
  std::vector<int> ids(total, -1), order(total, -1);
  int counter = 0;
  TITAN_LAUNCH(write_ids, grid, block, 0, nullptr, ids.data(), order.data(), &counter);
  EXPECT_EQ(counter, total);
  for (int i = 0; i < total; ++i) EXPECT_EQ(ids[size_t(i)], i);
  std::vector<int> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  for (int i = 0; i < total; ++i) EXPECT_EQ(sorted[size_t(i)], i);
}

TEST(CudaEmu, ThreadAndBlockOrderFollowTheSeed) {
  const uint64_t saved = emu::seed();
  auto run = [](uint64_t s) {
    emu::set_seed(s);
    std::vector<int> ids(256), order(256);
    int counter = 0;
    TITAN_LAUNCH(write_ids, dim3(4), dim3(64), 0, nullptr, ids.data(), order.data(), &counter);
    return order;
  };
  const auto a = run(1), b = run(2);
  emu::set_seed(saved);
  std::vector<int> in_order(256);
  std::iota(in_order.begin(), in_order.end(), 0);
  EXPECT_NE(a, b);         // a different seed, a different order
  EXPECT_NE(a, in_order);  // and not the natural one
  // Threads within the first block to run are shuffled too (not only the blocks).
  std::vector<int> first(a.begin(), a.begin() + 64);
  EXPECT_FALSE(std::is_sorted(first.begin(), first.end()));
}

TEST(CudaEmu, PartialBarrierIsADeadlockNamingKernelAndLine) {
  std::vector<int> out(64, 0);
  const std::string e = error_of([&] { TITAN_LAUNCH(partial_barrier, dim3(1), dim3(64), 0, nullptr, out.data()); });
  EXPECT_NE(e.find("deadlock"), std::string::npos) << e;
  EXPECT_NE(e.find("partial_barrier"), std::string::npos) << e;
  EXPECT_NE(e.find("test_emulator.cpp:" + std::to_string(g_partial_barrier_line)), std::string::npos) << e;
  EXPECT_NE(e.find("16 of 64"), std::string::npos) << e;
}

TEST(CudaEmu, DifferentBarriersAreADeadlock) {
  std::vector<int> out(64, 0);
  const std::string e = error_of([&] { TITAN_LAUNCH(two_barriers, dim3(1), dim3(64), 0, nullptr, out.data()); });
  EXPECT_NE(e.find("different barriers"), std::string::npos) << e;
}

TEST(CudaEmu, WarpMaskNamingANonParticipatingLaneIsAnError) {
  std::vector<float> out(32, 0);
  const std::string e = error_of([&] { TITAN_LAUNCH(half_warp_shuffle, dim3(1), dim3(32), 0, nullptr, out.data()); });
  EXPECT_NE(e.find("__shfl_xor_sync at"), std::string::npos) << e;
  EXPECT_NE(e.find(":" + std::to_string(g_warp_line)), std::string::npos) << e;
  EXPECT_NE(e.find("names lane 16, which has exited"), std::string::npos) << e;  // the first lane that left
  EXPECT_NE(e.find("half_warp_shuffle"), std::string::npos) << e;
  // With the mask of the lanes that take part it runs, and exchanges the right values.
  TITAN_LAUNCH(half_warp_shuffle_ok, dim3(1), dim3(32), 0, nullptr, out.data());
  for (int t = 0; t < 32; ++t) EXPECT_EQ(out[size_t(t)], t < 16 ? float(t + (t ^ 1)) : float(t)) << t;
}

TEST(CudaEmu, WarpMaskMustNameTheCallerAndCoverTheSource) {
  std::vector<float> out(32, 0);
  std::string e = error_of([&] { TITAN_LAUNCH(mask_without_caller, dim3(1), dim3(32), 0, nullptr, out.data()); });
  EXPECT_NE(e.find("does not name the calling lane"), std::string::npos) << e;
  e = error_of([&] { TITAN_LAUNCH(shuffle_outside_mask, dim3(1), dim3(32), 0, nullptr, out.data()); });
  EXPECT_NE(e.find("not in the mask"), std::string::npos) << e;
  // A full mask on a block of 48 threads names lanes 16..31 of the second warp, which do not exist.
  std::vector<float> x(48, 1.0f), sums(1, 0);
  e = error_of([&] { TITAN_LAUNCH(block_sum, dim3(1), dim3(48), 0, nullptr, x.data(), sums.data(), 48); });
  EXPECT_NE(e.find("not in the block"), std::string::npos) << e;
}

TEST(CudaEmu, VotesAndShufflesWithWidths) {
  std::vector<unsigned> ballot(32);
  std::vector<int> any(32), all(32);
  std::vector<float> idx(32), up(32), down(32);
  TITAN_LAUNCH(warp_votes, dim3(1), dim3(32), 0, nullptr, ballot.data(), any.data(), all.data(), idx.data(), up.data(),
               down.data());
  unsigned want = 0;
  for (int t = 0; t < 32; t += 3) want |= 1u << t;
  for (int t = 0; t < 32; ++t) {
    EXPECT_EQ(ballot[size_t(t)], want);
    EXPECT_EQ(any[size_t(t)], 1);
    EXPECT_EQ(all[size_t(t)], 0);
    EXPECT_EQ(idx[size_t(t)], float(t / 8 * 8 + 3)) << t;
    EXPECT_EQ(up[size_t(t)], float(t % 16 >= 2 ? t - 2 : t)) << t;
    EXPECT_EQ(down[size_t(t)], float(t % 16 < 14 ? t + 2 : t)) << t;
  }
}

TEST(CudaEmu, SyncthreadsCountCountsTheBlock) {
  std::vector<int> out(64, 0);
  TITAN_LAUNCH(syncthreads_count_kernel, dim3(1), dim3(64), 0, nullptr, out.data());
  for (int v : out) EXPECT_EQ(v, 16);
}

TEST(CudaEmu, SharedMemoryStartsAsNaNAndIsPerBlock) {
  std::vector<float> out(64, 0);
  TITAN_LAUNCH(read_shared_first, dim3(2), dim3(64), 0, nullptr, out.data());
  for (float v : out) EXPECT_TRUE(std::isnan(v));  // the second block to run sees NaN again, not 1
  std::fill(out.begin(), out.end(), 0.0f);
  TITAN_LAUNCH(read_dynamic_first, dim3(2), dim3(64), 64 * sizeof(float), nullptr, out.data());
  for (float v : out) EXPECT_TRUE(std::isnan(v));
  std::vector<float> per(5 * 32, -1);
  TITAN_LAUNCH(shared_is_per_block, dim3(5), dim3(32), 0, nullptr, per.data());
  for (int i = 0; i < 5 * 32; ++i) EXPECT_EQ(per[size_t(i)], float(i / 32));
}

TEST(CudaEmu, LaunchLimitsOfAnH200) {
  int flag = 0;
  EXPECT_NE(error_of([&] { TITAN_LAUNCH(noop, dim3(1), dim3(1025), 0, nullptr, &flag); }).find("1024 threads"),
            std::string::npos);
  EXPECT_NE(error_of([&] { TITAN_LAUNCH(noop, dim3(1), dim3(1, 1, 65), 0, nullptr, &flag); }).find("1024 threads"),
            std::string::npos);
  EXPECT_NE(error_of([&] { TITAN_LAUNCH(noop, dim3(1, 65536), dim3(1), 0, nullptr, &flag); }).find("grid"),
            std::string::npos);
  EXPECT_EQ(error_of([&] { TITAN_LAUNCH(noop, dim3(1), dim3(32, 32), 0, nullptr, &flag); }), "");
  EXPECT_EQ(flag, 1);
  std::vector<float> out(32);
  EXPECT_NE(error_of([&] { TITAN_LAUNCH(big_static_shared, dim3(1), dim3(32), 0, nullptr, out.data()); })
                .find("above the 48 KiB limit"),
            std::string::npos);
  // Dynamic shared memory above 48 KiB only after the opt-in attribute, and at most 227 KiB.
  const size_t big = 100 * 1024;
  EXPECT_NE(error_of([&] { TITAN_LAUNCH(read_dynamic_first, dim3(1), dim3(32), big, nullptr, out.data()); })
                .find("cudaFuncSetAttribute"),
            std::string::npos);
  EXPECT_NE(error_of([&] { TITAN_SET_MAX_DYNAMIC_SHARED(read_dynamic_first, 228 * 1024); }), "");
  TITAN_SET_MAX_DYNAMIC_SHARED(read_dynamic_first, big);
  EXPECT_EQ(error_of([&] { TITAN_LAUNCH(read_dynamic_first, dim3(1), dim3(32), big, nullptr, out.data()); }), "");
  EXPECT_NE(error_of([&] { TITAN_LAUNCH(read_dynamic_first, dim3(1), dim3(32), big + 4, nullptr, out.data()); }), "");
}

TEST(CudaEmu, BuiltinsOutsideAKernelAreAnError) {
  EXPECT_NE(error_of([] { (void)threadIdx.x; }).find("outside a kernel"), std::string::npos);
  EXPECT_NE(error_of([] { __syncthreads(); }).find("outside a kernel"), std::string::npos);
}

TEST(CudaEmu, DeviceMemoryIsTracked) {
  const size_t live = emu::device_live_bytes();
  void* p = emu::device_malloc(100);
  EXPECT_EQ(emu::device_live_bytes(), live + 100);
  int x = 0;
  EXPECT_THROW(emu::device_free(&x), Error);
  emu::device_free(p);
  EXPECT_EQ(emu::device_live_bytes(), live);
}

TEST(CudaEmu, PinnedMemoryIsTrackedAndAligned) {
  const size_t live = emu::pinned_live_bytes(), device = emu::device_live_bytes();
  void* p = emu::pinned_malloc(100);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
  EXPECT_EQ(emu::pinned_live_bytes(), live + 100);
  EXPECT_EQ(emu::device_live_bytes(), device);  // counted apart from device memory
  int x = 0;
  EXPECT_THROW(emu::pinned_free(&x), Error);
  void* d = emu::device_malloc(8);
  EXPECT_THROW(emu::pinned_free(d), Error);  // device memory is not pinned host memory
  emu::device_free(d);
  emu::pinned_free(p);
  EXPECT_EQ(emu::pinned_live_bytes(), live);
}

#if defined(__SANITIZE_ADDRESS__)
// In the ASan build (test_core_cuda_emu_asan), a shared array is its own heap block, so an
// access one past its end is a heap-buffer-overflow report.
__global__ void shared_overflow(float* out) {
  TITAN_SHARED(float, s, 32);
  s[threadIdx.x] = 1.0f;  // launched with 33 threads: one past the end
  out[0] = s[0];
}

TEST(CudaEmuAsan, SharedMemoryOverflowIsCaught) {
  std::vector<float> out(1);
  EXPECT_DEATH(TITAN_LAUNCH(shared_overflow, dim3(1), dim3(33), 0, nullptr, out.data()), "heap-buffer-overflow");
}
#endif

}  // namespace
