// Variant "cuda" of the Gated DeltaNet ops (gated_delta, causal_conv1d, gated_rmsnorm): the op's
// own argument checks, the operands staged through device memory (ops/cuda/staging.h), the
// single-source kernels (ops/cuda/gated_delta.cuh, causal_conv1d.cuh, gated_rmsnorm.cuh)
// launched through ops/cuda/launch.h, the outputs copied back. Under the grid emulator in a
// build without a GPU. Registered for DeviceType::CPU (host tensors, staged) and DeviceType::CUDA
// (tensors on cuda:0 used in place; the document starts `seg` stay a host array, copied in).
// docs/cuda.md.
#include <cstdint>

#include "core/cuda_emu/cuda.h"
#include "ops/causal_conv1d/causal_conv1d.h"
#include "ops/cuda/launch.h"
#include "ops/cuda/staging.h"
#include "ops/gated_delta/gated_delta.h"
#include "ops/gated_rmsnorm/gated_rmsnorm.h"
#include "ops/op_checks.h"

namespace titan {
namespace {

namespace ck = cuda_kernels;
using cuda_staging::Staged;

float* f32_or_null(const Staged& s, const Tensor& t) { return t.defined() ? s.as<float>() : nullptr; }

// The document starts [B * S] in device memory (null when the call has none).
struct Segments {
  Staged buf;
  const int64_t* p;
  Segments(const int64_t* seg, int64_t n)
      : buf(seg, seg ? size_t(n) * sizeof(int64_t) : 0), p(seg ? buf.as<int64_t>() : nullptr) {}
};

// ---- gated_rmsnorm ----
template <DeviceType Dev>
void gated_rmsnorm_forward(const ExecContext& ctx, const Tensor& x, const Tensor& z, const Tensor& w, float eps,
                           Tensor& y) {
  cuda_staging::context<Dev>(ctx, "gated_rmsnorm.cuda");
  const int64_t N = gated_rmsnorm::check(x, z, w, {&y}, "gated_rmsnorm.cuda forward"), D = w.numel();
  Staged sx(x, true), sz(z, true), sw(w, true), sy(y, false);
  ck::gated_rmsnorm_forward(sx.as<float>(), sz.as<float>(), sw.as<float>(), eps, sy.as<float>(), N, D, ctx.stream);
  sy.to_host();
}

template <DeviceType Dev>
void gated_rmsnorm_backward(const ExecContext& ctx, const Tensor& x, const Tensor& z, const Tensor& w, float eps,
                            const Tensor& dy, Tensor& dx, Tensor& dz, Tensor& dw) {
  cuda_staging::context<Dev>(ctx, "gated_rmsnorm.cuda");
  const int64_t N = gated_rmsnorm::check(x, z, w, {&dy, &dx, &dz}, "gated_rmsnorm.cuda backward"), D = w.numel();
  if (dw.defined())
    TITAN_CHECK(dw.dtype() == DType::F32 && dw.numel() == D, "gated_rmsnorm.cuda backward: 'dw' must be f32 [D], got ",
                dw.str());
  Staged sx(x, true), sz(z, true), sw(w, true), sdy(dy, true), sdx(dx, false), sdz(dz, false), sdw(dw, true);
  Staged scratch(size_t(ck::gated_rmsnorm_scratch_floats(N, D)) * sizeof(float));
  ck::gated_rmsnorm_backward(sx.as<float>(), sz.as<float>(), sw.as<float>(), eps, sdy.as<float>(), sdx.as<float>(),
                             sdz.as<float>(), f32_or_null(sdw, dw), scratch.as<float>(), N, D, ctx.stream);
  sdx.to_host();
  sdz.to_host();
  sdw.to_host();
}

template <DeviceType Dev>
const GatedRMSNormKernel kGatedRMSNorm{"cuda", gated_rmsnorm_forward<Dev>, gated_rmsnorm_backward<Dev>};

// ---- causal_conv1d ----
ck::Conv1dArgs conv_args(const conv1d::Dims& d, const Staged& x, const Staged& w, const Segments& seg,
                         const Staged& sin, const Tensor& sin_t) {
  ck::Conv1dArgs a;
  a.x = x.as<float>(), a.w = w.as<float>(), a.seg = seg.p, a.state_in = sin_t.defined() ? sin.as<float>() : nullptr;
  a.B = d.B, a.S = d.S, a.C = d.C, a.K = d.K;
  return a;
}

template <DeviceType Dev>
void conv1d_forward(const ExecContext& ctx, const Tensor& x, const Tensor& w, const int64_t* seg, const Tensor& sin,
                    Tensor& y, Tensor& sout) {
  cuda_staging::context<Dev>(ctx, "causal_conv1d.cuda");
  const conv1d::Dims d = conv1d::check(x, w, seg, sin, y, sout, "causal_conv1d.cuda forward");
  TITAN_CHECK(y.defined(), "causal_conv1d.cuda forward: 'y' is required");
  Staged sx(x, true), sw(w, true), ssin(sin, true), sy(y, false), ssout(sout, false);
  const Segments sseg(seg, d.B * d.S);
  ck::causal_conv1d_forward(conv_args(d, sx, sw, sseg, ssin, sin), sy.as<float>(), f32_or_null(ssout, sout),
                            ctx.stream);
  sy.to_host();
  ssout.to_host();
}

template <DeviceType Dev>
void conv1d_backward(const ExecContext& ctx, const Tensor& x, const Tensor& w, const int64_t* seg, const Tensor& sin,
                     const Tensor& dy, Tensor& dx, Tensor& dw, Tensor& dsin) {
  cuda_staging::context<Dev>(ctx, "causal_conv1d.cuda");
  const conv1d::Dims d = conv1d::check(x, w, seg, sin, dy, dsin, "causal_conv1d.cuda backward");
  conv1d::check(x, w, seg, sin, dx, Tensor(), "causal_conv1d.cuda backward");
  TITAN_CHECK(dw.defined() && dw.dtype() == DType::F32 && dw.shape() == w.shape(),
              "causal_conv1d.cuda backward: 'dw' must be f32 like w ", w.str());
  TITAN_CHECK(dy.defined() && dx.defined(), "causal_conv1d.cuda backward: 'dy' and 'dx' are required");
  Staged sx(x, true), sw(w, true), ssin(sin, true), sdy(dy, true), sdx(dx, false), sdw(dw, true), sds(dsin, false);
  const Segments sseg(seg, d.B * d.S);
  const ck::Conv1dArgs a = conv_args(d, sx, sw, sseg, ssin, sin);
  Staged scratch(size_t(ck::causal_conv1d_scratch_floats(a)) * sizeof(float));
  ck::causal_conv1d_backward(a, sdy.as<float>(), sdx.as<float>(), sdw.as<float>(), f32_or_null(sds, dsin),
                             scratch.as<float>(), ctx.stream);
  sdx.to_host();
  sdw.to_host();
  sds.to_host();
}

template <DeviceType Dev>
const CausalConv1dKernel kConv1d{"cuda", conv1d_forward<Dev>, conv1d_backward<Dev>};

// ---- gated_delta ----
struct GdOperands {
  Staged q, k, v, g, beta, init;
  Segments seg;
  ck::GatedDeltaArgs a;
  GdOperands(const gated_delta::Dims& d, const Tensor& qt, const Tensor& kt, const Tensor& vt, const Tensor& gt,
             const Tensor& bt, const int64_t* segp, const Tensor& it, const GatedDeltaOptions& o, const char* who)
      : q(qt, true), k(kt, true), v(vt, true), g(gt, true), beta(bt, true), init(it, true), seg(segp, d.B * d.S) {
    a.q = q.as<float>(), a.k = k.as<float>(), a.v = v.as<float>(), a.g = g.as<float>(), a.beta = beta.as<float>();
    a.seg = seg.p, a.init = it.defined() ? init.as<float>() : nullptr;
    a.B = d.B, a.S = d.S, a.Hk = d.Hk, a.Hv = d.Hv, a.dk = d.dk, a.dv = d.dv;
    a.scale = gated_delta::scale_of(o, d.dk), a.l2norm = o.l2norm;
    const char* bad = ck::gated_delta_check(a);
    TITAN_CHECK(*bad == 0, who, ": ", bad);
  }
};

template <DeviceType Dev>
void gated_delta_forward(const ExecContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                         const Tensor& beta, const int64_t* seg, const Tensor& init, const GatedDeltaOptions& o,
                         Tensor& out, Tensor& fin) {
  cuda_staging::context<Dev>(ctx, "gated_delta.cuda");
  const char* who = "gated_delta.cuda forward";
  const gated_delta::Dims d = gated_delta::check_forward(q, k, v, g, beta, seg, init, out, fin, who);
  TITAN_CHECK(out.defined(), who, ": 'out' is required");
  GdOperands op(d, q, k, v, g, beta, seg, init, o, who);
  Staged sout(out, false), sfin(fin, false);
  Staged scratch(size_t(ck::gated_delta_forward_scratch_floats(op.a)) * sizeof(float));
  ck::gated_delta_forward(op.a, sout.as<float>(), f32_or_null(sfin, fin), scratch.as<float>(), ctx.stream);
  sout.to_host();
  sfin.to_host();
}

template <DeviceType Dev>
void gated_delta_backward(const ExecContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                          const Tensor& beta, const int64_t* seg, const Tensor& init, const Tensor& dout,
                          const Tensor& dfin, const GatedDeltaOptions& o, Tensor& dq, Tensor& dk, Tensor& dv,
                          Tensor& dg, Tensor& dbeta, Tensor& dinit) {
  cuda_staging::context<Dev>(ctx, "gated_delta.cuda");
  const char* who = "gated_delta.cuda backward";
  const gated_delta::Dims d =
      gated_delta::check_backward(q, k, v, g, beta, seg, init, dout, dfin, dq, dk, dv, dg, dbeta, dinit, who);
  GdOperands op(d, q, k, v, g, beta, seg, init, o, who);
  Staged sdo(dout, true), sdfin(dfin, true);
  Staged sdq(dq, false), sdk(dk, false), sdv(dv, false), sdg(dg, false), sdb(dbeta, false), sdi(dinit, false);
  Staged scratch(size_t(ck::gated_delta_backward_scratch_floats(op.a)) * sizeof(float));
  ck::gated_delta_backward(op.a, sdo.as<float>(), dfin.defined() ? sdfin.as<float>() : nullptr, sdq.as<float>(),
                           sdk.as<float>(), sdv.as<float>(), sdg.as<float>(), sdb.as<float>(), f32_or_null(sdi, dinit),
                           scratch.as<float>(), ctx.stream);
  for (const Staged* s : {&sdq, &sdk, &sdv, &sdg, &sdb, &sdi}) s->to_host();
}

// One token on the state in place: the sequence form with S = 1 whose initial and final state are
// the same device buffer (each element read first and written last by the same thread).
template <DeviceType Dev>
void gated_delta_step(const ExecContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                      const Tensor& beta, const GatedDeltaOptions& o, Tensor& state, Tensor& out) {
  cuda_staging::context<Dev>(ctx, "gated_delta.cuda");
  const char* who = "gated_delta.cuda step";
  const gated_delta::Dims d = gated_delta::check_step(q, k, v, g, beta, state, out, who);
  GdOperands op(d, q, k, v, g, beta, nullptr, state, o, who);
  Staged sout(out, false);
  Staged scratch(size_t(ck::gated_delta_forward_scratch_floats(op.a)) * sizeof(float));
  ck::gated_delta_forward(op.a, sout.as<float>(), op.init.as<float>(), scratch.as<float>(), ctx.stream);
  sout.to_host();
  op.init.to_host();  // the state, updated
}

template <DeviceType Dev>
const GatedDeltaKernel kGatedDelta{"cuda", gated_delta_forward<Dev>, gated_delta_backward<Dev>, gated_delta_step<Dev>};

}  // namespace
TITAN_REGISTER_KERNEL(GatedRMSNormKernel, "cuda", DeviceType::CPU, kGatedRMSNorm<DeviceType::CPU>);
TITAN_REGISTER_KERNEL(GatedRMSNormKernel, "cuda", DeviceType::CUDA, kGatedRMSNorm<DeviceType::CUDA>);
TITAN_REGISTER_KERNEL(CausalConv1dKernel, "cuda", DeviceType::CPU, kConv1d<DeviceType::CPU>);
TITAN_REGISTER_KERNEL(CausalConv1dKernel, "cuda", DeviceType::CUDA, kConv1d<DeviceType::CUDA>);
TITAN_REGISTER_KERNEL(GatedDeltaKernel, "cuda", DeviceType::CPU, kGatedDelta<DeviceType::CPU>);
TITAN_REGISTER_KERNEL(GatedDeltaKernel, "cuda", DeviceType::CUDA, kGatedDelta<DeviceType::CUDA>);
}  // namespace titan
