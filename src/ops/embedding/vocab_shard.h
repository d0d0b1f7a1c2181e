// The embedding over a vocabulary shard (tensor parallelism, model/tensor_parallel.h: rank q holds
// rows [v0, v0 + n) of the table). forward writes a token's row when the shard holds it and zeros
// otherwise (the tp group's sum is then the whole lookup); backward adds each token's gradient row
// into the shard's row, tokens in order for each column (one fixed summation order).
//
// CPU functions taking an ExecContext like every kernel (refusing another device's context).
#pragma once
#include "core/exec_context.h"
#include "core/tensor.h"

namespace titan {

// ids [T] i64 in [0, vocab) (else a one-line error naming the position); shard [n, H] f32;
// out [T, H] f32, overwritten.
void embedding_shard_forward(const ExecContext& ctx, const Tensor& ids, const Tensor& shard, int64_t v0, int64_t vocab,
                             Tensor& out);
// dout [T, H] f32; dshard [n, H] f32, accumulated into.
void embedding_shard_backward(const ExecContext& ctx, const Tensor& ids, const Tensor& dout, int64_t v0,
                              Tensor& dshard);

}  // namespace titan
