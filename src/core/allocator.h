// Device memory allocation with live and peak byte accounting (the `memory` training metric).
// Buffers are 64-byte aligned so that AVX-512 loads of a tensor's start never split a line.
#pragma once
#include <atomic>
#include <cstddef>

#include "core/device.h"

namespace titan {

struct MemoryStats {
  size_t live_bytes = 0;      // bytes in tensors now
  size_t peak_bytes = 0;      // highest live_bytes since start or reset_peak()
  size_t alloc_count = 0;
  size_t cached_bytes = 0;    // freed blocks kept for reuse (see CpuAllocator)
  size_t reserved_bytes = 0;  // held from the system: in use (rounded) + cached (CUDA allocator)
  size_t system_allocs = 0;   // blocks taken from the system (cudaMalloc calls; CUDA allocator)
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* p, size_t bytes) = 0;
  MemoryStats stats() const;
  void reset_peak();  // peak := live
  virtual size_t cached_bytes() const { return 0; }
  virtual size_t reserved_bytes() const { return 0; }
  virtual size_t system_allocs() const { return 0; }
  virtual void empty_cache() {}  // return cached blocks to the system

 protected:
  void note_alloc(size_t bytes);
  void note_free(size_t bytes);

 private:
  std::atomic<size_t> live_{0}, peak_{0}, count_{0};
};

// The allocator of device d: the CPU's, or cuda:0's caching allocator (core/cuda_allocator.cpp;
// one GPU per process, so cuda:N other than 0 is refused).
Allocator& allocator_for(Device d);
Allocator& cuda_allocator();
inline Allocator& cpu_allocator() { return allocator_for(cpu()); }

// Physical memory of this machine in bytes (for "% of machine memory").
size_t machine_memory_bytes();
// The memory of device d: the machine's for the CPU, the GPU's total for cuda:0 (0: unknown, as
// under the grid emulator).
size_t device_memory_bytes(Device d);

}  // namespace titan
