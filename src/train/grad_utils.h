// Gradient helpers of the training step over whole tensors: global L2 norm, clipping as
// torch.nn.utils.clip_grad_norm_ does, and locating the first non-finite tensor (the run stops
// naming it). Norm and clipping are distributed/grad_clip.h's, the routine the sharded step (distributed/fsdp.h)
// uses too: deterministic for any thread count.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "train/tensor_file.h"

namespace titan {

// sqrt(sum over all tensors and elements of g^2). f32 tensors only (error names the tensor).
double global_l2_norm(const std::vector<NamedTensor>& grads);

// torch.nn.utils.clip_grad_norm_(max_norm, norm_type=2): total = global_l2_norm(grads);
// coef = max_norm / (total + 1e-6); when max_norm > 0 and coef < 1 every gradient is multiplied by
// (float)coef. Returns total (before clipping). A non-finite total leaves the gradients untouched
// (torch would multiply them by NaN); the caller stops the run, naming first_non_finite(grads).
double clip_grad_norm_(const std::vector<NamedTensor>& grads, double max_norm);

// Name of the first tensor, in the given order, holding a NaN or Inf (f32, bf16 or f16).
std::optional<std::string> first_non_finite(const std::vector<NamedTensor>& tensors);

}  // namespace titan
