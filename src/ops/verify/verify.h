// Numerical verification of every registered kernel variant against its op's reference variant
// (`titan verify kernels`): forward and backward, f32 and bf16, over a fixed list of shapes that
// includes odd ones.
//
// dtype "bf16" means: for ops with a bf16 compute mode (gemm, linear, cross_entropy, moe) both
// sides run that mode on the same inputs (the reference rounds at the same points and sums in
// double); for the other ops the inputs are rounded to bf16 values and both sides compute in f32.
//
// Per row: max_abs_diff = max |variant - reference| over all outputs of that direction;
// max_rel_diff = max over outputs of (max |variant - reference| / max(max |reference|, 1e-3))
// (relative to each output's largest reference magnitude, so near-zero elements do not dominate;
// the floor keeps an output that is zero up to rounding, e.g. RMSNorm's dx for D = 1, from
// turning noise into a large ratio);
// ok = finite and max_rel_diff <= tol, or for variants declared bit-exact (rope.fused) max_abs_diff == 0 exactly.
#pragma once
#include <string>
#include <vector>

#include "core/tensor.h"
#include "ops/registry.h"

namespace titan {

struct VerifyRow {
  std::string op, variant, dtype, shape, direction;  // direction: forward, backward (adamw: step)
  double max_abs_diff = 0, max_rel_diff = 0, tol = 0;
  bool exact = false, ok = false;
};

// All ops (op == "") or one op (error when unknown); variants other than "reference".
std::vector<VerifyRow> verify_kernels(const std::string& op = "");

namespace verify_detail {

// Accumulates the comparison of several outputs into one row.
struct Diff {
  double max_abs = 0, max_rel = 0;  // max over the outputs added
  bool finite = true;
  void add(const Tensor& got, const Tensor& ref);
  void add_scalar(double got, double ref);
};

Tensor randn(const Shape& s, uint64_t stream, double std = 1.0);
Tensor round_bf16(const Tensor& t, bool bf16);  // bf16 ? values rounded to bf16 (f32 tensor) : t
void emit(std::vector<VerifyRow>& rows, const std::string& op, const std::string& variant, bool bf16,
          const std::string& shape, const std::string& direction, const Diff& d, double tol, bool exact = false);

constexpr double kTolF32 = 1e-4, kTolBf16Compute = 2e-2;
constexpr double kRelFloor = 1e-3;  // smallest denominator of max_rel_diff

template <class K>
std::vector<std::string> variants_to_check() {
  std::vector<std::string> v;
  for (const auto& n : KernelRegistry<K>::get().variants())
    if (n != "reference") v.push_back(n);
  return v;
}

// "M=7,K=13" from name/value pairs.
inline std::string dims(std::initializer_list<std::pair<const char*, int64_t>> d) {
  std::string s;
  for (const auto& [k, v] : d) s += (s.empty() ? "" : ",") + std::string(k) + "=" + std::to_string(v);
  return s;
}

// One function per op family: appends rows for each non-reference variant.
void verify_embedding(std::vector<VerifyRow>& rows);
void verify_gemm(std::vector<VerifyRow>& rows);
void verify_linear(std::vector<VerifyRow>& rows);
void verify_rmsnorm(std::vector<VerifyRow>& rows);
void verify_rmsnorm_views(std::vector<VerifyRow>& rows);  // the row-view, bf16-y and dx += forms
void verify_rope(std::vector<VerifyRow>& rows);
void verify_attention(std::vector<VerifyRow>& rows);
void verify_swiglu(std::vector<VerifyRow>& rows);
void verify_residual(std::vector<VerifyRow>& rows);
void verify_bias(std::vector<VerifyRow>& rows);
void verify_cross_entropy(std::vector<VerifyRow>& rows);
void verify_adamw(std::vector<VerifyRow>& rows);
void verify_moe(std::vector<VerifyRow>& rows);

}  // namespace verify_detail
}  // namespace titan
