// The GPU side of ops/foreach/foreach.h (ops/cuda/foreach_variant.cpp), which foreach's functions
// call when ctx.device is cuda:0: the ranges are then device memory.
#pragma once
#include <vector>

#include "ops/foreach/foreach.h"

namespace titan::foreach_detail {

double sum_squares_cuda(const ExecContext& ctx, const std::vector<FloatRange>& ranges);
void scale_cuda(const ExecContext& ctx, const std::vector<FloatRange>& ranges, float c);

}  // namespace titan::foreach_detail
