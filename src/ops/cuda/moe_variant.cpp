// Variant "cuda" of the MoE block (ops/moe/moe.h): the operands staged through device memory
// (ops/cuda/staging.h), every step on the device:
//   1. router logits x @ router^T through the blas interface (f32), then one kernel per token for
//      the softmax (double sums) and the top-k (moe.cuh);
//   2. the (token, k) slots permuted into expert order: counts, exclusive scan, stable placement
//      in token order; the counts come back to the host, which launches the expert GEMMs;
//   3. per non-empty expert one blas GEMM over its contiguous rows for gate_up, the SwiGLU kernel,
//      one GEMM for down; the combine sums each token's k rows in k order.
// Backward: the groups again (dA = dy_e @ down[e], a per-row kernel for dL/dw, the SwiGLU backward
// and w dy; ddown[e] and dgate_up[e] accumulated by GEMMs with beta = 1; the expert-input rows),
// then the router-logit gradient per token, drouter += dlogits^T x and dx = dlogits @ router + the
// rows, added in k order. No float atomics; every sum in a fixed order.
// compute BF16: the expert GEMM inputs rounded to bf16 on the device (bf16 weights used as they
// are), f32 accumulation; the router stays f32. acts (the gate/up pre-activations [T K, 2I]) and
// slot_pos (row of slot t K + k) are this variant's saved state, as in the grouped_gemm variant
// but without padding rows.
// Registered for DeviceType::CPU (host tensors, staged) and DeviceType::CUDA (operands on cuda:0
// used in place; the saved state is made on the GPU then, except tokens_per_expert, which the
// host computes from the counts it needs anyway and which stays a host tensor for its readers).
#include <string>
#include <vector>

#include "core/cuda_emu/cuda.h"
#include "core/dtype.h"
#include "ops/cuda/gemm_variant.h"
#include "ops/cuda/launch.h"
#include "ops/cuda/staging.h"
#include "ops/moe/moe.h"
#include "ops/op_checks.h"

namespace titan {
namespace {

namespace ck = cuda_kernels;
using cuda_staging::Staged;

using Buf = Staged;  // device scratch (none when zero bytes)

// A GEMM input on the device: f32, or bf16 bits.
struct Operand {
  const float* f = nullptr;
  const uint16_t* b = nullptr;
  const void* at(int64_t off) const {
    return b ? static_cast<const void*>(b + off) : static_cast<const void*>(f + off);
  }
};

// src (count floats on the device) as a GEMM input: itself, or its bf16 rounding in `bits`.
class Rounded {
 public:
  Rounded(const float* src, int64_t count, bool bf16, void* stream) : bits_(bf16 ? size_t(count) * 2 : 0) {
    if (bf16) {
      ck::round_bf16(src, bits_.as<uint16_t>(), count, stream);
      op.b = bits_.as<uint16_t>();
    } else {
      op.f = src;
    }
  }
  Operand op;

 private:
  Buf bits_;
};

// An expert weight: staged as it is (f32 or bf16), rounded to bf16 on the device when f32 and the
// compute is bf16.
class Weight {
 public:
  Weight(const Tensor& w, bool bf16, void* stream)
      : raw_(w, true), bits_(bf16 && w.dtype() == DType::F32 ? size_t(w.numel()) * 2 : 0) {
    if (w.dtype() == DType::BF16) {
      op.b = raw_.as<uint16_t>();
    } else if (bf16) {
      ck::round_bf16(raw_.as<float>(), bits_.as<uint16_t>(), w.numel(), stream);
      op.b = bits_.as<uint16_t>();
    } else {
      op.f = raw_.as<float>();
    }
  }
  Operand op;

 private:
  Staged raw_;
  Buf bits_;
};

// Row-major C[m, n] = op(A) op(B) (+ beta C) on device pointers, through to_blas (gemm_variant.h).
void dgemm(const ExecContext& ctx, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void* a, int64_t lda,
           const void* b, int64_t ldb, float* c, int64_t ldc, float beta, bool bf16) {
  GemmArgs g;
  g.trans_a = ta, g.trans_b = tb, g.m = m, g.n = n, g.k = k;
  g.lda = lda, g.ldb = ldb, g.ldc = ldc, g.beta = beta, g.in_dtype = bf16 ? DType::BF16 : DType::F32;
  ck::blas_gemm(to_blas(g, a, b, c, nullptr), ctx.gemm_handle, ctx.stream);
}

// The expert groups' first rows and sizes, from the per-expert counts.
struct Groups {
  std::vector<int64_t> count, off;
  template <class I>
  Groups(const I* counts, int64_t E) : count(size_t(E)), off(size_t(E)) {
    int64_t run = 0;
    for (int64_t e = 0; e < E; ++e) {
      count[size_t(e)] = int64_t(counts[e]);
      off[size_t(e)] = run;
      run += count[size_t(e)];
    }
  }
};

void check_slots(int64_t T, int64_t K) {
  TITAN_CHECK(T * K < (int64_t(1) << 31), "moe.cuda: T * top_k = ", T * K, " exceeds its int32 slot index");
}

// A host copy of t (t itself when it is on the host): for the few reads the host makes of the
// saved state.
Tensor on_host(const Tensor& t) { return t.device().type == DeviceType::CPU ? t : t.to(cpu()); }

template <DeviceType Dev>
void forward(const ExecContext& ctx, const MoEArgs& a, Tensor& y, MoESaved& s) {
  cuda_staging::context<Dev>(ctx, "moe.cuda");
  const auto [T, H, E, I, K] = moe_check_args(a, "cuda");
  opcheck::f32(y, "moe", "y");
  TITAN_CHECK(y.ndim() == 2 && y.dim(0) == T && y.dim(1) == H, "moe: y must be [", T, ", ", H, "], got ", y.str());
  check_slots(T, K);
  const int64_t R = T * K;
  const bool bf = a.compute == DType::BF16;
  const Device dev = Dev == DeviceType::CPU ? cpu() : ctx.device;  // where the saved state lives
  s.logits = Tensor::empty({T, E}, DType::F32, dev);
  s.topk_idx = Tensor::empty({T, K}, DType::I32, dev);
  s.topk_w = Tensor::empty({T, K}, DType::F32, dev);
  s.tokens_per_expert = Tensor::zeros({E}, DType::I64);
  s.slot_pos = Tensor::empty({R}, DType::I32, dev);
  s.acts = Tensor::empty({R, 2 * I}, DType::F32, dev);
  if (T == 0) return;
  void* st = ctx.stream;
  // 1. Router and routing.
  Staged sx(*a.x, true), sr(*a.router, true), sb(a.bias ? *a.bias : Tensor(), true);
  Staged slog(s.logits, false), sidx(s.topk_idx, false), sw(s.topk_w, false), spos(s.slot_pos, false);
  Staged sacts(s.acts, false), sy(y, false);
  dgemm(ctx, false, true, T, E, H, sx.as<float>(), H, sr.as<float>(), H, slog.as<float>(), E, 0.f, false);
  {
    Buf probs(size_t(T * E) * sizeof(float));
    ck::moe_route(slog.as<float>(), a.bias ? sb.as<float>() : nullptr, T, E, K, a.norm_topk_prob, probs.as<float>(),
                  sidx.as<int32_t>(), sw.as<float>(), st);
  }
  // 2. Permutation into expert order.
  Buf counts(size_t(E) * sizeof(int32_t)), offsets(size_t(E + 1) * sizeof(int32_t)),
      row_slot(size_t(R) * sizeof(int32_t));
  ck::moe_permute(sidx.as<int32_t>(), R, E, counts.as<int32_t>(), offsets.as<int32_t>(), spos.as<int32_t>(),
                  row_slot.as<int32_t>(), st);
  std::vector<int32_t> cnt(static_cast<size_t>(E));
  gpu::copy_to_host(cnt.data(), counts.as<int32_t>(), size_t(E) * sizeof(int32_t));
  const Groups G(cnt.data(), E);
  for (int64_t e = 0; e < E; ++e) s.tokens_per_expert.data<int64_t>()[e] = G.count[size_t(e)];
  // 3. The experts over their rows.
  Buf xp(size_t(R * H) * sizeof(float));
  ck::moe_gather_rows(sx.as<float>(), row_slot.as<int32_t>(), K, R, H, xp.as<float>(), st);
  const Rounded xin(xp.as<float>(), R * H, bf, st);
  const Weight gu_w(*a.gate_up, bf, st), dn_w(*a.down, bf, st);
  float* gu = sacts.as<float>();
  for (int64_t e = 0; e < E; ++e)
    if (const int64_t n = G.count[size_t(e)], o = G.off[size_t(e)]; n > 0)
      dgemm(ctx, false, true, n, 2 * I, H, xin.op.at(o * H), H, gu_w.op.at(e * 2 * I * H), H, gu + o * 2 * I, 2 * I,
            0.f, bf);
  Buf act(size_t(R * I) * (bf ? 2 : 4));
  ck::swiglu_forward(gu, bf ? nullptr : act.as<float>(), bf ? act.as<uint16_t>() : nullptr, R, I, st);
  Operand ain;
  if (bf)
    ain.b = act.as<uint16_t>();
  else
    ain.f = act.as<float>();
  Buf out(size_t(R * H) * sizeof(float));
  for (int64_t e = 0; e < E; ++e)
    if (const int64_t n = G.count[size_t(e)], o = G.off[size_t(e)]; n > 0)
      dgemm(ctx, false, true, n, H, I, ain.at(o * I), I, dn_w.op.at(e * H * I), I, out.as<float>() + o * H, H, 0.f, bf);
  // 4. Combine in k order.
  ck::moe_combine(sw.as<float>(), spos.as<int32_t>(), out.as<float>(), T, H, K, sy.as<float>(), st);
  slog.to_host();
  sidx.to_host();
  sw.to_host();
  spos.to_host();
  sacts.to_host();
  sy.to_host();
}

template <DeviceType Dev>
void backward(const ExecContext& ctx, const MoEArgs& a, const MoESaved& s, const Tensor& dy, const MoEGrads& gr) {
  cuda_staging::context<Dev>(ctx, "moe.cuda");
  const auto [T, H, E, I, K] = moe_check_args(a, "cuda");
  opcheck::f32(dy, "moe", "dy");
  TITAN_CHECK(dy.ndim() == 2 && dy.dim(0) == T && dy.dim(1) == H, "moe: dy must be [", T, ", ", H, "], got ", dy.str());
  check_slots(T, K);
  const int64_t R = T * K;
  TITAN_CHECK(s.topk_idx.defined() && s.topk_idx.dim(0) == T && s.topk_idx.dim(1) == K && s.slot_pos.defined() &&
                  s.slot_pos.numel() == R && s.acts.defined() && s.acts.dim(0) == R && s.acts.dim(1) == 2 * I &&
                  s.tokens_per_expert.defined() && s.tokens_per_expert.numel() == E,
              "moe.cuda: saved state does not come from this variant's forward with these arguments");
  moe_check_grads(a, s, gr);
  if (gr.dlogits_extra) opcheck::f32(*gr.dlogits_extra, "moe", "dlogits_extra");
  if (T == 0) return;
  const bool bf = a.compute == DType::BF16;
  void* st = ctx.stream;
  TITAN_CHECK(
      s.topk_idx.dtype() == DType::I32 && s.slot_pos.dtype() == DType::I32 && s.tokens_per_expert.dtype() == DType::I64,
      "moe.cuda: saved state has the wrong dtypes (pass this variant's forward state)");
  const Tensor counts = on_host(s.tokens_per_expert);
  const Groups G(counts.data<int64_t>(), E);
  {  // every slot's row inside its expert's group (the kernels index device memory by these rows)
    const Tensor idx_t = on_host(s.topk_idx), pos_t = on_host(s.slot_pos);
    const int32_t* idx = idx_t.data<int32_t>();
    const int32_t* pos = pos_t.data<int32_t>();
    bool ok = true;
    for (int64_t j = 0; ok && j < R; ++j) {
      const int64_t e = idx[j];
      ok = e >= 0 && e < E && pos[j] >= G.off[size_t(e)] && pos[j] < G.off[size_t(e)] + G.count[size_t(e)];
    }
    TITAN_CHECK(ok, "moe.cuda: saved slot rows do not match the saved routing (pass this variant's forward state)");
  }
  Staged sdy(dy, true), sidx(s.topk_idx, true), sw(s.topk_w, true), spos(s.slot_pos, true), sacts(s.acts, true);
  Buf row_slot(size_t(R) * sizeof(int32_t));
  ck::moe_invert_permutation(spos.as<int32_t>(), R, row_slot.as<int32_t>(), st);
  // dA = dy_e @ down[e] (the gradient of act before the routing weight).
  Buf dyp(size_t(R * H) * sizeof(float)), dA(size_t(R * I) * sizeof(float));
  ck::moe_gather_rows(sdy.as<float>(), row_slot.as<int32_t>(), K, R, H, dyp.as<float>(), st);
  {
    const Rounded dyin(dyp.as<float>(), R * H, bf, st);
    const Weight dn_w(*a.down, bf, st);
    for (int64_t e = 0; e < E; ++e)
      if (const int64_t n = G.count[size_t(e)], o = G.off[size_t(e)]; n > 0)
        dgemm(ctx, false, false, n, I, H, dyin.op.at(o * H), H, dn_w.op.at(e * H * I), I, dA.as<float>() + o * I, I,
              0.f, bf);
  }
  // act again, dL/dw per row, dgu, and dy scaled by the routing weight.
  Buf act(size_t(R * I) * sizeof(float)), dw(size_t(R) * sizeof(double)), dgu(size_t(R * 2 * I) * (bf ? 2 : 4));
  ck::swiglu_forward(sacts.as<float>(), act.as<float>(), nullptr, R, I, st);
  ck::moe_expert_grad_rows(sacts.as<float>(), dA.as<float>(), act.as<float>(), sw.as<float>(), row_slot.as<int32_t>(),
                           R, I, H, dw.as<double>(), bf ? nullptr : dgu.as<float>(), bf ? dgu.as<uint16_t>() : nullptr,
                           dyp.as<float>(), st);
  Operand dgin;
  if (bf)
    dgin.b = dgu.as<uint16_t>();
  else
    dgin.f = dgu.as<float>();
  if (gr.ddown) {  // ddown[e] [H, I] += (w dy)_e^T @ act_e
    Staged sdd(*gr.ddown, true);
    const Rounded dyw(dyp.as<float>(), R * H, bf, st), ain(act.as<float>(), R * I, bf, st);
    for (int64_t e = 0; e < E; ++e)
      if (const int64_t n = G.count[size_t(e)], o = G.off[size_t(e)]; n > 0)
        dgemm(ctx, true, false, H, I, n, dyw.op.at(o * H), H, ain.op.at(o * I), I, sdd.as<float>() + e * H * I, I, 1.f,
              bf);
    sdd.to_host();
  }
  Staged sx(*a.x, true);
  if (gr.dgate_up) {  // dgate_up[e] [2I, H] += dgu_e^T @ x_e
    Staged sdg(*gr.dgate_up, true);
    Buf xp(size_t(R * H) * sizeof(float));
    ck::moe_gather_rows(sx.as<float>(), row_slot.as<int32_t>(), K, R, H, xp.as<float>(), st);
    const Rounded xin(xp.as<float>(), R * H, bf, st);
    for (int64_t e = 0; e < E; ++e)
      if (const int64_t n = G.count[size_t(e)], o = G.off[size_t(e)]; n > 0)
        dgemm(ctx, true, false, 2 * I, H, n, dgin.at(o * 2 * I), 2 * I, xin.op.at(o * H), H,
              sdg.as<float>() + e * 2 * I * H, H, 1.f, bf);
    sdg.to_host();
  }
  // The router-logit gradient (plus dlogits_extra), drouter and dx.
  Staged sextra(gr.dlogits_extra ? *gr.dlogits_extra : Tensor(), true), slog(s.logits, true);
  Buf dlogits(size_t(T * E) * sizeof(float));
  {
    Buf probs(size_t(T * E) * sizeof(float)), dprobs(size_t(T * E) * sizeof(double));
    ck::moe_router_grad(slog.as<float>(), sidx.as<int32_t>(), sw.as<float>(), dw.as<double>(), spos.as<int32_t>(),
                        gr.dlogits_extra ? sextra.as<float>() : nullptr, T, E, K, a.norm_topk_prob, probs.as<float>(),
                        dprobs.as<double>(), dlogits.as<float>(), st);
  }
  if (gr.drouter) {  // drouter [E, H] += dlogits^T @ x
    Staged sdr(*gr.drouter, true);
    dgemm(ctx, true, false, E, H, T, dlogits.as<float>(), E, sx.as<float>(), H, sdr.as<float>(), H, 1.f, false);
    sdr.to_host();
  }
  if (!gr.dx) return;
  // The expert-input rows dgu_e @ gate_up[e] (into dyp, no longer needed), then dx.
  {
    const Weight gu_w(*a.gate_up, bf, st);
    for (int64_t e = 0; e < E; ++e)
      if (const int64_t n = G.count[size_t(e)], o = G.off[size_t(e)]; n > 0)
        dgemm(ctx, false, false, n, H, 2 * I, dgin.at(o * 2 * I), 2 * I, gu_w.op.at(e * 2 * I * H), H,
              dyp.as<float>() + o * H, H, 0.f, bf);
  }
  Staged sr(*a.router, true), sdx(*gr.dx, false);
  dgemm(ctx, false, false, T, H, E, dlogits.as<float>(), E, sr.as<float>(), H, sdx.as<float>(), H, 0.f, false);
  ck::moe_add_slot_rows(sdx.as<float>(), spos.as<int32_t>(), dyp.as<float>(), T, H, K, st);
  sdx.to_host();
}

// Slot rows are int32 (saved for backward): T * top_k must stay below 2^31.
std::string constraint(const KernelShape& sh) {
  const int64_t slots = sh.batch * sh.seq * (sh.top_k > 0 ? sh.top_k : 1);
  if (slots >= (int64_t(1) << 31))
    return "batch * seq * top_k = " + std::to_string(slots) + " exceeds its int32 slot index (< 2^31)";
  return "";
}

template <DeviceType Dev>
const MoEKernel kMoECuda{"cuda", forward<Dev>, backward<Dev>, constraint};

}  // namespace
TITAN_REGISTER_KERNEL(MoEKernel, "cuda", DeviceType::CPU, kMoECuda<DeviceType::CPU>);
TITAN_REGISTER_KERNEL(MoEKernel, "cuda", DeviceType::CUDA, kMoECuda<DeviceType::CUDA>);
}  // namespace titan
