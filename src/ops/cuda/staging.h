// Staging of host tensors through device memory for the "cuda" op variants (ops/cuda/variants.cpp,
// linear_attn_variants.cpp): the project has no device tensor yet (docs/cuda.md), so a variant
// copies its operands in, launches, and copies its outputs back. titan::gpu is the emulator's
// memory in an emulator build and cudaMalloc/cudaMemcpy in a GPU build.
#pragma once
#include <cstddef>

#include "core/cuda_emu/cuda.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "ops/row_view.h"

namespace titan::cuda_staging {

// Device memory holding a copy of a host tensor (copied in unless `in` is false), copied back by
// to_host(); freed at scope end.
class Staged {
 public:
  Staged() = default;
  Staged(const Tensor& t, bool in) : host_(t), bytes_(t.defined() ? t.nbytes() : 0) {
    if (!t.defined()) return;
    dev_ = gpu::alloc(bytes_);
    if (in) gpu::copy_to_device(dev_, t.raw(), bytes_);
  }
  explicit Staged(size_t bytes) : bytes_(bytes) { dev_ = gpu::alloc(bytes); }
  // A copy of raw host memory (not copied back).
  Staged(const void* host, size_t bytes) : Staged(bytes) {
    if (host && bytes) gpu::copy_to_device(dev_, host, bytes);
  }
  ~Staged() {
    if (dev_) gpu::free(dev_);
  }
  Staged(const Staged&) = delete;
  Staged& operator=(const Staged&) = delete;
  template <class T>
  T* as() const {
    return static_cast<T*>(dev_);
  }
  void to_host() const {
    if (dev_) gpu::copy_to_host(host_.raw(), dev_, bytes_);
  }
  // Only the elements of view v of this tensor (its rows, not the gaps between them, which may be
  // another output's columns in the same buffer).
  void to_host_rows(const RowView& v) const {
    if (dev_ && v.n > 0)
      gpu::copy_to_host_2d(host_.raw(), dev_, size_t(v.ld) * dtype_size(host_.dtype()),
                           size_t(v.h * v.d) * dtype_size(host_.dtype()), size_t(v.n));
  }

 private:
  Tensor host_;
  void* dev_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace titan::cuda_staging
