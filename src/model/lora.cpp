#include "model/lora.h"

#include <cmath>
#include <cstring>

#include "model/replace.h"
#include "ops/matmul/bf16_convert.h"
#include "ops/matmul/matmul.h"

namespace titan {

double LoraConfig::scale() const {
  return use_rslora ? alpha / std::sqrt(double(rank)) : alpha / double(rank);
}

void LoraConfig::validate(const std::string& where) const {
  TITAN_CHECK(rank > 0, where, ": [lora] rank must be positive, got ", rank);
  TITAN_CHECK(std::isfinite(alpha) && alpha > 0, where, ": [lora] alpha must be positive, got ", alpha);
  TITAN_CHECK(std::isfinite(dropout) && dropout >= 0 && dropout < 1, where, ": [lora] dropout must be in [0, 1), got ",
              dropout);
  TITAN_CHECK(!target_modules.empty() || !target_parameters.empty(), where,
              ": [lora] target_modules and target_parameters are both empty");
  TITAN_CHECK(dropout == 0 || target_parameters.empty(), where,
              ": [lora] dropout must be 0 with target_parameters (PEFT's ParamWrapper has no dropout: its delta "
              "is merged into the weight)");
}

std::vector<LoraAdapter> lora_candidates(const ModelConfig& cfg) {
  const int64_t H = cfg.hidden_size, Q = cfg.q_dim(), K = cfg.kv_dim(), I = cfg.intermediate_size;
  std::vector<LoraAdapter> v;
  for (int64_t l = 0; l < cfg.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    auto add = [&](const std::string& name, LoraGroup g, int64_t row0, int64_t out, int64_t in) {
      LoraAdapter a;
      a.module = p + name, a.layer = l, a.group = g, a.row0 = row0, a.out = out, a.in = in;
      v.push_back(a);
    };
    const MixerKind mixer = cfg.layer_kind(l).mixer;
    if (mixer == MixerKind::GatedDeltaNet) {
      // Qwen3.5's linear attention: in_proj_qkv / z / b / a fused in that row order (linear_in_rows).
      const int64_t C = cfg.linear_conv_dim(), VD = cfg.linear_value_dim(), Hv = cfg.linear_num_value_heads;
      add("linear_attn.in_proj_qkv", LoraGroup::Qkv, 0, C, H);
      add("linear_attn.in_proj_z", LoraGroup::Qkv, C, VD, H);
      add("linear_attn.in_proj_b", LoraGroup::Qkv, C + VD, Hv, H);
      add("linear_attn.in_proj_a", LoraGroup::Qkv, C + VD + Hv, Hv, H);
      add("linear_attn.out_proj", LoraGroup::O, 0, H, VD);
    } else {
      // Gated attention: q_proj's 2Q rows give each head its query and its output gate, as in HF.
      const int64_t Qp = mixer == MixerKind::GatedAttention ? 2 * Q : Q;
      add("self_attn.q_proj", LoraGroup::Qkv, 0, Qp, H);
      add("self_attn.k_proj", LoraGroup::Qkv, Qp, K, H);
      add("self_attn.v_proj", LoraGroup::Qkv, Qp + K, K, H);
      add("self_attn.o_proj", LoraGroup::O, 0, H, Q);
    }
    if (cfg.layer_is_sparse(l)) {
      if (!cfg.has_shared_expert()) continue;
      // Qwen3.5-MoE's shared expert (rows of its fused [2 SI, H] gate_up) and its sigmoid gate.
      const int64_t SI = cfg.shared_expert_intermediate_size;
      add("mlp.shared_expert.gate_proj", LoraGroup::SharedGateUp, 0, SI, H);
      add("mlp.shared_expert.up_proj", LoraGroup::SharedGateUp, SI, SI, H);
      add("mlp.shared_expert.down_proj", LoraGroup::SharedDown, 0, H, SI);
      add("mlp.shared_expert_gate", LoraGroup::SharedGate, 0, 1, H);
      continue;
    }
    add("mlp.gate_proj", LoraGroup::GateUp, 0, I, H);
    add("mlp.up_proj", LoraGroup::GateUp, I, I, H);
    add("mlp.down_proj", LoraGroup::Down, 0, H, I);
  }
  return v;
}

std::vector<LoraAdapter> lora_parameter_candidates(const ModelConfig& cfg) {
  const int64_t H = cfg.hidden_size, I = cfg.moe_intermediate_size, E = cfg.num_experts;
  std::vector<LoraAdapter> v;
  for (int64_t l = 0; l < cfg.num_hidden_layers; ++l) {
    if (!cfg.layer_is_sparse(l)) continue;
    const std::string p = "model.layers." + std::to_string(l) + ".mlp.";
    auto add = [&](const std::string& name, LoraGroup g, int64_t experts, int64_t out, int64_t in) {
      LoraAdapter a;
      a.module = p + name, a.layer = l, a.group = g, a.out = out, a.in = in, a.experts = experts;
      v.push_back(a);
    };
    add("gate.weight", LoraGroup::Router, 1, E, H);
    add("experts.gate_up_proj", LoraGroup::ExpertGateUp, E, 2 * I, H);
    add("experts.down_proj", LoraGroup::ExpertDown, E, H, I);
  }
  return v;
}

std::vector<LoraAdapter> lora_select(const ModelConfig& cfg, const LoraConfig& c) {
  const std::vector<LoraAdapter> params = lora_parameter_candidates(cfg);
  std::vector<bool> pchosen(params.size(), false);
  for (const auto& pat : c.target_parameters) {
    size_t matched = 0;
    for (size_t i = 0; i < params.size(); ++i)
      if (module_pattern_match(pat, params[i].module)) pchosen[i] = true, ++matched;
    TITAN_CHECK(matched > 0, "[lora] target_parameters '", pat, "' matches no parameter (",
                params.empty() ? std::string("the model has no MoE layer")
                               : "they look like " + params.front().module + ", " + params[1].module + ", " +
                                     params[2].module,
                ")");
  }
  const std::vector<LoraAdapter> all = lora_candidates(cfg);
  std::vector<bool> chosen(all.size(), false);
  for (const auto& pat : c.target_modules) {
    size_t matched = 0;
    for (size_t i = 0; i < all.size(); ++i)
      if (module_pattern_match(pat, all[i].module)) chosen[i] = true, ++matched;
    if (matched > 0) continue;
    // Say why a pattern that names a real but unsupported module matched nothing.
    for (int64_t l = 0; l < cfg.num_hidden_layers && cfg.is_moe(); ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".mlp.";
      TITAN_CHECK(!module_pattern_match(pat, p + "gate") && !module_pattern_match(pat, p + "experts") &&
                      !module_pattern_match(pat, p + "experts.0.gate_proj") &&
                      !module_pattern_match(pat, p + "experts.0.up_proj") &&
                      !module_pattern_match(pat, p + "experts.0.down_proj"),
                  "[lora] target_modules '", pat, "' names an MoE router or expert projection: they are parameters "
                  "(transformers 5), name them in [lora] target_parameters (e.g. \"model.layers.*.mlp.experts.gate_up_proj\")");
      // A dense-MLP pattern such as mlp.*_proj on qwen3_5_moe: its MLP's linears sit one level down.
      TITAN_CHECK(!cfg.has_shared_expert() || !(module_pattern_match(pat, p + "gate_proj") ||
                                                module_pattern_match(pat, p + "up_proj") ||
                                                module_pattern_match(pat, p + "down_proj")),
                  "[lora] target_modules '", pat, "' matches no module: a qwen3_5_moe layer's MLP linears are its "
                  "shared expert's, ", p, "shared_expert.gate_proj ... (a glob's * stops at a dot: use "
                  "\"model.layers.*.mlp.**_proj\" or \"model.layers.*.mlp.shared_expert.*_proj\")");
    }
    fail("[lora] target_modules '", pat, "' matches no module (modules look like ",
         all.empty() ? std::string("(none)") : all.front().module, ")");
  }
  std::vector<LoraAdapter> out;
  for (size_t i = 0; i < all.size(); ++i)
    if (chosen[i]) out.push_back(all[i]);
  for (size_t i = 0; i < params.size(); ++i)
    if (pchosen[i]) out.push_back(params[i]);
  return out;
}

Philox lora_dropout_rng(uint64_t seed, const std::string& module, int64_t step) {
  // One stream per adapter and step: the name's hash mixed with the step (splitmix64's constant).
  const uint64_t s = stream_id((module + ".lora_dropout").c_str()) ^ (uint64_t(step) * 0x9E3779B97F4A7C15ull);
  return Philox{seed, s};
}

void lora_dropout_forward(const LoraDropout& d, const Tensor& x, Tensor& out) {
  const int64_t in = x.dim(x.ndim() - 1), T = x.numel() / in;
  out = Tensor::empty({T, in}, DType::F32);
  const float s = 1.f / (1.f - d.p);
  float* o = out.data<float>();
  const bool bf = x.dtype() == DType::BF16;
  TITAN_ASSERT(bf || x.dtype() == DType::F32, "lora dropout: input must be f32 or bf16");
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < T; ++t)
    for (int64_t k = 0; k < in; ++k) {
      const float v = bf ? bf16_to_f32(static_cast<const uint16_t*>(x.raw())[t * in + k]) : x.data<float>()[t * in + k];
      o[t * in + k] = d.keep(t, k, in) ? v * s : 0.f;
    }
}

void lora_dropout_backward(const LoraDropout& d, Tensor& y) {
  const int64_t in = y.dim(y.ndim() - 1), T = y.numel() / in;
  const float s = 1.f / (1.f - d.p);
  float* o = y.data<float>();
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < T; ++t)
    for (int64_t k = 0; k < in; ++k) o[t * in + k] = d.keep(t, k, in) ? o[t * in + k] * s : 0.f;
}

std::string lora_a_name(const std::string& module) { return module + ".lora_A.weight"; }
std::string lora_b_name(const std::string& module) { return module + ".lora_B.weight"; }

namespace {

// An operand of a LoRA product: rows of `cols` values at row stride ld, f32 or bf16.
struct Mat {
  const void* p;
  int64_t ld;
  DType dt;
};

Mat mat(const Tensor& t) { return Mat{t.raw(), t.dim(t.ndim() - 1), t.dtype()}; }

// The operand in the product's input dtype: as is when it already matches; f32 -> bf16 packs a
// rounded copy (rows x cols) into `keep`, bf16 -> f32 (f32 adapter GEMMs on a bf16 input) a widened one.
Mat as(const Mat& m, int64_t rows, int64_t cols, DType want, Tensor& keep) {
  if (m.dt == want) return m;
  TITAN_ASSERT((m.dt == DType::F32 && want == DType::BF16) || (m.dt == DType::BF16 && want == DType::F32),
               "lora: unexpected operand dtype");
  keep = Tensor::empty({rows, cols}, want);
  if (want == DType::F32) {
    const size_t es = 2;
    for (int64_t i = 0; i < rows; ++i)
      convert_floats(static_cast<const char*>(m.p) + size_t(i * m.ld) * es, DType::BF16, keep.data<float>() + i * cols,
                     DType::F32, size_t(cols));
    return Mat{keep.raw(), cols, DType::F32};
  }
  const float* src = static_cast<const float*>(m.p);
  uint16_t* dst = static_cast<uint16_t*>(keep.raw());
  if (m.ld == cols) {
    f32_to_bf16_array(src, dst, size_t(rows * cols));
  } else {
    for (int64_t i = 0; i < rows; ++i) f32_to_bf16_row(src + i * m.ld, dst + i * cols, size_t(cols));
  }
  return Mat{keep.raw(), cols, DType::BF16};
}

// c[m, n] (ldc) = alpha * op(a) op(b) + beta * c; a is op(a) [m, k] stored with a's rows of
// (ta ? m : k) values, b likewise; both rounded to `in` first when they are f32 and in is BF16.
void prod(const ExecContext& ctx, const GemmKernel& gk, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
          Mat a, Mat b, float beta, float* c, int64_t ldc, DType in) {
  Tensor ka, kb;
  a = as(a, ta ? k : m, ta ? m : k, in, ka);
  b = as(b, tb ? n : k, tb ? k : n, in, kb);
  GemmArgs g;
  g.trans_a = ta, g.trans_b = tb, g.m = m, g.n = n, g.k = k, g.alpha = alpha, g.beta = beta;
  g.a = a.p, g.lda = a.ld, g.b = b.p, g.ldb = b.ld, g.c = c, g.ldc = ldc, g.in_dtype = in;
  gemm(ctx, gk, g);
}

DType input_dtype(DType compute) { return compute == DType::BF16 ? DType::BF16 : DType::F32; }

// The input dtype of an adapter's GEMMs: bf16 under bf16 compute, unless A and B stay unrounded
// (then f32 over bf16-valued activations).
DType gemm_dtype(const LoraPrecision& p) { return p.round_weights ? input_dtype(p.compute) : DType::F32; }

// An activation operand (x, t, dy or dt) in its GEMM's input dtype: rounded to bf16 under bf16
// compute, and with unrounded weights then widened to f32 (bf16 values, as PEFT's bf16 activations).
Mat act(const LoraPrecision& p, const Mat& m, int64_t rows, int64_t cols, Tensor (&keep)[2]) {
  const DType dt = input_dtype(p.compute);
  if (dt == DType::F32 || p.round_weights) return as(m, rows, cols, dt, keep[0]);
  return as(as(m, rows, cols, DType::BF16, keep[0]), rows, cols, DType::F32, keep[1]);
}

// B_e [out, r] (contiguous) = columns j*E + e of B [out, r*E].
void expert_columns(const Tensor& B, int64_t r, int64_t E, int64_t e, std::vector<float>& be) {
  const int64_t out = B.dim(0);
  be.resize(size_t(out * r));
  const float* b = B.data<float>();
  for (int64_t o = 0; o < out; ++o)
    for (int64_t j = 0; j < r; ++j) be[size_t(o * r + j)] = b[o * r * E + j * E + e];
}

}  // namespace

void lora_merge_parameter(const ExecContext& ctx, const GemmKernel& gk, const Tensor& A, const Tensor& B,
                          int64_t experts, float scale, Tensor& W) {
  const int64_t E = experts, r = A.dim(0) / E, in = A.dim(1), out = B.dim(0);
  TITAN_ASSERT(W.dtype() == DType::F32 && W.numel() == E * out * in && B.dim(1) == r * E, "lora: parameter shapes");
  std::vector<float> be;
  for (int64_t e = 0; e < E; ++e) {
    expert_columns(B, r, E, e, be);
    GemmArgs g;  // W_e [out, in] += scale * B_e [out, r] @ A_e [r, in]
    g.m = out, g.n = in, g.k = r, g.alpha = scale, g.beta = 1.f;
    g.a = be.data(), g.lda = r, g.b = A.data<float>() + e * r * in, g.ldb = in;
    g.c = W.data<float>() + e * out * in, g.ldc = in;
    gemm(ctx, gk, g);
  }
}

void lora_parameter_backward(const ExecContext& ctx, const GemmKernel& gk, const Tensor& A, const Tensor& B,
                             int64_t experts, float scale, const Tensor& dW, Tensor& gA, Tensor& gB) {
  const int64_t E = experts, r = A.dim(0) / E, in = A.dim(1), out = B.dim(0);
  TITAN_ASSERT(dW.dtype() == DType::F32 && dW.numel() == E * out * in, "lora: parameter gradient shape");
  std::vector<float> be, gbe(size_t(out * r));
  float* gb = gB.data<float>();
  for (int64_t e = 0; e < E; ++e) {
    const float* dw = dW.data<float>() + e * out * in;
    expert_columns(B, r, E, e, be);
    GemmArgs a;  // gA_e [r, in] += scale * B_e^T [r, out] @ dW_e [out, in]
    a.trans_a = true, a.m = r, a.n = in, a.k = out, a.alpha = scale, a.beta = 1.f;
    a.a = be.data(), a.lda = r, a.b = dw, a.ldb = in, a.c = gA.data<float>() + e * r * in, a.ldc = in;
    gemm(ctx, gk, a);
    GemmArgs b;  // gB_e [out, r] = scale * dW_e [out, in] @ A_e^T [in, r]
    b.trans_b = true, b.m = out, b.n = r, b.k = in, b.alpha = scale, b.beta = 0.f;
    b.a = dw, b.lda = in, b.b = A.data<float>() + e * r * in, b.ldb = in, b.c = gbe.data(), b.ldc = r;
    gemm(ctx, gk, b);
    for (int64_t o = 0; o < out; ++o)
      for (int64_t j = 0; j < r; ++j) gb[o * r * E + j * E + e] += gbe[size_t(o * r + j)];
  }
}

void lora_forward(const ExecContext& ctx, const GemmKernel& gk, const Tensor& A, const Tensor& B, float scale,
                  const Tensor& x, Tensor& t, float* y, int64_t ldy, LoraPrecision prec, const LoraDropout* drop) {
  const int64_t r = A.dim(0), in = A.dim(1), T = x.numel() / in;
  const DType dt = gemm_dtype(prec);
  t = Tensor::empty({T, r}, DType::F32);
  Tensor xd;  // dropout(x), for this call only (the backward draws the same mask again)
  if (drop && drop->p > 0) lora_dropout_forward(*drop, x, xd);
  Tensor xk[2];
  const Mat xm = act(prec, mat(xd.defined() ? xd : x), T, in, xk);
  prod(ctx, gk, false, true, T, r, in, 1.f, xm, mat(A), 0.f, t.data<float>(), r, dt);  // t = d(x) A^T
  if (y) lora_forward_b(ctx, gk, B, scale, t, y, ldy, prec);                           // y += s t B^T
}

void lora_forward_b(const ExecContext& ctx, const GemmKernel& gk, const Tensor& B, float scale, const Tensor& t,
                    float* y, int64_t ldy, LoraPrecision prec) {
  const int64_t r = B.dim(1), out = B.dim(0), T = t.dim(0);
  TITAN_ASSERT(t.dim(1) == r, "lora: t [T, r] and B [out, r]");
  Tensor tk[2];
  prod(ctx, gk, false, true, T, out, r, scale, act(prec, mat(t), T, r, tk), mat(B), 1.f, y, ldy,
       gemm_dtype(prec));  // y += s t B^T
}

std::vector<ParamSpec> lora_param_specs(const std::vector<LoraAdapter>& adapters, int64_t rank) {
  std::vector<ParamSpec> v;
  for (const LoraAdapter& ad : adapters) {
    const int64_t R = rank * ad.experts;
    ParamSpec a, b;
    a.name = lora_a_name(ad.module), a.shape = {R, ad.in}, a.init = InitKind::LoraA;
    b.name = lora_b_name(ad.module), b.shape = {ad.out, R}, b.init = InitKind::Zeros;
    for (ParamSpec* s : {&a, &b}) s->unit = 1 + ad.layer, s->layer = ad.layer, s->role = ParamRole::Adapter;
    if (lora_column_parallel(ad.group)) b.placement.tp_dim = 0;  // the base's rows
    if (lora_row_parallel(ad.group)) a.placement.tp_dim = 1;     // the base's columns
    v.push_back(std::move(a));
    v.push_back(std::move(b));
  }
  return v;
}

void lora_backward(const ExecContext& ctx, const GemmKernel& gk, const Tensor& A, const Tensor& B, float scale,
                   const Tensor& x, const Tensor& t, const void* dy, int64_t lddy, DType dy_dtype, Tensor& dx,
                   Tensor& gA, Tensor& gB, LoraPrecision prec, const LoraDropout* drop) {
  const int64_t r = A.dim(0), in = A.dim(1), out = B.dim(0), T = x.numel() / in;
  const DType dt = gemm_dtype(prec);
  Tensor dyk[2], tk[2];
  const Mat dym = act(prec, Mat{dy, lddy, dy_dtype}, T, out, dyk);  // rounded once, read twice
  prod(ctx, gk, true, false, out, r, T, scale, dym, act(prec, mat(t), T, r, tk), 1.f, gB.data<float>(), r,
       dt);  // gB += s dy^T t
  Tensor dts = Tensor::empty({T, r}, DType::F32);
  prod(ctx, gk, false, false, T, r, out, scale, dym, mat(B), 0.f, dts.data<float>(), r, dt);  // dt = s dy B
  Tensor dtk[2], xk[2];
  const Mat dtm = act(prec, mat(dts), T, r, dtk);
  if (drop && drop->p > 0) {
    Tensor xd;
    lora_dropout_forward(*drop, x, xd);
    prod(ctx, gk, true, false, r, in, T, 1.f, dtm, act(prec, mat(xd), T, in, xk), 1.f, gA.data<float>(), in,
         dt);  // gA += dt^T d(x)
    Tensor dxd = Tensor::empty({T, in}, DType::F32);
    prod(ctx, gk, false, false, T, in, r, 1.f, dtm, mat(A), 0.f, dxd.data<float>(), in, dt);  // d(d(x)) = dt A
    lora_dropout_backward(*drop, dxd);
    float* o = dx.data<float>();
    const float* g = dxd.data<float>();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < T * in; ++i) o[i] += g[i];  // dx += mask / (1 - p) * (dt A)
    return;
  }
  prod(ctx, gk, true, false, r, in, T, 1.f, dtm, act(prec, mat(x), T, in, xk), 1.f, gA.data<float>(), in,
       dt);                                                                                // gA += dt^T x
  prod(ctx, gk, false, false, T, in, r, 1.f, dtm, mat(A), 1.f, dx.data<float>(), in, dt);  // dx += dt A
}

}  // namespace titan
