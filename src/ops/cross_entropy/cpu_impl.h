// The cpu variant of the fused lm_head + cross-entropy, with its GEMM and chunk size as explicit
// parameters. The registered "cpu" kernel calls these with kernel<GemmKernel>("cpu") and the
// default chunk; tests and benchmarks call them directly (a small chunk exercises the chunk
// boundaries, a deterministic GEMM checks thread-count independence).
#pragma once
#include <cstddef>
#include <cstdint>

#include "ops/cross_entropy/cross_entropy.h"
#include "ops/matmul/matmul.h"

namespace titan::ce_detail {

// Bytes of f32 logits one chunk of rows may hold (the working set besides W, dW and, with bf16
// compute, W's bf16 copy and the chunk's bf16 dlogits).
constexpr size_t kDefaultChunkBytes = size_t(512) << 20;

// Rows per chunk: the N rows split into equal chunks (a multiple of 16 rows, except a single
// chunk of N) whose [rows, V] f32 logits fit in `budget_bytes`.
int64_t chunk_rows(int64_t n, int64_t v, size_t budget_bytes = kDefaultChunkBytes);

// As CrossEntropyKernel::forward / forward_backward; rows <= 0 picks chunk_rows(N, V).
double cpu_forward(const ExecContext& ctx, const GemmKernel& gemm, const Tensor& h, const Tensor& w,
                   const Tensor& labels, Tensor* logits_out, DType compute, int64_t rows = 0);
double cpu_forward_backward(const ExecContext& ctx, const GemmKernel& gemm, const Tensor& h, const Tensor& w,
                            const Tensor& labels, float grad_scale, Tensor& dh, Tensor& dw, DType compute,
                            int64_t rows = 0);

}  // namespace titan::ce_detail
