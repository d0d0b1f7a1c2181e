// The host entry points of the single-source CUDA kernels (ops/cuda/*.cuh): plain C++ over device
// pointers, so the op variants (ops/cuda/variants.cpp) call them without CUDA headers. Defined by
// kernels_emu.cpp under the grid emulator and by kernels.cu under nvcc; the same .cuh sources.
// `stream` is a cudaStream_t (null: the default stream).
#pragma once
#include <cstdint>

namespace titan::cuda_kernels {

// The layout of a row view (ops/row_view.h): vectors of length d, h per row, rows ld apart.
struct Rows {
  int64_t h = 1, d = 0, ld = 0;
};

// RMSNorm (ops/rmsnorm/rmsnorm.h) over n vectors; y is f32 (y_f32) or bf16 bits (y_bf16).
void rmsnorm_forward(const float* x, Rows xr, const float* w, float eps, float* y_f32, uint16_t* y_bf16, Rows yr,
                     float* rstd, int64_t n, void* stream);
// dx (=|+=) and, when dw is non-null, dw += (deterministic: fixed-order partial sums). dx may be
// dy. partial: scratch of dw_partial_floats(n, d) floats.
void rmsnorm_backward(const float* x, Rows xr, const float* w, const float* rstd, const float* dy, Rows dyr, float* dx,
                      Rows dxr, float* dw, float* partial, int64_t n, bool accumulate, void* stream);
int64_t rmsnorm_dw_partial_floats(int64_t n, int64_t d);

// SwiGLU (ops/swiglu/swiglu.h): gu [n, 2i] -> out [n, i] (f32 or bf16 bits); backward into dgu
// [n, 2i] (f32 or bf16 bits; may be gu when f32).
void swiglu_forward(const float* gu, float* out_f32, uint16_t* out_bf16, int64_t n, int64_t i, void* stream);
void swiglu_backward(const float* gu, const float* dout, float* dgu_f32, uint16_t* dgu_bf16, int64_t n, int64_t i,
                     void* stream);

// Embedding (ops/embedding/embedding.h): ids are i64 (ids64) or i32 (ids32), checked in range by
// the caller. backward: dweight[ids[t]] += dout[t], each column summed in token order.
void embedding_forward(const int64_t* ids64, const int32_t* ids32, const float* w, float* out, int64_t n, int64_t h,
                       void* stream);
void embedding_backward(const int64_t* ids64, const int32_t* ids32, const float* dout, float* dw, int64_t n, int64_t h,
                        void* stream);

// AdamW (ops/adamw/adamw.h) over `count` f32 elements: decay = 1 - lr wd, step_size = lr / (1 - b1^t),
// inv_sqrt_bc2 = 1 / sqrt(1 - b2^t).
void adamw_step(float* p, const float* g, float* m, float* v, int64_t count, float beta1, float beta2, float eps,
                float decay, float step_size, float inv_sqrt_bc2, void* stream);
// The list form: every tensor of a device table updated in one launch. chunks (device memory, one
// per block): the tensor's index and first element of each adamw_multi_chunk()-element piece of
// every non-empty tensor. Each element gets adamw_step's arithmetic (the same bits).
struct AdamWTensor {
  float* p = nullptr;
  const float* g = nullptr;
  float* m = nullptr;
  float* v = nullptr;
  int64_t numel = 0;
};
struct AdamWChunk {
  int64_t tensor = 0, start = 0;
};
int64_t adamw_multi_chunk();
void adamw_multi_step(const AdamWTensor* tensors, const AdamWChunk* chunks, int64_t n_chunks, float beta1, float beta2,
                      float eps, float decay, float step_size, float inv_sqrt_bc2, void* stream);

// The multi-tensor ops of ops/foreach/foreach.h over f32 ranges in device memory: a device table of
// the ranges and one (range, first element) entry per foreach_chunk()-element piece of every
// non-empty range, one block per piece.
struct ForeachRange {
  float* data = nullptr;
  int64_t n = 0;
};
struct ForeachChunk {
  int64_t range = 0, start = 0;
};
int64_t foreach_chunk();
// *out (device, one double) = the sum of x^2 over the chunks, in double, the same bits for every
// block and thread order. partial: device scratch of n_chunks doubles.
void foreach_sum_squares(const ForeachRange* ranges, const ForeachChunk* chunks, int64_t n_chunks, double* partial,
                         double* out, void* stream);
// Every element of the chunks becomes x * c (f32).
void foreach_scale(const ForeachRange* ranges, const ForeachChunk* chunks, int64_t n_chunks, float c, void* stream);

// RoPE (ops/rope/rope.h) in place on `rows` token rows (row r at position start + r mod seq);
// cos/sin: the [P, D] caches; backward: the transposed rotation.
void rope_rotate(float* x, Rows xr, int64_t rows, int64_t seq, int64_t start, const float* cos_cache,
                 const float* sin_cache, bool backward, void* stream);

// Softmax cross-entropy on `rows` logit rows z [rows, v] (labels l64 or l32 at row0 + r, -100
// ignored): loss[r] = logsumexp - z[label]; with backward, the rows become grad_scale * (softmax -
// onehot) in place (f32) or in z_bf16 (bf16 bits) when it is non-null.
void ce_rows(float* z, int64_t rows, int64_t v, const int64_t* l64, const int32_t* l32, int64_t row0, float* loss,
             bool backward, float grad_scale, uint16_t* z_bf16, void* stream);
// dst = bf16 bits of src (round to nearest even).
void round_bf16(const float* src, uint16_t* dst, int64_t count, void* stream);

// Attention (ops/attention/attention.h) over row views of q [B*S rows, Hq, D], k, v [.., Hkv, D];
// out [B, S, Hq, D] and lse [B, Hq, S] contiguous; seg: document starts or null (causal).
struct AttnArgs {
  const float* q = nullptr;
  Rows qr;
  const float* k = nullptr;
  Rows kr;
  const float* v = nullptr;
  Rows vr;
  const int64_t* seg = nullptr;
  int64_t B = 0, S = 0, Hq = 0, Hkv = 0, D = 0;
  float scale = 1;
};
const char* attention_check(const AttnArgs& a);  // "" or why the kernels refuse the shape
void attention_forward(const AttnArgs& a, float* out, float* lse, void* stream);
// dvec: scratch of B * Hq * S floats.
void attention_backward(const AttnArgs& a, const float* out, const float* lse, const float* dout, float* dvec,
                        float* dq, Rows dqr, float* dk, Rows dkr, float* dv, Rows dvr, void* stream);

// Residual add y = a + b (y may be a); bias y[m, n] += b[n]; bias gradient db[n] += sum_m dy[m, n].
void add(const float* a, const float* b, float* y, int64_t count, void* stream);
void bias_forward(float* y, const float* b, int64_t m, int64_t n, void* stream);
void bias_backward(const float* dy, float* db, int64_t m, int64_t n, void* stream);

// Gated RMSNorm (ops/gated_rmsnorm/gated_rmsnorm.h) over n contiguous rows of d: y = w (x r) silu(z).
// Backward: dx, dz overwritten; dw += when non-null (fixed-order partial sums); scratch of
// gated_rmsnorm_scratch_floats(n, d) floats.
void gated_rmsnorm_forward(const float* x, const float* z, const float* w, float eps, float* y, int64_t n, int64_t d,
                           void* stream);
void gated_rmsnorm_backward(const float* x, const float* z, const float* w, float eps, const float* dy, float* dx,
                            float* dz, float* dw, float* scratch, int64_t n, int64_t d, void* stream);
int64_t gated_rmsnorm_scratch_floats(int64_t n, int64_t d);

// Depthwise causal conv1d + SiLU (ops/causal_conv1d/causal_conv1d.h): x [B, S, C], w [C, K],
// seg (document starts) and state_in [B, C, K - 1] optional (null).
struct Conv1dArgs {
  const float* x = nullptr;
  const float* w = nullptr;
  const int64_t* seg = nullptr;
  const float* state_in = nullptr;
  int64_t B = 0, S = 0, C = 0, K = 1;
};
// y [B, S, C]; state_out [B, C, K - 1] when non-null.
void causal_conv1d_forward(const Conv1dArgs& a, float* y, float* state_out, void* stream);
// dx overwritten; dw += when non-null; d_state_in overwritten when non-null; scratch of
// causal_conv1d_scratch_floats(a) floats.
void causal_conv1d_backward(const Conv1dArgs& a, const float* dy, float* dx, float* dw, float* d_state_in,
                            float* scratch, void* stream);
int64_t causal_conv1d_scratch_floats(const Conv1dArgs& a);

// The gated delta rule (ops/gated_delta/gated_delta.h): q, k [B, S, Hk, dk], v [B, S, Hv, dv],
// g, beta [B, S, Hv], seg and init [B, Hv, dk, dv] optional (null); scale already resolved.
struct GatedDeltaArgs {
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  const float* g = nullptr;
  const float* beta = nullptr;
  const int64_t* seg = nullptr;
  const float* init = nullptr;
  int64_t B = 0, S = 0, Hk = 1, Hv = 1, dk = 0, dv = 0;
  float scale = 1;
  bool l2norm = true;
};
const char* gated_delta_check(const GatedDeltaArgs& a);  // "" or why the kernels refuse the shape
// out [B, S, Hv, dv]; fin [B, Hv, dk, dv] when non-null (may equal a.init: the decode step in
// place). scratch: gated_delta_forward_scratch_floats(a) floats.
void gated_delta_forward(const GatedDeltaArgs& a, float* out, float* fin, float* scratch, void* stream);
int64_t gated_delta_forward_scratch_floats(const GatedDeltaArgs& a);
// dq, dk, dv, dg, dbeta overwritten; dinit overwritten when non-null; dfin (the gradient into the
// final state) optional. scratch: gated_delta_backward_scratch_floats(a) floats.
void gated_delta_backward(const GatedDeltaArgs& a, const float* dout, const float* dfin, float* dq, float* dk,
                          float* dv, float* dg, float* dbeta, float* dinit, float* scratch, void* stream);
int64_t gated_delta_backward_scratch_floats(const GatedDeltaArgs& a);

// MoE (ops/moe/moe.h) around the expert GEMMs (moe.cuh). Slots j = t K + k; rows in expert order.
// route: per token the softmax of logits [T, E] (double sums; probs [T, E] written) and the top-k
// of p + bias (bias null or [E]; ties to the lower index) into idx, w [T, K].
void moe_route(const float* logits, const float* bias, int64_t T, int64_t E, int64_t K, bool norm, float* probs,
               int32_t* idx, float* w, void* stream);
// counts [E] of the slots per expert, offsets [E + 1] their exclusive scan, and the stable
// permutation: pos[j] = row of slot j (slots of an expert in slot order), row_slot[row] = j.
void moe_permute(const int32_t* idx, int64_t slots, int64_t E, int32_t* counts, int32_t* offsets, int32_t* pos,
                 int32_t* row_slot, void* stream);
// row_slot[pos[j]] = j for the slots' rows pos.
void moe_invert_permutation(const int32_t* pos, int64_t slots, int32_t* row_slot, void* stream);
// dst[r] = src[row_slot[r] / K], rows of h floats.
void moe_gather_rows(const float* src, const int32_t* row_slot, int64_t K, int64_t rows, int64_t h, float* dst,
                     void* stream);
// y[t] = sum_k w[t, k] out[pos[t K + k]] in k order (overwritten).
void moe_combine(const float* w, const int32_t* pos, const float* out, int64_t T, int64_t H, int64_t K, float* y,
                 void* stream);
// dx[t] += sum_k rows[pos[t K + k]] in k order.
void moe_add_slot_rows(float* dx, const int32_t* pos, const float* rows, int64_t T, int64_t H, int64_t K, void* stream);
// Per row r (weight w[row_slot[r]]): dw[r] = dA[r] . act[r] (double); dgu [rows, 2I] = the SwiGLU
// backward of w dA (f32, or bf16 bits into dgu_bf16 when non-null); dyw [rows, H] *= w.
void moe_expert_grad_rows(const float* gu, const float* dA, const float* act, const float* w, const int32_t* row_slot,
                          int64_t rows, int64_t I, int64_t H, double* dw, float* dgu, uint16_t* dgu_bf16, float* dyw,
                          void* stream);
// dlogits [T, E] through the renormalisation and softmax from dL/dw of each row (dw_rows), plus
// extra [T, E] when non-null; probs [T, E] f32 and dprobs [T, E] f64 scratch.
void moe_router_grad(const float* logits, const int32_t* idx, const float* w, const double* dw_rows, const int32_t* pos,
                     const float* extra, int64_t T, int64_t E, int64_t K, bool norm, float* probs, double* dprobs,
                     float* dlogits, void* stream);

// d[i * ldd + j] += r[i * ldr + j] over a row-major rows x cols block.
void add_rows(float* d, int64_t ldd, const float* r, int64_t ldr, int64_t rows, int64_t cols, void* stream);

}  // namespace titan::cuda_kernels
