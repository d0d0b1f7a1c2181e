// Variant "cuda" of the ops with single-source CUDA kernels (ops/cuda/*.cuh): the op's argument
// checks on the host, the operands staged into device memory (titan::gpu), the kernels launched
// through ops/cuda/launch.h, the outputs copied back. In this build the kernels run under the
// grid emulator (core/cuda_emu), so `titan verify kernels --device cuda` and the kernel case
// table check them against the reference on the CPU; the staging is the code a GPU build runs.
//
// Registered twice: for DeviceType::CPU, where the operands are host tensors staged through device
// memory per call (the kernel case table, `titan verify kernels --device cuda`, `[kernels]
// replace`), and for DeviceType::CUDA, where they are tensors on cuda:0 used in place (a cuda:0
// ExecContext; ops/cuda/staging.h). The same code serves both: Staged passes a GPU tensor through.
// docs/cuda.md.
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "core/cuda_emu/cuda.h"
#include "core/dtype.h"
#include "ops/adamw/adamw.h"
#include "ops/adamw/checks.h"
#include "ops/attention/attention.h"
#include "ops/attention/shape.h"
#include "ops/bias/checks.h"
#include "ops/cuda/launch.h"
#include "ops/cuda/staging.h"
#include "ops/embedding/checks.h"
#include "ops/embedding/embedding.h"
#include "ops/op_checks.h"
#include "ops/residual/residual.h"
#include "ops/rmsnorm/checks.h"
#include "ops/rmsnorm/rmsnorm.h"
#include "ops/rope/checks.h"
#include "ops/rope/rope.h"
#include "ops/swiglu/checks.h"
#include "ops/swiglu/swiglu.h"

namespace titan {
namespace {

namespace ck = cuda_kernels;
using cuda_staging::Staged;

ck::Rows rows_of(const RowView& v) { return {v.h, v.d, v.ld}; }
bool same_memory(const RowView& a, const RowView& b) { return a.t.raw() == b.t.raw(); }

// ---- rmsnorm ----
template <DeviceType Dev>
void rmsnorm_forward(const ExecContext& ctx, const RowView& x, const Tensor& w, float eps, const RowView& y,
                     Tensor& rstd) {
  cuda_staging::context<Dev>(ctx, "rmsnorm.cuda");
  const auto [N, D] = rmsnorm_detail::check_forward(x, w, y, rstd);
  const bool bf16 = y.t.dtype() == DType::BF16;
  Staged dx(x.t, true), dw(w, true), dy(y.t, true), dr(rstd, false);
  ck::rmsnorm_forward(dx.as<float>(), rows_of(x), dw.as<float>(), eps, bf16 ? nullptr : dy.as<float>(),
                      bf16 ? dy.as<uint16_t>() : nullptr, rows_of(y), dr.as<float>(), N, ctx.stream);
  dy.to_host_rows(y);
  dr.to_host();
}

template <DeviceType Dev>
void rmsnorm_backward(const ExecContext& ctx, const RowView& x, const Tensor& w, const Tensor& rstd, const RowView& dy,
                      const RowView& dx, Tensor& dw, bool accumulate) {
  cuda_staging::context<Dev>(ctx, "rmsnorm.cuda");
  const auto [N, D] = rmsnorm_detail::check_backward(x, w, rstd, dy, dx, dw);
  Staged sx(x.t, true), sw(w, true), sr(rstd, true), sdy(dy.t, true), sdw(dw, true);
  // dx may share dy's memory (in place): then one device copy serves both.
  const bool alias = same_memory(dy, dx);
  Staged sdx(alias ? Tensor() : dx.t, true);
  float* dxp = alias ? sdy.as<float>() : sdx.as<float>();
  Staged partial(size_t(ck::rmsnorm_dw_partial_floats(N, D)) * sizeof(float));
  ck::rmsnorm_backward(sx.as<float>(), rows_of(x), sw.as<float>(), sr.as<float>(), sdy.as<float>(), rows_of(dy), dxp,
                       rows_of(dx), dw.defined() ? sdw.as<float>() : nullptr, partial.as<float>(), N, accumulate,
                       ctx.stream);
  if (alias)
    sdy.to_host_rows(dx);
  else
    sdx.to_host_rows(dx);
  sdw.to_host();
}

template <DeviceType Dev>
const RMSNormKernel kRMSNorm{"cuda", rmsnorm_forward<Dev>, rmsnorm_backward<Dev>};

// ---- swiglu ----
template <DeviceType Dev>
void swiglu_forward(const ExecContext& ctx, const Tensor& gu, Tensor& out) {
  cuda_staging::context<Dev>(ctx, "swiglu.cuda");
  const auto [N, I] = swiglu_detail::check(gu, out, "out", true);
  const bool bf16 = out.dtype() == DType::BF16;
  Staged sgu(gu, true), so(out, false);
  ck::swiglu_forward(sgu.as<float>(), bf16 ? nullptr : so.as<float>(), bf16 ? so.as<uint16_t>() : nullptr, N, I,
                     ctx.stream);
  so.to_host();
}

template <DeviceType Dev>
void swiglu_backward(const ExecContext& ctx, const Tensor& gu, const Tensor& dout, Tensor& dgu) {
  cuda_staging::context<Dev>(ctx, "swiglu.cuda");
  const auto [N, I] = swiglu_detail::check(gu, dout, "dout");
  swiglu_detail::check_dgu(gu, dgu);
  const bool bf16 = dgu.dtype() == DType::BF16;
  const bool alias = !bf16 && dgu.raw() == gu.raw();
  Staged sgu(gu, true), sd(dout, true), sdg(alias ? Tensor() : dgu, false);
  float* dgf = bf16 ? nullptr : (alias ? sgu.as<float>() : sdg.as<float>());
  ck::swiglu_backward(sgu.as<float>(), sd.as<float>(), dgf, bf16 ? sdg.as<uint16_t>() : nullptr, N, I, ctx.stream);
  if (alias)
    sgu.to_host();
  else
    sdg.to_host();
}

template <DeviceType Dev>
const SwiGLUKernel kSwiGLU{"cuda", swiglu_forward<Dev>, swiglu_backward<Dev>};

// ---- embedding ----
// The ids where the host can read them for the range check: a host copy of GPU ids.
Tensor host_ids(const Tensor& ids) {
  return ids.defined() && ids.device().type == DeviceType::CUDA ? ids.to(cpu()) : ids;
}

template <DeviceType Dev>
void embedding_forward(const ExecContext& ctx, const Tensor& ids, const Tensor& weight, Tensor& out) {
  cuda_staging::context<Dev>(ctx, "embedding.cuda");
  const int64_t N = embedding_detail::check(host_ids(ids), weight, out, "out");
  const int64_t H = weight.dim(1);
  const bool i64 = ids.dtype() == DType::I64;
  Staged si(ids, true), sw(weight, true), so(out, false);
  ck::embedding_forward(i64 ? si.as<int64_t>() : nullptr, i64 ? nullptr : si.as<int32_t>(), sw.as<float>(),
                        so.as<float>(), N, H, ctx.stream);
  so.to_host();
}

template <DeviceType Dev>
void embedding_backward(const ExecContext& ctx, const Tensor& ids, const Tensor& dout, Tensor& dweight) {
  cuda_staging::context<Dev>(ctx, "embedding.cuda");
  const int64_t N = embedding_detail::check(host_ids(ids), dweight, dout, "dout");
  const int64_t H = dweight.dim(1);
  const bool i64 = ids.dtype() == DType::I64;
  Staged si(ids, true), sd(dout, true), sw(dweight, true);
  ck::embedding_backward(i64 ? si.as<int64_t>() : nullptr, i64 ? nullptr : si.as<int32_t>(), sd.as<float>(),
                         sw.as<float>(), N, H, ctx.stream);
  sw.to_host();
}

template <DeviceType Dev>
const EmbeddingKernel kEmbedding{"cuda", embedding_forward<Dev>, embedding_backward<Dev>};

// ---- adamw ----
template <DeviceType Dev>
void adamw_step(const ExecContext& ctx, Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                const AdamWParams& hp) {
  cuda_staging::context<Dev>(ctx, "adamw.cuda");
  adamw_detail::check(param, grad, m, v, hp);
  Staged sp(param, true), sg(grad, true), sm(m, true), sv(v, true);
  const adamw_detail::Hyper hy(hp);
  ck::adamw_step(sp.as<float>(), sg.as<float>(), sm.as<float>(), sv.as<float>(), param.numel(), float(hy.beta1),
                 float(hy.beta2), float(hy.eps), float(1.0 - hy.lr * hy.wd), float(hy.lr / hy.bias_correction1),
                 float(1.0 / std::sqrt(hy.bias_correction2)), ctx.stream);
  sp.to_host();
  sm.to_host();
  sv.to_host();
}

// The list form: every non-empty tensor staged, a device table of them and of their
// adamw_multi_chunk()-element chunks, one launch. On the GPU the tensors are used in place and only
// the two small tables are copied in.
template <DeviceType Dev>
void adamw_step_multi(const ExecContext& ctx, const std::vector<AdamWTensors>& ts, const AdamWParams& hp) {
  cuda_staging::context<Dev>(ctx, "adamw.cuda");
  for (size_t i = 0; i < ts.size(); ++i) {   // every entry checked before any is updated
    const AdamWTensors& t = ts[i];
    TITAN_CHECK(t.param && t.grad && t.m && t.v, "adamw: list entry ", i,
                " lacks its param, grad, exp_avg or exp_avg_sq");
    try {
      adamw_detail::check(*t.param, *t.grad, *t.m, *t.v, hp);
    } catch (const Error& e) {
      fail(e.what(), " (list entry ", i, ")");
    }
  }
  std::vector<std::unique_ptr<Staged>> staged;  // p, g, m, v of each non-empty tensor
  std::vector<ck::AdamWTensor> table;
  std::vector<ck::AdamWChunk> chunks;
  const int64_t chunk = ck::adamw_multi_chunk();
  for (const AdamWTensors& t : ts) {
    const int64_t n = t.param->numel();
    if (n == 0) continue;
    ck::AdamWTensor d;
    for (const Tensor* x : {static_cast<const Tensor*>(t.param), t.grad, static_cast<const Tensor*>(t.m),
                            static_cast<const Tensor*>(t.v)})
      staged.push_back(std::make_unique<Staged>(*x, true));
    const size_t s0 = staged.size() - 4;
    d.p = staged[s0]->as<float>(), d.g = staged[s0 + 1]->as<float>(), d.m = staged[s0 + 2]->as<float>();
    d.v = staged[s0 + 3]->as<float>(), d.numel = n;
    for (int64_t at = 0; at < n; at += chunk) chunks.push_back({int64_t(table.size()), at});
    table.push_back(d);
  }
  if (chunks.empty()) return;
  Staged stable(table.data(), table.size() * sizeof(ck::AdamWTensor));
  Staged schunks(chunks.data(), chunks.size() * sizeof(ck::AdamWChunk));
  const adamw_detail::Hyper hy(hp);
  ck::adamw_multi_step(stable.as<ck::AdamWTensor>(), schunks.as<ck::AdamWChunk>(), int64_t(chunks.size()),
                       float(hy.beta1), float(hy.beta2), float(hy.eps), float(1.0 - hy.lr * hy.wd),
                       float(hy.lr / hy.bias_correction1), float(1.0 / std::sqrt(hy.bias_correction2)), ctx.stream);
  for (size_t i = 0; i < staged.size(); ++i)
    if (i % 4 != 1) staged[i]->to_host();  // p, m, v (not the gradient)
}

template <DeviceType Dev>
const AdamWKernel kAdamW{"cuda", adamw_step<Dev>, adamw_step_multi<Dev>};

// ---- rope ----
void rope_rotate(const ExecContext& ctx, const RowView& x, int64_t seq, int64_t start, const RopeCache& cache,
                 bool backward) {
  rope_detail::check(x, seq, start, cache, backward ? "dy" : "x");
  Staged sx(x.t, true), sc(cache.cos, true), ss(cache.sin, true);
  ck::rope_rotate(sx.as<float>(), rows_of(x), x.n, seq, start, sc.as<float>(), ss.as<float>(), backward, ctx.stream);
  sx.to_host_rows(x);
}
template <DeviceType Dev>
void rope_forward(const ExecContext& ctx, const RowView& x, int64_t seq, int64_t start, const RopeCache& cache) {
  cuda_staging::context<Dev>(ctx, "rope.cuda");
  rope_rotate(ctx, x, seq, start, cache, false);
}
template <DeviceType Dev>
void rope_backward(const ExecContext& ctx, const RowView& dy, int64_t seq, int64_t start, const RopeCache& cache) {
  cuda_staging::context<Dev>(ctx, "rope.cuda");
  rope_rotate(ctx, dy, seq, start, cache, true);
}

template <DeviceType Dev>
const RopeKernel kRope{"cuda", rope_forward<Dev>, rope_backward<Dev>};

// ---- attention ----
ck::AttnArgs attn_args(const attention::Dims& d, const Staged& q, const RowView& qv, const Staged& k,
                       const RowView& kv, const Staged& v, const RowView& vv, const int64_t* seg, float scale) {
  ck::AttnArgs a;
  a.q = q.as<float>(), a.qr = rows_of(qv), a.k = k.as<float>(), a.kr = rows_of(kv), a.v = v.as<float>();
  a.vr = rows_of(vv), a.seg = seg, a.B = d.B, a.S = d.S, a.Hq = d.Hq, a.Hkv = d.Hkv, a.D = d.D, a.scale = scale;
  const char* bad = ck::attention_check(a);
  TITAN_CHECK(*bad == 0, "attention.cuda: ", bad);
  return a;
}

template <DeviceType Dev>
void attention_forward_seg(const ExecContext& ctx, const RowView& q, const RowView& k, const RowView& v, int64_t seq,
                           const int64_t* seg, float scale, Tensor& out, Tensor& lse) {
  cuda_staging::context<Dev>(ctx, "attention.cuda");
  const attention::Dims d = attention::check_rows_forward(q, k, v, seq, scale, out, lse, "attention.cuda forward");
  attention::check_segments(seg, d.B, d.S, "attention.cuda forward");
  Staged sq(q.t, true), sk(k.t, true), sv(v.t, true), so(out, false), sl(lse, false);
  Staged sseg(seg, seg ? size_t(d.B * d.S) * sizeof(int64_t) : 0);
  ck::attention_forward(attn_args(d, sq, q, sk, k, sv, v, seg ? sseg.as<int64_t>() : nullptr, scale), so.as<float>(),
                        sl.as<float>(), ctx.stream);
  so.to_host();
  sl.to_host();
}
template <DeviceType Dev>
void attention_forward(const ExecContext& ctx, const RowView& q, const RowView& k, const RowView& v, int64_t seq,
                       float scale, Tensor& out, Tensor& lse) {
  cuda_staging::context<Dev>(ctx, "attention.cuda");
  attention_forward_seg<Dev>(ctx, q, k, v, seq, nullptr, scale, out, lse);
}

template <DeviceType Dev>
void attention_backward_seg(const ExecContext& ctx, const RowView& q, const RowView& k, const RowView& v,
                            const Tensor& out, const Tensor& lse, const Tensor& dout, int64_t seq, const int64_t* seg,
                            float scale, const RowView& dq, const RowView& dk, const RowView& dv) {
  cuda_staging::context<Dev>(ctx, "attention.cuda");
  const attention::Dims d =
      attention::check_rows_backward(q, k, v, out, lse, dout, seq, scale, dq, dk, dv, "attention.cuda backward");
  attention::check_segments(seg, d.B, d.S, "attention.cuda backward");
  Staged sq(q.t, true), sk(k.t, true), sv(v.t, true), so(out, true), sl(lse, true), sdo(dout, true);
  Staged sseg(seg, seg ? size_t(d.B * d.S) * sizeof(int64_t) : 0);
  Staged sdq(dq.t, true), sdk(dk.t, true), sdv(dv.t, true);
  Staged dvec(size_t(d.B * d.Hq * d.S) * sizeof(float));
  ck::attention_backward(attn_args(d, sq, q, sk, k, sv, v, seg ? sseg.as<int64_t>() : nullptr, scale), so.as<float>(),
                         sl.as<float>(), sdo.as<float>(), dvec.as<float>(), sdq.as<float>(), rows_of(dq),
                         sdk.as<float>(), rows_of(dk), sdv.as<float>(), rows_of(dv), ctx.stream);
  sdq.to_host_rows(dq);
  sdk.to_host_rows(dk);
  sdv.to_host_rows(dv);
}
template <DeviceType Dev>
void attention_backward(const ExecContext& ctx, const RowView& q, const RowView& k, const RowView& v, const Tensor& out,
                        const Tensor& lse, const Tensor& dout, int64_t seq, float scale, const RowView& dq,
                        const RowView& dk, const RowView& dv) {
  cuda_staging::context<Dev>(ctx, "attention.cuda");
  attention_backward_seg<Dev>(ctx, q, k, v, out, lse, dout, seq, nullptr, scale, dq, dk, dv);
}

template <DeviceType Dev>
const AttentionKernel kAttention{"cuda", attention_forward<Dev>, attention_backward<Dev>, attention_forward_seg<Dev>,
                                 attention_backward_seg<Dev>};

// ---- residual, bias ----
template <DeviceType Dev>
void residual_forward(const ExecContext& ctx, const Tensor& a, const Tensor& b, Tensor& y) {
  cuda_staging::context<Dev>(ctx, "residual.cuda");
  opcheck::f32(a, "residual", "a");
  opcheck::f32(b, "residual", "b");
  opcheck::f32(y, "residual", "y");
  opcheck::numel(b, a.numel(), "residual", "b");
  opcheck::numel(y, a.numel(), "residual", "y");
  Staged sa(a, true), sb(b, true), sy(y, false);
  ck::add(sa.as<float>(), sb.as<float>(), sy.as<float>(), a.numel(), ctx.stream);
  sy.to_host();
}
template <DeviceType Dev>
void residual_accumulate(const ExecContext& ctx, Tensor& dst, const Tensor& src) {
  cuda_staging::context<Dev>(ctx, "residual.cuda");
  opcheck::f32(dst, "residual", "dst");
  opcheck::f32(src, "residual", "src");
  opcheck::numel(src, dst.numel(), "residual", "src");
  Staged sd(dst, true), ss(src, true);
  ck::add(sd.as<float>(), ss.as<float>(), sd.as<float>(), dst.numel(), ctx.stream);
  sd.to_host();
}
template <DeviceType Dev>
const ResidualKernel kResidual{"cuda", residual_forward<Dev>, residual_accumulate<Dev>};

template <DeviceType Dev>
void bias_forward(const ExecContext& ctx, Tensor& y, const Tensor& b) {
  cuda_staging::context<Dev>(ctx, "bias.cuda");
  const int64_t n = bias_checks::check(y, b, "y", "b");
  Staged sy(y, true), sb(b, true);
  ck::bias_forward(sy.as<float>(), sb.as<float>(), y.dim(0), n, ctx.stream);
  sy.to_host();
}
template <DeviceType Dev>
void bias_backward(const ExecContext& ctx, const Tensor& dy, Tensor& db) {
  cuda_staging::context<Dev>(ctx, "bias.cuda");
  const int64_t n = bias_checks::check(dy, db, "dy", "db");
  Staged sdy(dy, true), sdb(db, true);
  ck::bias_backward(sdy.as<float>(), sdb.as<float>(), dy.dim(0), n, ctx.stream);
  sdb.to_host();
}
template <DeviceType Dev>
const BiasKernel kBias{"cuda", bias_forward<Dev>, bias_backward<Dev>};

}  // namespace
TITAN_REGISTER_KERNEL(ResidualKernel, "cuda", DeviceType::CPU, kResidual<DeviceType::CPU>);
TITAN_REGISTER_KERNEL(ResidualKernel, "cuda", DeviceType::CUDA, kResidual<DeviceType::CUDA>);
TITAN_REGISTER_KERNEL(BiasKernel, "cuda", DeviceType::CPU, kBias<DeviceType::CPU>);
TITAN_REGISTER_KERNEL(BiasKernel, "cuda", DeviceType::CUDA, kBias<DeviceType::CUDA>);
TITAN_REGISTER_KERNEL(AttentionKernel, "cuda", DeviceType::CPU, kAttention<DeviceType::CPU>);
TITAN_REGISTER_KERNEL(AttentionKernel, "cuda", DeviceType::CUDA, kAttention<DeviceType::CUDA>);
TITAN_REGISTER_KERNEL(RopeKernel, "cuda", DeviceType::CPU, kRope<DeviceType::CPU>);
TITAN_REGISTER_KERNEL(RopeKernel, "cuda", DeviceType::CUDA, kRope<DeviceType::CUDA>);
TITAN_REGISTER_KERNEL(RMSNormKernel, "cuda", DeviceType::CPU, kRMSNorm<DeviceType::CPU>);
TITAN_REGISTER_KERNEL(RMSNormKernel, "cuda", DeviceType::CUDA, kRMSNorm<DeviceType::CUDA>);
TITAN_REGISTER_KERNEL(SwiGLUKernel, "cuda", DeviceType::CPU, kSwiGLU<DeviceType::CPU>);
TITAN_REGISTER_KERNEL(SwiGLUKernel, "cuda", DeviceType::CUDA, kSwiGLU<DeviceType::CUDA>);
TITAN_REGISTER_KERNEL(EmbeddingKernel, "cuda", DeviceType::CPU, kEmbedding<DeviceType::CPU>);
TITAN_REGISTER_KERNEL(EmbeddingKernel, "cuda", DeviceType::CUDA, kEmbedding<DeviceType::CUDA>);
TITAN_REGISTER_KERNEL(AdamWKernel, "cuda", DeviceType::CPU, kAdamW<DeviceType::CPU>);
TITAN_REGISTER_KERNEL(AdamWKernel, "cuda", DeviceType::CUDA, kAdamW<DeviceType::CUDA>);
}  // namespace titan
