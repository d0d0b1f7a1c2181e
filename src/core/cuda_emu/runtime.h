// The CUDA grid emulator: runs a __global__ kernel written for nvcc on the CPU, so that kernel
// logic (indexing, shared memory, barriers, warp collectives) is tested on machines without a GPU
// (docs/cuda.md). Kernel code does not include this header directly: it includes
// core/cuda_emu/cuda.h, which selects the CUDA toolkit under nvcc and this emulator under g++.
//
// Model: every CUDA thread of a block is a fiber (its own stack, switched by a few instructions of
// assembly, runtime.cpp) on the calling OS thread; the blocks
// of a grid run one after another in an order shuffled by the seed; within a block the fibers run
// until each reaches a barrier, a warp collective or its end, in an order reshuffled on every
// pass. Because fibers switch only at those points, an atomic is a plain read-modify-write.
//
// Checks a GPU does not give (each a titan::Error naming the kernel, the launch site and the
// source line, plus the seed that reproduces the order):
//   - a __syncthreads reached by part of a block (others exited or wait at another barrier):
//     deadlock;
//   - a warp collective (__shfl_*_sync, __ballot_sync, __any/__all_sync, __syncwarp) whose mask
//     names a lane that does not take part (exited, waits elsewhere, is not in the block, or runs
//     another collective or mask), does not name the caller, or reads a lane outside the mask;
//   - shared memory (static TITAN_SHARED arrays and the dynamic TITAN_SHARED_DYNAMIC one) is
//     filled with NaN bytes (0xFF) at block start, and every array is its own heap block so that
//     ASan sees an access past its end;
//   - the launch limits of an H200 (sm_90): 1024 threads per block (x, y <= 1024, z <= 64), grid
//     y, z <= 65535, 48 KiB of static shared memory, dynamic shared memory above 48 KiB only after
//     cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, n), n <= 227 KiB.
//
// The seed: TITAN_CUDA_EMU_SEED from the environment, else random per process (set_seed() sets it).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>

namespace titan::cuda_emu {

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct uint3 {
  unsigned x = 0, y = 0, z = 0;
};

// H200 (compute capability 9.0) limits the launcher enforces.
struct Limits {
  static constexpr unsigned kMaxThreadsPerBlock = 1024, kMaxBlockX = 1024, kMaxBlockY = 1024, kMaxBlockZ = 64;
  static constexpr unsigned kMaxGridX = 2147483647u, kMaxGridY = 65535, kMaxGridZ = 65535;
  static constexpr size_t kStaticShared = 48 * 1024;        // static shared memory per block
  static constexpr size_t kDefaultDynamicShared = 48 * 1024;  // static + dynamic without opt-in
  static constexpr size_t kOptInShared = 227 * 1024;         // cudaDevAttrMaxSharedMemoryPerBlockOptin
  static constexpr int kWarpSize = 32;
};

// The built-in variables of the running CUDA thread.
struct Builtins {
  uint3 threadIdx, blockIdx;
  dim3 blockDim, gridDim;
};
const Builtins& builtins();  // error outside a kernel

uint64_t seed();
void set_seed(uint64_t s);

// Where a launch came from, for messages.
struct LaunchSite {
  const char* kernel;
  const char* file;
  int line;
};

// Runs body() as every thread of every block (body reads builtins()). func identifies the kernel
// for its attributes (cudaFuncSetAttribute).
void launch(const LaunchSite& site, const void* func, dim3 grid, dim3 block, size_t dynamic_shared,
            const std::function<void()>& body);
// The emulated cudaFuncSetAttribute(func, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes).
void set_max_dynamic_shared(const void* func, size_t bytes);

// Launch with the parameters converted to the kernel's parameter types once, as a real launch
// copies them; every thread then calls the kernel with its own copies.
template <class... P, class... A>
void launch_kernel(const LaunchSite& site, void (*k)(P...), dim3 grid, dim3 block, size_t dynamic_shared,
                   A&&... args) {
  static_assert(sizeof...(P) == sizeof...(A), "kernel launched with the wrong number of arguments");
  const std::tuple<std::decay_t<P>...> params(std::forward<A>(args)...);
  launch(site, reinterpret_cast<const void*>(k), grid, block, dynamic_shared, [&] { std::apply(k, params); });
}

// Shared memory of the running block: one array per declaration (key: the declaration's own
// static), the same pointer for every thread of the block, NaN bytes at block start.
void* shared_array(const void* key, size_t bytes, const char* name, const char* file, int line);
void* dynamic_shared();
size_t dynamic_shared_bytes();

// Barriers and warp collectives (file, line: the call site).
void syncthreads(const char* file, int line);
void syncwarp(const char* file, int line, unsigned mask);
int syncthreads_count(const char* file, int line, int pred);

enum class WarpOp : uint8_t { Sync, ShflIdx, ShflUp, ShflDown, ShflXor, Ballot, Any, All };
// One lane's part of a warp collective: it deposits `value` (raw bits) and the op's argument
// (source lane, delta or lane mask) and gets the op's result for it back.
uint64_t warp_op(const char* file, int line, WarpOp op, unsigned mask, uint64_t value, int arg, int width);

template <class T>
uint64_t to_bits(T v) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8, "warp shuffle of a type wider than 8 bytes");
  uint64_t b = 0;
  std::memcpy(&b, &v, sizeof(T));
  return b;
}
template <class T>
T from_bits(uint64_t b) {
  T v;
  std::memcpy(&v, &b, sizeof(T));
  return v;
}
template <class T>
T shfl(const char* f, int l, WarpOp op, unsigned mask, T v, int arg, int width) {
  return from_bits<T>(warp_op(f, l, op, mask, to_bits(v), arg, width));
}

// Device memory under the emulator: host memory, tracked so that a free of an unknown pointer and
// a leak (live_bytes() after the fact) are visible.
void* device_malloc(size_t bytes);
void device_free(void* p);
size_t device_live_bytes();
// Pinned (page-locked) host memory under the emulator: plain host memory aligned to 64 bytes,
// tracked the same way (a free of an unknown pointer fails; pinned_live_bytes() shows a leak).
void* pinned_malloc(size_t bytes);
void pinned_free(void* p);
size_t pinned_live_bytes();

}  // namespace titan::cuda_emu
