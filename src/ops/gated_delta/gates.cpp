// delta_gates_forward / delta_gates_backward on the CPU (gates.h).
#include "ops/gated_delta/gates.h"

#include <cmath>
#include <vector>

#include "ops/op_checks.h"

namespace titan {
namespace {

// torch's softplus (beta 1, threshold 20) and its derivative.
inline double softplus(double x) { return x > 20 ? x : std::log1p(std::exp(x)); }
inline double softplus_grad(double x) { return x > 20 ? 1.0 : 1.0 / (1.0 + std::exp(-x)); }

// Checks the operands; returns T (the rows of the views).
int64_t check(const ExecContext& ctx, const char* who, std::initializer_list<const RowView*> views, const Tensor& a_log,
              const Tensor& dt_bias, std::initializer_list<const Tensor*> per_token) {
  opcheck::host_context(ctx, who);
  const int64_t Hv = a_log.numel();
  TITAN_CHECK(a_log.dtype() == DType::F32 && dt_bias.dtype() == DType::F32 && dt_bias.numel() == Hv, who,
              ": A_log and dt_bias must be f32 [Hv], got ", a_log.str(), " and ", dt_bias.str());
  const RowView& v0 = **views.begin();
  for (const RowView* v : views) {
    check_view(*v, DType::F32, who, "gate input");
    TITAN_CHECK(v->n == v0.n && v->h == 1 && v->d == Hv, who, ": a gate view [n ", v->n, ", h ", v->h, ", d ", v->d,
                "] is not [", v0.n, ", 1, ", Hv, "]");
  }
  for (const Tensor* t : per_token)
    TITAN_CHECK(t->dtype() == DType::F32 && t->numel() == v0.n * Hv, who, ": ", t->str(), " is not f32 of ",
                v0.n, " x ", Hv, " elements");
  return v0.n;
}

}  // namespace

void delta_gates_forward(const ExecContext& ctx, const RowView& b, const RowView& a, const Tensor& a_log,
                         const Tensor& dt_bias, Tensor& g, Tensor& beta) {
  const int64_t T = check(ctx, "delta_gates_forward", {&b, &a}, a_log, dt_bias, {&g, &beta}), Hv = a_log.numel();
  const auto bp = b.ptr<float>();
  const auto ap = a.ptr<float>();
  const float* alog = a_log.data<float>();
  const float* dt = dt_bias.data<float>();
  float* gp = g.data<float>();
  float* be = beta.data<float>();
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < Hv; ++h) {
      const double bb = bp.row(t)[h], aa = ap.row(t)[h];
      be[t * Hv + h] = float(1.0 / (1.0 + std::exp(-bb)));
      gp[t * Hv + h] = float(-std::exp(double(alog[h])) * softplus(aa + double(dt[h])));
    }
}

void delta_gates_backward(const ExecContext& ctx, const RowView& a, const Tensor& a_log, const Tensor& dt_bias,
                          const Tensor& g, const Tensor& beta, const Tensor& dg, const Tensor& dbeta, const RowView& db,
                          const RowView& da, Tensor& d_dt_bias, Tensor& d_a_log) {
  const int64_t T = check(ctx, "delta_gates_backward", {&a, &db, &da}, a_log, dt_bias, {&g, &beta, &dg, &dbeta});
  const int64_t Hv = a_log.numel();
  for (const Tensor* t : {&d_dt_bias, &d_a_log})
    TITAN_CHECK(!t->defined() || (t->dtype() == DType::F32 && t->numel() == Hv),
                "delta_gates_backward: a parameter gradient must be f32 [Hv], got ", t->str());
  const auto ap = a.ptr<float>();
  const auto dbv = db.ptr<float>();
  const auto dav = da.ptr<float>();
  const float* alog = a_log.data<float>();
  const float* dt = dt_bias.data<float>();
  const float* gp = g.data<float>();
  const float* be = beta.data<float>();
  const float* dgp = dg.data<float>();
  const float* dbp = dbeta.data<float>();
  std::vector<double> ddt(size_t(Hv), 0.0), dalog(size_t(Hv), 0.0);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < Hv; ++h) {
      const int64_t i = t * Hv + h;
      dbv.row(t)[h] = float(double(dbp[i]) * double(be[i]) * (1.0 - double(be[i])));
      // g = -exp(A_log) softplus(a + dt_bias): dg/da = -exp(A_log) sigmoid(a + dt_bias), dg/dA_log = g
      const double u = double(ap.row(t)[h]) + double(dt[h]);
      const double d = double(dgp[i]) * -std::exp(double(alog[h])) * softplus_grad(u);
      dav.row(t)[h] = float(d);
      ddt[size_t(h)] += d;
      dalog[size_t(h)] += double(dgp[i]) * double(gp[i]);
    }
  if (d_dt_bias.defined())
    for (int64_t h = 0; h < Hv; ++h) d_dt_bias.data<float>()[h] += float(ddt[size_t(h)]);
  if (d_a_log.defined())
    for (int64_t h = 0; h < Hv; ++h) d_a_log.data<float>()[h] += float(dalog[size_t(h)]);
}

}  // namespace titan
