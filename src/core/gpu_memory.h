// Device memory, the same calls under both compilers (defined in core/cuda_emu/gpu_memory.cpp for
// the grid emulator, where device memory is host memory, and in src/ops/cuda/kernels.cu over the
// CUDA runtime in a GPU build). Host code that moves bytes (Tensor, the CUDA allocator) includes
// this alone; kernel code gets it through core/cuda_emu/cuda.h.
#pragma once
#include <cstddef>

namespace titan::gpu {
void* alloc(size_t bytes);
void free(void* p);
// Page-locked host memory (cudaHostAlloc / cudaFreeHost): the host side of a copy the DMA engine
// does without a bounce buffer. Checkpoint I/O stages GPU tensors through one bounded buffer of it
// (core/pinned_staging.h). Under the emulator: 64-byte aligned host memory, counted apart from
// device memory (cuda_emu::pinned_live_bytes).
void* alloc_pinned(size_t bytes);
void free_pinned(void* p);
void copy_to_device(void* dst, const void* src, size_t bytes);
void copy_to_host(void* dst, const void* src, size_t bytes);
void copy_device(void* dst, const void* src, size_t bytes);
void zero(void* dst, size_t bytes);  // cudaMemset(dst, 0, bytes)
// rows of width bytes, pitch bytes apart on both sides (cudaMemcpy2D): the rows of a strided view
// without the gaps between them, which may belong to another operand.
void copy_to_host_2d(void* dst, const void* src, size_t pitch, size_t width, size_t rows);
// rows of width bytes from device memory to device memory, each side with its own pitch
// (cudaMemcpy2D device to device): a strided row view copied out of (or into) a fused buffer.
void copy_device_2d(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t rows);
void synchronize();
// The device's total memory in bytes (cudaMemGetInfo); 0 under the emulator, which has no such limit.
size_t total_memory();
}  // namespace titan::gpu
