// The decoder's tensor-parallel pieces (model/tensor_parallel.h): the collectives that enter and
// leave the column/row-parallel regions, the reduction of replicated weights' partial gradients,
// the vocabulary-parallel embedding and the cross-entropy over vocabulary shards.
#include <cmath>
#include <cstring>
#include <vector>

#include "model/decoder_layer.h"
#include "ops/cross_entropy/cpu_impl.h"
#include "ops/cross_entropy/vocab_shard.h"
#include "ops/embedding/vocab_shard.h"

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
  kernels_.back().residual->accumulate(exec_, dw, part);  // dw += part
}

void DecoderModel::tp_embedding_forward(const Tensor& ids, Tensor& x) const {
  const Tensor& E = params_.all()[0].value;  // model.embed_tokens.weight (ParamStore order)
  embedding_shard_forward(exec_, ids, E, loc_.vocab0, cfg_.vocab_size, x);
}

void DecoderModel::tp_embedding_backward(const Tensor& ids, const Tensor& dx, Tensor& gemb) const {
  embedding_shard_backward(exec_, ids, dx, loc_.vocab0, gemb);
}

double DecoderModel::tp_cross_entropy(const Tensor& xf, const Tensor& labels, float grad_scale, Tensor* dxf,
                                      Tensor* dw) {
  const KernelSet& hk = kernels_.back();
  const Tensor& W = lm_head_weight();  // [vocab shard, H]
  const int64_t N = xf.dim(0), Vl = loc_.vocab, v0 = loc_.vocab0, n = tp_.size();
  const int64_t* lab = labels.data<int64_t>();
  // Chunks of rows whose logits of this shard fit in 64 MiB.
  const int64_t rows = ce_detail::chunk_rows(N, Vl, size_t(64) << 20);
  double loss = 0;
  for (int64_t r0 = 0; r0 < N; r0 += rows) {
    const int64_t r1 = std::min(N, r0 + rows), c = r1 - r0;
    const Tensor xc = xf.slice0(r0, r1);
    Tensor z = f32({c, Vl});
    hk.linear->forward(exec_, xc, W, z, compute_);
    const Tensor lc = labels.view({labels.numel()}).slice0(r0, r1);
    // Each row's max over the whole vocabulary: the shards' maxima, gathered (max is exact).
    std::vector<float> mx(static_cast<size_t>(c)), all(static_cast<size_t>(c * n));
    ce_shard_row_max(exec_, z, mx.data());
    tp_.comm->all_gather(mx.data(), all.data(), c);
    for (int64_t i = 0; i < c; ++i)
      for (int64_t q = 0; q < n; ++q) mx[size_t(i)] = std::max(mx[size_t(i)], all[size_t(q * c + i)]);
    // Sums of exponentials and the target logit (on the rank that holds it, 0 elsewhere), summed over tp.
    std::vector<float> st(static_cast<size_t>(2 * c), 0.0f);
    ce_shard_exp_sums(exec_, z, lc, v0, mx.data(), dxf != nullptr, st.data(), st.data() + c);
    tp_.comm->all_reduce(st.data(), 2 * c, comm::ReduceOp::Sum);
    for (int64_t i = 0; i < c; ++i) {
      const int64_t l = lab[r0 + i];
      TITAN_CHECK(l == kIgnoreIndex || (l >= 0 && l < cfg_.vocab_size), "cross_entropy: label ", l, " at row ",
                  r0 + i, " outside the vocabulary [0, ", cfg_.vocab_size, ")");
      if (l != kIgnoreIndex) loss += std::log(double(st[size_t(i)])) - double(st[size_t(c + i)]);
    }
    if (!dxf) continue;
    // d(logits) = grad_scale (softmax - onehot) on counted rows, 0 on ignored ones.
    ce_shard_dlogits(exec_, z, lc, v0, st.data(), grad_scale);
    Tensor dxc = dxf->slice0(r0, r1);
    hk.linear->backward(exec_, xc, W, z, &dxc, dw, compute_);
  }
  return loss;
}

}  // namespace titan
