// Operands of the "cuda" op variants (ops/cuda/variants.cpp, linear_attn_variants.cpp, ...): a
// tensor already on the GPU (Tensor on cuda:0) is used where it is; a host tensor is staged: copied
// into device memory, and an output copied back by to_host(). Every block comes from the CUDA
// caching allocator (core/cuda_allocator.cpp), so neither path calls cudaMalloc once warm.
// titan::gpu is the emulator's memory in an emulator build and the CUDA runtime in a GPU build.
#pragma once
#include <cstddef>

#include "core/allocator.h"
#include "core/cuda_emu/cuda.h"
#include "core/dtype.h"
#include "core/exec_context.h"
#include "core/tensor.h"
#include "ops/op_checks.h"
#include "ops/row_view.h"

namespace titan::cuda_staging {

// A tensor's device memory: its own when it lives on the GPU; else a copy of the host tensor
// (copied in unless `in` is false), copied back by to_host(), freed at scope end.
class Staged {
 public:
  Staged() = default;
  Staged(const Tensor& t, bool in) : host_(t), bytes_(t.defined() ? t.nbytes() : 0) {
    if (!t.defined()) return;
    if (t.device().type == DeviceType::CUDA) {  // already there: no copy either way
      dev_ = t.raw(), owned_ = false;
      return;
    }
    dev_ = cuda_allocator().allocate(bytes_);
    if (in) gpu::copy_to_device(dev_, t.raw(), bytes_);
  }
  // Device scratch of `bytes` (none when zero).
  explicit Staged(size_t bytes) : bytes_(bytes) {
    if (bytes) dev_ = cuda_allocator().allocate(bytes);
  }
  // A copy of raw host memory (not copied back).
  Staged(const void* host, size_t bytes) : Staged(bytes) {
    if (host && bytes) gpu::copy_to_device(dev_, host, bytes);
  }
  ~Staged() {
    if (dev_ && owned_) cuda_allocator().deallocate(dev_, bytes_);
  }
  Staged(const Staged&) = delete;
  Staged& operator=(const Staged&) = delete;
  template <class T>
  T* as() const {
    return static_cast<T*>(dev_);
  }
  void to_host() const {
    if (dev_ && owned_ && host_.defined()) gpu::copy_to_host(host_.raw(), dev_, bytes_);
  }
  // Only the elements of view v of this tensor (its rows, not the gaps between them, which may be
  // another output's columns in the same buffer).
  void to_host_rows(const RowView& v) const {
    if (dev_ && owned_ && v.n > 0)
      gpu::copy_to_host_2d(host_.raw(), dev_, size_t(v.ld) * dtype_size(host_.dtype()),
                           size_t(v.h * v.d) * dtype_size(host_.dtype()), size_t(v.n));
  }

 private:
  Tensor host_;
  void* dev_ = nullptr;
  size_t bytes_ = 0;
  bool owned_ = true;
};

// The context check of a cuda variant registered for device D: for DeviceType::CPU the host
// context (its operands host tensors, staged), for DeviceType::CUDA a cuda:0 context (its operands
// on the GPU; a host operand is staged all the same). Named "<op>.cuda" in the refusal.
template <DeviceType D>
void context(const ExecContext& ctx, const char* kernel) {
  if constexpr (D == DeviceType::CPU) {
    opcheck::host_context(ctx, kernel);
  } else {
    TITAN_CHECK(ctx.device.type == DeviceType::CUDA, kernel, ": registered for the GPU, not for ", ctx.device.str());
  }
}

}  // namespace titan::cuda_staging
