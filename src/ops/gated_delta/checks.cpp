// Argument checks of the gated delta rule (gated_delta.h), shared by its variants.
#include "ops/attention/segments.h"
#include "ops/gated_delta/gated_delta.h"
#include "ops/op_checks.h"

namespace titan::gated_delta {
namespace {

void shape_is(const Tensor& t, const Shape& s, const char* who, const char* name) {
  opcheck::f32(t, who, name);
  TITAN_CHECK(t.shape() == s, who, ": '", name, "' ", t.str(), " has the wrong shape (q, k [B, S, Hk, dk], v [B, S, Hv, dv], g, beta [B, S, Hv], states [B, Hv, dk, dv])");
}

}  // namespace

Dims check_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                   const int64_t* seg, const Tensor& initial_state, const Tensor& out, const Tensor& final_state,
                   const char* who) {
  opcheck::f32(q, who, "q");
  opcheck::f32(v, who, "v");
  TITAN_CHECK(q.ndim() == 4 && v.ndim() == 4, who, ": q ", q.str(), " and v ", v.str(), " must be 4-d");
  const Dims d{q.dim(0), q.dim(1), q.dim(2), v.dim(2), q.dim(3), v.dim(3)};
  TITAN_CHECK(v.dim(0) == d.B && v.dim(1) == d.S, who, ": v ", v.str(), " and q ", q.str(), " differ in B or S");
  TITAN_CHECK(d.Hk > 0 && d.Hv % d.Hk == 0, who, ": value heads ", d.Hv, " must be a multiple of key heads ", d.Hk);
  TITAN_CHECK(d.dk > 0 && d.dv > 0, who, ": empty head dimension");
  shape_is(k, q.shape(), who, "k");
  shape_is(g, {d.B, d.S, d.Hv}, who, "g");
  shape_is(beta, {d.B, d.S, d.Hv}, who, "beta");
  if (initial_state.defined()) shape_is(initial_state, {d.B, d.Hv, d.dk, d.dv}, who, "initial_state");
  if (final_state.defined()) shape_is(final_state, {d.B, d.Hv, d.dk, d.dv}, who, "final_state");
  if (out.defined()) shape_is(out, v.shape(), who, "out");
  attention::check_segments(seg, d.B, d.S, who);
  return d;
}

Dims check_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                    const int64_t* seg, const Tensor& initial_state, const Tensor& dout, const Tensor& d_final_state,
                    const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dg, const Tensor& dbeta,
                    const Tensor& d_initial_state, const char* who) {
  const Dims d = check_forward(q, k, v, g, beta, seg, initial_state, dout, d_final_state, who);
  shape_is(dout, v.shape(), who, "dout");
  shape_is(dq, q.shape(), who, "dq");
  shape_is(dk, q.shape(), who, "dk");
  shape_is(dv, v.shape(), who, "dv");
  shape_is(dg, g.shape(), who, "dg");
  shape_is(dbeta, g.shape(), who, "dbeta");
  if (d_initial_state.defined()) shape_is(d_initial_state, {d.B, d.Hv, d.dk, d.dv}, who, "d_initial_state");
  return d;
}

Dims check_step(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                const Tensor& state, const Tensor& out, const char* who) {
  opcheck::f32(q, who, "q");
  opcheck::f32(v, who, "v");
  TITAN_CHECK(q.ndim() == 3 && v.ndim() == 3, who, ": step q ", q.str(), " and v ", v.str(), " must be [B, H, d]");
  const Dims d{q.dim(0), 1, q.dim(1), v.dim(1), q.dim(2), v.dim(2)};
  TITAN_CHECK(v.dim(0) == d.B && d.Hk > 0 && d.Hv % d.Hk == 0, who, ": step v ", v.str(), " does not fit q ", q.str());
  shape_is(k, q.shape(), who, "k");
  shape_is(g, {d.B, d.Hv}, who, "g");
  shape_is(beta, {d.B, d.Hv}, who, "beta");
  shape_is(state, {d.B, d.Hv, d.dk, d.dv}, who, "state");
  shape_is(out, v.shape(), who, "out");
  return d;
}

}  // namespace titan::gated_delta
