// The op families by name, for code that picks kernels from strings ("rope.transposed" in a job file,
// `titan verify kernels --op rope`): which ops exist, which variants each has registered, and
// whether a variant accepts a shape (its declared constraint).
#pragma once
#include <string>
#include <vector>

#include "ops/kernel_shape.h"

namespace titan {

// Every op family with a kernel registry, in a fixed order:
// embedding, gemm, linear, rmsnorm, rope, attention, swiglu, residual, cross_entropy, adamw, moe, bias, gated_delta, causal_conv1d, gated_rmsnorm.
const std::vector<std::string>& op_names();
bool op_exists(const std::string& op);
std::vector<std::string> op_variants(const std::string& op);  // registered CPU variants, sorted
// The registered variant that `name` selects: itself, or the variant it is an alias of
// ("fused" selects rope's "transposed"); "" when it selects none.
std::string op_variant_of(const std::string& op, const std::string& name);
bool op_has_variant(const std::string& op, const std::string& variant);  // aliases included
// "" when op.variant accepts the shape, else the reason; the variant must exist.
std::string op_constraint(const std::string& op, const std::string& variant, const KernelShape& s);

// "op.variant" -> {op, variant}; the split is at the first '.'. Errors on a malformed string.
std::pair<std::string, std::string> split_kernel_name(const std::string& s);

}  // namespace titan
