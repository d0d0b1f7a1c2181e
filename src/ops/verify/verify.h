// Numerical verification of every registered kernel variant against its op's reference variant
// (`titan verify kernels`), driven by one case table (kernel_cases()) that the unit tests
// (tests/unit/ops/test_kernel_cases.cpp) instantiate as well: a case added here is checked by both.
//
// A case is one op on one set of inputs (shape, dtype, input generator) with the directions it
// compares (forward, backward, step; each with its tolerance) and, for the f32 cases of ops with a
// backward, a finite-difference check of the reference backward. Each case runs for every
// non-reference variant of its op; its finite-difference check runs once, as variant "reference".
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
// ok = finite and max_rel_diff <= tol, or for variants declared bit-exact (rope.transposed, and the cpu
// variants of embedding's forward and residual) max_abs_diff == 0 exactly. An output given an
// elementwise bound (the tolerances the cpu kernels were tested with) is judged by
// |variant - reference| <= atol + rtol |reference| on every element instead of by tol; cases marked
// `threads` also need the variant's outputs to be the same bits with 1 and 2 threads.
//
// Finite-difference rows (direction "gradient", variant "reference"): L(inputs) = sum(forward · R)
// for fixed random R; along kFdDirections random directions u (unit normal entries per input),
// fd = (L(x + eps u) - L(x - eps u)) / (2 eps) against the analytic <grad, u> from the reference
// backward (directions along which a piecewise op, MoE's top-k routing, changes its piece are
// skipped); max_rel_diff = max |fd - <grad, u>| / max(|grad|_2, 1e-3) (|grad|_2 over all perturbed
// inputs is the standard deviation of <grad, u> for such u); ok when <= the case's tolerance.
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "ops/registry.h"

namespace titan {

struct VerifyRow {
  std::string op, variant, dtype, shape, direction;  // direction: forward, backward, gradient (adamw: step)
  double max_abs_diff = 0, max_rel_diff = 0, tol = 0;
  bool exact = false, ok = false;
  std::string why;  // when !ok: which condition failed
};

// All ops (op == "") or one op (error when unknown); every variant (variant == "") or only one
// (`titan verify kernels --device cuda` runs variant "cuda", docs/cuda.md).
std::vector<VerifyRow> verify_kernels(const std::string& op = "", const std::string& variant = "");

namespace verify_detail {

constexpr double kTolF32 = 1e-4, kTolBf16Compute = 2e-2;
constexpr double kRelFloor = 1e-3;  // smallest denominator of max_rel_diff
constexpr int kFdDirections = 4;

// |got - ref| <= atol + rtol |ref| on every element of one output (inactive when atol < 0).
struct Bound {
  double atol = -1, rtol = 0;
};

// Accumulates the comparison of several outputs into one row.
struct Diff {
  double max_abs = 0, max_rel = 0;  // max over the outputs added
  double max_rel_unbounded = 0;       // max_rel over the outputs added without an active Bound
  bool finite = true, within = true;  // within: every active Bound held
  void add(const Tensor& got, const Tensor& ref, Bound b = {});
  void add_scalar(double got, double ref);
};

// One compared direction of a case. run(variant) computes that variant's outputs on the case's
// inputs (f32, bf16 or i32 tensors, compared as f32 values).
struct Check {
  std::string direction;     // forward, backward, step
  std::string shape_suffix;  // appended to the case's shape label (",residual", ",out=bf16")
  std::function<std::vector<Tensor>(const std::string& variant)> run;
  double tol = kTolF32;
  std::string exact_variant;  // this variant must match the reference bit for bit
  std::vector<Bound> bounds;  // per output (missing: none)
  std::function<double(const std::string& variant)> scalar;  // optional scalar output (a loss)
};

// The finite-difference check of the reference backward over `inputs` (perturbed in place and
// restored; loss and grads see them through shared storage).
struct FdCheck {
  std::vector<Tensor> inputs;
  std::function<double()> loss;                // sum(reference forward · R), in double
  std::function<std::vector<Tensor>()> grads;  // reference backward: dL/d inputs[i]
  double eps = 1e-2, tol = 1e-3;
  // Piecewise-smooth ops (MoE routing): whether the inputs as they are now lie in the same smooth
  // piece as the unperturbed ones (called at x + eps u and x - eps u; a direction that leaves the
  // piece is replaced by another, up to 4 kFdDirections tries in all).
  std::function<bool()> same_piece;
};

struct CaseBody {
  std::vector<Check> checks;
  std::optional<FdCheck> fd;
};

// One entry of the table: an op on one shape and dtype. make() generates the inputs from fixed
// Philox streams and returns the checks (called once per variant run).
struct KernelCase {
  std::string op, shape;
  bool bf16 = false;
  bool threads = false;  // variants run with 1 and 2 threads must give the same bits
  bool fd = false;       // make() provides an FdCheck
  std::function<std::vector<std::string>()> variants;  // the non-reference variants of the op
  std::function<CaseBody()> make;
  std::string dtype() const { return bf16 ? "bf16" : "f32"; }
};

// The table, in op_names() order (built once).
const std::vector<KernelCase>& kernel_cases();
// The rows of one case for one variant: its checks for a non-reference variant, its
// finite-difference row for "reference" (none when the case has no FdCheck).
std::vector<VerifyRow> run_case(const KernelCase& c, const std::string& variant);

Tensor randn(const Shape& s, uint64_t stream, double std = 1.0, double mean = 0.0);
Tensor round_bf16(const Tensor& t, bool bf16);  // bf16 ? values rounded to bf16 (f32 tensor) : t
double dot(const Tensor& a, const Tensor& r);   // sum a[i] r[i] in double (f32 tensors)

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

// A case of kernel type K (its variants from K's registry).
template <class K>
KernelCase make_case(const std::string& shape, bool bf16, std::function<CaseBody()> make, bool fd = false,
                     bool threads = false) {
  KernelCase c;
  c.op = K::op_name, c.shape = shape, c.bf16 = bf16, c.threads = threads, c.fd = fd;
  c.variants = variants_to_check<K>;
  c.make = std::move(make);
  return c;
}

// One function per op family: appends its cases to the table.
void cases_embedding(std::vector<KernelCase>& t);
void cases_gemm(std::vector<KernelCase>& t);
void cases_linear(std::vector<KernelCase>& t);
void cases_rmsnorm(std::vector<KernelCase>& t);
void cases_rope(std::vector<KernelCase>& t);
void cases_attention(std::vector<KernelCase>& t);
void cases_swiglu(std::vector<KernelCase>& t);
void cases_residual(std::vector<KernelCase>& t);
void cases_cross_entropy(std::vector<KernelCase>& t);
void cases_adamw(std::vector<KernelCase>& t);
void cases_moe(std::vector<KernelCase>& t);
void cases_bias(std::vector<KernelCase>& t);
void cases_gated_delta(std::vector<KernelCase>& t);
void cases_causal_conv1d(std::vector<KernelCase>& t);
void cases_gated_rmsnorm(std::vector<KernelCase>& t);

}  // namespace verify_detail
}  // namespace titan
