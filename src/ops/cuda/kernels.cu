// The single-source CUDA kernels (ops/cuda/*.cuh) compiled by nvcc (sm_80, sm_90; -Werror): the
// TITAN_CUDA build gate (cmake/cuda.cmake) compiles this file so that every kernel the emulator
// runs also builds for the GPU, and records `-Xptxas -v` (registers, spills) per kernel. It also
// defines titan::gpu's memory calls over the CUDA runtime (the emulator's are in
// core/cuda_emu/gpu_memory.cpp).
#include <cstdio>
#include <string>

#include "core/cuda_emu/cuda.h"
#include "core/error.h"
#include "ops/cuda/adamw.cuh"
#include "ops/cuda/attention.cuh"
#include "ops/cuda/causal_conv1d.cuh"
#include "ops/cuda/cross_entropy.cuh"
#include "ops/cuda/elementwise.cuh"
#include "ops/cuda/embedding.cuh"
#include "ops/cuda/foreach.cuh"
#include "ops/cuda/gated_delta.cuh"
#include "ops/cuda/gated_rmsnorm.cuh"
#include "ops/cuda/gemm_cublaslt.cuh"
#include "ops/cuda/gemm_ref.cuh"
#include "ops/cuda/moe.cuh"
#include "ops/cuda/rmsnorm.cuh"
#include "ops/cuda/rope.cuh"
#include "ops/cuda/swiglu.cuh"

namespace titan::gpu {

void check(cudaError_t e, const char* what, const char* file, int line) {
  if (e != cudaSuccess) fail("cuda: ", what, " at ", file, ":", line, ": ", cudaGetErrorString(e));
}

void* alloc(size_t bytes) {
  void* p = nullptr;
  TITAN_CUDA_CHECK(cudaMalloc(&p, bytes ? bytes : 1));
  return p;
}
void free(void* p) { TITAN_CUDA_CHECK(cudaFree(p)); }
void* alloc_pinned(size_t bytes) {
  void* p = nullptr;
  TITAN_CUDA_CHECK(cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocDefault));
  return p;
}
void free_pinned(void* p) {
  if (p) TITAN_CUDA_CHECK(cudaFreeHost(p));
}
void copy_to_device(void* dst, const void* src, size_t bytes) {
  TITAN_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}
void copy_to_host(void* dst, const void* src, size_t bytes) {
  TITAN_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}
void copy_device(void* dst, const void* src, size_t bytes) {
  TITAN_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice));
}
void zero(void* dst, size_t bytes) {
  if (bytes) TITAN_CUDA_CHECK(cudaMemset(dst, 0, bytes));
}
void copy_to_host_2d(void* dst, const void* src, size_t pitch, size_t width, size_t rows) {
  if (rows) TITAN_CUDA_CHECK(cudaMemcpy2D(dst, pitch, src, pitch, width, rows, cudaMemcpyDeviceToHost));
}
void copy_device_2d(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t rows) {
  if (rows && width) TITAN_CUDA_CHECK(cudaMemcpy2D(dst, dpitch, src, spitch, width, rows, cudaMemcpyDeviceToDevice));
}
void synchronize() { TITAN_CUDA_CHECK(cudaDeviceSynchronize()); }
size_t total_memory() {
  size_t free_bytes = 0, total = 0;
  TITAN_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
  return total;
}

}  // namespace titan::gpu
