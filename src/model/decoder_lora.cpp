// LoRA adapters inside the decoder layer (model/lora.h has the math): each adapter adds into its
// module's rows of a fused projection output, and its backward reads d(output) there.
#include "core/rng.h"
#include "model/decoder_layer.h"
#include "ops/registry.h"

namespace titan {
namespace {

// The GEMM behind the layer's linear variant (the default one for variants without a GEMM of their name).
const GemmKernel& lora_gemm(const LinearKernel& lin) {
  const GemmKernel* g = KernelRegistry<GemmKernel>::get().find(lin.variant);
  return g ? *g : kernel<GemmKernel>(default_variant());
}

}  // namespace

void DecoderModel::enable_lora(const LoraConfig& c, uint64_t seed) {
  check_host("LoRA");
  TITAN_CHECK(lora_.empty(), "LoRA is already enabled on this model");
  c.validate("lora");
  lora_cfg_ = c;
  lora_seed_ = seed;
  lora_ = lora_select(cfg_, c);
  // Pipeline parallelism: the adapters of the layers this rank's stages hold (model/pipeline.h).
  std::erase_if(lora_, [&](const LoraAdapter& ad) { return !holds_unit(unit_of_layer(ad.layer)); });
  // Expert parallelism splits the experts over ranks; their adapters are not split with them here.
  if (ep_.on())
    for (const LoraAdapter& ad : lora_)
      TITAN_CHECK(!ad.is_parameter(), "LoRA: with expert parallelism ([parallelism] expert_parallel_degree = ",
                  ep_.size(), ") the MoE parameters (", ad.module, ", [lora] target_parameters) take no adapters "
                  "in this build; target the attention projections");
  // Tensor parallelism: each adapter split like its linear (model/lora.h); the MoE parameters'
  // adapters (a router replicated, experts split by rows and columns) are not split here.
  TITAN_CHECK(!tp_.on() || !cfg_.is_qwen3_5(),
              "LoRA: with tensor parallelism ([parallelism] tensor_parallel_degree = ", tp_.size(), ") not for ",
              cfg_.model_type, " in this build (its adapters are not split over tp ranks)");
  if (tp_.on())
    for (const LoraAdapter& ad : lora_) {
      TITAN_CHECK(!ad.is_parameter(), "LoRA: with tensor parallelism ([parallelism] tensor_parallel_degree = ",
                  tp_.size(), ") the MoE parameters (", ad.module, ", [lora] target_parameters) take no adapters "
                  "in this build; target the attention and MLP projections ([lora] target_modules)");
      TITAN_CHECK(lora_column_parallel(ad.group) || lora_row_parallel(ad.group), "LoRA: ", ad.module,
                  " is not split over tensor-parallel ranks in this build ([parallelism] tensor_parallel_degree = ",
                  tp_.size(), ")");
    }
  lora_specs_ = titan::lora_param_specs(lora_, c.rank);
  lora_layer_.assign(layers_.size(), {});
  for (size_t i = 0; i < lora_.size(); ++i) {
    LoraAdapter& ad = lora_[i];
    ad.param = lora_params_.all().size();
    // A targeted MoE parameter: one rank-r pair per expert, A [E*r, in], B [out, r*E] (model/lora.h).
    // Under tensor parallelism this rank's blocks (ParamSpec::local_shape) of the whole tensors.
    const ParamSpec& sa = lora_specs_[ad.param];
    const ParamSpec& sb = lora_specs_[ad.param + 1];
    Tensor A = Tensor::empty(sa.shape, DType::F32);
    // PEFT: kaiming_uniform_(A, a=sqrt(5)) = U(-1/sqrt(in), 1/sqrt(in)) over the whole A; B = 0.
    const double bound = 1.0 / std::sqrt(double(ad.in));
    fill_uniform(A, -bound, bound, Philox{seed, stream_id(sa.name.c_str())});
    if (tp_.on() && sa.placement.tp_dim >= 0) {
      Tensor whole = A;
      A = Tensor::empty(sa.local_shape(tp_.size()), DType::F32);
      tp_take_shard(whole, sa.placement.tp_dim, tp_.rank(), tp_.size(), A);
    }
    const Tensor B = Tensor::zeros(sb.local_shape(tp_.size()), DType::F32);
    lora_params_.add(sa.name, A, Tensor::zeros(A.shape(), DType::F32));
    lora_params_.add(sb.name, B, Tensor::zeros(B.shape(), DType::F32));
    lora_layer_[size_t(ad.layer)].push_back(i);
  }
}

void DecoderModel::freeze_base() {
  for (auto& p : params_.all()) p.grad = Tensor();
  for (Layer& L : layers_)
    for (Tensor* g : {&L.g_in, &L.g_qkv, &L.g_qn, &L.g_kn, &L.g_o, &L.g_post, &L.g_gu, &L.g_down, &L.g_router,
                      &L.g_egu, &L.g_edown, &L.g_conv, &L.g_dt, &L.g_alog, &L.g_gnorm, &L.g_sgu, &L.g_sdown,
                      &L.g_sgate})
      *g = Tensor();
  base_frozen_ = true;
}

void DecoderModel::merge_lora() {
  const GemmKernel& gk = kernel<GemmKernel>(default_variant());
  const float scale = float(lora_cfg_.scale());
  for (const LoraAdapter& ad : lora_) {
    const auto& ps = lora_params_.all();
    if (ad.is_parameter()) {
      if (!lora_params_merged_) merge_lora_parameter(ad);
      continue;
    }
    Tensor& w = params_.at(ad.module + ".weight").value;  // [out, in], a contiguous row range
    // (Under tensor parallelism this rank's block of W, of B and of A: model/lora.h.)
    const Tensor& A = ps[ad.param].value;
    const Tensor& B = ps[ad.param + 1].value;
    TITAN_CHECK(w.dtype() == DType::F32 && w.dim(0) == B.dim(0) && w.dim(1) == A.dim(1), "merging LoRA into ",
                ad.module, ": the base weight ", w.str(), " does not match the adapter");
    GemmArgs g;  // W[out, in] += scale * B[out, r] @ A[r, in]
    g.m = B.dim(0), g.n = A.dim(1), g.k = lora_cfg_.rank, g.alpha = scale, g.beta = 1.f;
    g.a = B.data<float>(), g.lda = lora_cfg_.rank;
    g.b = A.data<float>(), g.ldb = A.dim(1);
    g.c = w.data<float>(), g.ldc = A.dim(1);
    gemm(exec_, gk, g);
  }
  lora_.clear();
  lora_layer_.clear();
  lora_params_ = ParamStore();
  lora_specs_.clear();
  lora_params_merged_ = false;
}

// The same GEMM and operands as lora_merge_moe's per-pass merge: the merged weight is bit-identical.
void DecoderModel::merge_lora_parameter(const LoraAdapter& ad) {
  Layer& L = layers_[size_t(ad.layer)];
  Tensor& w = ad.group == LoraGroup::Router ? L.w_router : ad.group == LoraGroup::ExpertGateUp ? L.w_egu : L.w_edown;
  TITAN_CHECK(w.dtype() == DType::F32, "merging LoRA into ", ad.module, ": the base weight is not f32");
  const auto& ps = lora_params_.all();
  lora_merge_parameter(exec_, lora_gemm(*kernels_[size_t(ad.layer)].linear), ps[ad.param].value, ps[ad.param + 1].value,
                       ad.experts, float(lora_cfg_.scale()), w);
}

void DecoderModel::merge_lora_parameters() {
  if (lora_params_merged_) return;
  for (const LoraAdapter& ad : lora_)
    if (ad.is_parameter()) merge_lora_parameter(ad);
  lora_params_merged_ = true;
  wbf_.reset();  // held bf16 copies are of the unmerged weights
}

LoraDropout DecoderModel::lora_dropout(size_t i) const {
  LoraDropout d;
  if (lora_cfg_.dropout <= 0 || lora_seq_ <= 0) return d;
  d.p = float(lora_cfg_.dropout);
  d.rng = lora_dropout_rng(lora_seed_, lora_[i].module, lora_step_);
  d.row0 = lora_row0_, d.seq = lora_seq_;
  return d;
}

bool DecoderModel::lora_targets(size_t l, LoraGroup g) const {
  if (lora_layer_.empty()) return false;
  for (size_t i : lora_layer_[l])
    if (lora_[i].group == g) return true;
  return false;
}

void DecoderModel::lora_forward_group(size_t l, LoraGroup g, const Tensor& x, Tensor* y, LayerActs& a) {
  if (lora_layer_.empty() || lora_layer_[l].empty()) return;
  const auto& ids = lora_layer_[l];
  a.lora_t.resize(ids.size());
  const GemmKernel& gk = lora_gemm(*kernels_[l].linear);
  const float scale = float(lora_cfg_.scale());
  // Tensor parallelism on a row-parallel linear (model/lora.h): x holds this rank's columns of the
  // input, so x A_local^T is a partial sum, reduced over tp before B; the product goes to y's rows,
  // which under sequence parallelism are this rank's block of the T tokens.
  const bool split_in = tp_.on() && lora_row_parallel(g);
  for (size_t j = 0; j < ids.size(); ++j) {
    const LoraAdapter& ad = lora_[ids[j]];
    if (ad.group != g) continue;
    const auto& ps = lora_params_.all();
    const Tensor& A = ps[ad.param].value;
    const Tensor& B = ps[ad.param + 1].value;
    // Column-parallel under tp: ad.row0 is in the whole fused output; this rank's rows start at row0 / tp.
    const int64_t row0 = tp_.on() && lora_column_parallel(g) ? ad.row0 / tp_.size() : ad.row0;
    LoraDropout drop = lora_dropout(ids[j]);
    if (!split_in) {
      float* yp = y ? y->data<float>() + row0 : nullptr;
      lora_forward(exec_, gk, A, B, scale, x, a.lora_t[j], yp, y ? y->dim(1) : 0, lora_compute(), &drop);
      continue;
    }
    drop.col0 = tp_.rank() * A.dim(1), drop.cols = ad.in;
    Tensor& t = a.lora_t[j];
    lora_forward(exec_, gk, A, B, scale, x, t, nullptr, 0, lora_compute(), &drop);
    tp_.comm->all_reduce(t.data<float>(), t.numel(), comm::ReduceOp::Sum);
    if (!y) continue;
    const int64_t rows = y->dim(0), r0 = tp_.sp() ? tp_.rank() * rows : 0;
    TITAN_ASSERT(r0 + rows <= t.dim(0), "lora: output rows outside the adapter's tokens");
    lora_forward_b(exec_, gk, B, scale, t.slice0(r0, r0 + rows), y->data<float>() + row0, y->dim(1), lora_compute());
  }
}

void DecoderModel::lora_backward_group(size_t l, LoraGroup g, const Tensor& x, LayerActs& a, const Tensor& dy,
                                     Tensor& dx) {
  if (lora_layer_.empty() || lora_layer_[l].empty()) return;
  const auto& ids = lora_layer_[l];
  const GemmKernel& gk = lora_gemm(*kernels_[l].linear);
  const float scale = float(lora_cfg_.scale());
  const size_t esize = dy.dtype() == DType::BF16 ? 2 : 4;
  // Tensor parallelism (model/lora.h). Column-parallel: dy holds this rank's rows of the output, so
  // the replicated A's gradient is a partial sum (into `part`, one buffer for the group, summed over
  // tp below) and so is dx (the caller reduces it with the base's). Row-parallel: dy is whole, every
  // gradient is complete; A and x are this rank's columns.
  const bool col = tp_.on() && lora_column_parallel(g), row = tp_.on() && lora_row_parallel(g);
  std::vector<size_t> mine;
  int64_t part_n = 0;
  for (size_t j = 0; j < ids.size(); ++j)
    if (lora_[ids[j]].group == g) mine.push_back(j), part_n += lora_params_.all()[lora_[ids[j]].param].value.numel();
  if (mine.empty()) return;
  Tensor part = col ? Tensor::zeros({part_n}, DType::F32) : Tensor();
  int64_t at = 0;
  for (size_t j : mine) {
    const LoraAdapter& ad = lora_[ids[j]];
    auto& ps = lora_params_.all();
    const Tensor& A = ps[ad.param].value;
    const int64_t row0 = col ? ad.row0 / tp_.size() : ad.row0;
    const void* dyp = static_cast<const char*>(dy.raw()) + size_t(row0) * esize;
    LoraDropout drop = lora_dropout(ids[j]);
    if (row) drop.col0 = tp_.rank() * A.dim(1), drop.cols = ad.in;
    Tensor gA = ps[ad.param].grad;
    if (col) gA = part.slice0(at, at + A.numel()).view(A.shape()), at += A.numel();
    lora_backward(exec_, gk, A, ps[ad.param + 1].value, scale, x, a.lora_t.at(j), dyp, dy.dim(1), dy.dtype(), dx, gA,
                  ps[ad.param + 1].grad, lora_compute(), &drop);
  }
  if (!col) return;
  tp_.comm->all_reduce(part.data<float>(), part.numel(), comm::ReduceOp::Sum);  // dA summed over tp
  at = 0;
  for (size_t j : mine) {
    Tensor& gA = lora_params_.all()[lora_[ids[j]].param].grad;
    float* d = gA.data<float>();
    const float* p = part.data<float>() + at;
    for (int64_t k = 0; k < gA.numel(); ++k) d[k] += p[k];
    at += gA.numel();
  }
}

bool DecoderModel::lora_merge_moe(size_t l, MoEArgs& m, LoraMoeWeights& w) const {
  if (lora_layer_.empty() || lora_layer_[l].empty() || lora_params_merged_) return false;
  const Layer& L = layers_[l];
  const GemmKernel& gk = lora_gemm(*kernels_[l].linear);
  const float scale = float(lora_cfg_.scale());
  bool any = false;
  for (size_t i : lora_layer_[l]) {
    const LoraAdapter& ad = lora_[i];
    if (!ad.is_parameter()) continue;
    const int g = ad.group == LoraGroup::Router ? 0 : ad.group == LoraGroup::ExpertGateUp ? 1 : 2;
    const Tensor& base = g == 0 ? L.w_router : g == 1 ? L.w_egu : L.w_edown;
    w.w[g] = base.to(DType::F32);  // a copy (widened from a bf16 base)
    const auto& ps = lora_params_.all();
    lora_merge_parameter(exec_, gk, ps[ad.param].value, ps[ad.param + 1].value, ad.experts, scale, w.w[g]);
    any = true;
  }
  if (w.w[0].defined()) m.router = &w.w[0];
  if (w.w[1].defined()) m.gate_up = &w.w[1];
  if (w.w[2].defined()) m.down = &w.w[2];
  return any;
}

void DecoderModel::lora_moe_grads(const LoraMoeWeights& w, MoEGrads& g, LoraMoeWeights& dw) const {
  Tensor** slot[3] = {&g.drouter, &g.dgate_up, &g.ddown};
  for (int i = 0; i < 3; ++i) {
    if (!w.w[i].defined()) continue;
    dw.w[i] = Tensor::zeros(w.w[i].shape(), DType::F32);
    *slot[i] = &dw.w[i];
  }
}

void DecoderModel::lora_moe_backward(size_t l, const LoraMoeWeights& dw) {
  // An unfrozen base (titan score --dump-grads with an adapter): d(base) = d(merged weight).
  Layer& L = layers_[l];
  Tensor* base[3] = {&L.g_router, &L.g_egu, &L.g_edown};
  for (int i = 0; i < 3; ++i)
    if (dw.w[i].defined() && base[i]->defined()) {
      float* o = base[i]->data<float>();
      const float* d = dw.w[i].data<float>();
      for (int64_t k = 0; k < base[i]->numel(); ++k) o[k] += d[k];
    }
  const GemmKernel& gk = lora_gemm(*kernels_[l].linear);
  const float scale = float(lora_cfg_.scale());
  for (size_t i : lora_layer_[l]) {
    const LoraAdapter& ad = lora_[i];
    if (!ad.is_parameter()) continue;
    const int g = ad.group == LoraGroup::Router ? 0 : ad.group == LoraGroup::ExpertGateUp ? 1 : 2;
    auto& ps = lora_params_.all();
    lora_parameter_backward(exec_, gk, ps[ad.param].value, ps[ad.param + 1].value, ad.experts, scale, dw.w[g],
                            ps[ad.param].grad, ps[ad.param + 1].grad);
  }
}

}  // namespace titan
