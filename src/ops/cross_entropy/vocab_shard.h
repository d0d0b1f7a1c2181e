// The row phases of cross-entropy when each rank holds the logits of a vocabulary shard
// [v0, v0 + Vl) (tensor parallelism: the lm_head split by rows, Megatron's vocab-parallel
// cross-entropy). The caller runs the GEMMs and the tp group's collectives between the phases:
//
//   ce_shard_row_max    mx[i] = max_j z[i, j] over the shard        -> all-gather, max over ranks
//   ce_shard_exp_sums   sum[i] = sum_j exp(z[i, j] - mx[i]) (z overwritten by the exponentials when
//                       `store`), tgt[i] = z[i, label - v0] - mx[i] on the rank holding the label,
//                       0 elsewhere (and for ignored rows)       -> all-reduce (sum) of both
//   ce_shard_dlogits    z[i, :] = grad_scale (exp / sum[i] - onehot) on counted rows, 0 on ignored
//                       ones (z holding the exponentials)
//
// The row passes are the fused cross-entropy's own (ce_detail::row_ops: AVX2/AVX-512 max, sum of
// exponentials, scaling), so the shard's numbers are those of the whole-vocabulary kernel's rows.
// CPU functions taking an ExecContext like every kernel (refusing another device's context).
#pragma once
#include "core/exec_context.h"
#include "core/tensor.h"

namespace titan {

// z: [c, Vl] f32 contiguous; labels: [c] i64 (kIgnoreIndex or a vocabulary id); mx, sum, tgt: c floats.
void ce_shard_row_max(const ExecContext& ctx, const Tensor& z, float* mx);
void ce_shard_exp_sums(const ExecContext& ctx, Tensor& z, const Tensor& labels, int64_t v0, const float* mx, bool store,
                       float* sum, float* tgt);
void ce_shard_dlogits(const ExecContext& ctx, Tensor& z, const Tensor& labels, int64_t v0, const float* sum,
                      float grad_scale);

}  // namespace titan
