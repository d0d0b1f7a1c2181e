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
  TITAN_CHECK(lora_.empty(), "LoRA is already enabled on this model");
  TITAN_CHECK(!tp_.on(), "LoRA: not with tensor parallelism in this build ([parallelism] tensor_parallel_degree = 1)");
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
  lora_layer_.assign(layers_.size(), {});
  for (size_t i = 0; i < lora_.size(); ++i) {
    LoraAdapter& ad = lora_[i];
    ad.param = lora_params_.all().size();
    // A targeted MoE parameter: one rank-r pair per expert, A [E*r, in], B [out, r*E] (model/lora.h).
    const int64_t R = c.rank * ad.experts;
    Tensor A = Tensor::zeros({R, ad.in}, DType::F32), B = Tensor::zeros({ad.out, R}, DType::F32);
    // PEFT: kaiming_uniform_(A, a=sqrt(5)) = U(-1/sqrt(in), 1/sqrt(in)); B = 0.
    const double bound = 1.0 / std::sqrt(double(ad.in));
    fill_uniform(A, -bound, bound, Philox{seed, stream_id(lora_a_name(ad.module).c_str())});
    lora_params_.add(lora_a_name(ad.module), A, Tensor::zeros(A.shape(), DType::F32));
    lora_params_.add(lora_b_name(ad.module), B, Tensor::zeros(B.shape(), DType::F32));
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
    GemmArgs g;  // W[out, in] += scale * B[out, r] @ A[r, in]
    g.m = ad.out, g.n = ad.in, g.k = lora_cfg_.rank, g.alpha = scale, g.beta = 1.f;
    g.a = ps[ad.param + 1].value.data<float>(), g.lda = lora_cfg_.rank;
    g.b = ps[ad.param].value.data<float>(), g.ldb = ad.in;
    g.c = w.data<float>(), g.ldc = ad.in;
    gemm(gk, g);
  }
  lora_.clear();
  lora_layer_.clear();
  lora_params_ = ParamStore();
  lora_params_merged_ = false;
}

// The same GEMM and operands as lora_merge_moe's per-pass merge: the merged weight is bit-identical.
void DecoderModel::merge_lora_parameter(const LoraAdapter& ad) {
  Layer& L = layers_[size_t(ad.layer)];
  Tensor& w = ad.group == LoraGroup::Router ? L.w_router : ad.group == LoraGroup::ExpertGateUp ? L.w_egu : L.w_edown;
  TITAN_CHECK(w.dtype() == DType::F32, "merging LoRA into ", ad.module, ": the base weight is not f32");
  const auto& ps = lora_params_.all();
  lora_merge_parameter(lora_gemm(*kernels_[size_t(ad.layer)].linear), ps[ad.param].value, ps[ad.param + 1].value,
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
  for (size_t j = 0; j < ids.size(); ++j) {
    const LoraAdapter& ad = lora_[ids[j]];
    if (ad.group != g) continue;
    const auto& ps = lora_params_.all();
    float* yp = y ? y->data<float>() + ad.row0 : nullptr;
    const LoraDropout drop = lora_dropout(ids[j]);
    lora_forward(gk, ps[ad.param].value, ps[ad.param + 1].value, scale, x, a.lora_t[j], yp, y ? y->dim(1) : 0,
                 compute_, &drop);
  }
}

void DecoderModel::lora_backward_group(size_t l, LoraGroup g, const Tensor& x, LayerActs& a, const Tensor& dy,
                                     Tensor& dx) {
  if (lora_layer_.empty() || lora_layer_[l].empty()) return;
  const auto& ids = lora_layer_[l];
  const GemmKernel& gk = lora_gemm(*kernels_[l].linear);
  const float scale = float(lora_cfg_.scale());
  const size_t esize = dy.dtype() == DType::BF16 ? 2 : 4;
  for (size_t j = 0; j < ids.size(); ++j) {
    const LoraAdapter& ad = lora_[ids[j]];
    if (ad.group != g) continue;
    auto& ps = lora_params_.all();
    const void* dyp = static_cast<const char*>(dy.raw()) + size_t(ad.row0) * esize;
    const LoraDropout drop = lora_dropout(ids[j]);
    lora_backward(gk, ps[ad.param].value, ps[ad.param + 1].value, scale, x, a.lora_t.at(j), dyp, dy.dim(1),
                  dy.dtype(), dx, ps[ad.param].grad, ps[ad.param + 1].grad, compute_, &drop);
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
    lora_merge_parameter(gk, ps[ad.param].value, ps[ad.param + 1].value, ad.experts, scale, w.w[g]);
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
    lora_parameter_backward(gk, ps[ad.param].value, ps[ad.param + 1].value, ad.experts, scale, dw.w[g],
                            ps[ad.param].grad, ps[ad.param + 1].grad);
  }
}

}  // namespace titan
