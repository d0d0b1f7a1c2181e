#include "ops/verify/verify.h"

#include <cmath>
#include <map>

#include "core/dtype.h"
#include "core/rng.h"
#include "ops/catalog.h"

namespace titan {
namespace verify_detail {


void Diff::add(const Tensor& got, const Tensor& ref) {
  TITAN_CHECK(got.shape() == ref.shape(), "verify: output shapes differ: ", got.str(), " vs ", ref.str());
  const float* g = got.data<float>();
  const float* r = ref.data<float>();
  double a = 0, m = 0;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    if (!std::isfinite(g[i]) || !std::isfinite(r[i])) finite = false;
    a = std::max(a, std::fabs(double(g[i]) - r[i]));
    m = std::max(m, std::fabs(double(r[i])));
  }
  max_abs = std::max(max_abs, a);
  max_rel = std::max(max_rel, a / std::max(m, kRelFloor));
}

void Diff::add_scalar(double got, double ref) {
  if (!std::isfinite(got) || !std::isfinite(ref)) finite = false;
  const double a = std::fabs(got - ref), m = std::fabs(ref);
  max_abs = std::max(max_abs, a);
  max_rel = std::max(max_rel, a / std::max(m, kRelFloor));
}

Tensor randn(const Shape& s, uint64_t stream, double std) {
  Tensor t = Tensor::empty(s, DType::F32);
  fill_normal(t, 0.0, std, Philox{20260101, stream});
  return t;
}

Tensor round_bf16(const Tensor& t, bool bf16) {
  if (!bf16) return t;
  Tensor r = t.clone();
  float* p = r.data<float>();
  for (int64_t i = 0; i < r.numel(); ++i) p[i] = bf16_to_f32(f32_to_bf16(p[i]));
  return r;
}

void emit(std::vector<VerifyRow>& rows, const std::string& op, const std::string& variant, bool bf16,
          const std::string& shape, const std::string& direction, const Diff& d, double tol, bool exact) {
  VerifyRow r;
  r.op = op, r.variant = variant, r.dtype = bf16 ? "bf16" : "f32", r.shape = shape, r.direction = direction;
  r.max_abs_diff = d.max_abs;
  r.max_rel_diff = d.max_rel;
  r.tol = exact ? 0.0 : tol;
  r.exact = exact;
  r.ok = d.finite && (exact ? d.max_abs == 0.0 : r.max_rel_diff <= tol);
  rows.push_back(std::move(r));
}

}  // namespace verify_detail

std::vector<VerifyRow> verify_kernels(const std::string& op) {
  using namespace verify_detail;
  using Fn = void (*)(std::vector<VerifyRow>&);
  static const std::map<std::string, Fn> fns = {
      {"embedding", verify_embedding}, {"gemm", verify_gemm},           {"linear", verify_linear},
      {"rmsnorm", verify_rmsnorm},     {"rope", verify_rope},           {"attention", verify_attention},
      {"swiglu", verify_swiglu},       {"residual", verify_residual},   {"cross_entropy", verify_cross_entropy},
      {"adamw", verify_adamw},         {"moe", verify_moe},             {"bias", verify_bias},
  };
  std::vector<VerifyRow> rows;
  if (!op.empty()) {
    auto it = fns.find(op);
    std::string known;
    for (const auto& n : op_names()) known += (known.empty() ? "" : ", ") + n;
    TITAN_CHECK(it != fns.end(), "verify kernels: unknown op '", op, "' (known: ", known, ")");
    it->second(rows);
    return rows;
  }
  for (const auto& n : op_names()) fns.at(n)(rows);
  return rows;
}

}  // namespace titan
