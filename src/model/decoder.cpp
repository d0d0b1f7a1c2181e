#include "model/decoder.h"

#include <cmath>
#include <cstring>

#include "core/rng.h"
#include "model/inference_state.h"
#include "model/positions.h"
#include "model/decoder_layer.h"
#include "ops/matmul/bf16_convert.h"

namespace titan {

void DecoderModel::round_weights_for_compute() {
  if (hold_wbf_ && wbf_) return;
  wbf_.reset();
  // On the GPU the linear and cross-entropy kernels round f32 weights to bf16 on the device (the
  // same RNE values as this host copy), so no bf16 copy is kept there.
  if (compute_ != DType::BF16 || on_gpu()) return;
  wbf_ = std::make_unique<Bf16Weights>();
  const size_t n = layers_.size();
  wbf_->qkv.resize(n), wbf_->o.resize(n), wbf_->gu.resize(n), wbf_->down.resize(n);
  if (hooks_) return;  // rounded layer by layer as the hooks bring the values (need())
  for (size_t l = 0; l < n; ++l) round_layer(l);
}

void DecoderModel::round_layer(size_t l) {
  if (!wbf_ || wbf_->qkv[l].defined()) return;
  const Layer& L = layers_[l];
  wbf_->qkv[l] = to_bf16(L.w_qkv);
  wbf_->o[l] = to_bf16(L.w_o);
  // Sparse layers: the stacked experts are rounded here too (the MoE op takes bf16 expert
  // weights as they are); the router stays f32 inside the op.
  wbf_->gu[l] = to_bf16(L.moe() ? L.w_egu : L.w_gu);
  wbf_->down[l] = to_bf16(L.moe() ? L.w_edown : L.w_down);
}

void DecoderModel::apply(const UnitStep& s) {
  const int64_t l = s.unit - 1;
  const bool layer = l >= 0 && l < int64_t(layers_.size());
  switch (s.kind) {
    case UnitStep::Kind::Need:
      if (hooks_) hooks_->need(s.unit, s.use);
      if (layer && uses(s.use, UnitUse::Values)) round_layer(size_t(l));
      break;
    case UnitStep::Kind::Prefetch:
      if (hooks_) hooks_->prefetch(s.unit);
      break;
    case UnitStep::Kind::Done:
      if (!hooks_) break;
      if (layer && wbf_ && uses(s.use, UnitUse::Values))
        wbf_->qkv[size_t(l)] = wbf_->o[size_t(l)] = wbf_->gu[size_t(l)] = wbf_->down[size_t(l)] = Tensor();
      hooks_->done(s.unit, s.use);
      break;
    case UnitStep::Kind::Run:
      break;
  }
}

InitScheme parse_init_scheme(const std::string& s) {
  if (s == "torchtitan") return InitScheme::Torchtitan;
  if (s == "hf") return InitScheme::HF;
  fail("unknown init scheme '", s, "' (expected torchtitan or hf)");
}

DecoderModel::DecoderModel(const ModelConfig& cfg, const std::string& kernel_variant, bool deferred, bool frozen,
                           DType weight_dtype, const TensorParallel& tp, const ExpertParallel& ep,
                           const PipelineStages& pp, Device device)
    : cfg_(cfg), tp_(tp), ep_(ep), pp_(pp), deferred_(deferred), base_frozen_(frozen) {
  cfg_.validate(cfg.flavor.empty() ? "model config" : "flavor " + cfg.flavor);
  exec_.device = device;
  if (on_gpu()) {  // the device-aware path (docs/cuda.md "The model on the GPU")
    TITAN_CHECK(device.type == DeviceType::CUDA && device.index == 0, "model: device ", device.str(),
                " is not supported (cpu or cuda:0)");
    const std::string why = " (the model on the GPU runs the Qwen3 and Qwen3-MoE paths only; docs/cuda.md)";
    TITAN_CHECK(!cfg_.is_qwen3_5(), "model on ", device.str(), ": Qwen3.5 layers are not device-aware yet", why);
    TITAN_CHECK(!tp.on() && !ep.on() && !pp.on(), "model on ", device.str(), ": no tensor, expert or pipeline",
                " parallelism", why);
    TITAN_CHECK(!deferred && !frozen && weight_dtype == DType::F32, "model on ", device.str(),
                ": f32 weights, trainable, not deferred (no FSDP, LoRA or bf16 weights)", why);
  }
  // This rank's widths: whole KV groups (and the query heads that read them), a slice of the
  // MLP and of the vocabulary.
  const int64_t n = tp_.size(), r = tp_.rank();
  if (tp_.on()) {
    const std::string why = " does not divide by [parallelism] tensor_parallel_degree = " + std::to_string(n);
    TITAN_CHECK(cfg_.num_key_value_heads % n == 0, "tensor parallelism: num_key_value_heads = ",
                cfg_.num_key_value_heads, why, " (each rank holds whole KV groups)");
    TITAN_CHECK(cfg_.intermediate_size % n == 0, "tensor parallelism: intermediate_size = ", cfg_.intermediate_size, why);
    TITAN_CHECK(cfg_.vocab_size % n == 0, "tensor parallelism: vocab_size = ", cfg_.vocab_size, why);
    if (cfg_.num_sparse_layers() > 0)
      TITAN_CHECK(cfg_.moe_intermediate_size % n == 0, "tensor parallelism: moe_intermediate_size = ",
                  cfg_.moe_intermediate_size, why);
    if (cfg_.is_qwen3_5()) {  // Gated DeltaNet: whole linear key heads and the value heads that read them
      if (cfg_.has_shared_expert())
        TITAN_CHECK(cfg_.shared_expert_intermediate_size % n == 0,
                    "tensor parallelism: shared_expert_intermediate_size = ", cfg_.shared_expert_intermediate_size,
                    why);
      TITAN_CHECK(cfg_.linear_num_key_heads % n == 0,
                  "tensor parallelism: linear_num_key_heads = ", cfg_.linear_num_key_heads, why,
                  " (each rank holds whole linear key heads and their value heads)");
      TITAN_CHECK(cfg_.linear_num_value_heads % n == 0,
                  "tensor parallelism: linear_num_value_heads = ", cfg_.linear_num_value_heads, why);
    }
    TITAN_CHECK(weight_dtype == DType::F32 || frozen, "tensor parallelism: bf16 weights only for a frozen (LoRA) base");
  }
  if (ep_.on()) {  // model/expert_parallel.h
    const std::string why = " ([parallelism] expert_parallel_degree = " + std::to_string(ep_.size()) + ")";
    TITAN_CHECK(cfg_.num_sparse_layers() > 0, "expert parallelism: the model has no MoE layers", why);
    TITAN_CHECK(cfg_.num_experts % ep_.size() == 0, "expert parallelism: num_experts = ", cfg_.num_experts,
                " does not divide by the expert-parallel degree", why);
    TITAN_CHECK(!tp_.on(), "expert parallelism: not together with tensor parallelism in this build", why);
    TITAN_CHECK(weight_dtype == DType::F32 || frozen,
                "expert parallelism: bf16 weights only for a frozen (LoRA) base", why);
  }
  if (pp_.on()) {  // model/pipeline.h
    const std::string why = " ([parallelism] pipeline_parallel_degree)";
    TITAN_CHECK(int64_t(pp_.layer_begin.size()) == pp_.num_stages + 1 &&
                    pp_.layer_begin.back() == cfg_.num_hidden_layers,
                "pipeline parallelism: the stages do not cover the model's ", cfg_.num_hidden_layers, " layers");
    TITAN_CHECK(weight_dtype == DType::F32 || frozen,
                "pipeline parallelism: bf16 weights only for a frozen (LoRA) base", why);
    TITAN_CHECK(!aux_loss_on(), "pipeline parallelism: the router auxiliary loss (output_router_logits) spans every "
                "stage's layers and is not computed across stages in this build; use [model] load_balance_coeff", why);
  }
  loc_.experts = cfg_.num_experts / ep_.size(), loc_.expert0 = ep_.rank() * loc_.experts;
  loc_.heads = cfg_.num_attention_heads / n, loc_.kv_heads = cfg_.num_key_value_heads / n;
  loc_.q = loc_.heads * cfg_.head_dim, loc_.kv = loc_.kv_heads * cfg_.head_dim;
  loc_.inter = cfg_.intermediate_size / n, loc_.moe_inter = cfg_.moe_intermediate_size / n;
  loc_.vocab = cfg_.vocab_size / n, loc_.vocab0 = r * loc_.vocab;
  loc_.lin_k_heads = cfg_.linear_num_key_heads / n, loc_.lin_v_heads = cfg_.linear_num_value_heads / n;
  TITAN_CHECK(weight_dtype == DType::F32 || (weight_dtype == DType::BF16 && frozen),
              "model: weights can be stored in f32, or in bf16 for a frozen (inference) model; got ",
              dtype_name(weight_dtype), frozen ? "" : " on a trainable model");
  weight_dtype_ = weight_dtype;
  if (weight_dtype == DType::BF16) compute_ = DType::BF16;
  kernels_.assign(size_t(cfg_.num_hidden_layers + 1), kernel_set(kernel_variant, exec_.device.type));
  build_params();
  // The cache covers max_position_embeddings lazily: sequences longer than what is built here
  // rebuild it in forward (kept modest so small models do not pay for 40k-position tables).
  rope_ = rope_cache(std::min<int64_t>(cfg_.max_position_embeddings, 4096));
}

RopeCache DecoderModel::rope_cache(int64_t max_pos) const {
  RopeLlama3 s;
  if (cfg_.rope_scaling.rope_type == "llama3") {
    const auto& r = cfg_.rope_scaling;
    s.factor = r.factor, s.low_freq_factor = r.low_freq_factor, s.high_freq_factor = r.high_freq_factor;
    s.original_max_position_embeddings = r.original_max_position_embeddings;
  }
  RopeCache c = make_rope_cache(cfg_.rope_theta, cfg_.is_qwen3_5() ? cfg_.rotary_dim() : cfg_.head_dim, max_pos, s);
  if (on_gpu()) c.cos = c.cos.to(dev()), c.sin = c.sin.to(dev());  // built on the host, kept where the kernels run
  return c;
}

void DecoderModel::check_host(const char* what) const {
  TITAN_CHECK(!on_gpu(), "model on ", exec_.device.str(), ": ", what, " is not device-aware yet (docs/cuda.md)");
}

DecoderModel::~DecoderModel() = default;

void DecoderModel::build_params() {
  // Local widths (the whole model's without tensor parallelism).
  const int64_t H = cfg_.hidden_size, V = loc_.vocab, I = loc_.inter, D = cfg_.head_dim;
  const int64_t Q = loc_.q, K = loc_.kv;
  // dt: the value's dtype (the matmul weights: weight_dtype_); gradients are f32.
  auto pair = [&](const Shape& s, DType dt = DType::F32) {
    if (deferred_)
      return std::make_pair(Tensor::deferred(s, dt), base_frozen_ ? Tensor() : Tensor::deferred(s, DType::F32));
    return std::make_pair(Tensor::zeros(s, dt, dev()), base_frozen_ ? Tensor() : Tensor::zeros(s, DType::F32, dev()));
  };
  const DType wdt = weight_dtype_;
  // A frozen base has no gradients: slicing an undefined gradient gives an undefined one.
  auto rows = [](const Tensor& t, int64_t b, int64_t e) { return t.defined() ? t.slice0(b, e) : Tensor(); };
  if (holds_unit(0)) {
    auto [emb, gemb] = pair({V, H});
    params_.add("model.embed_tokens.weight", emb, gemb);
  }
  layers_.resize(size_t(cfg_.num_hidden_layers));
  for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l) {
    Layer& L = layers_[size_t(l)];
    L.kind = cfg_.layer_kind(l);
    kinds_.push_back(L.kind);
    if (!holds_unit(unit_of_layer(l))) continue;  // another pipeline stage's layer
    if (cfg_.is_qwen3_5()) {  // model/layers/qwen3_5_layer.cpp
      build_qwen3_5_layer(size_t(l));
      continue;
    }
    // The kinds this decoder builds today; a new kind is its own file in model/layers/.
    TITAN_CHECK(L.kind.mixer == MixerKind::Attention, describe_layer(l, L.kind), ": the ",
                mixer_kind_name(L.kind.mixer), " mixer is not built into this decoder yet");
    std::string p = "model.layers." + std::to_string(l) + ".";
    std::tie(L.w_in, L.g_in) = pair({H});
    std::tie(L.w_qkv, L.g_qkv) = pair({Q + 2 * K, H}, wdt);
    std::tie(L.w_o, L.g_o) = pair({H, Q}, wdt);
    std::tie(L.w_post, L.g_post) = pair({H});
    params_.add(p + "input_layernorm.weight", L.w_in, L.g_in);
    // Qwen2: each projection's bias right after its weight (HF's order), all three in one buffer.
    const bool bias = cfg_.has_qkv_bias();
    if (bias) std::tie(L.b_qkv, L.gb_qkv) = pair({Q + 2 * K});
    const int64_t cuts[4] = {0, Q, Q + K, Q + 2 * K};
    const char* proj[3] = {"q_proj", "k_proj", "v_proj"};
    for (int j = 0; j < 3; ++j) {
      const std::string n = p + "self_attn." + proj[j];
      params_.add(n + ".weight", L.w_qkv.slice0(cuts[j], cuts[j + 1]), rows(L.g_qkv, cuts[j], cuts[j + 1]));
      if (bias) params_.add(n + ".bias", L.b_qkv.slice0(cuts[j], cuts[j + 1]), rows(L.gb_qkv, cuts[j], cuts[j + 1]));
    }
    params_.add(p + "self_attn.o_proj.weight", L.w_o, L.g_o);
    if (cfg_.has_qk_norm()) {
      std::tie(L.w_qn, L.g_qn) = pair({D});
      std::tie(L.w_kn, L.g_kn) = pair({D});
      params_.add(p + "self_attn.q_norm.weight", L.w_qn, L.g_qn);
      params_.add(p + "self_attn.k_norm.weight", L.w_kn, L.g_kn);
    }
    params_.add(p + "post_attention_layernorm.weight", L.w_post, L.g_post);
    if (L.moe()) {
      // This rank's share of each expert (tensor parallel), of the experts (expert parallel).
      const int64_t E = cfg_.num_experts, MI = loc_.moe_inter, El = loc_.experts;
      std::tie(L.w_router, L.g_router) = pair({E, H});
      std::tie(L.w_egu, L.g_egu) = pair({El, 2 * MI, H}, wdt);
      std::tie(L.w_edown, L.g_edown) = pair({El, H, MI}, wdt);
      params_.add(p + "mlp.gate.weight", L.w_router, L.g_router);
      for (int64_t e = 0; e < El; ++e) {
        const std::string x = p + "mlp.experts." + std::to_string(loc_.expert0 + e) + ".";
        Tensor wgu = L.w_egu.slice0(e, e + 1).view({2 * MI, H});
        Tensor ggu = L.g_egu.defined() ? L.g_egu.slice0(e, e + 1).view({2 * MI, H}) : Tensor();
        params_.add(x + "gate_proj.weight", wgu.slice0(0, MI), rows(ggu, 0, MI));
        params_.add(x + "up_proj.weight", wgu.slice0(MI, 2 * MI), rows(ggu, MI, 2 * MI));
        params_.add(x + "down_proj.weight", L.w_edown.slice0(e, e + 1).view({H, MI}),
                    L.g_edown.defined() ? L.g_edown.slice0(e, e + 1).view({H, MI}) : Tensor());
      }
      continue;
    }
    std::tie(L.w_gu, L.g_gu) = pair({2 * I, H}, wdt);
    std::tie(L.w_down, L.g_down) = pair({H, I}, wdt);
    params_.add(p + "mlp.gate_proj.weight", L.w_gu.slice0(0, I), rows(L.g_gu, 0, I));
    params_.add(p + "mlp.up_proj.weight", L.w_gu.slice0(I, 2 * I), rows(L.g_gu, I, 2 * I));
    params_.add(p + "mlp.down_proj.weight", L.w_down, L.g_down);
  }
  const bool head = holds_unit(cfg_.num_hidden_layers + 1);
  if (head) {
    auto [nw, gnw] = pair({H});
    params_.add("model.norm.weight", nw, gnw);
  }
  if (head && !cfg_.tie_word_embeddings) {
    auto [lm, glm] = pair({V, H}, wdt);
    params_.add("lm_head.weight", lm, glm);
  }
  // Names and shapes must be exactly HF's, in HF's order.
  // Names, shapes and dtypes must be exactly the specs' (HF's, in HF's order): from here on the
  // specs say what each parameter is (unit, init, placement).
  specs_ = local_param_specs(cfg_, ep_.size(), ep_.rank());
  if (pp_.on())
    std::erase_if(specs_, [&](const ParamSpec& s) { return !holds_unit(s.unit); });
  const auto& specs = specs_;
  TITAN_ASSERT(specs.size() == params_.all().size(), "param spec count");
  for (size_t i = 0; i < specs.size(); ++i)
    TITAN_ASSERT(specs[i].name == params_.all()[i].name &&
                     specs[i].local_shape(tp_.size()) == params_.all()[i].value.shape() &&
                     specs[i].dtype(weight_dtype_) == params_.all()[i].value.dtype(),
                 "param spec mismatch at ", specs[i].name);
  // Unit boundaries: the first parameter of each unit (ParamSpec::unit), then the end.
  unit_begin_.assign(size_t(cfg_.num_hidden_layers) + 3, params_.all().size());
  for (size_t i = params_.all().size(); i-- > 0;) {
    const int64_t u = specs[i].unit;
    TITAN_ASSERT(i == 0 || specs[i - 1].unit <= u, "parameter units are not contiguous");
    unit_begin_[size_t(u)] = i;
  }
  // A unit another pipeline stage holds is empty: it starts where the next one does.
  for (int64_t u = cfg_.num_hidden_layers + 1; u >= 0; --u)
    if (!holds_unit(u)) unit_begin_[size_t(u)] = unit_begin_[size_t(u) + 1];
}

Tensor* DecoderModel::expert_gate_up(int64_t layer) {
  Layer& L = layers_.at(size_t(layer));
  return L.moe() ? &L.w_egu : nullptr;
}
Tensor* DecoderModel::expert_down(int64_t layer) {
  Layer& L = layers_.at(size_t(layer));
  return L.moe() ? &L.w_edown : nullptr;
}

// The bias lives where the routing kernel reads it (on the GPU for a model on cuda:0); the token
// counts stay on the host on every device: the moe op hands its per-expert counts to the host
// anyway (its expert GEMMs are launched from there), and the trainer sums them over the ranks there.
void DecoderModel::enable_expert_bias() {
  bias_.assign(layers_.size(), Tensor());
  counts_.assign(layers_.size(), Tensor());
  for (size_t l = 0; l < layers_.size(); ++l) {
    if (!layers_[l].moe()) continue;
    bias_[l] = Tensor::zeros({cfg_.num_experts}, DType::F32, dev());
    counts_[l] = Tensor::zeros({cfg_.num_experts}, DType::F32);
  }
}

void DecoderModel::update_expert_bias(float coeff) {
  for (size_t l = 0; l < bias_.size(); ++l) {
    if (!bias_[l].defined()) continue;
    if (on_gpu()) {  // E floats: the update (host code) on a host copy, copied back
      Tensor b = bias_[l].to(cpu());
      moe_update_expert_bias(b, counts_[l], coeff);
      bias_[l].copy_(b);
    } else {
      moe_update_expert_bias(bias_[l], counts_[l], coeff);
    }
    counts_[l].zero_();
  }
}

std::vector<NamedTensor> DecoderModel::expert_bias_state() {
  std::vector<NamedTensor> v;
  for (size_t l = 0; l < bias_.size(); ++l)
    if (bias_[l].defined()) v.push_back({"model.layers." + std::to_string(l) + ".mlp.expert_bias", bias_[l]});
  for (size_t l = 0; l < counts_.size(); ++l)
    if (counts_[l].defined()) v.push_back({"model.layers." + std::to_string(l) + ".mlp.tokens_per_expert", counts_[l]});
  return v;
}

bool DecoderModel::aux_loss_on() const { return cfg_.output_router_logits && cfg_.num_sparse_layers() > 0; }

const Tensor& DecoderModel::lm_head_weight() {
  return params_.at(cfg_.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight").value;
}
Tensor& DecoderModel::lm_head_grad() {
  return params_.at(cfg_.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight").grad;
}

void DecoderModel::init_weights(InitScheme scheme, uint64_t seed, int64_t unit) {
  auto rng = [&](const std::string& name) { return Philox{seed, stream_id(name.c_str())}; };
  const auto [first, last] = unit >= 0 ? unit_params(unit) : std::make_pair(size_t(0), params_.all().size());
  // torchtitan's output layer: trunc_normal(std = dim^-0.5, cutoff 3 std), drawn from the
  // lm_head's stream (also for a tied embedding: torchtitan's init writes it last, so it wins).
  const double out_std = 1.0 / std::sqrt(double(cfg_.hidden_size));
  // The f32 values of parameter i (a bf16 weight gets them rounded once, as an f32 init converted).
  auto init = [&](Tensor& w, const ParamSpec& s) {
    if (s.init == InitKind::Ones) return w.fill_(1.0f);
    if (s.init == InitKind::Zeros) return w.fill_(0.0f);  // linear biases (qwen2), as HF and torchtitan
    if (s.init == InitKind::LogDecay) {  // transformers: A_log = log(uniform(0.01, 16)), either scheme
      fill_uniform(w, 0.01, 16.0, rng(s.name));
      float* p = w.data<float>();
      for (int64_t j = 0; j < w.numel(); ++j) p[j] = std::log(p[j]);
      return;
    }
    if (scheme == InitScheme::HF)  // PreTrainedModel._init_weights: normal(0, initializer_range)
      return fill_normal(w, 0.0, 0.02, rng(s.name));
    // torchtitan (Qwen3 / Llama family): embeddings N(0, 1); input-side projections (q/k/v, gate,
    // the router) trunc_normal(0.02); output-side ones (o, up, down) trunc_normal with the
    // depth-scaled std 0.02 / sqrt(2 * (layer + 1)); torch's trunc_normal_ default bounds are
    // [-2, 2] absolute.
    switch (s.init) {
      case InitKind::Output:
        return fill_trunc_normal(w, 0.0, out_std, -3 * out_std, 3 * out_std, rng("lm_head.weight"));
      case InitKind::Embedding: return fill_normal(w, 0.0, 1.0, rng(s.name));
      case InitKind::LogDecay: return;  // below
      case InitKind::OutputSide:
        return fill_trunc_normal(w, 0.0, 0.02 / std::sqrt(2.0 * double(s.layer + 1)), -2.0, 2.0, rng(s.name));
      default: return fill_trunc_normal(w, 0.0, 0.02, -2.0, 2.0, rng(s.name));
    }
  };
  for (size_t i = first; i < last; ++i) {
    Param& p = params_.all()[i];
    if (tp_.on() && specs_[i].placement.tp_dim >= 0) {  // this rank's block of the whole tensor's init
      Tensor w = Tensor::empty(specs_[i].shape, DType::F32);
      init(w, specs_[i]);
      if (p.value.dtype() == DType::F32) {
        tp_take_shard(w, specs_[i].placement.tp_dim, tp_.rank(), tp_.size(), p.value, specs_[i].placement.tp_segments);
      } else {  // a bf16 base: the f32 block, rounded once (RNE) as a whole tensor's init is
        Tensor b = Tensor::empty(p.value.shape(), DType::F32);
        tp_take_shard(w, specs_[i].placement.tp_dim, tp_.rank(), tp_.size(), b, specs_[i].placement.tp_segments);
        p.value.copy_(b);
      }
    } else if (p.value.dtype() == DType::F32 && !on_gpu()) {
      init(p.value, specs_[i]);
    } else {  // bf16 or on the GPU: drawn in f32 on the host, then converted / copied over
      Tensor w = Tensor::empty(p.value.shape(), DType::F32);
      init(w, specs_[i]);
      p.value.copy_(w);  // RNE
    }
  }
}

using layer_util::f32;
using layer_util::grad_or_null;

namespace {

// The router auxiliary loss over the sparse layers' logits (moe_aux_loss, host code). On the GPU
// the logits ([T, E] per sparse layer, E columns against the activations' H) are copied to the
// host, and the gradient (scale * d(aux)/d(logits), when dlogits is given) copied back.
double router_aux_loss(const std::vector<const Tensor*>& logits, int64_t top_k, std::vector<Tensor*>* dlogits = nullptr,
                       float scale = 1.f) {
  std::vector<Tensor> hl(logits.size()), hd(dlogits ? dlogits->size() : 0);  // host copies (sized: no reallocation)
  std::vector<const Tensor*> lp;
  for (size_t i = 0; i < logits.size(); ++i) {
    const Tensor* t = logits[i];
    if (t->device().type != DeviceType::CPU) hl[i] = t->to(cpu()), t = &hl[i];
    lp.push_back(t);
  }
  if (!dlogits) return moe_aux_loss(lp, top_k);
  std::vector<Tensor*> dp;
  for (size_t i = 0; i < dlogits->size(); ++i) {
    Tensor* d = (*dlogits)[i];
    if (d->device().type != DeviceType::CPU) hd[i] = Tensor::empty(d->shape(), DType::F32), d = &hd[i];
    dp.push_back(d);
  }
  const double loss = moe_aux_loss(lp, top_k, &dp, scale);
  for (size_t i = 0; i < hd.size(); ++i)
    if (hd[i].defined()) (*dlogits)[i]->copy_(hd[i]);
  return loss;
}

void check_batch(const Tensor& ids, const Tensor& labels, int64_t max_pos) {
  TITAN_CHECK(ids.ndim() == 2 && ids.dtype() == DType::I64, "token ids must be i64 [batch, seq], got ", ids.str());
  TITAN_CHECK(labels.shape() == ids.shape() && labels.dtype() == DType::I64, "labels must be i64 ", shape_str(ids.shape()),
              ", got ", labels.str());
  TITAN_CHECK(ids.dim(1) <= max_pos, "sequence length ", ids.dim(1), " exceeds max_position_embeddings ", max_pos);
}

// The rows of labels [T] that count (label != -100), when they are at most half of them: the
// lm_head and cross-entropy then run on those rows alone, exactly (an ignored row has no loss and
// no gradient), which on chat data with the loss on the assistant's tokens only is most of the
// head's work. Empty: run on every row.
std::vector<int64_t> sparse_label_rows(const Tensor& labels) {
  const int64_t T = labels.numel();
  const int64_t* l = labels.data<int64_t>();
  std::vector<int64_t> rows;
  for (int64_t i = 0; i < T; ++i)
    if (l[i] != kIgnoreIndex) rows.push_back(i);
  if (rows.empty() || int64_t(rows.size()) * 2 > T) rows.clear();
  return rows;
}

}  // namespace

int64_t DecoderModel::head_rows(const Tensor& labels) {
  const size_t n = sparse_label_rows(labels).size();
  return n > 0 ? int64_t(n) : labels.numel();
}

namespace {

// x[rows] -> [rows.size(), H] (gather), and back (scatter into a zeroed [T, H]).
Tensor gather_rows(const Tensor& x, const std::vector<int64_t>& rows) {
  const int64_t H = x.dim(1);
  Tensor out = f32({int64_t(rows.size()), H});
  for (size_t i = 0; i < rows.size(); ++i) std::memcpy(out.data<float>() + i * H, x.data<float>() + rows[i] * H, H * 4);
  return out;
}
void scatter_rows(const Tensor& src, const std::vector<int64_t>& rows, Tensor& dst) {
  const int64_t H = dst.dim(1);
  dst.zero_();
  for (size_t i = 0; i < rows.size(); ++i)
    std::memcpy(dst.data<float>() + rows[i] * H, src.data<float>() + i * H, H * 4);
}
Tensor gather_labels(const Tensor& labels, const std::vector<int64_t>& rows) {
  Tensor out = Tensor::empty({int64_t(rows.size())}, DType::I64);
  for (size_t i = 0; i < rows.size(); ++i) out.data<int64_t>()[i] = labels.data<int64_t>()[rows[i]];
  return out;
}

}  // namespace

DecoderModel::Hidden DecoderModel::forward_layers(const Tensor& ids, Positions pos, ActivationStore* store, Steps& steps,
                                              InferenceState* cache) {
  const int64_t B = ids.dim(0), S = ids.dim(1), T = B * S;
  const size_t n = layers_.size();
  const int64_t end = pos.chunks ? pos.global_seq : pos.start + S;  // past the last position
  TITAN_CHECK(end <= cfg_.max_position_embeddings, "sequence length ", end, " exceeds max_position_embeddings ",
              cfg_.max_position_embeddings);
  if (end > rope_.max_pos()) rope_ = rope_cache(end);
  if (cache) check_host("generation (a KV cache)");
  Hidden out;
  Tensor x;  // the residual stream: the embedding, then each layer's output
  steps.at(0, Phase::Forward);
  TITAN_CHECK(!cache || !tp_.on(), "generation: not with tensor parallelism in this build");
  embed(ids.view({T}), x);
  if (store) {
    store->x.assign(n + 1, Tensor());
    store->layers.assign(n, LayerActs());
  }
  forward_layer_range(0, n, x, B, S, pos, store, steps, cache, &out);
  out.x = x;
  return out;
}

void DecoderModel::forward_layer_range(size_t l0, size_t l1, Tensor& x, int64_t B, int64_t S, Positions pos,
                                       ActivationStore* store, Steps& steps, InferenceState* cache, Hidden* out) {
  const int64_t Tr = x.dim(0), H = cfg_.hidden_size;  // the residual stream's rows on this rank
  for (size_t l = l0; l < l1; ++l) {
    LayerActs dropped;  // pure inference: the layer's activations end with it
    LayerActs& a = store ? store->layers[l] : dropped;
    Tensor y = f32({Tr, H});
    steps.at(unit_of_layer(int64_t(l)), Phase::Forward);
    layer_forward(l, x, &y, a, B, S, pos, cache);
    if (layers_[l].moe()) {
      if (aux_loss_on()) out->router_logits.push_back(a.moe.logits);
      if (store && !counts_.empty()) {  // counted once per training forward (recomputation does not count)
        const int64_t* c = a.moe.tokens_per_expert.data<int64_t>();
        float* dst = counts_[l].data<float>();
        for (int64_t e = 0; e < cfg_.num_experts; ++e) dst[e] += float(c[e]);
      }
    }
    if (store) {
      store->x[l] = x;
      if (ckpt_ == Checkpointing::Full) {
        a = LayerActs();
      } else if (ckpt_ == Checkpointing::Selective) {  // keep the attention block, recompute the MLP
        a.xn2 = a.rstd2 = a.gu = a.act = Tensor();
        a.sgu = a.sact = a.sgate = Tensor();  // qwen3_5_moe's shared expert, recomputed with the MLP
        a.moe = MoESaved();
        a.have_mlp = false;
      }
    }
    x = y;
  }
  if (store) store->x[l1] = x;
}

void DecoderModel::backward_layers(ActivationStore& store, Tensor& dx, std::vector<Tensor>& dlogits, int64_t B,
                                 int64_t S, Positions pos, Steps& steps, size_t l0, size_t l1) {
  if (l1 == size_t(-1)) l1 = layers_.size();
  for (size_t l = l1; l-- > l0;) {
    store.x[l + 1] = Tensor();
    const int64_t u = unit_of_layer(int64_t(l));
    LayerActs& a = store.layers[l];
    if (ckpt_ != Checkpointing::None) {  // refill what checkpointing dropped
      steps.at(u, Phase::Recompute);
      layer_forward(l, store.x[l], nullptr, a, B, S, pos);
    }
    steps.at(u, Phase::Backward);
    layer_backward(l, store.x[l], a, dx, B, S, pos, dlogits[l].defined() ? &dlogits[l] : nullptr);
    dlogits[l] = Tensor();
  }
}

double DecoderModel::forward(const Tensor& ids, const Tensor& labels, Tensor* logits_out, const Tensor* positions) {
  check_batch(ids, labels, cfg_.max_position_embeddings);
  TITAN_CHECK(!pp_.on(), "scoring: not with pipeline parallelism in this build (the model holds only its stages)");
  const SequenceLayout layout = sequence_layout(ids, positions, cp_);
  const int64_t T = ids.numel(), H = cfg_.hidden_size;
  round_weights_for_compute();
  Steps steps(*this, Pass::Score);
  Hidden hid = forward_layers(ids, layout.pos(), nullptr, steps);
  steps.at(num_units() - 1, Phase::Forward);
  const KernelSet& hk = kernels_.back();
  const int64_t Tr = hid.x.dim(0);
  Tensor xf = f32({Tr, H}), rstd = f32({Tr});
  hk.rmsnorm->forward(exec_, hid.x, norm_weight(params_.at("model.norm.weight").value), float(cfg_.rms_norm_eps), xf,
                      rstd);
  xf = tp_gather_rows(xf);  // sequence parallel: the head reads every token
  // On the GPU every row goes through the head (exact too: an ignored row adds nothing); the row gather is host code.
  const std::vector<int64_t> rows = logits_out || on_gpu() ? std::vector<int64_t>() : sparse_label_rows(labels);
  // A head stored in bf16 (an untied lm_head of a bf16 model) is read as it is (compute is bf16).
  const Tensor& head = lm_head_weight();
  double loss = 0;
  if (tp_.on()) {
    TITAN_CHECK(!logits_out, "scoring: logits are not dumped with tensor parallelism in this build");
    loss = rows.empty() ? tp_cross_entropy(xf, labels.view({T}), 0.0f, nullptr, nullptr)
                        : tp_cross_entropy(gather_rows(xf, rows), gather_labels(labels, rows), 0.0f, nullptr, nullptr);
  } else {
    loss = rows.empty() ? hk.cross_entropy->forward(exec_, xf, head, labels.view({T}), logits_out, compute_)
                        : hk.cross_entropy->forward(exec_, gather_rows(xf, rows), head, gather_labels(labels, rows),
                                                    nullptr, compute_);
  }
  steps.finish();
  if (!hold_wbf_) wbf_.reset();
  last_aux_ = 0;
  if (aux_loss_on()) {
    std::vector<const Tensor*> lp;
    for (const auto& t : hid.router_logits) lp.push_back(&t);
    last_aux_ = router_aux_loss(lp, cfg_.num_experts_per_tok);
    // One rounding (std::fma), as the x86-64-v3 build's contraction has always computed it, on every target.
    loss = std::fma(double(count_labels(labels)) * cfg_.router_aux_loss_coef, last_aux_, loss);
  }
  return loss;
}

void DecoderModel::set_context_parallel(const ContextParallel& cp) {
  if (cp.on()) check_host("context parallelism");
  if (cp.on()) {
    const char* why = " ([parallelism] context_parallel_degree = 1)";
    TITAN_CHECK(!cfg_.is_qwen3_5(), "context parallelism: not for ", cfg_.model_type,
                " (its linear-attention layers carry a recurrent state along the sequence) in this build", why);
    TITAN_CHECK(!lora_enabled(), "context parallelism: not with LoRA in this build", why);
    TITAN_CHECK(!pp_.on(), "context parallelism: not with pipeline parallelism in this build", why);
    TITAN_CHECK(!aux_loss_on(), "context parallelism: the router auxiliary loss (output_router_logits) spans every ",
                "token of a sequence; not with context parallelism in this build", why);
  }
  cp_ = cp;
}

void DecoderModel::set_compute_dtype(DType d) {
  TITAN_CHECK(weight_dtype_ == DType::F32 || d == weight_dtype_, "model: weights stored in ", dtype_name(weight_dtype_),
              " cannot compute in ", dtype_name(d));
  compute_ = d;
}

void DecoderModel::hold_compute_weights(bool on) {
  hold_wbf_ = on;
  wbf_.reset();  // the next call rounds the current weights
  head_bf16_ = Tensor();
}

void DecoderModel::forward_cached(const Tensor& ids, InferenceState& cache, Tensor& logits) {
  TITAN_CHECK(!tp_.on() && !ep_.on() && !pp_.on(),
              "generation: not with tensor, expert or pipeline parallelism in this build");
  TITAN_CHECK(ids.ndim() == 2 && ids.dtype() == DType::I64 && ids.dim(0) == cache.rows && ids.dim(1) > 0,
              "generation: token ids must be i64 [", cache.rows, ", columns], got ", ids.str());
  const int64_t B = ids.dim(0), S = ids.dim(1), H = cfg_.hidden_size, V = cfg_.vocab_size;
  TITAN_CHECK(cache.len + S <= cfg_.max_position_embeddings, "generation: ", cache.len + S,
              " columns exceed max_position_embeddings ", cfg_.max_position_embeddings);
  TITAN_CHECK(!logits.defined() || (logits.dtype() == DType::F32 && logits.shape() == Shape({B, V})),
              "generation: logits must be f32 [", B, ", ", V, "], got ", logits.str());
  for (int64_t b = 0; b < B && cache.len == 0; ++b)
    TITAN_CHECK(cache.first[size_t(b)] >= 0 && cache.first[size_t(b)] < S, "generation: row ", b, " of the prompt batch ",
                "has ", cache.first[size_t(b)], " padding columns of ", S);
  if (!logits.defined()) logits = f32({B, V});
  // The KV cache in bf16 when the matmuls compute in bf16 (halves the bytes a decode step reads).
  cache.reserve(layer_kinds(), cfg_.num_key_value_heads, cfg_.head_dim, cache.len + S,
                compute_ == DType::BF16 ? DType::BF16 : DType::F32);
  round_weights_for_compute();
  Steps steps(*this, Pass::Score);
  Hidden hid = forward_layers(ids, Positions{cache.len}, nullptr, steps, &cache);
  cache.len += S;
  steps.at(num_units() - 1, Phase::Forward);
  const KernelSet& hk = kernels_.back();
  Tensor last = f32({B, H}), xf = f32({B, H}), rstd = f32({B});
  for (int64_t b = 0; b < B; ++b)
    std::memcpy(last.data<float>() + b * H, hid.x.data<float>() + (b * S + S - 1) * H, size_t(H) * sizeof(float));
  hid = Hidden();
  hk.rmsnorm->forward(exec_, last, norm_weight(params_.at("model.norm.weight").value), float(cfg_.rms_norm_eps), xf,
                      rstd);
  // The head reads V x H weights per step, as many as several layers: held in bf16 with the rest.
  if (hold_wbf_ && compute_ == DType::BF16 && !head_bf16_.defined()) head_bf16_ = to_bf16(lm_head_weight());
  hk.linear->forward(exec_, xf, head_bf16_.defined() ? head_bf16_ : lm_head_weight(), logits, compute_);
  steps.finish();
  if (!hold_wbf_) wbf_.reset();
}

double DecoderModel::forward_backward(const Tensor& ids, const Tensor& labels, float grad_scale,
                                    const Tensor* positions) {
  check_batch(ids, labels, cfg_.max_position_embeddings);
  TITAN_CHECK(!pp_.on(), "forward_backward: a pipeline stage trains through stage_forward / stage_backward");
  TITAN_CHECK(!lora_params_merged_, "forward_backward: the MoE-parameter LoRA adapters were merged for inference");
  TITAN_CHECK(!cp_.on() || !lora_enabled(), "LoRA: not with context parallelism in this build");
  const SequenceLayout layout = sequence_layout(ids, positions, cp_);
  const Positions pos = layout.pos();
  const int64_t B = ids.dim(0), S = ids.dim(1), T = B * S;
  const size_t n = layers_.size();
  round_weights_for_compute();
  const TrainPass train_pass(lora_seq_, S);
  Steps steps(*this, Pass::Train);
  ActivationStore store;
  Hidden hid = forward_layers(ids, pos, &store, steps);
  // Auxiliary loss: its value joins the loss sum as n * coef * aux (n counted tokens), so its
  // gradient, fed to each sparse layer's router logits, is grad_scale * n * coef * d(aux).
  // Recomputation under checkpointing reproduces the same logits, so the counts stay valid.
  std::vector<Tensor> dlogits(n);
  double aux_term = 0;
  last_aux_ = 0;
  if (aux_loss_on()) {
    const double count = double(count_labels(labels));
    std::vector<const Tensor*> lp;
    std::vector<Tensor*> dp;
    for (size_t l = 0, i = 0; l < n; ++l) {
      if (!layers_[l].moe()) continue;
      const Tensor& logits = hid.router_logits.at(i++);
      dlogits[l] = f32(logits.shape());
      lp.push_back(&logits);
      dp.push_back(&dlogits[l]);
    }
    last_aux_ = router_aux_loss(lp, cfg_.num_experts_per_tok, &dp,
                                float(double(grad_scale) * count * cfg_.router_aux_loss_coef));
    aux_term = count * cfg_.router_aux_loss_coef * last_aux_;
  }
  hid = Hidden();
  // Head: final norm, fused lm_head + cross-entropy forward and backward, norm backward.
  steps.at(num_units() - 1, Phase::Backward);
  Tensor dx;  // d(residual stream), from the head down to the embedding
  const double loss = head_forward_backward(store.x[n], labels, grad_scale, dx);
  backward_layers(store, dx, dlogits, B, S, pos, steps);
  steps.at(0, Phase::Backward);
  embed_backward(ids.view({T}), dx);
  steps.finish();
  if (!hold_wbf_) wbf_.reset();
  return loss + aux_term;
}

void DecoderModel::embed(const Tensor& ids, Tensor& x) {
  const int64_t T = ids.numel();
  x = f32({T, cfg_.hidden_size});
  if (tp_.on()) {  // vocabulary-parallel: each rank's rows, summed (sequence parallel: its tokens' sums)
    tp_embedding_forward(ids, x);
    x = tp_reduce_rows(x);
  } else {
    kernels_.back().embedding->forward(exec_, ids, params_.at("model.embed_tokens.weight").value, x);
  }
}

void DecoderModel::embed_backward(const Tensor& ids, const Tensor& dx) {
  Tensor& gemb = params_.at("model.embed_tokens.weight").grad;
  if (gemb.defined() && tp_.on()) tp_embedding_backward(ids, tp_gather_rows(dx), gemb);
  else if (gemb.defined())
    kernels_.back().embedding->backward(exec_, ids, dx, gemb);
}

double DecoderModel::head_forward_backward(const Tensor& xl, const Tensor& labels, float grad_scale, Tensor& dx) {
  const int64_t T = labels.numel(), H = cfg_.hidden_size;
  const KernelSet& hk = kernels_.back();
  const Param& norm = params_.at("model.norm.weight");
  const int64_t Tr = xl.dim(0);  // the residual stream's rows on this rank
  dx = f32({Tr, H});
  double loss;
  if (tp_.on()) {  // the final norm on this rank's rows; the head over the vocabulary shards
    Tensor xn = f32({Tr, H}), rstd = f32({Tr}), dxf = f32({T, H});
    hk.rmsnorm->forward(exec_, xl, norm_weight(norm.value), float(cfg_.rms_norm_eps), xn, rstd);
    const Tensor xf = tp_gather_rows(xn);
    const std::vector<int64_t> rows = sparse_label_rows(labels);
    Tensor& gw = lm_head_grad();
    if (rows.empty()) {
      loss = tp_cross_entropy(xf, labels.view({T}), grad_scale, &dxf, grad_or_null(gw));
    } else {
      Tensor dxc = f32({int64_t(rows.size()), H});
      loss = tp_cross_entropy(gather_rows(xf, rows), gather_labels(labels, rows), grad_scale, &dxc, grad_or_null(gw));
      scatter_rows(dxc, rows, dxf);
    }
    Tensor dxn = tp_reduce_rows(dxf);
    Tensor& gn = params_.at("model.norm.weight").grad;
    if (tp_norm_grads_partial()) {
      Tensor part = Tensor::zeros({H}, DType::F32);
      hk.rmsnorm->backward(exec_, xl, norm_weight(norm.value), rstd, dxn, dx, part);
      tp_grad_sum(part, gn);
    } else {
      hk.rmsnorm->backward(exec_, xl, norm_weight(norm.value), rstd, dxn, dx, gn);
    }
  } else {
    Tensor xf = f32({T, H}), rstd = f32({T}), dxf = f32({T, H});
    hk.rmsnorm->forward(exec_, xl, norm_weight(norm.value), float(cfg_.rms_norm_eps), xf, rstd);
    const std::vector<int64_t> rows = on_gpu() ? std::vector<int64_t>() : sparse_label_rows(labels);  // as in forward
    if (rows.empty()) {
      loss = hk.cross_entropy->forward_backward(exec_, xf, lm_head_weight(), labels.view({T}), grad_scale, dxf,
                                                lm_head_grad(), compute_);
    } else {
      Tensor dxc = f32({int64_t(rows.size()), H});
      loss = hk.cross_entropy->forward_backward(exec_, gather_rows(xf, rows), lm_head_weight(),
                                                gather_labels(labels, rows), grad_scale, dxc, lm_head_grad(), compute_);
      scatter_rows(dxc, rows, dxf);
    }
    hk.rmsnorm->backward(exec_, xl, norm_weight(norm.value), rstd, dxf, dx, params_.at("model.norm.weight").grad);
  }
  return loss;
}

}  // namespace titan
