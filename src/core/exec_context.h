// Where and how a kernel runs: the execution context every kernel call takes as its first
// argument (ops/registry.h). It names the device the operands live on, the stream the work is
// queued on, a scratch workspace and the GEMM library handle, so that the same op interface
// serves the CPU (the calling thread, oneDNN) and an accelerator (a CUDA stream, cuBLASLt)
// without the model knowing which.
//
// On the CPU, stream and gemm_handle are null: work runs on the calling thread (its OpenMP
// team), and oneDNN keeps its primitives in a process-wide cache. A CUDA backend fills them
// (cudaStream_t, cublasLtHandle_t) and owns them; they are opaque pointers here so that this
// header, and every layer above it, builds without the CUDA toolkit.
#pragma once
#include <cstddef>
#include <memory>

#include "core/device.h"

namespace titan {

// Scratch memory a kernel may use for the duration of one call (the caller does not read it
// afterwards). Grows to the largest request and keeps that size, so a steady training step makes
// no allocation for scratch. Not thread-safe: one workspace per stream of work.
class Workspace {
 public:
  explicit Workspace(Device d = cpu()) : device_(d) {}
  ~Workspace();
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  // At least `bytes` bytes, 64-byte aligned, valid until the next get() or the workspace's end.
  void* get(size_t bytes);
  size_t capacity() const { return bytes_; }
  Device device() const { return device_; }

 private:
  Device device_;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

struct ExecContext {
  Device device = cpu();
  void* stream = nullptr;          // cudaStream_t on CUDA; null on the CPU
  Workspace* workspace = nullptr;  // optional scratch; null: kernels allocate their own temporaries
  void* gemm_handle = nullptr;     // cublasLtHandle_t on CUDA; null on the CPU

  // The host context: the CPU, the calling thread, no shared workspace.
  static const ExecContext& host();
};

}  // namespace titan
