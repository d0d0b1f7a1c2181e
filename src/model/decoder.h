// Qwen3ForCausalLM (dense): forward and explicit backward, HF parameter names, on kernel sets.
//
// Shapes (T = B * S tokens, H hidden, Q = heads * head_dim, K = kv_heads * head_dim, I ffn):
//   x  [T, H] residual stream
//   per layer: xn1 = rmsnorm(x); qkv = xn1 @ Wqkv^T [T, Q+2K]; q, k <- per-head rmsnorm(q_norm,
//   k_norm) then RoPE; a = attention(q, k, v) [T, Q]; h = x + a @ Wo^T; xn2 = rmsnorm(h);
//   gu = xn2 @ Wgu^T [T, 2I]; x' = h + swiglu(gu) @ Wdown^T
//   final: xf = rmsnorm(x_L); loss = CE(xf @ Wlm^T, labels) in vocab-sized chunks.
//
// Passes: forward (scoring) and forward_backward (training) both run forward_layers, the one
// embedding + decoder-layer loop, and both follow the unit schedule of model/unit_schedule.h
// (the hook calls, checked against it at every compute step). One layer's forward and backward
// are in decoder_layer.cpp.
//
// Qwen3-MoE (config.is_moe()): a sparse layer's MLP is the MoE op instead (ops/moe/moe.h):
//   x' = h + moe(xn2; router [E, H], gate_up [E, 2I, H], down [E, H, I]), experts stacked in one
//   buffer each; the per-expert HF parameters are row-slice views of them (gate_proj of expert e =
//   gate_up[e, :I], up_proj = gate_up[e, I:], down_proj = down[e]), so names stay HF's.
//   With output_router_logits the returned loss sum is CE_sum + n * coef * aux, where n =
//   count_labels(labels) and aux is HF's load_balancing_loss_func over every sparse layer's router
//   logits of this call: divided by n it is transformers' loss, CE_mean + coef * aux.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/context_parallel.h"
#include "model/expert_parallel.h"
#include "model/pipeline.h"
#include "model/kernels.h"
#include "model/lora.h"
#include "model/params.h"
#include "model/tensor_parallel.h"
#include "model/unit_hooks.h"
#include "model/unit_schedule.h"

namespace titan {

enum class InitScheme { Torchtitan, HF };
InitScheme parse_init_scheme(const std::string& s);

struct LayerActs;        // saved activations of one decoder layer (model/decoder_layer.h)
struct ActivationStore;  // what a training forward keeps for the backward (model/decoder_layer.h)
struct InferenceState;   // per-layer state of a generating batch (model/inference_state.h)

// Positions of the tokens of a call: each sequence's S tokens are at positions start..start+S-1
// (start > 0: a continuation after cached positions, for generation with a KV cache).
// Packed documents (block-causal, model/positions.h): doc_start [B * S] gives, per token, the
// index in its sequence of its document's first token; each document's positions restart at 0
// and its tokens attend only within it. nullptr: one document per sequence.
//
// Context parallelism (model/context_parallel.h): the S tokens of a call are this rank's chunks of
// sequences of global_seq tokens; doc_start then holds global token indices.
struct Positions {
  int64_t start = 0;
  const int64_t* doc_start = nullptr;
  const std::vector<SeqChunk>* chunks = nullptr;  // null: the whole sequence
  int64_t global_seq = 0;                         // with chunks
};

class DecoderModel {
 public:
  // deferred: parameters and gradients get no memory (Tensor::deferred) until someone allocates
  // their storage, as fully sharded data parallelism does one unit at a time.
  // frozen: built with the base frozen (freeze_base()) from the start: no gradient buffer is ever
  // allocated, so a LoRA run's memory never holds base gradients, not even during setup.
  // weight_dtype BF16 (inference only, needs frozen): the matmul weights (q/k/v/o, MLP and
  // expert projections, an untied lm_head) are stored in bf16 and the model computes in bf16:
  // a loader reads them straight into bf16 (half the memory; no f32 copy is ever held). Norms,
  // biases, the router and the embedding stay f32.
  // tp: tensor parallelism (model/tensor_parallel.h): the parameters get their local shapes and
  // the layers run the tp group's collectives; training and scoring only (no generation); LoRA
  // adapters are split like their linears (model/lora.h).
  // device: where parameters, gradients, the RoPE tables and activations live and the kernels run
  // (kernel_set(kernel_variant, device.type)). cuda:0 (docs/cuda.md "The model on the GPU"): the
  // dense f32 or bf16-compute path with the q/k norm, training and scoring only, no parallelism,
  // LoRA, MoE or Qwen3.5 layers; the rest refuses in one line.
  DecoderModel(const ModelConfig& cfg, const std::string& kernel_variant = default_variant(), bool deferred = false,
               bool frozen = false, DType weight_dtype = DType::F32, const TensorParallel& tp = {},
               const ExpertParallel& ep = {}, const PipelineStages& pp = {}, Device device = cpu());
  ~DecoderModel();

  const ModelConfig& config() const { return cfg_; }
  const TensorParallel& tensor_parallel() const { return tp_; }
  // Context parallelism (model/context_parallel.h): training and scoring calls then take this
  // rank's chunks of each sequence (cp_take_sequence of ids, labels and positions). It changes no
  // parameter; causal-attention families only (not the Qwen3.5 linear-attention layers), no LoRA,
  // no pipeline stages, no router auxiliary loss.
  void set_context_parallel(const ContextParallel& cp);
  const ContextParallel& context_parallel() const { return cp_; }
  const ExpertParallel& expert_parallel() const { return ep_; }
  // Pipeline parallelism (model/pipeline.h): the stages this model holds; only their units have
  // parameters, and training goes through stage_forward / stage_backward.
  const PipelineStages& pipeline() const { return pp_; }
  bool holds_unit(int64_t u) const { return pp_.holds_unit(u, cfg_.num_hidden_layers, cfg_.tie_word_embeddings); }
  // One microbatch's forward through stage `stage` (held by this model): ids [B, S] (every stage
  // reads them: the first embeds them, the last's loss needs their shape), x_in [B*S, H] the
  // previous stage's output (stages > 0). Writes the stage output into *x_out (not the last stage)
  // and returns what its backward needs.
  struct StagePass;
  std::shared_ptr<StagePass> stage_forward(int64_t stage, const Tensor& ids, const Tensor* positions,
                                           const Tensor* x_in, Tensor* x_out);
  // Its backward: on the last stage the head's forward, loss (returned: the sum over the labelled
  // tokens) and backward with grad_scale, else from dy_out = d(stage output); the stage's
  // layers; on the first stage the embedding's backward, else *dx_in = d(stage input).
  // Parameter gradients accumulate as in forward_backward.
  double stage_backward(StagePass& p, const Tensor& labels, float grad_scale, const Tensor* dy_out, Tensor* dx_in);
  // The rows of a stage border's activations for `tokens` tokens on this rank (tokens / tp under
  // sequence parallelism: each tp rank sends and receives its own rows).
  int64_t stage_rows(int64_t tokens) const { return tp_rows(tokens); }
  // Expert parallelism: the bytes this rank's MoE blocks have sent to the other ep ranks so far
  // (dispatch and combine, forward and backward).
  int64_t expert_dispatch_bytes() const { return ep_bytes_; }
  // What each parameter is (unit, role, init, placement), in params() order.
  const std::vector<ParamSpec>& param_specs() const { return specs_; }
  // Each layer's mixer and MLP kind (model/layer_kind.h).
  const std::vector<LayerKind>& layer_kinds() const { return kinds_; }
  ParamStore& params() { return params_; }
  const ParamStore& params() const { return params_; }

  // Kernels per layer (index n_layers is the embedding / final norm / head set).
  KernelSet& layer_kernels(int64_t layer) { return kernels_.at(size_t(layer)); }
  KernelSet& head_kernels() { return kernels_.back(); }
  // Where every kernel call of this model runs (core/exec_context.h): the device of its kernel
  // set (the CPU today), the stream and workspace a device backend fills in.
  const ExecContext& exec() const { return exec_; }

  // unit >= 0: only that unit's parameters (the same values as a whole-model init gives them).
  void init_weights(InitScheme scheme, uint64_t seed, int64_t unit = -1);

  int64_t num_units() const { return int64_t(unit_begin_.size()) - 1; }
  // Parameter indices [first, last) of a unit (ParamStore order).
  std::pair<size_t, size_t> unit_params(int64_t unit) const {
    return {unit_begin_.at(size_t(unit)), unit_begin_.at(size_t(unit) + 1)};
  }
  int64_t unit_of_layer(int64_t layer) const { return 1 + layer; }
  // Installs (or with nullptr removes) the hooks; the caller keeps them alive.
  void set_unit_hooks(UnitHooks* h) { hooks_ = h; }
  void set_compute_dtype(DType d);
  DType weight_dtype() const { return weight_dtype_; }
  DType compute_dtype() const { return compute_; }
  void set_checkpointing(Checkpointing c) { ckpt_ = c; }

  // MoE: the stacked expert storage of a sparse layer (null for dense layers), for the state-dict
  // adapter (fused HF layout). gate_up [E, 2I, H], down [E, H, I], router [E, H].
  Tensor* expert_gate_up(int64_t layer);
  Tensor* expert_down(int64_t layer);
  // The unweighted auxiliary loss of the last forward(_backward) (0 without sparse layers or when
  // output_router_logits is false).
  double last_aux_loss() const { return last_aux_; }

  // torchtitan's auxiliary-loss-free load balancing: each sparse layer gets an expert bias [E]
  // (zeros) that steers only the top-k choice (ops/moe/moe.h). forward_backward counts the tokens
  // routed to each expert; update_expert_bias (once per optimizer step, before it) applies
  //   delta = coeff * sign(mean(counts) - counts);  bias += delta - mean(delta)
  // and clears the counts. The biases are training state (checkpointed), not HF parameters.
  void enable_expert_bias();
  bool has_expert_bias() const { return !bias_.empty(); }
  void update_expert_bias(float coeff);
  // name "model.layers.N.mlp.expert_bias" -> bias [E], then "...tokens_per_expert" -> counts [E] f32.
  // The biases are on the model's device, the counts always on the host (decoder.cpp).
  std::vector<NamedTensor> expert_bias_state();

  // LoRA (model/lora.h): adapters on the linears that c.target_modules names, their parameters
  // in lora_params() (PEFT's init: A Kaiming-uniform from `seed`, B zeros), computed in every
  // pass from then on. Their gradients accumulate like the base's.
  void enable_lora(const LoraConfig& c, uint64_t seed);
  bool lora_enabled() const { return !lora_.empty(); }
  const LoraConfig& lora_config() const { return lora_cfg_; }
  // [lora] round_adapters on adapters already enabled (a PEFT folder's load sets the rest).
  void set_lora_round_adapters(bool on) { lora_cfg_.round_adapters = on; }
  const std::vector<LoraAdapter>& lora_adapters() const { return lora_; }
  ParamStore& lora_params() { return lora_params_; }
  const ParamStore& lora_params() const { return lora_params_; }
  // What each adapter tensor is (whole shape, unit, tensor-parallel placement; model/lora.h
  // lora_param_specs), in lora_params() order; under tensor parallelism lora_params() holds this
  // rank's local shapes of them.
  const std::vector<ParamSpec>& lora_param_specs() const { return lora_specs_; }
  // Freezes every base parameter: their gradient buffers are released (Param::grad undefined)
  // and the backward computes no base weight gradient, only the input gradients it needs.
  void freeze_base();
  // W += scale * B A into every adapted module's weight (its rows of the fused buffer), then the
  // adapters are removed: the plain model that computes what the adapted one did.
  void merge_lora();
  bool base_frozen() const { return base_frozen_; }
  // Inference: merges the adapters on MoE parameters (router, experts) into the base weights for
  // good, so a pass no longer merges them into copies (the result is bit-identical: the same
  // W + delta). Their adapter values stay (save_peft_adapter still writes them); training after
  // this is an error.
  void merge_lora_parameters();
  bool lora_parameters_merged() const { return lora_params_merged_; }
  // LoRA dropout (lora_config().dropout > 0; forward_backward only, scoring never drops): the
  // next forward_backward calls belong to optimizer step `step`, and their row 0 is sample `row0`
  // of the step's global batch (model/lora.h: the mask is a function of these, not of history).
  void set_lora_dropout_rows(int64_t step, int64_t row0) { lora_step_ = step, lora_row0_ = row0; }

  // ids, labels: [B, S] i64; label -100 is ignored. Returns the SUM of token losses; the number
  // of counted tokens is count_labels(labels). logits_out (optional): [B*S, V] f32.
  // In training (no logits_out) the lm_head and loss run only on the counted rows when they are at
  // most half of them (exact: an ignored row has no loss and no gradient); head_rows(labels) is
  // the number of rows they run on, for the FLOPs a step really needs.
  // positions (optional, [B, S] i64, transformers' position_ids of packed documents): each
  // document's positions count 0, 1, ... and its tokens attend only within it (block-causal);
  // without, each sequence is one document at positions 0..S-1.
  static int64_t head_rows(const Tensor& labels);
  double forward(const Tensor& ids, const Tensor& labels, Tensor* logits_out = nullptr,
                 const Tensor* positions = nullptr);
  // Forward and backward: gradients of grad_scale * (sum of token losses) are ADDED to the
  // params' grads. Returns the loss sum.
  double forward_backward(const Tensor& ids, const Tensor& labels, float grad_scale,
                          const Tensor* positions = nullptr);
  // Generation: ids [rows, S] i64 are the next S columns of every row of the left-padded batch
  // whose keys and values `cache` holds (S = the padded prompt width at the first call, with
  // cache.first = each row's padding; then 1 per decoding step). Their keys and values join the
  // cache; logits [rows, V] f32 (allocated when undefined) get each row's next-token logits,
  // those after its last new column. Only the new columns are computed, and the head only on the
  // last one.
  void forward_cached(const Tensor& ids, InferenceState& cache, Tensor& logits);
  // Keeps the bf16 weight copies (compute dtype BF16) from one call to the next instead of
  // rounding them again per call: for inference, where the weights do not change. Call it again
  // after changing weights.
  void hold_compute_weights(bool on);

 private:
  struct Layer;
  class Steps;
  // The last hidden state [B*S, H] (before the final norm) and, when the auxiliary loss is on,
  // every sparse layer's router logits [B*S, E].
  struct Hidden {
    Tensor x;
    std::vector<Tensor> router_logits;
  };
  // The one forward through the embedding and the decoder layers, for scoring, training and
  // (next) generation. store: null for pure inference (each layer's activations are dropped when
  // it ends); else it receives the layer inputs and what each layer's backward needs (by the
  // checkpointing mode). A KV cache joins as one more argument of this loop.
  // cache: generation (forward_cached); pos then only bounds the positions (RoPE table size).
  Hidden forward_layers(const Tensor& ids, Positions pos, ActivationStore* store, Steps& steps,
                        InferenceState* cache = nullptr);
  // The decoder layers' backward from d(last hidden state) (dx, [B*S, H], becomes d(embedding
  // output)); dlogits: per layer, the auxiliary loss's gradient on its router logits (or undefined).
  // Layers [l0, l1) only (a pipeline stage's; default: all).
  void backward_layers(ActivationStore& store, Tensor& dx, std::vector<Tensor>& dlogits, int64_t B, int64_t S,
                       Positions pos, Steps& steps, size_t l0 = 0, size_t l1 = size_t(-1));
  // forward_layers' loop over layers [l0, l1): x (the residual stream) in, their output out;
  // the layer inputs and activations into store (by the checkpointing mode), router logits into
  // out when the auxiliary loss is on.
  void forward_layer_range(size_t l0, size_t l1, Tensor& x, int64_t B, int64_t S, Positions pos,
                           ActivationStore* store, Steps& steps, InferenceState* cache, Hidden* out);
  void build_params();
  RopeCache rope_cache(int64_t max_pos) const;  // positions [0, max_pos), with the config's scaling
  // One decoder layer (model/decoder_layer.cpp).
  void layer_forward(size_t l, const Tensor& x, Tensor* out, LayerActs& a, int64_t B, int64_t S, Positions pos,
                     InferenceState* cache = nullptr);
  // With a KV cache (model/decoder_cache.cpp): RoPE of a.q / a.k at each row's positions, the new
  // keys and values into the cache, a.attn = attention of the new queries over the cache.
  void attend_cached(size_t l, LayerActs& a, int64_t B, int64_t S, InferenceState& cache);
  // The prefill's attention (cache.len == 0) over a left-padded batch: q [B, S, heads, D] and
  // k [B, S, kv heads, D] after RoPE, v at column v_col of `qkv` [B * S, .]; rows without padding
  // in one call, each padded row alone on its real columns; padding columns' outputs are zero.
  void prefill_attention(size_t l, const Tensor& q, const Tensor& k, const Tensor& qkv, int64_t v_col, Tensor& attn,
                         int64_t B, int64_t S, const InferenceState& cache);
  void layer_backward(size_t l, const Tensor& x, LayerActs& a, Tensor& dx, int64_t B, int64_t S, Positions pos,
                      const Tensor* dlogits_extra);
  // The layer kinds' blocks (model/layers/): the mixer block maps x to a.h = x + mixer(norm(x))
  // (backward: dx = d(a.h) in, d(x) out); the MLP block maps a.xn2 to residual + mlp(a.xn2).
  void attention_forward(size_t l, const Tensor& x, LayerActs& a, int64_t B, int64_t S, Positions pos,
                         InferenceState* cache);
  void attention_backward(size_t l, const Tensor& x, LayerActs& a, Tensor& dx, int64_t B, int64_t S, Positions pos);
  void dense_mlp_forward(size_t l, LayerActs& a, const Tensor& residual, Tensor* out, int64_t T);
  void dense_mlp_backward(size_t l, LayerActs& a, const Tensor& dy, Tensor& dxn2, int64_t T);
  void moe_mlp_forward(size_t l, LayerActs& a, const Tensor& residual, Tensor* out, int64_t T);
  void moe_mlp_backward(size_t l, LayerActs& a, const Tensor& dy, Tensor& dxn2, int64_t T, const Tensor* dlogits_extra);
  MoEArgs moe_args(size_t l, const LayerActs& a) const;
  // Qwen3.5 (model/layers/qwen3_5_layer.cpp, gated_deltanet.cpp, gated_attention.cpp): a layer's
  // parameters, its two mixer kinds (the same block contract as attention_forward/backward), the
  // MoE block's shared expert (y += sigmoid(x Wg^T) shared(x); backward dxn2 +=), and the norm
  // weight a norm computes with (w, or 1 + w for the family's zero-centred norms).
  std::pair<Tensor, Tensor> new_param(const Shape& s, DType dt) const;
  void build_qwen3_5_layer(size_t l);
  Tensor norm_weight(const Tensor& w) const;
  // An f32 activation on the model's device: inside the model's members this hides layer_util's
  // host f32(), so every activation buffer is allocated where the kernels run.
  Tensor f32(const Shape& s) const { return Tensor::empty(s, DType::F32, exec_.device); }
  Device dev() const { return exec_.device; }
  bool on_gpu() const { return exec_.device.type != DeviceType::CPU; }
  void check_host(const char* what) const;  // refuses a GPU model in one line
  void gated_deltanet_forward(size_t l, const Tensor& x, LayerActs& a, int64_t B, int64_t S, Positions pos,
                              InferenceState* cache);
  void gated_deltanet_backward(size_t l, const Tensor& x, LayerActs& a, Tensor& dx, int64_t B, int64_t S,
                               Positions pos);
  void gated_attention_forward(size_t l, const Tensor& x, LayerActs& a, int64_t B, int64_t S, Positions pos,
                               InferenceState* cache);
  void gated_attention_backward(size_t l, const Tensor& x, LayerActs& a, Tensor& dx, int64_t B, int64_t S,
                                Positions pos);
  // The mixer block's input norm backward: dxn1 [T, H] is d(xn1) (with tensor parallelism this
  // rank's partial sum, the column-parallel projections' input gradient: reduced over tp, then the
  // norm on this rank's rows); dx += the norm's input gradient, its weight's gradient accumulated.
  void mixer_norm_backward(size_t l, const Tensor& x, const LayerActs& a, Tensor& dxn1, Tensor& dx);
  void shared_expert_forward(size_t l, LayerActs& a, Tensor& y, int64_t T);
  void shared_expert_backward(size_t l, LayerActs& a, const Tensor& dy, Tensor& dxn2, int64_t T);
  // LoRA on one projection group of layer l (model/decoder_lora.cpp; no-ops without adapters
  // there): forward adds each adapter into its rows of the group's output y (y null: only the
  // saved x A^T, for a recomputation); backward takes d(output) and adds into dx.
  void lora_forward_group(size_t l, LoraGroup g, const Tensor& x, Tensor* y, LayerActs& a);
  bool lora_targets(size_t l, LoraGroup g) const;  // whether layer l has an adapter in group g
  // The adapters' GEMM precision: the step's, A and B unrounded with [lora] round_adapters = false.
  LoraPrecision lora_compute() const { return LoraPrecision(compute_, lora_cfg_.round_adapters); }
  void lora_backward_group(size_t l, LoraGroup g, const Tensor& x, LayerActs& a, const Tensor& dy, Tensor& dx);
  // LoRA on a sparse layer's MoE parameters (model/decoder_lora.cpp): lora_merge_moe copies each
  // targeted weight of layer l with its delta merged into w (router, gate_up, down) and points m
  // at the copies (false: none targeted); lora_moe_grads points g's weight gradients at zeroed
  // buffers dw for the merged ones; lora_moe_backward turns those into the adapters' gradients.
  struct LoraMoeWeights {
    Tensor w[3];
  };
  bool lora_merge_moe(size_t l, MoEArgs& m, LoraMoeWeights& w) const;
  void lora_moe_grads(const LoraMoeWeights& w, MoEGrads& g, LoraMoeWeights& dw) const;
  void merge_lora_parameter(const LoraAdapter& ad);
  bool lora_params_merged_ = false;  // merge_lora_parameters
  void lora_moe_backward(size_t l, const LoraMoeWeights& dw);
  bool aux_loss_on() const;
  // A schedule step's hook call (no-op without hooks) plus the per-layer bf16 weight copies that
  // go with a unit's values.
  void apply(const UnitStep& s);
  void round_layer(size_t l);
  const Tensor& lm_head_weight();
  Tensor& lm_head_grad();
  // Tensor parallelism (model/layers/tensor_parallel_ops.cpp; identities without it).
  // tp_rows(T): the residual stream's rows on this rank (T / tp under sequence parallelism, else T).
  // tp_gather_rows: the whole [T, ...] from every rank's rows (sequence parallel; else `local`).
  // tp_reduce_rows: y [T, ...] is this rank's partial sum (a row-parallel GEMM's output, or the
  // gradient of a column-parallel one's input); returns the sum over tp: this rank's rows of it
  // under sequence parallelism (a reduce-scatter), else all of it (an all-reduce, in place in y).
  // tp_grad_sum: dw += the sum over tp of `part`, a replicated weight's partial gradient (the q/k
  // norms: each rank's heads; the other norms under sequence parallelism: each rank's tokens).
  int64_t tp_rows(int64_t T) const;
  // The embedding of ids [T] into x (allocated: this rank's tp_rows(T) rows of the residual stream),
  // its backward from dx (this rank's rows) into the embedding's gradient, and the head (final
  // norm, fused lm_head + cross-entropy, their backward) on the last layer's output xl: returns the
  // loss sum and dx (allocated, xl's shape). forward_backward and the pipeline stages share them.
  void embed(const Tensor& ids, Tensor& x);
  void embed_backward(const Tensor& ids, const Tensor& dx);
  double head_forward_backward(const Tensor& xl, const Tensor& labels, float grad_scale, Tensor& dx);
  Tensor tp_gather_rows(const Tensor& local) const;
  Tensor tp_reduce_rows(Tensor& y) const;
  void tp_grad_sum(Tensor& part, Tensor& dw) const;
  // Whether layer norm grads (input/post/final) are partial sums over tp (sequence parallelism).
  bool tp_norm_grads_partial() const { return tp_.sp(); }
  // The vocabulary-parallel embedding: x [T, H] = this rank's partial (rows of its vocabulary
  // shard, zeros for other tokens; reduce with tp_reduce_rows), and its backward (gemb += into
  // this rank's rows from dx [T, H]).
  void tp_embedding_forward(const Tensor& ids, Tensor& x) const;
  void tp_embedding_backward(const Tensor& ids, const Tensor& dx, Tensor& gemb) const;
  // The fused lm_head + cross-entropy over vocabulary shards: returns the loss sum of rows `xf`
  // [n, H] (the same on every tp rank) with labels [n]; with dxf: the gradient of grad_scale x that
  // sum as this rank's partial (reduce with tp_reduce_rows), overwritten, and dw accumulated (null:
  // a frozen head).
  double tp_cross_entropy(const Tensor& xf, const Tensor& labels, float grad_scale, Tensor* dxf, Tensor* dw);
  // Context parallelism (model/layers/context_parallel_ops.cpp), for calls whose Positions carry
  // chunks: cp_gather_sequence joins every rank's rows of x [B*S, h, d] (S local tokens) into the
  // whole sequences [B, global_seq, h, d]; cp_reduce_scatter_sequence sums whole-sequence
  // gradients over cp and writes this rank's tokens into dst; the attention forward and backward
  // over the gathered K and V (q, out, lse, dout and the gradients of the local tokens).
  Tensor cp_gather_sequence(const RowView& x, int64_t B, int64_t S, const Positions& pos) const;
  void cp_reduce_scatter_sequence(const Tensor& global, int64_t B, int64_t S, const Positions& pos,
                                  const RowView& dst) const;
  void cp_attention_forward(const AttentionKernel& k, const RowView& q, const RowView& kk, const RowView& v, int64_t B,
                            int64_t S, const Positions& pos, float scale, Tensor& out, Tensor& lse) const;
  void cp_attention_backward(const AttentionKernel& k, const RowView& q, const RowView& kk, const RowView& v,
                             const Tensor& out, const Tensor& lse, const Tensor& dout, int64_t B, int64_t S,
                             const Positions& pos, float scale, const RowView& dq, const RowView& dk,
                             const RowView& dv) const;
  // With bf16 compute, each linear weight is rounded to bf16 once per forward(_backward) call
  // (not once per GEMM); the copies live for that call only, so updated weights are never stale.
  // With unit hooks a layer's copies are made when its values arrive and dropped when they go.
  void round_weights_for_compute();
  struct Bf16Weights;
  std::unique_ptr<Bf16Weights> wbf_;
  bool hold_wbf_ = false;  // hold_compute_weights
  Tensor head_bf16_;       // with it and bf16 compute, the lm_head weight in bf16 (forward_cached)

  ModelConfig cfg_;
  TensorParallel tp_;
  ExpertParallel ep_;
  ContextParallel cp_;
  PipelineStages pp_;
  int64_t ep_bytes_ = 0;  // expert_dispatch_bytes
  // This rank's share of the model's widths (the whole model without tensor parallelism): heads,
  // KV heads, their widths Q and K, the dense MLP's I, the vocabulary rows [vocab0_, vocab0_ + vocab_).
  struct LocalDims {
    int64_t heads = 0, kv_heads = 0, q = 0, kv = 0, inter = 0, moe_inter = 0, vocab = 0, vocab0 = 0;
    int64_t experts = 0, expert0 = 0;  // expert parallelism: this rank's experts [expert0, expert0 + experts)
    int64_t lin_k_heads = 0, lin_v_heads = 0;  // a Gated DeltaNet's linear key and value heads on this rank
  } loc_;
  bool deferred_ = false;
  ParamStore params_;
  std::vector<size_t> unit_begin_;  // first param index of each unit, then params_.size()
  UnitHooks* hooks_ = nullptr;
  std::vector<ParamSpec> specs_;  // one per parameter, in params_ order (model/param_spec.h)
  std::vector<Layer> layers_;
  std::vector<LayerKind> kinds_;  // layers_[l].kind, as one list
  std::vector<KernelSet> kernels_;
  ExecContext exec_;  // passed to every kernel call (the host context: kernel_set(..., CPU))
  RopeCache rope_;
  DType compute_ = DType::F32;
  DType weight_dtype_ = DType::F32;  // of the matmul weights (constructor)
  Checkpointing ckpt_ = Checkpointing::None;
  double last_aux_ = 0;
  std::vector<Tensor> bias_, counts_;  // per layer (undefined for dense layers); empty when off
  bool base_frozen_ = false;
  LoraConfig lora_cfg_;
  std::vector<LoraAdapter> lora_;               // HF order
  ParamStore lora_params_;                      // lora_A, lora_B of each adapter, in that order
  std::vector<ParamSpec> lora_specs_;           // one per lora_params_ entry (whole shapes, placement)
  std::vector<std::vector<size_t>> lora_layer_;  // per layer: indices into lora_
  uint64_t lora_seed_ = 0;                       // enable_lora's seed: the dropout masks' too
  int64_t lora_step_ = 0, lora_row0_ = 0;        // set_lora_dropout_rows
  int64_t lora_seq_ = 0;                         // > 0 inside forward_backward: its seq length
  // The dropout of adapter i in the current pass (p = 0 outside training or without dropout).
  LoraDropout lora_dropout(size_t i) const;
};

}  // namespace titan
