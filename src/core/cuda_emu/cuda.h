// The one header CUDA kernel sources include (single-source kernels, docs/cuda.md): under nvcc it
// is the CUDA toolkit; under a host compiler it is the grid emulator (runtime.h), with the CUDA
// built-ins (threadIdx, __syncthreads, __shfl_xor_sync, atomicAdd, ...) defined on top of it.
//
// What kernel code writes differently from plain CUDA, so that both compilers take it:
//   TITAN_SHARED(T, name, n);         instead of  __shared__ T name[n];
//   TITAN_SHARED_DYNAMIC(T, name);    instead of  extern __shared__ T name[];
//   TITAN_LAUNCH(kernel, grid, block, shared_bytes, stream, args...)  instead of  kernel<<<...>>>(args...)
//   titan::gpu::alloc / free / copy_* for device memory (cudaMalloc, cudaMemcpy under nvcc)
// The kernel name given to TITAN_LAUNCH must not contain a top-level comma (wrap a template
// instantiation with two arguments in a using-alias).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#if defined(__CUDACC__)
#include <cuda_runtime.h>

#define TITAN_SHARED(T, name, n) __shared__ T name[n]
#define TITAN_SHARED_DYNAMIC(T, name)                               \
  extern __shared__ __align__(16) unsigned char titan_dynamic_smem_[]; \
  T* name = reinterpret_cast<T*>(titan_dynamic_smem_)
#define TITAN_HD __host__ __device__

namespace titan::gpu {
using Stream = cudaStream_t;
void check(cudaError_t e, const char* what, const char* file, int line);
}  // namespace titan::gpu
#define TITAN_CUDA_CHECK(expr) ::titan::gpu::check((expr), #expr, __FILE__, __LINE__)
#define TITAN_LAUNCH(kernel, grid, block, shmem, stream, ...)                  \
  do {                                                                         \
    kernel<<<(grid), (block), (shmem), (stream)>>>(__VA_ARGS__);               \
    TITAN_CUDA_CHECK(cudaGetLastError());                                      \
  } while (0)
#define TITAN_SET_MAX_DYNAMIC_SHARED(kernel, bytes) \
  TITAN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)))

#else  // the grid emulator
#include <cmath>

#include "core/cuda_emu/runtime.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __restrict__ __restrict
#define TITAN_HD

using dim3 = ::titan::cuda_emu::dim3;
using uint3 = ::titan::cuda_emu::uint3;
#define threadIdx (::titan::cuda_emu::builtins().threadIdx)
#define blockIdx (::titan::cuda_emu::builtins().blockIdx)
#define blockDim (::titan::cuda_emu::builtins().blockDim)
#define gridDim (::titan::cuda_emu::builtins().gridDim)
constexpr int warpSize = 32;

#define TITAN_SHARED(T, name, n)                                                                             \
  static const char titan_shared_key_##name = 0;                                                             \
  T* const name = static_cast<T*>(::titan::cuda_emu::shared_array(&titan_shared_key_##name, sizeof(T) * (n), \
                                                                  #name, __FILE__, __LINE__))
#define TITAN_SHARED_DYNAMIC(T, name) T* const name = static_cast<T*>(::titan::cuda_emu::dynamic_shared())

#define __syncthreads() ::titan::cuda_emu::syncthreads(__FILE__, __LINE__)
#define __syncthreads_count(pred) ::titan::cuda_emu::syncthreads_count(__FILE__, __LINE__, (pred))
#define __syncwarp(...) ::titan::cuda_emu::syncwarp(__FILE__, __LINE__, ::titan::cuda_emu::mask_or_full(__VA_ARGS__))
#define __shfl_sync(mask, v, lane, ...)                                                                     \
  ::titan::cuda_emu::shfl(__FILE__, __LINE__, ::titan::cuda_emu::WarpOp::ShflIdx, (mask), (v), (lane), \
                          ::titan::cuda_emu::width_or_32(__VA_ARGS__))
#define __shfl_up_sync(mask, v, delta, ...)                                                                \
  ::titan::cuda_emu::shfl(__FILE__, __LINE__, ::titan::cuda_emu::WarpOp::ShflUp, (mask), (v), int(delta), \
                          ::titan::cuda_emu::width_or_32(__VA_ARGS__))
#define __shfl_down_sync(mask, v, delta, ...)                                                                \
  ::titan::cuda_emu::shfl(__FILE__, __LINE__, ::titan::cuda_emu::WarpOp::ShflDown, (mask), (v), int(delta), \
                          ::titan::cuda_emu::width_or_32(__VA_ARGS__))
#define __shfl_xor_sync(mask, v, lm, ...)                                                                \
  ::titan::cuda_emu::shfl(__FILE__, __LINE__, ::titan::cuda_emu::WarpOp::ShflXor, (mask), (v), int(lm), \
                          ::titan::cuda_emu::width_or_32(__VA_ARGS__))
#define __ballot_sync(mask, pred)                                                                              \
  static_cast<unsigned>(::titan::cuda_emu::warp_op(__FILE__, __LINE__, ::titan::cuda_emu::WarpOp::Ballot, (mask), \
                                                   (pred) != 0, 0, 32))
#define __any_sync(mask, pred)                                                                               \
  static_cast<int>(::titan::cuda_emu::warp_op(__FILE__, __LINE__, ::titan::cuda_emu::WarpOp::Any, (mask), \
                                              (pred) != 0, 0, 32))
#define __all_sync(mask, pred)                                                                               \
  static_cast<int>(::titan::cuda_emu::warp_op(__FILE__, __LINE__, ::titan::cuda_emu::WarpOp::All, (mask), \
                                              (pred) != 0, 0, 32))

namespace titan::cuda_emu {
constexpr int width_or_32() { return 32; }
constexpr int width_or_32(int w) { return w; }
constexpr unsigned mask_or_full() { return 0xffffffffu; }
constexpr unsigned mask_or_full(unsigned m) { return m; }
}  // namespace titan::cuda_emu

// Atomics: fibers switch only at barriers and warp collectives, so a read-modify-write is atomic.
template <class T>
inline T atomicAdd(T* p, T v) {
  const T old = *p;
  *p = old + v;
  return old;
}
template <class T>
inline T atomicSub(T* p, T v) {
  const T old = *p;
  *p = old - v;
  return old;
}
template <class T>
inline T atomicMax(T* p, T v) {
  const T old = *p;
  *p = old < v ? v : old;
  return old;
}
template <class T>
inline T atomicMin(T* p, T v) {
  const T old = *p;
  *p = v < old ? v : old;
  return old;
}
template <class T>
inline T atomicExch(T* p, T v) {
  const T old = *p;
  *p = v;
  return old;
}
template <class T>
inline T atomicCAS(T* p, T compare, T v) {
  const T old = *p;
  if (old == compare) *p = v;
  return old;
}
inline float __expf(float x) { return std::exp(x); }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline int __float_as_int(float f) { return ::titan::cuda_emu::from_bits<int>(::titan::cuda_emu::to_bits(f)); }
inline float __int_as_float(int i) { return ::titan::cuda_emu::from_bits<float>(::titan::cuda_emu::to_bits(i)); }
inline unsigned __float_as_uint(float f) { return ::titan::cuda_emu::from_bits<unsigned>(::titan::cuda_emu::to_bits(f)); }
inline float __uint_as_float(unsigned i) { return ::titan::cuda_emu::from_bits<float>(::titan::cuda_emu::to_bits(i)); }

namespace titan::gpu {
using Stream = void*;
}  // namespace titan::gpu
#define TITAN_LAUNCH(kernel, grid, block, shmem, stream, ...)                                                \
  do {                                                                                                         \
    (void)(stream); /* one stream: launches run in order, each to completion */                                \
    ::titan::cuda_emu::launch_kernel(::titan::cuda_emu::LaunchSite{#kernel, __FILE__, __LINE__}, kernel, (grid), \
                                     (block), (shmem), __VA_ARGS__);                                           \
  } while (0)
#define TITAN_SET_MAX_DYNAMIC_SHARED(kernel, bytes) \
  ::titan::cuda_emu::set_max_dynamic_shared(reinterpret_cast<const void*>(kernel), (bytes))
#endif

// Device memory: core/gpu_memory.h.
#include "core/gpu_memory.h"
