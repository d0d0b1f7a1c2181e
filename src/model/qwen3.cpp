#include "model/qwen3.h"

#include <cmath>
#include <cstring>

#include "core/rng.h"
#include "core/threading.h"
#include "ops/matmul/bf16_convert.h"

namespace titan {

// Saved activations of one decoder layer. Which are kept depends on the checkpointing mode; the
// rest are recomputed from the layer input (Full) or from the attention block output (Selective).
struct LayerActs {
  // attention block
  Tensor xn1, rstd1;   // [T, H], [T]
  Tensor qkv;          // [T, Q+2K] projections before q/k norm
  Tensor rstd_q, rstd_k;  // [T*heads], [T*kv_heads]
  Tensor q, k, v;      // [B, S, heads, D] after norm + RoPE (v: plain)
  Tensor attn, lse;    // [T, Q], [B, heads, S]
  Tensor h;            // [T, H] residual after attention
  // MLP block
  Tensor xn2, rstd2;   // [T, H], [T]
  Tensor gu, act;      // [T, 2I], [T, I]  (dense MLP)
  MoESaved moe;        // sparse MLP: routing and the variant's saved activations
  bool have_attn = false, have_mlp = false;
};

struct Qwen3Model::Layer {
  Tensor w_in, w_qkv, w_qn, w_kn, w_o, w_post, w_gu, w_down;        // fused storage
  Tensor g_in, g_qkv, g_qn, g_kn, g_o, g_post, g_gu, g_down;        // their grads
  // Sparse layers (w_gu / w_down unused): router [E, H], stacked experts [E, 2I, H], [E, H, I].
  bool sparse = false;
  Tensor w_router, w_egu, w_edown, g_router, g_egu, g_edown;
};

struct Qwen3Model::Bf16Weights {
  std::vector<Tensor> qkv, o, gu, down;  // per layer, BF16
};

void Qwen3Model::round_weights_for_compute() {
  wbf_.reset();
  if (compute_ != DType::BF16) return;
  wbf_ = std::make_unique<Bf16Weights>();
  const size_t n = layers_.size();
  wbf_->qkv.resize(n), wbf_->o.resize(n), wbf_->gu.resize(n), wbf_->down.resize(n);
  if (hooks_) return;  // rounded layer by layer as the hooks bring the values (need())
  for (size_t l = 0; l < n; ++l) round_layer(l);
}

void Qwen3Model::round_layer(size_t l) {
  if (!wbf_ || wbf_->qkv[l].defined()) return;
  const Layer& L = layers_[l];
  wbf_->qkv[l] = to_bf16(L.w_qkv);
  wbf_->o[l] = to_bf16(L.w_o);
  // Sparse layers: the stacked experts are rounded here too (the MoE op takes bf16 expert
  // weights as they are); the router stays f32 inside the op.
  wbf_->gu[l] = to_bf16(L.sparse ? L.w_egu : L.w_gu);
  wbf_->down[l] = to_bf16(L.sparse ? L.w_edown : L.w_down);
}

void Qwen3Model::need(int64_t unit, bool values, bool grads) {
  if (hooks_) hooks_->need(unit, values, grads);
  const int64_t l = unit - 1;
  if (values && l >= 0 && l < int64_t(layers_.size())) round_layer(size_t(l));
}

void Qwen3Model::done(int64_t unit, bool values, bool grads) {
  if (!hooks_) return;
  const int64_t l = unit - 1;
  if (values && wbf_ && l >= 0 && l < int64_t(layers_.size()))
    wbf_->qkv[size_t(l)] = wbf_->o[size_t(l)] = wbf_->gu[size_t(l)] = wbf_->down[size_t(l)] = Tensor();
  hooks_->done(unit, values, grads);
}

InitScheme parse_init_scheme(const std::string& s) {
  if (s == "torchtitan") return InitScheme::Torchtitan;
  if (s == "hf") return InitScheme::HF;
  fail("unknown init scheme '", s, "' (expected torchtitan or hf)");
}

Checkpointing parse_checkpointing(const std::string& s) {
  if (s == "none") return Checkpointing::None;
  if (s == "selective") return Checkpointing::Selective;
  if (s == "full") return Checkpointing::Full;
  fail("unknown activation checkpointing mode '", s, "' (expected none, selective or full)");
}

Qwen3Model::Qwen3Model(const ModelConfig& cfg, const std::string& kernel_variant, bool deferred)
    : cfg_(cfg), deferred_(deferred) {
  cfg_.validate(cfg.flavor.empty() ? "model config" : "flavor " + cfg.flavor);
  kernels_.assign(size_t(cfg_.num_hidden_layers + 1), kernel_set(kernel_variant));
  build_params();
  // The cache covers max_position_embeddings lazily: sequences longer than what is built here
  // rebuild it in forward (kept modest so small models do not pay for 40k-position tables).
  rope_ = make_rope_cache(cfg_.rope_theta, cfg_.head_dim, std::min<int64_t>(cfg_.max_position_embeddings, 4096));
}

Qwen3Model::~Qwen3Model() = default;

void Qwen3Model::build_params() {
  const int64_t H = cfg_.hidden_size, V = cfg_.vocab_size, I = cfg_.intermediate_size, D = cfg_.head_dim;
  (void)I;
  const int64_t Q = cfg_.q_dim(), K = cfg_.kv_dim();
  auto pair = [&](const Shape& s) {
    if (deferred_) return std::make_pair(Tensor::deferred(s, DType::F32), Tensor::deferred(s, DType::F32));
    return std::make_pair(Tensor::zeros(s, DType::F32), Tensor::zeros(s, DType::F32));
  };
  auto [emb, gemb] = pair({V, H});
  params_.add("model.embed_tokens.weight", emb, gemb);
  layers_.resize(size_t(cfg_.num_hidden_layers));
  for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l) {
    Layer& L = layers_[size_t(l)];
    std::string p = "model.layers." + std::to_string(l) + ".";
    std::tie(L.w_in, L.g_in) = pair({H});
    std::tie(L.w_qkv, L.g_qkv) = pair({Q + 2 * K, H});
    std::tie(L.w_qn, L.g_qn) = pair({D});
    std::tie(L.w_kn, L.g_kn) = pair({D});
    std::tie(L.w_o, L.g_o) = pair({H, Q});
    std::tie(L.w_post, L.g_post) = pair({H});
    params_.add(p + "input_layernorm.weight", L.w_in, L.g_in);
    params_.add(p + "self_attn.q_proj.weight", L.w_qkv.slice0(0, Q), L.g_qkv.slice0(0, Q));
    params_.add(p + "self_attn.k_proj.weight", L.w_qkv.slice0(Q, Q + K), L.g_qkv.slice0(Q, Q + K));
    params_.add(p + "self_attn.v_proj.weight", L.w_qkv.slice0(Q + K, Q + 2 * K), L.g_qkv.slice0(Q + K, Q + 2 * K));
    params_.add(p + "self_attn.o_proj.weight", L.w_o, L.g_o);
    params_.add(p + "self_attn.q_norm.weight", L.w_qn, L.g_qn);
    params_.add(p + "self_attn.k_norm.weight", L.w_kn, L.g_kn);
    params_.add(p + "post_attention_layernorm.weight", L.w_post, L.g_post);
    if (cfg_.layer_is_sparse(l)) {
      const int64_t E = cfg_.num_experts, MI = cfg_.moe_intermediate_size;
      L.sparse = true;
      std::tie(L.w_router, L.g_router) = pair({E, H});
      std::tie(L.w_egu, L.g_egu) = pair({E, 2 * MI, H});
      std::tie(L.w_edown, L.g_edown) = pair({E, H, MI});
      params_.add(p + "mlp.gate.weight", L.w_router, L.g_router);
      for (int64_t e = 0; e < E; ++e) {
        const std::string x = p + "mlp.experts." + std::to_string(e) + ".";
        Tensor wgu = L.w_egu.slice0(e, e + 1).view({2 * MI, H}), ggu = L.g_egu.slice0(e, e + 1).view({2 * MI, H});
        params_.add(x + "gate_proj.weight", wgu.slice0(0, MI), ggu.slice0(0, MI));
        params_.add(x + "up_proj.weight", wgu.slice0(MI, 2 * MI), ggu.slice0(MI, 2 * MI));
        params_.add(x + "down_proj.weight", L.w_edown.slice0(e, e + 1).view({H, MI}),
                    L.g_edown.slice0(e, e + 1).view({H, MI}));
      }
      continue;
    }
    std::tie(L.w_gu, L.g_gu) = pair({2 * I, H});
    std::tie(L.w_down, L.g_down) = pair({H, I});
    params_.add(p + "mlp.gate_proj.weight", L.w_gu.slice0(0, I), L.g_gu.slice0(0, I));
    params_.add(p + "mlp.up_proj.weight", L.w_gu.slice0(I, 2 * I), L.g_gu.slice0(I, 2 * I));
    params_.add(p + "mlp.down_proj.weight", L.w_down, L.g_down);
  }
  auto [nw, gnw] = pair({H});
  params_.add("model.norm.weight", nw, gnw);
  if (!cfg_.tie_word_embeddings) {
    auto [lm, glm] = pair({V, H});
    params_.add("lm_head.weight", lm, glm);
  }
  // Names and shapes must be exactly HF's, in HF's order.
  auto specs = model_param_specs(cfg_);
  TITAN_ASSERT(specs.size() == params_.all().size(), "param spec count");
  for (size_t i = 0; i < specs.size(); ++i)
    TITAN_ASSERT(specs[i].name == params_.all()[i].name && specs[i].shape == params_.all()[i].value.shape(),
                 "param spec mismatch at ", specs[i].name);
  // Unit boundaries: the first parameter of each unit (param_unit), then the end.
  unit_begin_.assign(size_t(cfg_.num_hidden_layers) + 3, params_.all().size());
  for (size_t i = params_.all().size(); i-- > 0;) {
    const int64_t u = param_unit(cfg_, params_.all()[i].name);
    TITAN_ASSERT(i == 0 || param_unit(cfg_, params_.all()[i - 1].name) <= u, "parameter units are not contiguous");
    unit_begin_[size_t(u)] = i;
  }
}

Tensor* Qwen3Model::expert_gate_up(int64_t layer) {
  Layer& L = layers_.at(size_t(layer));
  return L.sparse ? &L.w_egu : nullptr;
}
Tensor* Qwen3Model::expert_down(int64_t layer) {
  Layer& L = layers_.at(size_t(layer));
  return L.sparse ? &L.w_edown : nullptr;
}

void Qwen3Model::enable_expert_bias() {
  bias_.assign(layers_.size(), Tensor());
  counts_.assign(layers_.size(), Tensor());
  for (size_t l = 0; l < layers_.size(); ++l) {
    if (!layers_[l].sparse) continue;
    bias_[l] = Tensor::zeros({cfg_.num_experts}, DType::F32);
    counts_[l] = Tensor::zeros({cfg_.num_experts}, DType::F32);
  }
}

void Qwen3Model::update_expert_bias(float coeff) {
  for (size_t l = 0; l < bias_.size(); ++l) {
    if (!bias_[l].defined()) continue;
    moe_update_expert_bias(bias_[l], counts_[l], coeff);
    counts_[l].zero_();
  }
}

std::vector<NamedTensor> Qwen3Model::expert_bias_state() {
  std::vector<NamedTensor> v;
  for (size_t l = 0; l < bias_.size(); ++l)
    if (bias_[l].defined()) v.push_back({"model.layers." + std::to_string(l) + ".mlp.expert_bias", bias_[l]});
  for (size_t l = 0; l < counts_.size(); ++l)
    if (counts_[l].defined()) v.push_back({"model.layers." + std::to_string(l) + ".mlp.tokens_per_expert", counts_[l]});
  return v;
}

bool Qwen3Model::aux_loss_on() const { return cfg_.output_router_logits && cfg_.num_sparse_layers() > 0; }

const Tensor& Qwen3Model::lm_head_weight() {
  return params_.at(cfg_.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight").value;
}
Tensor& Qwen3Model::lm_head_grad() {
  return params_.at(cfg_.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight").grad;
}

void Qwen3Model::init_weights(InitScheme scheme, uint64_t seed, int64_t unit) {
  auto rng = [&](const std::string& name) { return Philox{seed, stream_id(name.c_str())}; };
  const auto [first, last] = unit >= 0 ? unit_params(unit) : std::make_pair(size_t(0), params_.all().size());
  // torchtitan's output layer: trunc_normal(std = dim^-0.5, cutoff 3 std). With tied embeddings the
  // output weight is the embedding, and torchtitan's init writes it last, so it wins there too.
  const std::string out_name = cfg_.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight";
  const double out_std = 1.0 / std::sqrt(double(cfg_.hidden_size));
  for (size_t i = first; i < last; ++i) {
    Param& p = params_.all()[i];
    Tensor& w = p.value;
    const std::string& n = p.name;
    bool is_norm = n.find("norm.weight") != std::string::npos || n.find("layernorm.weight") != std::string::npos;
    if (is_norm) {
      w.fill_(1.0f);
      continue;
    }
    if (scheme == InitScheme::HF) {  // PreTrainedModel._init_weights: normal(0, initializer_range)
      fill_normal(w, 0.0, 0.02, rng(n));
      continue;
    }
    // torchtitan (Qwen3 / Llama family): embeddings N(0, 1); q/k/v and gate projections
    // trunc_normal(0.02); output-side projections (o, up, down) trunc_normal with the depth-scaled
    // std 0.02 / sqrt(2 * (layer + 1)); torch's trunc_normal_ default bounds are [-2, 2] absolute.
    if (n == out_name) {
      fill_trunc_normal(w, 0.0, out_std, -3 * out_std, 3 * out_std, rng("lm_head.weight"));
      continue;
    }
    if (n == "model.embed_tokens.weight") {
      fill_normal(w, 0.0, 1.0, rng(n));
      continue;
    }
    int64_t layer = std::stoll(n.substr(std::strlen("model.layers."), n.find('.', 13) - 13));
    double depth_std = 0.02 / std::sqrt(2.0 * double(layer + 1));
    bool out_side = n.find("o_proj") != std::string::npos || n.find("up_proj") != std::string::npos ||
                    n.find("down_proj") != std::string::npos;
    fill_trunc_normal(w, 0.0, out_side ? depth_std : 0.02, -2.0, 2.0, rng(n));
  }
}

namespace {

// qkv [T, Q+2K] -> q [T, Q], k [T, K], v [T, K] (contiguous copies).
void split_qkv(const Tensor& qkv, Tensor& q, Tensor& k, Tensor& v, int64_t Q, int64_t K) {
  const int64_t T = qkv.dim(0), W = Q + 2 * K;
  const float* s = qkv.data<float>();
  float *qd = q.data<float>(), *kd = k.data<float>(), *vd = v.data<float>();
  parallel_for(T, 64, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      std::memcpy(qd + t * Q, s + t * W, size_t(Q) * 4);
      std::memcpy(kd + t * K, s + t * W + Q, size_t(K) * 4);
      std::memcpy(vd + t * K, s + t * W + Q + K, size_t(K) * 4);
    }
  });
}

// The inverse: dq [T, Q], dk [T, K], dv [T, K] -> dqkv [T, Q+2K].
void pack_qkv(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& qkv, int64_t Q, int64_t K) {
  const int64_t T = qkv.dim(0), W = Q + 2 * K;
  float* d = qkv.data<float>();
  const float *qs = q.data<float>(), *ks = k.data<float>(), *vs = v.data<float>();
  parallel_for(T, 64, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      std::memcpy(d + t * W, qs + t * Q, size_t(Q) * 4);
      std::memcpy(d + t * W + Q, ks + t * K, size_t(K) * 4);
      std::memcpy(d + t * W + Q + K, vs + t * K, size_t(K) * 4);
    }
  });
}

Tensor f32(const Shape& s) { return Tensor::empty(s, DType::F32); }

}  // namespace

// x [T, H] -> out [T, H]. Fills `a` with what backward needs (all of it; the caller drops parts
// according to the checkpointing mode).
void Qwen3Model::layer_forward(size_t l, const Tensor& x, Tensor& out, LayerActs& a, int64_t B, int64_t S) {
  const Layer& L = layers_[l];
  const KernelSet& k = kernels_[l];
  const Tensor& Wqkv = wbf_ ? wbf_->qkv[l] : L.w_qkv;
  const Tensor& Wo = wbf_ ? wbf_->o[l] : L.w_o;
  const int64_t T = B * S, H = cfg_.hidden_size, Q = cfg_.q_dim(), K = cfg_.kv_dim(), D = cfg_.head_dim;
  const int64_t nh = cfg_.num_attention_heads, nkv = cfg_.num_key_value_heads;
  const float eps = float(cfg_.rms_norm_eps);
  if (!a.have_attn) {
    a.xn1 = f32({T, H});
    a.rstd1 = f32({T});
    k.rmsnorm->forward(x, L.w_in, eps, a.xn1, a.rstd1);
    a.qkv = f32({T, Q + 2 * K});
    k.linear->forward(a.xn1, Wqkv, a.qkv, compute_);
    Tensor qr = f32({T * nh, D}), kr = f32({T * nkv, D});
    a.v = f32({B, S, nkv, D});
    split_qkv(a.qkv, qr, kr, a.v, Q, K);
    a.q = f32({T * nh, D});
    a.k = f32({T * nkv, D});
    a.rstd_q = f32({T * nh});
    a.rstd_k = f32({T * nkv});
    k.rmsnorm->forward(qr, L.w_qn, eps, a.q, a.rstd_q);
    k.rmsnorm->forward(kr, L.w_kn, eps, a.k, a.rstd_k);
    a.q = a.q.view({B, S, nh, D});
    a.k = a.k.view({B, S, nkv, D});
    k.rope->forward(a.q, rope_);
    k.rope->forward(a.k, rope_);
    a.attn = f32({B, S, nh, D});
    a.lse = f32({B, nh, S});
    k.attention->forward(a.q, a.k, a.v, float(1.0 / std::sqrt(double(D))), a.attn, a.lse);
    a.attn = a.attn.view({T, Q});
    a.h = f32({T, H});
    k.linear->forward(a.attn, Wo, a.h, compute_);
    k.residual->forward(a.h, x, a.h);
    a.have_attn = true;
  }
  a.xn2 = f32({T, H});
  a.rstd2 = f32({T});
  k.rmsnorm->forward(a.h, L.w_post, eps, a.xn2, a.rstd2);
  mlp_forward(l, a, out, T);
  k.residual->forward(out, a.h, out);
  a.have_mlp = true;
}

// The MoE op's inputs for sparse layer l (the same for forward and backward).
MoEArgs Qwen3Model::moe_args(size_t l, const LayerActs& a) const {
  const Layer& L = layers_[l];
  MoEArgs m;
  m.x = &a.xn2, m.router = &L.w_router;
  m.gate_up = wbf_ ? &wbf_->gu[l] : &L.w_egu, m.down = wbf_ ? &wbf_->down[l] : &L.w_edown;
  m.bias = bias_.empty() ? nullptr : &bias_[l];
  m.top_k = cfg_.num_experts_per_tok, m.norm_topk_prob = cfg_.norm_topk_prob, m.compute = compute_;
  return m;
}

// out [T, H] = mlp(xn2): the dense SwiGLU MLP or the sparse MoE block.
void Qwen3Model::mlp_forward(size_t l, LayerActs& a, Tensor& out, int64_t T) {
  const Layer& L = layers_[l];
  const KernelSet& k = kernels_[l];
  if (L.sparse) {
    const MoEArgs m = moe_args(l, a);
    k.moe->forward(m, out, a.moe);
    return;
  }
  const int64_t I = cfg_.intermediate_size;
  a.gu = f32({T, 2 * I});
  k.linear->forward(a.xn2, wbf_ ? wbf_->gu[l] : L.w_gu, a.gu, compute_);
  a.act = f32({T, I});
  k.swiglu->forward(a.gu, a.act);
  k.linear->forward(a.act, wbf_ ? wbf_->down[l] : L.w_down, out, compute_);
}

// dy [T, H] = d(mlp output) -> returns d(xn2) in dxn2; parameter grads accumulate.
void Qwen3Model::mlp_backward(size_t l, LayerActs& a, Tensor& dxn2, int64_t T, const Tensor* dlogits_extra) {
  Layer& L = layers_[l];
  const KernelSet& k = kernels_[l];
  Tensor& dy = dxn2;  // on entry d(out); overwritten with d(xn2) below
  if (L.sparse) {
    const MoEArgs m = moe_args(l, a);
    Tensor dx = f32({T, cfg_.hidden_size});
    MoEGrads g;
    g.dx = &dx, g.drouter = &L.g_router, g.dgate_up = &L.g_egu, g.ddown = &L.g_edown, g.dlogits_extra = dlogits_extra;
    k.moe->backward(m, a.moe, dy, g);
    a.moe = MoESaved();
    dxn2 = dx;
    return;
  }
  const int64_t I = cfg_.intermediate_size, H = cfg_.hidden_size;
  Tensor dact = f32({T, I});
  k.linear->backward(a.act, wbf_ ? wbf_->down[l] : L.w_down, dy, &dact, &L.g_down, compute_);
  a.act = Tensor();
  Tensor dgu = f32({T, 2 * I});
  k.swiglu->backward(a.gu, dact, dgu);
  a.gu = Tensor();
  dact = Tensor();
  Tensor dx = f32({T, H});
  k.linear->backward(a.xn2, wbf_ ? wbf_->gu[l] : L.w_gu, dgu, &dx, &L.g_gu, compute_);
  dxn2 = dx;
}

// dx: on entry d(layer output) [T, H]; on exit d(layer input). Parameter grads accumulate.
void Qwen3Model::layer_backward(size_t l, const Tensor& x, LayerActs& a, Tensor& dx, int64_t B, int64_t S,
                                const Tensor* dlogits_extra) {
  Layer& L = layers_[l];
  const KernelSet& k = kernels_[l];
  const Tensor& Wqkv = wbf_ ? wbf_->qkv[l] : L.w_qkv;
  const Tensor& Wo = wbf_ ? wbf_->o[l] : L.w_o;
  const int64_t T = B * S, H = cfg_.hidden_size, Q = cfg_.q_dim(), K = cfg_.kv_dim(), D = cfg_.head_dim;
  const int64_t nh = cfg_.num_attention_heads, nkv = cfg_.num_key_value_heads;
  if (!a.have_attn || !a.have_mlp) {  // recompute what checkpointing dropped
    Tensor out = f32({T, H});
    layer_forward(l, x, out, a, B, S);
  }
  // MLP block: out = h + mlp(rmsnorm(h))  (dense: down(swiglu(gu(.))); sparse: the MoE block)
  {
    Tensor dxn2 = dx;  // d(out) shared; mlp_backward rebinds dxn2 to a fresh tensor
    mlp_backward(l, a, dxn2, T, dlogits_extra);
    Tensor dh = f32({T, H});
    k.rmsnorm->backward(a.h, L.w_post, a.rstd2, dxn2, dh, L.g_post);
    k.residual->accumulate(dx, dh);  // dx is now d(h)
  }
  // Attention block: h = x + o(attention(rope(norm(q)), rope(norm(k)), v))
  {
    Tensor dattn = f32({T, Q});
    k.linear->backward(a.attn, Wo, dx, &dattn, &L.g_o, compute_);
    Tensor dq = f32({B, S, nh, D}), dk = f32({B, S, nkv, D}), dv = f32({B, S, nkv, D});
    k.attention->backward(a.q, a.k, a.v, a.attn.view({B, S, nh, D}), a.lse, dattn.view({B, S, nh, D}),
                          float(1.0 / std::sqrt(double(D))), dq, dk, dv);
    dattn = Tensor();
    k.rope->backward(dq, rope_);
    k.rope->backward(dk, rope_);
    Tensor qr = f32({T * nh, D}), kr = f32({T * nkv, D}), vtmp = f32({T, K});
    split_qkv(a.qkv, qr, kr, vtmp, Q, K);
    Tensor dqr = f32({T * nh, D}), dkr = f32({T * nkv, D});
    k.rmsnorm->backward(qr, L.w_qn, a.rstd_q, dq.view({T * nh, D}), dqr, L.g_qn);
    k.rmsnorm->backward(kr, L.w_kn, a.rstd_k, dk.view({T * nkv, D}), dkr, L.g_kn);
    Tensor dqkv = f32({T, Q + 2 * K});
    pack_qkv(dqr, dkr, dv, dqkv, Q, K);
    Tensor dxn1 = f32({T, H});
    k.linear->backward(a.xn1, Wqkv, dqkv, &dxn1, &L.g_qkv, compute_);
    Tensor dxin = f32({T, H});
    k.rmsnorm->backward(x, L.w_in, a.rstd1, dxn1, dxin, L.g_in);
    k.residual->accumulate(dx, dxin);
  }
  a = LayerActs();
}

static void check_batch(const Tensor& ids, const Tensor& labels, int64_t max_pos) {
  TITAN_CHECK(ids.ndim() == 2 && ids.dtype() == DType::I64, "token ids must be i64 [batch, seq], got ", ids.str());
  TITAN_CHECK(labels.shape() == ids.shape() && labels.dtype() == DType::I64, "labels must be i64 ", shape_str(ids.shape()),
              ", got ", labels.str());
  TITAN_CHECK(ids.dim(1) <= max_pos, "sequence length ", ids.dim(1), " exceeds max_position_embeddings ", max_pos);
}

double Qwen3Model::forward(const Tensor& ids, const Tensor& labels, Tensor* logits_out) {
  check_batch(ids, labels, cfg_.max_position_embeddings);
  const int64_t B = ids.dim(0), S = ids.dim(1), T = B * S, H = cfg_.hidden_size;
  if (S > rope_.max_pos()) rope_ = make_rope_cache(cfg_.rope_theta, cfg_.head_dim, S);
  const KernelSet& hk = kernels_.back();
  round_weights_for_compute();
  const int64_t head = num_units() - 1;
  Tensor x = f32({T, H}), y = f32({T, H});
  need(0, true, false);
  hk.embedding->forward(ids.view({T}), params_.at("model.embed_tokens.weight").value, x);
  done(0, true, false);
  std::vector<Tensor> router_logits;  // [T, E] per sparse layer (for the auxiliary loss)
  for (size_t l = 0; l < layers_.size(); ++l) {
    LayerActs a;
    need(unit_of_layer(int64_t(l)), true, false);
    if (hooks_) hooks_->prefetch(l + 1 < layers_.size() ? unit_of_layer(int64_t(l) + 1) : head);
    layer_forward(l, x, y, a, B, S);
    done(unit_of_layer(int64_t(l)), true, false);
    if (layers_[l].sparse) router_logits.push_back(a.moe.logits);
    std::swap(x, y);
  }
  Tensor xf = f32({T, H}), rstd = f32({T});
  need(head, true, false);
  if (cfg_.tie_word_embeddings) need(0, true, false);
  hk.rmsnorm->forward(x, params_.at("model.norm.weight").value, float(cfg_.rms_norm_eps), xf, rstd);
  double loss = hk.cross_entropy->forward(xf, lm_head_weight(), labels.view({T}), logits_out, compute_);
  if (cfg_.tie_word_embeddings) done(0, true, false);
  done(head, true, false);
  if (hooks_) hooks_->end_pass();
  wbf_.reset();
  last_aux_ = 0;
  if (aux_loss_on()) {
    std::vector<const Tensor*> lp;
    for (const auto& t : router_logits) lp.push_back(&t);
    last_aux_ = moe_aux_loss(lp, cfg_.num_experts_per_tok);
    loss += double(count_labels(labels)) * cfg_.router_aux_loss_coef * last_aux_;
  }
  return loss;
}

double Qwen3Model::forward_backward(const Tensor& ids, const Tensor& labels, float grad_scale) {
  check_batch(ids, labels, cfg_.max_position_embeddings);
  const int64_t B = ids.dim(0), S = ids.dim(1), T = B * S, H = cfg_.hidden_size;
  if (S > rope_.max_pos()) rope_ = make_rope_cache(cfg_.rope_theta, cfg_.head_dim, S);
  const KernelSet& hk = kernels_.back();
  round_weights_for_compute();
  const size_t n = layers_.size();
  std::vector<Tensor> xs(n + 1);  // layer inputs (and the final hidden state)
  std::vector<LayerActs> acts(n);
  std::vector<Tensor> router_logits(n);
  const int64_t head = num_units() - 1;
  xs[0] = f32({T, H});
  need(0, true, false);
  if (hooks_) hooks_->prefetch(n > 0 ? unit_of_layer(0) : head);
  hk.embedding->forward(ids.view({T}), params_.at("model.embed_tokens.weight").value, xs[0]);
  done(0, true, false);
  for (size_t l = 0; l < n; ++l) {
    xs[l + 1] = f32({T, H});
    need(unit_of_layer(int64_t(l)), true, false);
    if (hooks_) hooks_->prefetch(l + 1 < n ? unit_of_layer(int64_t(l) + 1) : head);
    layer_forward(l, xs[l], xs[l + 1], acts[l], B, S);
    done(unit_of_layer(int64_t(l)), true, false);
    if (layers_[l].sparse) {
      router_logits[l] = acts[l].moe.logits;
      if (!counts_.empty()) {  // counted once per step's forward (recomputation does not count)
        const int64_t* c = acts[l].moe.tokens_per_expert.data<int64_t>();
        float* dst = counts_[l].data<float>();
        for (int64_t e = 0; e < cfg_.num_experts; ++e) dst[e] += float(c[e]);
      }
    }
    if (ckpt_ == Checkpointing::Full) {
      acts[l] = LayerActs();
    } else if (ckpt_ == Checkpointing::Selective) {  // keep the attention block, recompute the MLP
      LayerActs& a = acts[l];
      a.xn2 = a.rstd2 = a.gu = a.act = Tensor();
      a.moe = MoESaved();
      a.have_mlp = false;
    }
  }
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
    for (size_t l = 0; l < n; ++l) {
      if (!layers_[l].sparse) continue;
      dlogits[l] = f32(router_logits[l].shape());
      lp.push_back(&router_logits[l]);
      dp.push_back(&dlogits[l]);
    }
    last_aux_ = moe_aux_loss(lp, cfg_.num_experts_per_tok, &dp,
                             float(double(grad_scale) * count * cfg_.router_aux_loss_coef));
    aux_term = count * cfg_.router_aux_loss_coef * last_aux_;
  }
  router_logits.clear();
  Tensor xf = f32({T, H}), rstd = f32({T});
  need(head, true, true);
  if (cfg_.tie_word_embeddings) need(0, true, true);
  if (hooks_) hooks_->prefetch(n > 0 ? unit_of_layer(int64_t(n) - 1) : 0);
  const Param& norm = params_.at("model.norm.weight");
  hk.rmsnorm->forward(xs[n], norm.value, float(cfg_.rms_norm_eps), xf, rstd);
  Tensor dxf = f32({T, H});
  double loss = hk.cross_entropy->forward_backward(xf, lm_head_weight(), labels.view({T}), grad_scale, dxf,
                                                   lm_head_grad(), compute_);
  if (cfg_.tie_word_embeddings) done(0, true, false);
  Tensor dx = f32({T, H});
  hk.rmsnorm->backward(xs[n], norm.value, rstd, dxf, dx, params_.at("model.norm.weight").grad);
  done(head, true, true);
  xf = dxf = Tensor();
  for (size_t l = n; l-- > 0;) {
    xs[l + 1] = Tensor();
    need(unit_of_layer(int64_t(l)), true, true);
    if (hooks_ && l > 0) hooks_->prefetch(unit_of_layer(int64_t(l) - 1));
    layer_backward(l, xs[l], acts[l], dx, B, S, dlogits[l].defined() ? &dlogits[l] : nullptr);
    done(unit_of_layer(int64_t(l)), true, true);
    dlogits[l] = Tensor();
  }
  need(0, false, true);
  hk.embedding->backward(ids.view({T}), dx, params_.at("model.embed_tokens.weight").grad);
  done(0, false, true);
  if (hooks_) hooks_->end_pass();
  wbf_.reset();
  return loss + aux_term;
}

}  // namespace titan
