// LoRA adapters (Hu et al. 2021), as PEFT defines them: a targeted linear y = x W^T becomes
//   y = x W^T + scale * (x A^T) B^T,   A [r, in], B [out, r],
//   scale = alpha / r, or alpha / sqrt(r) with use_rslora (Kalajdzievski 2023);
// PEFT's default init: A Kaiming-uniform (a = sqrt(5): U(-1/sqrt(in), 1/sqrt(in))), B zeros, so a
// fresh adapter is a no-op. Backward, with t = x A^T saved and dy the output gradient:
//   dB += scale * dy^T t;   dt = scale * dy B;   dA += dt^T x;   dx += dt A.
//
// Targets are glob patterns (model/replace.h syntax, plus [abc] classes) over the HF module names
// of the decoder's linears: model.layers.N.self_attn.{q,k,v,o}_proj, model.layers.N.mlp.
// {gate,up,down}_proj. The engine keeps q/k/v and gate/up fused (model/params.h), so an adapter
// acts on its module's row range of the fused projection output (q_proj: rows [0, Q) of qkv).
// Dense Qwen3.5: a gated-attention layer's q_proj has 2 Q rows (each head's query then its output
// gate, HF's layout; the adapter covers them all, as PEFT's does); a Gated DeltaNet layer's
// linear_attn.in_proj_{qkv,z,b,a} are rows of its fused in-projection (group Qkv) and
// linear_attn.out_proj is its output projection (group O). Qwen3.5-MoE: the same mixers, and
// in each (sparse) layer the shared expert's mlp.shared_expert.{gate,up,down}_proj (ordinary
// nn.Linear modules in transformers: gate/up are rows of the fused [2 SI, H] shared gate_up,
// group SharedGateUp; down_proj group SharedDown) and mlp.shared_expert_gate, the [1, H] linear
// whose sigmoid scales the shared expert (group SharedGate: its adapter adds into the gate logit
// before the sigmoid). shared_expert_gate is an nn.Linear in transformers, so PEFT adapts it when a
// target names it (its "all-linear" does); this engine does too, rather than refuse a PEFT folder
// that holds it. The routed experts and the router are parameters (target_parameters, below).
// Adapter parameters keep PEFT's names without its "base_model.model." prefix:
//   model.layers.0.self_attn.q_proj.lora_A.weight [r, in], ...lora_B.weight [out, r].
//
// MoE parameters (PEFT's target_parameters, its ParamWrapper): in transformers 5 a Qwen3-MoE layer's
// experts are fused 3-D parameters and its router is not an nn.Linear, so PEFT adapts the
// parameters themselves. A targeted parameter W (a router weight [E, H] is 2-D, one "expert"; the
// experts' gate_up_proj [E, 2I, H] / down_proj [E, H, I] are [E, out, in]) is used as
//   W'_e = W_e + scale * B_e A_e,  A_e = A[e*r : (e+1)*r, :]  (A [E*r, in], expert-major rows),
//                                  B_e[o, j] = B[o, j*E + e]   (B [out, r*E], rank-major columns)
// in every pass (PEFT's layout and delta, get_delta_factors). With dW' the gradient of the
// merged weight:  dA_e += scale * B_e^T dW'_e;  dB_e += scale * dW'_e A_e^T.
// PEFT refuses lora_dropout on target_parameters, so does this engine.
//
// Dropout (PEFT's lora_dropout p, training passes only): y = x W^T + scale * (d(x) A^T) B^T with
// d(x) = x * mask / (1 - p), mask ~ Bernoulli(1 - p) per element, drawn for each adapter
// separately. The backward uses the same mask: dA += dt^T d(x), dx += mask / (1 - p) * (dt A).
// Bit-equality with PyTorch's RNG is not a goal; the mask is a pure function of (seed, step,
// adapter, global sample index, position, feature), counter-based (core/rng.h), so it is the same
// for any thread count, any rank count (a sample has the same global index wherever it runs),
// in a recomputation, and after a resume.
//
// Tensor parallelism (model/tensor_parallel.h): an adapter is split like the linear it adapts, as
// PEFT's tensor-parallel plan does. On a column-parallel linear (q/k/v, gate/up: a rank holds rows
// of W) lora_A [r, in] is replicated and lora_B holds the same rows as W: t = x A^T is whole on every
// rank and y_local += scale * t B_local^T; backward, dt = scale * dy_local B_local and so dA = dt^T x
// and the input gradient dt A are partial sums over tp, dA summed in the layer and dx with the
// base's input gradient. On a row-parallel linear (o_proj, down_proj: a rank holds columns of W)
// lora_A holds the same columns as W [r, in/tp] and lora_B [out, r] is replicated: x_local A_local^T
// is a partial sum, all-reduced over tp ([T, r], small) before B, and the product is added to the
// reduced output (this rank's rows of it under sequence parallelism); backward, dy is whole (the
// layer gathers it), so dB and dt are whole on every rank and dA_local = dt^T x_local and the input
// gradient dt A_local are this rank's columns: no collective. Dropout masks are keyed by the
// feature's index in the whole input, so they are one process's. Adapters on MoE parameters
// (target_parameters) are not split in this build.
#pragma once
#include <string>
#include <vector>

#include "core/exec_context.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "model/config.h"
#include "model/param_spec.h"

namespace titan {

struct GemmKernel;

// The precision of an adapter's GEMMs: the step's compute dtype; under BF16, round_weights false
// keeps A and B unrounded (the products in f32 over the bf16-rounded activations and gradients).
struct LoraPrecision {
  DType compute = DType::F32;
  bool round_weights = true;
  LoraPrecision(DType c, bool rw = true) : compute(c), round_weights(rw) {}  // NOLINT: a DType is the common case
};

struct LoraConfig {
  int64_t rank = 8;
  double alpha = 16;
  double dropout = 0;  // PEFT's lora_dropout, in [0, 1)
  std::vector<std::string> target_modules;
  // Glob patterns over the MoE parameter names (PEFT's target_parameters): per sparse layer N
  // model.layers.N.mlp.gate.weight, model.layers.N.mlp.experts.gate_up_proj, ...experts.down_proj.
  std::vector<std::string> target_parameters;
  bool use_rslora = false;
  // Under bf16 compute, whether the adapters' A and B are rounded to bf16 in their GEMMs like every
  // bf16 GEMM input (so a bf16 base trains bit-identically to an f32 base with bf16 mixed
  // precision). false: A and B enter unrounded, as PEFT keeps the adapters f32 on a bf16 base
  // (autocast_adapter_dtype); the activations and their gradients are still rounded to bf16.
  bool round_adapters = true;
  double scale() const;
  void validate(const std::string& where) const;
};

// Which fused projection output an adapter adds into.
// Router / ExpertGateUp / ExpertDown: a targeted MoE parameter (merged into the weight).
// SharedGateUp / SharedDown / SharedGate: qwen3_5_moe's shared expert and its gate (linear modules).
enum class LoraGroup { Qkv, O, GateUp, Down, Router, ExpertGateUp, ExpertDown, SharedGateUp, SharedDown, SharedGate };

struct LoraAdapter {
  std::string module;  // HF module name, "model.layers.3.self_attn.q_proj"
  int64_t layer = 0;
  LoraGroup group = LoraGroup::Qkv;
  int64_t row0 = 0, out = 0, in = 0;  // rows [row0, row0 + out) of the group's output; in-features
  size_t param = 0;                    // index of lora_A in the adapter ParamStore (lora_B follows)
  int64_t experts = 1;                 // a targeted MoE parameter: E for the experts, 1 for the router
  // A targeted parameter (target_parameters; `module` is then its name) rather than a linear module.
  bool is_parameter() const { return group == LoraGroup::Router || group == LoraGroup::ExpertGateUp ||
                                     group == LoraGroup::ExpertDown; }
  int64_t numel(int64_t rank) const { return rank * experts * (in + out); }  // of lora_A and lora_B
};

// Every linear module of `cfg` that LoRA can target, in HF order (a sparse layer's attention
// projections and, on qwen3_5_moe, its shared expert's projections and gate; its router and
// experts are parameters, below).
std::vector<LoraAdapter> lora_candidates(const ModelConfig& cfg);
// Every MoE parameter that target_parameters can name, in HF order (per sparse layer: router,
// experts' gate_up_proj, down_proj).
std::vector<LoraAdapter> lora_parameter_candidates(const ModelConfig& cfg);

// The candidates matched by c.target_modules and c.target_parameters, modules first (each pattern
// must match at least one; a target_modules pattern naming an MoE expert or router is an error
// pointing to target_parameters).
std::vector<LoraAdapter> lora_select(const ModelConfig& cfg, const LoraConfig& c);

// A targeted parameter's forward: W [E, out, in] (or [out, in]; f32) += scale * B_e A_e for every
// expert e (A, B laid out as above). Also merges an adapter into the base for good.
void lora_merge_parameter(const ExecContext& ctx, const GemmKernel& gk, const Tensor& A, const Tensor& B,
                          int64_t experts, float scale, Tensor& W);
// Its backward from dW [E, out, in] f32, the gradient of the merged weight: gA, gB accumulate.
void lora_parameter_backward(const ExecContext& ctx, const GemmKernel& gk, const Tensor& A, const Tensor& B,
                             int64_t experts, float scale, const Tensor& dW, Tensor& gA, Tensor& gB);

std::string lora_a_name(const std::string& module);
std::string lora_b_name(const std::string& module);

// How tensor parallelism splits an adapter of group g: lora_B's rows on a column-parallel linear
// (Qkv, GateUp), lora_A's columns on a row-parallel one (O, Down), nothing (replicated) otherwise.
inline bool lora_column_parallel(LoraGroup g) { return g == LoraGroup::Qkv || g == LoraGroup::GateUp; }
inline bool lora_row_parallel(LoraGroup g) { return g == LoraGroup::O || g == LoraGroup::Down; }
// The adapters' tensors as ParamSpecs (model/param_spec.h), lora_A then lora_B of each adapter in
// the order given (DecoderModel::lora_params() order): whole shapes ([rank * experts, in],
// [out, rank * experts]), the unit of the adapter's layer, role Adapter, init LoraA / Zeros, and
// the tensor-parallel split above as placement.tp_dim (a row of the base is a row of lora_B, a
// column of the base a column of lora_A).
std::vector<ParamSpec> lora_param_specs(const std::vector<LoraAdapter>& adapters, int64_t rank);

// One adapter's dropout in one training pass: token t of its input [T, in] is position t % seq of
// global sample row0 + t / seq (the sample's index in the optimizer step's global batch).
// Tensor parallelism: a row-parallel adapter's input holds features [col0, col0 + in) of `cols`
// (cols 0: the input is whole), so each element keeps its whole-input mask.
struct LoraDropout {
  float p = 0;     // dropout probability, in (0, 1)
  Philox rng;      // seed: the run's; stream: the adapter and the step (lora_dropout_rng)
  int64_t row0 = 0, seq = 1;
  int64_t col0 = 0, cols = 0;
  // Whether element (t, k) of an input with `in` features is kept.
  bool keep(int64_t t, int64_t k, int64_t in) const {
    const uint64_t n = uint64_t(cols > 0 ? cols : in);
    const uint64_t i = (uint64_t(row0 + t / seq) * uint64_t(seq) + uint64_t(t % seq)) * n + uint64_t(col0 + k);
    return rng.uniform(i) >= p;
  }
};
Philox lora_dropout_rng(uint64_t seed, const std::string& module, int64_t step);
// out [T, in] f32 = dropout(x) (x f32 or bf16, [T, in]).
void lora_dropout_forward(const LoraDropout& d, const Tensor& x, Tensor& out);
// y [T, in] f32 *= mask / (1 - p), in place (the backward of the dropout).
void lora_dropout_backward(const LoraDropout& d, Tensor& y);

// The adapter's forward on one projection: t [T, r] = x A^T (kept for backward); when y is not
// null, y[:, 0:out] (rows at ldy, f32) += scale * t B^T. x is [T, in] f32 or bf16. With compute
// BF16 the products round their inputs to bf16 (f32 accumulation), as the base GEMMs do; A and B
// too unless prec.round_weights is false.
// drop: null (or p = 0) for no dropout; else x A^T reads dropout(x).
void lora_forward(const ExecContext& ctx, const GemmKernel& gk, const Tensor& A, const Tensor& B, float scale,
                  const Tensor& x, Tensor& t, float* y, int64_t ldy, LoraPrecision prec,
                  const LoraDropout* drop = nullptr);
// Its second product alone: y[:, 0:out] (rows at ldy) += scale * t B^T for t [rows, r] (the rows
// of y; a row-parallel adapter's t once reduced over tp).
void lora_forward_b(const ExecContext& ctx, const GemmKernel& gk, const Tensor& B, float scale, const Tensor& t,
                    float* y, int64_t ldy, LoraPrecision prec);
// Its backward: dy is [T, out] at lddy, f32 or bf16 (dy_dtype); dx [T, in] f32 += the adapter's
// input gradient; gA, gB accumulate.
void lora_backward(const ExecContext& ctx, const GemmKernel& gk, const Tensor& A, const Tensor& B, float scale,
                   const Tensor& x, const Tensor& t, const void* dy, int64_t lddy, DType dy_dtype, Tensor& dx,
                   Tensor& gA, Tensor& gB, LoraPrecision prec, const LoraDropout* drop = nullptr);

}  // namespace titan
