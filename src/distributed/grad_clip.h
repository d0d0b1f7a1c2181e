// Gradient clipping as torch.nn.utils.clip_grad_norm_(max_norm, norm_type=2), one routine for
// gradients held whole in each process (one process, or replicas after their all-reduce:
// train/grad_utils.h) and for a rank's shard of them (distributed/fsdp.h). The two differ only in how
// the global sum of squares is formed from this process's part, which the caller passes in; the
// norm and the scaling are the same code.
//
// The arithmetic is the multi-tensor ops of ops/foreach/foreach.h (deterministic for any thread
// count: fixed chunks, each summed in double, the chunk sums added in order).
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "ops/foreach/foreach.h"

namespace titan::distributed {

// f32 gradient elements [data, data + n).
using GradRange = FloatRange;

// Sum over the ranges of g^2, in double. ctx: where the gradients live (the model's exec()).
double sum_of_squares(const ExecContext& ctx, const std::vector<GradRange>& grads);

// total = sqrt(global(sum_of_squares(grads))), where `global` turns this process's sum into the sum
// over every gradient: the identity (empty) when `grads` are all of them, the sum over the ranks
// holding the other parts when they are a shard (an all-reduce, every rank getting the same
// total). When max_norm > 0 and coef = max_norm / (total + 1e-6) < 1, every element is multiplied
// by (float)coef. A non-finite total leaves the gradients untouched (torch would multiply them by
// NaN): the caller stops the run. Returns total.
double clip_grad_norm(const ExecContext& ctx, const std::vector<GradRange>& grads, double max_norm,
                      const std::function<double(double local_sum_of_squares)>& global = {});

}  // namespace titan::distributed
