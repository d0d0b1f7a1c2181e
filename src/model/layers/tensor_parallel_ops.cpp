// The decoder's tensor-parallel pieces (model/tensor_parallel.h): the collectives that enter and
// leave the column/row-parallel regions, the reduction of replicated weights' partial gradients,
// the vocabulary-parallel embedding and the cross-entropy over vocabulary shards.
#include <cmath>
#include <cstring>
#include <vector>

#include "core/threading.h"
#include "model/decoder_layer.h"
#include "ops/cross_entropy/cpu_impl.h"
#include "ops/cross_entropy/softmax_rows.h"

namespace titan {

using namespace layer_util;

int64_t DecoderModel::tp_rows(int64_t T) const {
  if (!tp_.sp()) return T;
  TITAN_CHECK(T % tp_.size() == 0, "sequence parallelism: a micro-batch of ", T,
              " tokens (local_batch_size x seq_len) does not divide by [parallelism] tensor_parallel_degree = ",
              tp_.size(), " (or set [parallelism] enable_sequence_parallel = false)");
  return T / tp_.size();
}

Tensor DecoderModel::tp_gather_rows(const Tensor& local) const {
  if (!tp_.sp()) return local;
  Shape s = local.shape();
  s[0] *= tp_.size();
  Tensor all = Tensor::empty(s, local.dtype());
  tp_.comm->all_gather_bytes(local.raw(), all.raw(), local.nbytes());
  return all;
}

Tensor DecoderModel::tp_reduce_rows(Tensor& y) const {
  if (!tp_.on()) return y;
  TITAN_ASSERT(y.dtype() == DType::F32, "tp_reduce_rows: f32 partial sums");
  if (!tp_.sp()) {
    tp_.comm->all_reduce(y.data<float>(), y.numel(), comm::ReduceOp::Sum);
    return y;
  }
  Shape s = y.shape();
  s[0] = tp_rows(s[0]);
  Tensor mine = Tensor::empty(s, DType::F32);
  tp_.comm->reduce_scatter(y.data<float>(), mine.data<float>(), mine.numel(), comm::ReduceOp::Sum);
  return mine;
}

void DecoderModel::tp_grad_sum(Tensor& part, Tensor& dw) const {
  if (!dw.defined()) return;  // a frozen weight (a LoRA base), on every tp rank alike
  tp_.comm->all_reduce(part.data<float>(), part.numel(), comm::ReduceOp::Sum);
  float* d = dw.data<float>();
  const float* p = part.data<float>();
  for (int64_t i = 0; i < part.numel(); ++i) d[i] += p[i];
}

void DecoderModel::tp_embedding_forward(const Tensor& ids, Tensor& x) const {
  const Tensor& E = params_.all()[0].value;  // model.embed_tokens.weight (ParamStore order)
  const int64_t T = ids.numel(), H = cfg_.hidden_size, V = cfg_.vocab_size, v0 = loc_.vocab0, n = loc_.vocab;
  const int64_t* id = ids.data<int64_t>();
  for (int64_t t = 0; t < T; ++t)
    TITAN_CHECK(id[t] >= 0 && id[t] < V, "embedding: token id ", id[t], " at position ", t, " outside the vocabulary [0, ",
                V, ")");
  const float* e = E.data<float>();
  float* y = x.data<float>();
  parallel_for(T, 64, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t r = id[t] - v0;
      if (r >= 0 && r < n) std::memcpy(y + t * H, e + r * H, size_t(H) * sizeof(float));
      else std::memset(y + t * H, 0, size_t(H) * sizeof(float));
    }
  });
}

void DecoderModel::tp_embedding_backward(const Tensor& ids, const Tensor& dx, Tensor& gemb) const {
  const int64_t T = ids.numel(), H = cfg_.hidden_size, v0 = loc_.vocab0, n = loc_.vocab;
  const int64_t* id = ids.data<int64_t>();
  const float* d = dx.data<float>();
  float* g = gemb.data<float>();
  // Columns in parallel, tokens in order: each element's sum has one fixed order.
  parallel_for(H, 16, [&](int64_t c0, int64_t c1) {
    for (int64_t t = 0; t < T; ++t) {
      const int64_t r = id[t] - v0;
      if (r < 0 || r >= n) continue;
      for (int64_t c = c0; c < c1; ++c) g[r * H + c] += d[t * H + c];
    }
  });
}

double DecoderModel::tp_cross_entropy(const Tensor& xf, const Tensor& labels, float grad_scale, Tensor* dxf,
                                      Tensor* dw) {
  const KernelSet& hk = kernels_.back();
  const Tensor& W = lm_head_weight();  // [vocab shard, H]
  const int64_t N = xf.dim(0), Vl = loc_.vocab, v0 = loc_.vocab0, n = tp_.size();
  const ce_detail::RowOps& ops = ce_detail::row_ops();
  const int64_t* lab = labels.data<int64_t>();
  // Chunks of rows whose logits of this shard fit in 64 MiB.
  const int64_t rows = ce_detail::chunk_rows(N, Vl, size_t(64) << 20);
  double loss = 0;
  for (int64_t r0 = 0; r0 < N; r0 += rows) {
    const int64_t r1 = std::min(N, r0 + rows), c = r1 - r0;
    const Tensor xc = xf.slice0(r0, r1);
    Tensor z = f32({c, Vl});
    hk.linear->forward(exec_, xc, W, z, compute_);
    float* zp = z.data<float>();
    // Each row's max over the whole vocabulary: the shards' maxima, gathered (max is exact).
    std::vector<float> mx(static_cast<size_t>(c)), all(static_cast<size_t>(c * n));
    parallel_for(c, 1, [&](int64_t a, int64_t b) {
      for (int64_t i = a; i < b; ++i) mx[size_t(i)] = ops.max(zp + i * Vl, Vl);
    });
    tp_.comm->all_gather(mx.data(), all.data(), c);
    for (int64_t i = 0; i < c; ++i)
      for (int64_t q = 0; q < n; ++q) mx[size_t(i)] = std::max(mx[size_t(i)], all[size_t(q * c + i)]);
    // Sums of exponentials and the target logit (on the rank that holds it, 0 elsewhere), summed over tp.
    std::vector<float> st(static_cast<size_t>(2 * c), 0.0f);
    parallel_for(c, 1, [&](int64_t a, int64_t b) {
      for (int64_t i = a; i < b; ++i) {
        const int64_t l = lab[r0 + i], t = l - v0;
        float* zi = zp + i * Vl;
        if (l != kIgnoreIndex && t >= 0 && t < Vl) st[size_t(c + i)] = zi[t] - mx[size_t(i)];
        st[size_t(i)] = dxf ? ops.exp_store(zi, Vl, mx[size_t(i)]) : ops.sum_exp(zi, Vl, mx[size_t(i)]);
      }
    });
    tp_.comm->all_reduce(st.data(), 2 * c, comm::ReduceOp::Sum);
    for (int64_t i = 0; i < c; ++i) {
      const int64_t l = lab[r0 + i];
      TITAN_CHECK(l == kIgnoreIndex || (l >= 0 && l < cfg_.vocab_size), "cross_entropy: label ", l, " at row ",
                  r0 + i, " outside the vocabulary [0, ", cfg_.vocab_size, ")");
      if (l != kIgnoreIndex) loss += std::log(double(st[size_t(i)])) - double(st[size_t(c + i)]);
    }
    if (!dxf) continue;
    // d(logits) = grad_scale (softmax - onehot) on counted rows, 0 on ignored ones.
    parallel_for(c, 1, [&](int64_t a, int64_t b) {
      for (int64_t i = a; i < b; ++i) {
        const int64_t l = lab[r0 + i], t = l - v0;
        float* zi = zp + i * Vl;
        if (l == kIgnoreIndex) {
          std::memset(zi, 0, size_t(Vl) * sizeof(float));
          continue;
        }
        ops.scale(zi, Vl, grad_scale / st[size_t(i)], nullptr);
        if (t >= 0 && t < Vl) zi[t] -= grad_scale;
      }
    });
    Tensor dxc = dxf->slice0(r0, r1);
    hk.linear->backward(exec_, xc, W, z, &dxc, dw, compute_);
  }
  return loss;
}

}  // namespace titan
