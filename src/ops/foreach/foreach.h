// Multi-tensor ops over f32 ranges, as torch's _foreach_norm / _foreach_mul_ serve
// torch.nn.utils.clip_grad_norm_ (distributed/grad_clip.h): the sum of squares of many ranges and
// their scaling in place.
//
// Deterministic for any thread count: each range is cut into fixed 64Ki-element chunks, each
// chunk's sum of squares is accumulated in double (AVX2, 8 lanes, fixed lane order), and the chunk
// sums are added in order.
//
// ctx.device says where the ranges live: the CPU, or cuda:0 (ranges in GPU memory, e.g. a GPU
// model's gradients through Tensor::raw()). On the GPU all ranges go to one launch
// (ops/cuda/foreach.cuh: per 8Ki-element chunk a fixed-shape block tree in double, the chunk sums
// added in a fixed order; no atomics), so the sum is the same bits for every block and thread
// order and equals the CPU's up to the order of the double additions; the scaling is the CPU's f32
// product, the same bits.
#pragma once
#include <cstdint>
#include <vector>

#include "core/exec_context.h"

namespace titan {

// f32 elements [data, data + n): host memory, or device memory for a cuda:0 context.
struct FloatRange {
  float* data;
  int64_t n;
};

// Sum over the ranges of x^2, in double.
double foreach_sum_squares(const ExecContext& ctx, const std::vector<FloatRange>& ranges);

// Every element x of the ranges becomes x * c.
void foreach_scale(const ExecContext& ctx, const std::vector<FloatRange>& ranges, float c);

}  // namespace titan
