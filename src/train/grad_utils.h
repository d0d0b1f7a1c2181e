// Gradient helpers of the training step over whole tensors: their f32 ranges for the one
// clipping routine (distributed/grad_clip.h, which the sharded step uses too: deterministic for
// any thread count), the global L2 norm, and locating the first non-finite tensor (the run stops
// naming it).
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "distributed/grad_clip.h"
#include "train/tensor_file.h"

namespace titan {

// sqrt(sum over all tensors and elements of g^2). f32 tensors only (error names the tensor).
// On the device the tensors live on (the host, or cuda:0 through ops/foreach's GPU kernels).
double global_l2_norm(const std::vector<NamedTensor>& grads);

// The f32 elements of every tensor, for distributed::clip_grad_norm; an undefined or non-f32
// tensor, or one on another device than the first, is an error naming it (`what`: the caller, in
// that message). GPU tensors give device pointers: pass a cuda:0 context (the model's exec()).
std::vector<distributed::GradRange> grad_ranges(const std::vector<NamedTensor>& grads, const char* what);

// Name of the first tensor, in the given order, holding a NaN or Inf (f32, bf16 or f16). A GPU
// tensor is copied to the host first (an error path, not a step's).
std::optional<std::string> first_non_finite(const std::vector<NamedTensor>& tensors);

}  // namespace titan
