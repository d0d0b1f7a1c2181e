#include "ops/verify/verify.h"

#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "core/rng.h"
#include "core/threading.h"
#include "ops/catalog.h"

namespace titan {
namespace verify_detail {

void Diff::add(const Tensor& got, const Tensor& ref, Bound b) {
  TITAN_CHECK(got.shape() == ref.shape(), "verify: output shapes differ: ", got.str(), " vs ", ref.str());
  const float* g = got.data<float>();
  const float* r = ref.data<float>();
  double a = 0, m = 0;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    if (!std::isfinite(g[i]) || !std::isfinite(r[i])) finite = false;
    const double d = std::fabs(double(g[i]) - r[i]);
    a = std::max(a, d);
    m = std::max(m, std::fabs(double(r[i])));
    if (b.atol >= 0 && !(d <= b.atol + b.rtol * std::fabs(double(r[i])))) within = false;
  }
  max_abs = std::max(max_abs, a);
  max_rel = std::max(max_rel, a / std::max(m, kRelFloor));
  if (b.atol < 0) max_rel_unbounded = std::max(max_rel_unbounded, a / std::max(m, kRelFloor));
}

void Diff::add_scalar(double got, double ref) {
  if (!std::isfinite(got) || !std::isfinite(ref)) finite = false;
  const double a = std::fabs(got - ref), m = std::fabs(ref);
  max_abs = std::max(max_abs, a);
  max_rel = std::max(max_rel, a / std::max(m, kRelFloor));
  max_rel_unbounded = std::max(max_rel_unbounded, a / std::max(m, kRelFloor));
}

Tensor randn(const Shape& s, uint64_t stream, double std, double mean) {
  Tensor t = Tensor::empty(s, DType::F32);
  fill_normal(t, mean, std, Philox{20260101, stream});
  return t;
}

Tensor round_bf16(const Tensor& t, bool bf16) {
  if (!bf16) return t;
  Tensor r = t.clone();
  float* p = r.data<float>();
  for (int64_t i = 0; i < r.numel(); ++i) p[i] = bf16_to_f32(f32_to_bf16(p[i]));
  return r;
}

double dot(const Tensor& a, const Tensor& r) {
  double s = 0;
  for (int64_t i = 0; i < a.numel(); ++i) s += double(a.data<float>()[i]) * r.data<float>()[i];
  return s;
}

const std::vector<KernelCase>& kernel_cases() {
  static const std::vector<KernelCase> table = [] {
    using Fn = void (*)(std::vector<KernelCase>&);
    const std::pair<const char*, Fn> fns[] = {
        {"embedding", cases_embedding}, {"gemm", cases_gemm},         {"linear", cases_linear},
        {"rmsnorm", cases_rmsnorm},     {"rope", cases_rope},         {"attention", cases_attention},
        {"swiglu", cases_swiglu},       {"residual", cases_residual}, {"cross_entropy", cases_cross_entropy},
        {"adamw", cases_adamw},         {"moe", cases_moe},           {"bias", cases_bias},           {"gated_delta", cases_gated_delta},
        {"causal_conv1d", cases_causal_conv1d}, {"gated_rmsnorm", cases_gated_rmsnorm},
    };
    std::vector<KernelCase> t;
    for (const auto& n : op_names()) {
      bool found = false;
      for (const auto& [name, fn] : fns)
        if (n == name) fn(t), found = true;
      TITAN_CHECK(found, "verify kernels: op '", n, "' has no cases in src/ops/verify/");
    }
    return t;
  }();
  return table;
}

namespace {

// f32 copies of a check's outputs (bf16 and i32 converted by value).
std::vector<Tensor> as_f32(std::vector<Tensor> v) {
  for (auto& t : v) {
    if (t.dtype() == DType::F32) continue;
    Tensor f = Tensor::empty(t.shape(), DType::F32);
    if (t.dtype() == DType::I32)
      for (int64_t i = 0; i < t.numel(); ++i) f.data<float>()[i] = float(t.data<int32_t>()[i]);
    else f = t.to(DType::F32);
    t = f;
  }
  return v;
}

bool same_bits(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].nbytes() != b[i].nbytes() || std::memcmp(a[i].raw(), b[i].raw(), a[i].nbytes()) != 0) return false;
  return true;
}

template <class F>
auto with_threads(int n, F&& fn) {
  const int before = num_threads();
  set_num_threads(n);
  auto r = fn();
  set_num_threads(before);
  return r;
}

VerifyRow row_of(const KernelCase& c, const std::string& variant, const std::string& shape, const std::string& dir) {
  VerifyRow r;
  r.op = c.op, r.variant = variant, r.dtype = c.dtype(), r.shape = shape, r.direction = dir;
  return r;
}

VerifyRow compare(const KernelCase& c, const Check& k, const std::string& variant) {
  VerifyRow r = row_of(c, variant, c.shape + k.shape_suffix, k.direction);
  const std::vector<Tensor> ref = as_f32(k.run("reference"));
  std::vector<Tensor> got;
  bool threads_agree = true;
  if (c.threads) {
    got = with_threads(1, [&] { return k.run(variant); });
    threads_agree = same_bits(got, with_threads(2, [&] { return k.run(variant); }));
  } else {
    got = k.run(variant);
  }
  got = as_f32(std::move(got));
  TITAN_CHECK(got.size() == ref.size(), "verify: ", c.op, ".", variant, " gave ", got.size(), " outputs, the reference ",
              ref.size());
  Diff d;
  for (size_t i = 0; i < ref.size(); ++i) d.add(got[i], ref[i], i < k.bounds.size() ? k.bounds[i] : Bound{});
  if (k.scalar) d.add_scalar(k.scalar(variant), k.scalar("reference"));
  r.exact = !k.exact_variant.empty() && k.exact_variant == variant;
  r.max_abs_diff = d.max_abs, r.max_rel_diff = d.max_rel, r.tol = r.exact ? 0.0 : k.tol;
  if (!d.finite) r.why = "non-finite values";
  else if (r.exact && d.max_abs != 0.0) r.why = "not bit-exact";
  else if (!r.exact && !(d.max_rel_unbounded <= k.tol)) r.why = "max_rel_diff above " + std::to_string(k.tol);
  else if (!d.within) r.why = "an element outside its atol + rtol |reference| bound";
  else if (!threads_agree) r.why = "different bits with 1 and 2 threads";
  r.ok = r.why.empty();
  return r;
}

VerifyRow fd_row(const KernelCase& c, FdCheck& f) {
  VerifyRow r = row_of(c, "reference", c.shape, "gradient");
  r.tol = f.tol;
  const std::vector<Tensor> g = f.grads();
  TITAN_CHECK(g.size() == f.inputs.size(), "verify: ", c.op, " finite differences: ", g.size(), " gradients for ",
              f.inputs.size(), " inputs");
  double gnorm = 0;
  for (const auto& t : g)
    for (int64_t i = 0; i < t.numel(); ++i) gnorm += double(t.data<float>()[i]) * t.data<float>()[i];
  gnorm = std::sqrt(gnorm);
  bool finite = std::isfinite(gnorm);
  int used = 0;
  for (int dir = 0; dir < 4 * kFdDirections && used < kFdDirections; ++dir) {
    std::vector<Tensor> u, orig;
    double analytic = 0;
    for (size_t i = 0; i < f.inputs.size(); ++i) {
      u.push_back(randn(f.inputs[i].shape(), 1000 + uint64_t(dir) * 64 + i));
      orig.push_back(f.inputs[i].clone());
      analytic += dot(g[i], u[i]);
    }
    auto shift = [&](double s) {
      for (size_t i = 0; i < f.inputs.size(); ++i) {
        float* p = f.inputs[i].data<float>();
        for (int64_t j = 0; j < f.inputs[i].numel(); ++j)
          p[j] = float(double(orig[i].data<float>()[j]) + s * u[i].data<float>()[j]);
      }
    };
    shift(f.eps);
    const double lp = f.loss();
    bool smooth = !f.same_piece || f.same_piece();
    shift(-f.eps);
    const double lm = f.loss();
    smooth = smooth && (!f.same_piece || f.same_piece());
    for (size_t i = 0; i < f.inputs.size(); ++i) f.inputs[i].copy_(orig[i]);
    if (!smooth) continue;
    ++used;
    const double fd = (lp - lm) / (2 * f.eps), a = std::fabs(fd - analytic);
    finite = finite && std::isfinite(fd);
    r.max_abs_diff = std::max(r.max_abs_diff, a);
    r.max_rel_diff = std::max(r.max_rel_diff, a / std::max(gnorm, kRelFloor));
  }
  if (used < kFdDirections) r.why = "too few directions stay in one smooth piece";
  else if (!finite) r.why = "non-finite values";
  else if (!(r.max_rel_diff <= f.tol)) r.why = "finite differences disagree with the backward";
  r.ok = r.why.empty();
  return r;
}

}  // namespace

std::vector<VerifyRow> run_case(const KernelCase& c, const std::string& variant) {
  CaseBody b = c.make();
  std::vector<VerifyRow> rows;
  if (variant == "reference") {
    if (b.fd) rows.push_back(fd_row(c, *b.fd));
    return rows;
  }
  for (const Check& k : b.checks) rows.push_back(compare(c, k, variant));
  return rows;
}

}  // namespace verify_detail

std::vector<VerifyRow> verify_kernels(const std::string& op, const std::string& variant) {
  using namespace verify_detail;
  const auto& table = kernel_cases();
  if (!op.empty()) {
    bool known_op = false;
    std::string known;
    for (const auto& n : op_names()) {
      known += (known.empty() ? "" : ", ") + n;
      known_op = known_op || n == op;
    }
    TITAN_CHECK(known_op, "verify kernels: unknown op '", op, "' (known: ", known, ")");
  }
  std::vector<VerifyRow> rows;
  for (const auto& c : table) {
    if (!op.empty() && c.op != op) continue;
    std::vector<std::string> vs = c.variants();
    if (c.fd) vs.insert(vs.begin(), "reference");
    for (const auto& v : vs)
      if (variant.empty() || v == variant)
      for (auto& r : run_case(c, v)) rows.push_back(std::move(r));
  }
  return rows;
}

}  // namespace titan
