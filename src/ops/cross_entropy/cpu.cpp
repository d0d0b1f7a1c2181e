// Fused lm_head + cross-entropy, cpu variant. Rows are processed in chunks so that at most
// [rows, V] f32 logits exist at once (never [N, V]); per chunk:
//   logits = h_c @ W^T                       (GEMM; bf16 inputs when compute = bf16)
//   per row (in parallel): m = max, e = exp(z - m) in place, s = sum e,
//     loss_n = log s + m - z[label],  dlogits = e * (grad_scale / s) - grad_scale [v == label]
//     written once: over e in f32, or with bf16 compute only as the bf16 copy the GEMMs read
//   dh_c = dlogits @ W                        (GEMM, overwrite)
//   dW  += dlogits^T @ h_c                    (GEMM, beta = 1)
// Ignored rows (label -100) get zero dlogits, so no gradient; a chunk with no counted row skips its
// GEMMs. Row losses are kept per row and summed in row order in double, and each row pass depends
// only on its row, so everything but the GEMMs' own summation order is independent of the thread
// count. With compute = bf16, W is rounded to bf16 once per call, h and dlogits once per chunk.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/threading.h"
#include "ops/cross_entropy/checks.h"
#include "ops/cross_entropy/cpu_impl.h"
#include "ops/cross_entropy/softmax_rows.h"
#include "ops/op_checks.h"
#include "ops/vec_math.h"

namespace titan::ce_detail {
namespace {

// f32 -> bf16 (RNE, as core's f32_to_bf16) in parallel: for W once per call and h per chunk.
void to_bf16(const float* src, uint16_t* dst, int64_t n) {
  parallel_for((n + 7) / 8, 8192, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t i = b * 8;
      if (i + 8 <= n) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), vmath::bf16x8(_mm256_loadu_ps(src + i)));
      } else {
        for (int64_t j = i; j < n; ++j) dst[j] = f32_to_bf16(src[j]);
      }
    }
  });
}

struct Gemm {
  const ExecContext& ctx;
  const GemmKernel& k;
  DType in;  // F32 or BF16 inputs
  size_t esize() const { return dtype_size(in); }
  // C[m, n] = op(A) @ op(B) + beta C, A/B given with their row strides as stored
  void run(bool ta, bool tb, int64_t m, int64_t n, int64_t kk, const void* a, int64_t lda, const void* b,
           int64_t ldb, float beta, float* c, int64_t ldc) const {
    GemmArgs g;
    g.trans_a = ta, g.trans_b = tb, g.m = m, g.n = n, g.k = kk;
    g.alpha = 1.f, g.beta = beta;
    g.a = a, g.lda = lda, g.b = b, g.ldb = ldb, g.c = c, g.ldc = ldc, g.in_dtype = in;
    k.gemm(ctx, g);
  }
};

// The GEMM's view of W: the tensor itself (f32, or bf16 already) or its bf16 copy (made once per
// call; a Tensor, so the allocator's live/peak bytes see it).
struct WeightOperand {
  Tensor bf16;
  const void* ptr;
  WeightOperand(const Tensor& w, DType compute) : ptr(w.raw()) {
    if (compute == DType::BF16 && w.dtype() != DType::BF16) {
      bf16 = Tensor::empty(w.shape(), DType::BF16);
      to_bf16(w.data<float>(), static_cast<uint16_t*>(bf16.raw()), w.numel());
      ptr = bf16.raw();
    }
  }
};

// h rows [r0, r0 + R) as GEMM input: a pointer into h, or their bf16 copy in `scratch` ([rows, H]
// bf16, allocated on first use).
const void* h_rows(const Tensor& h, int64_t r0, int64_t R, DType compute, Tensor& scratch) {
  const int64_t H = h.dim(-1);
  const float* src = h.data<float>() + r0 * H;
  if (compute != DType::BF16) return src;
  if (!scratch.defined() || scratch.numel() < R * H) scratch = Tensor::empty({R, H}, DType::BF16);
  uint16_t* dst = static_cast<uint16_t*>(scratch.raw());
  to_bf16(src, dst, R * H);
  return dst;
}

bool any_counted(const std::vector<int64_t>& labels, int64_t r0, int64_t r1) {
  for (int64_t n = r0; n < r1; ++n)
    if (labels[size_t(n)] != kIgnoreIndex) return true;
  return false;
}

std::vector<int64_t> labels_of(const Tensor& labels) {
  std::vector<int64_t> v(size_t(labels.numel()));
  for (int64_t n = 0; n < labels.numel(); ++n) v[size_t(n)] = opcheck::index_at(labels, n);
  return v;
}

double sum_in_order(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s;
}

}  // namespace

int64_t chunk_rows(int64_t n, int64_t v, size_t budget_bytes) {
  const int64_t max_rows = std::max<int64_t>(16, int64_t(budget_bytes / (size_t(std::max<int64_t>(v, 1)) * 4)));
  if (n <= max_rows) return std::max<int64_t>(n, 1);
  const int64_t chunks = (n + max_rows - 1) / max_rows;
  const int64_t rows = (n + chunks - 1) / chunks;
  return std::min(max_rows, (rows + 15) / 16 * 16);
}

double cpu_forward(const ExecContext& ctx, const GemmKernel& gemm, const Tensor& h, const Tensor& w,
                   const Tensor& labels, Tensor* logits_out, DType compute, int64_t rows) {
  const Dims d = check_inputs(h, w, labels, compute);
  if (logits_out) check_logits_out(*logits_out, d);
  if (d.n == 0) return 0.0;
  const std::vector<int64_t> lab = labels_of(labels);
  const RowOps& ops = row_ops();
  const Gemm g{ctx, gemm, compute};
  const WeightOperand wop(w, compute);
  // With logits_out the chunk is written straight into it (so one chunk of all rows); otherwise a
  // scratch chunk of `rows` rows.
  if (rows <= 0) rows = logits_out ? d.n : chunk_rows(d.n, d.v);
  Tensor scratch;
  if (!logits_out) scratch = Tensor::empty({std::min(rows, d.n), d.v}, DType::F32);
  Tensor hb;
  std::vector<double> row_loss(size_t(d.n), 0.0);
  for (int64_t r0 = 0; r0 < d.n; r0 += rows) {
    const int64_t r1 = std::min(d.n, r0 + rows), R = r1 - r0;
    if (!logits_out && !any_counted(lab, r0, r1)) continue;
    float* z = logits_out ? logits_out->data<float>() + r0 * d.v : scratch.data<float>();  // [R, V]
    g.run(false, true, R, d.v, d.h, h_rows(h, r0, R, compute, hb), d.h, wop.ptr, d.h, 0.f, z, d.v);
    parallel_for(R, 1, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t label = lab[size_t(r0 + i)];
        if (label == kIgnoreIndex) continue;
        const float* zr = z + i * d.v;
        const float m = ops.max(zr, d.v);
        row_loss[size_t(r0 + i)] = std::log(double(ops.sum_exp(zr, d.v, m))) + double(m) - double(zr[label]);
      }
    });
  }
  return sum_in_order(row_loss);
}

double cpu_forward_backward(const ExecContext& ctx, const GemmKernel& gemm, const Tensor& h, const Tensor& w,
                            const Tensor& labels, float grad_scale, Tensor& dh, Tensor& dw, DType compute,
                            int64_t rows) {
  const Dims d = check_inputs(h, w, labels, compute);
  check_grads(h, w, dh, dw);
  if (d.n == 0) return 0.0;
  const std::vector<int64_t> lab = labels_of(labels);
  const RowOps& ops = row_ops();
  const Gemm g{ctx, gemm, compute};
  const WeightOperand wop(w, compute);
  if (rows <= 0) rows = chunk_rows(d.n, d.v);
  rows = std::min(rows, d.n);
  Tensor logits = Tensor::empty({rows, d.v}, DType::F32);  // [rows, V], becomes dlogits in place
  Tensor dl_bf16;                                           // [rows, V] bf16 dlogits for bf16 GEMMs
  if (compute == DType::BF16) dl_bf16 = Tensor::empty({rows, d.v}, DType::BF16);
  Tensor hb;
  std::vector<double> row_loss(size_t(d.n), 0.0);
  float* dhp = dh.data<float>();  // [N, H]
  float* dwp = dw.defined() ? dw.data<float>() : nullptr;  // [V, H]; null: frozen weight
  for (int64_t r0 = 0; r0 < d.n; r0 += rows) {
    const int64_t r1 = std::min(d.n, r0 + rows), R = r1 - r0;
    if (!any_counted(lab, r0, r1)) {
      std::fill(dhp + r0 * d.h, dhp + r1 * d.h, 0.0f);
      continue;
    }
    float* z = logits.data<float>();  // [R, V]
    uint16_t* zb = compute == DType::BF16 ? static_cast<uint16_t*>(dl_bf16.raw()) : nullptr;
    const void* hc = h_rows(h, r0, R, compute, hb);
    g.run(false, true, R, d.v, d.h, hc, d.h, wop.ptr, d.h, 0.f, z, d.v);
    parallel_for(R, 1, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t label = lab[size_t(r0 + i)];
        float* zr = z + i * d.v;
        uint16_t* br = zb ? zb + i * d.v : nullptr;
        if (label == kIgnoreIndex) {
          if (br)
            std::fill(br, br + d.v, uint16_t(0));
          else
            std::fill(zr, zr + d.v, 0.0f);
          continue;
        }
        const float m = ops.max(zr, d.v);
        const float zl = zr[label];
        const float s = ops.exp_store(zr, d.v, m);
        row_loss[size_t(r0 + i)] = std::log(double(s)) + double(m) - double(zl);
        // dlogits written once: over the logits in f32, or (bf16 GEMMs) only as bf16, the label's
        // element from the same single product, corrected before its rounding
        const float c = float(double(grad_scale) / double(s));
        ops.scale(zr, d.v, c, br);
        if (br) {
          const float yl = zr[label] * c;
          br[label] = f32_to_bf16(yl - grad_scale);
        } else {
          zr[label] -= grad_scale;
        }
      }
    });
    const void* dlp = zb ? static_cast<const void*>(zb) : static_cast<const void*>(z);
    g.run(false, false, R, d.h, d.v, dlp, d.v, wop.ptr, d.h, 0.f, dhp + r0 * d.h, d.h);  // dh_c = dl @ W
    if (dwp) g.run(true, false, d.v, d.h, R, dlp, d.v, hc, d.h, 1.f, dwp, d.h);          // dW += dl^T @ h_c
  }
  return sum_in_order(row_loss);
}

}  // namespace titan::ce_detail

namespace titan {
namespace {

double forward(const ExecContext& ctx, const Tensor& h, const Tensor& w, const Tensor& labels, Tensor* logits_out,
               DType compute) {
  opcheck::host_context(ctx, "cross_entropy.cpu");
  return ce_detail::cpu_forward(ctx, kernel<GemmKernel>("cpu"), h, w, labels, logits_out, compute);
}

double forward_backward(const ExecContext& ctx, const Tensor& h, const Tensor& w, const Tensor& labels,
                        float grad_scale, Tensor& dh, Tensor& dw, DType compute) {
  opcheck::host_context(ctx, "cross_entropy.cpu");
  return ce_detail::cpu_forward_backward(ctx, kernel<GemmKernel>("cpu"), h, w, labels, grad_scale, dh, dw, compute);
}

const CrossEntropyKernel kCpu{"cpu", forward, forward_backward};

}  // namespace
TITAN_REGISTER_KERNEL(CrossEntropyKernel, "cpu", DeviceType::CPU, kCpu);
}  // namespace titan
