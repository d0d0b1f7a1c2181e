// titan::gpu memory calls (core/cuda_emu/cuda.h) under the grid emulator: device memory is host
// memory, tracked by the emulator; copies are memcpy. The nvcc build defines the same calls over
// the CUDA runtime (src/ops/cuda/gpu_runtime.cu).
#ifndef TITAN_CUDA_RUNTIME  // a GPU build: kernels.cu defines these over the CUDA runtime
#include <cstring>

#include "core/cuda_emu/cuda.h"

namespace titan::gpu {

void* alloc(size_t bytes) { return cuda_emu::device_malloc(bytes); }
void free(void* p) { cuda_emu::device_free(p); }
void* alloc_pinned(size_t bytes) { return cuda_emu::pinned_malloc(bytes); }
void free_pinned(void* p) { cuda_emu::pinned_free(p); }
void copy_to_device(void* dst, const void* src, size_t bytes) {
  if (bytes) std::memcpy(dst, src, bytes);
}
void copy_to_host(void* dst, const void* src, size_t bytes) {
  if (bytes) std::memcpy(dst, src, bytes);
}
void copy_device(void* dst, const void* src, size_t bytes) {
  if (bytes) std::memmove(dst, src, bytes);
}
void zero(void* dst, size_t bytes) {
  if (bytes) std::memset(dst, 0, bytes);
}
void copy_to_host_2d(void* dst, const void* src, size_t pitch, size_t width, size_t rows) {
  for (size_t r = 0; r < rows; ++r)
    std::memcpy(static_cast<char*>(dst) + r * pitch, static_cast<const char*>(src) + r * pitch, width);
}
void copy_device_2d(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t rows) {
  for (size_t r = 0; r < rows; ++r)
    std::memcpy(static_cast<char*>(dst) + r * dpitch, static_cast<const char*>(src) + r * spitch, width);
}
void synchronize() {}
size_t total_memory() { return 0; }

}  // namespace titan::gpu
#endif  // TITAN_CUDA_RUNTIME
