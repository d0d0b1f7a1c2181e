// titan info: parameter count, training FLOPs per token and training-state memory of a model
// given as an HF folder or a built-in flavor name; with --dp N, the training state per rank of N
// fully sharded data-parallel ranks (src/distributed/fsdp.h: parameters, gradients and AdamW moments
// 1/N per unit, the staging buffer of the collectives, and the gathered units of a step).
// --n-layers overrides the layer count. On one process every model (dense, Qwen3.5, MoE) also gets
// one training step's predicted peak memory (model/train_memory.h): --batch N, and --lora-rank R for
// LoRA (attention and MLP projections, base frozen; --lora-base-dtype bfloat16: the base's matmul weights in bf16, as
// [lora] base_dtype); with --config, the job's batch, [lora], checkpointing and dtype. A sharded
// LoRA rank (--dp N) of a dense model gets its step peak too, and so does a rank of a mesh (--dp N
// [--dp-replicate R] [--tp T] [--cp C], --sequence-parallel, --cp-load-balancer, --checkpointing,
// --dtype, --fsdp-prefetch; distributed/step_memory.h). `titan info --peak` prints the peak FLOP/s MFU is measured
// against on this machine (src/train/peak_flops.h), f32 and bf16. `titan info --mesh` lays out a
// job's device mesh; `titan info --pp-schedule` prints a pipeline schedule and its bubble.
#include <sys/stat.h>

#include <cstdio>
#include <optional>

#include "cli/command.h"
#include "core/allocator.h"
#include "distributed/data_parallel.h"
#include "distributed/fsdp.h"
#include "distributed/pp_schedule.h"
#include "distributed/step_memory.h"
#include "model/flops.h"
#include "model/param_spec.h"
#include "model/pipeline.h"
#include "ops/moe/expert_parallel.h"
#include "model/train_memory.h"
#include "train/model_state.h"
#include "train/peak_flops.h"
#include "comm/device_mesh.h"
#include "train/trainer.h"
#include "util/numbers.h"

namespace titan::cli {

// Bounds of the numbers info computes with: far beyond any real job, well inside int64 arithmetic.
constexpr int64_t kMaxRanks = int64_t(1) << 24, kMaxSeqLen = int64_t(1) << 30;

// What one training step of a job would take (model/train_memory.h), when it can be predicted.
struct StepMemory {
  TrainMemory mem;
  int64_t batch = 1;
  std::string what;  // "full fine-tuning" / "LoRA r=16 (N modules)", checkpointing, dtype
};

static std::string step_json(const StepMemory* s) {
  if (!s) return "";
  char buf[320];
  std::snprintf(buf, sizeof buf,
                ", \"step_batch\": %lld, \"step_weights_bytes\": %lld, \"step_grads_bytes\": %lld, "
                "\"step_optimizer_bytes\": %lld, \"step_activation_bytes\": %lld, \"step_peak_bytes\": %lld",
                (long long)s->batch, (long long)s->mem.weights, (long long)s->mem.grads, (long long)s->mem.optimizer,
                (long long)s->mem.activations, (long long)s->mem.total());
  return buf;
}

static StepMemory step_memory(const ModelConfig& cfg, int64_t batch, int64_t seq, Checkpointing ck, DType compute,
                              const LoraConfig* lora, DType base = DType::F32) {
  StepMemory s;
  s.mem = predict_train_memory(cfg, batch, seq, ck, compute, lora, base);
  s.batch = batch;
  s.what = lora ? "LoRA r=" + std::to_string(lora->rank) + " (" + std::to_string(lora_select(cfg, *lora).size()) +
                      " modules, base frozen" + (base == DType::BF16 ? " in bf16)" : ")")
                : std::string("full fine-tuning");
  s.what += std::string(", activation checkpointing ") +
            (ck == Checkpointing::None ? "none" : ck == Checkpointing::Selective ? "selective" : "full") +
            (compute == DType::BF16 ? ", bf16 GEMMs" : ", f32");
  return s;
}

// Elements of the adapters lora_select(cfg, c) picks: rank x (in + out) each.
static int64_t lora_elems(const ModelConfig& cfg, const LoraConfig& c) {
  int64_t n = 0;
  for (const LoraAdapter& a : lora_select(cfg, c)) n += a.numel(c.rank);
  return n;
}

static bool parse_on_off(const std::string& v, const char* what) {
  if (v == "true" || v == "on") return true;
  if (v == "false" || v == "off") return false;
  fail(what, " must be true or false, got '", v, "'");
}

static const char* ckpt_name(Checkpointing c) {
  return c == Checkpointing::None ? "none" : c == Checkpointing::Selective ? "selective" : "full";
}

// The "step peak" line of a rank (distributed/step_memory.h), and its JSON fields.
static std::string rank_step_text(const distributed::RankStepMemory& r, const distributed::MeshStep& ms) {
  const double mib = double(1 << 20);
  char buf[768];
  std::snprintf(buf, sizeof buf,
                "step peak        %.3f MiB per rank for a local batch of %lld x seq %lld (%lld tokens per rank), "
                "activation checkpointing %s, %s: state %.3f (params + grads + adamw + comm buffers) + gathered units "
                "%.3f + RoPE tables %.3f + activations %.3f MiB, during the %s%s\n",
                double(r.peak) / mib, (long long)ms.batch, (long long)ms.seq, (long long)(ms.batch * ms.seq / ms.cp),
                ckpt_name(ms.ckpt), ms.compute == DType::BF16 ? "bf16 GEMMs" : "f32", double(r.state()) / mib,
                double(r.gathered) / mib, double(r.rope) / mib, double(r.activations) / mib, r.at.c_str(),
                r.sharded ? (r.prefetch ? " (FSDP prefetch on)" : " (FSDP prefetch off)") : "");
  return buf;
}

static std::string rank_step_json(const distributed::RankStepMemory& r, const distributed::MeshStep& ms) {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                ", \"rank_step_batch\": %lld, \"rank_step_checkpointing\": \"%s\", \"rank_step_compute\": \"%s\", "
                "\"rank_step_state_bytes\": %lld, \"rank_step_gathered_bytes\": %lld, \"rank_step_rope_bytes\": %lld, "
                "\"rank_step_activation_bytes\": %lld, \"rank_step_peak_bytes\": %lld, \"rank_step_peak_at\": \"%s\"",
                (long long)ms.batch, ckpt_name(ms.ckpt), ms.compute == DType::BF16 ? "bf16" : "f32",
                (long long)r.state(), (long long)r.gathered, (long long)r.rope, (long long)r.activations,
                (long long)r.peak, r.at.c_str());
  return buf;
}

// Per rank of a mesh with tensor and/or context parallelism: tp tensor-parallel x cp
// context-parallel x dp fully sharded ranks (x dp_replicate replicas, which hold the same): the tp
// rank's local tensors sharded over dp x cp (the sharded path even at dp 1:
// model/tensor_parallel.h, model/context_parallel.h, train/sharded_state.cpp), and a step's peak
// (distributed/step_memory.h) when `step` (dense attention models).
static int print_tp_info(const std::string& m, const ModelConfig& cfg, const distributed::MeshStep& ms, bool step,
                         bool json) {
  const int64_t tp = ms.tp, cp = ms.cp, dp = ms.dp_shard, seq = ms.seq;
  const std::pair<const char*, int64_t> widths[] = {{"num_key_value_heads", cfg.num_key_value_heads},
                                                     {"intermediate_size", cfg.intermediate_size},
                                                     {"moe_intermediate_size", cfg.is_moe() ? cfg.moe_intermediate_size : tp},
                                                     {"vocab_size", cfg.vocab_size}};
  for (const auto& [what, v] : widths)
    TITAN_CHECK(v % tp == 0, "titan info --tp ", tp, ": ", what, " = ", v, " does not divide by ", tp);
  const int64_t cp_multiple = ms.head_tail ? 2 * cp : cp;
  TITAN_CHECK(cp == 1 || seq % cp_multiple == 0, "titan info --cp ", cp, ": --seq-len ", seq, " does not divide by ",
              cp_multiple, ms.head_tail ? " (2 cp head-tail chunks)" : "");
  const ModelSize s = model_size(cfg, seq);
  const distributed::FsdpPlan plan = distributed::fsdp_plan(cfg, dp * cp, false, DType::F32, tp);
  const int64_t param = plan.shard_bytes, grad = plan.shard_bytes, opt = 2 * plan.shard_bytes;
  // What a step gathers at most, with the trainer's prefetch rule (no prefetch thread under tp).
  const bool prefetch = ms.prefetch && tp == 1;
  const int64_t comm = plan.staging_bytes, gather = plan.transient_bytes(ms.reshard_after_forward, prefetch);
  std::optional<distributed::RankStepMemory> r;
  if (step) r = distributed::predict_rank_step_memory(cfg, ms);
  const double mib = double(1 << 20);
  if (json) {
    std::printf("{\"model\": \"%s\", \"params\": %lld, \"flops_per_token\": %.6g, \"seq_len\": %lld, \"tp\": %lld, "
                "\"cp\": %lld, \"dp\": %lld, \"dp_replicate\": %lld, \"rank_param_bytes\": %lld, \"rank_grad_bytes\": %lld, "
                "\"rank_optimizer_bytes\": %lld, \"rank_comm_bytes\": %lld, \"rank_state_bytes\": %lld, "
                "\"rank_gather_bytes\": %lld, \"rank_flops_per_token\": %.6g%s}\n",
                m.c_str(), (long long)s.params, s.flops_per_token, (long long)seq, (long long)tp, (long long)cp,
                (long long)dp, (long long)ms.dp_replicate, (long long)param, (long long)grad, (long long)opt,
                (long long)comm, (long long)(param + grad + opt + comm), (long long)gather,
                s.flops_per_token / double(tp), r ? rank_step_json(*r, ms).c_str() : "");
    return 0;
  }
  std::printf("model            %s (%s, %lld layers, hidden %lld, heads %lld/%lld, ffn %lld, vocab %lld)\n", m.c_str(),
              cfg.model_type.c_str(), (long long)cfg.num_hidden_layers, (long long)cfg.hidden_size,
              (long long)cfg.num_attention_heads, (long long)cfg.num_key_value_heads, (long long)cfg.intermediate_size,
              (long long)cfg.vocab_size);
  if (tp > 1) {
    std::printf("parameters       %lld (%.3f B); per tp rank: %lld/%lld heads, %lld/%lld KV heads, ffn %lld, vocab %lld\n",
                (long long)s.params, double(s.params) / 1e9, (long long)(cfg.num_attention_heads / tp),
                (long long)cfg.num_attention_heads, (long long)(cfg.num_key_value_heads / tp),
                (long long)cfg.num_key_value_heads, (long long)(cfg.intermediate_size / tp),
                (long long)(cfg.vocab_size / tp));
    std::printf("flops/token      %.4g per rank of a tp group (1/%lld of %.4g, seq_len %lld)\n",
                s.flops_per_token / double(tp), (long long)tp, s.flops_per_token, (long long)seq);
  } else {
    std::printf("parameters       %lld (%.3f B)\n", (long long)s.params, double(s.params) / 1e9);
  }
  if (cp > 1)
    std::printf("context parallel %lld (%s): a rank holds %lld of every sequence's %lld tokens (%s); attention "
                "all-gathers K and V into whole sequences, its backward reduce-scatters dK and dV\n",
                (long long)cp, ms.head_tail ? "head-tail" : "no load balancing", (long long)(seq / cp), (long long)seq,
                ms.head_tail ? "chunks r and 2 cp - 1 - r of 2 cp" : "chunk r of cp");
  const std::string layout = tp > 1 ? "tensor parallel " + std::to_string(tp) + " x FSDP over " + std::to_string(dp * cp)
                                    : "FSDP over " + std::to_string(dp * cp);
  std::printf("per rank (%s rank(s)%s): params %.3f MiB, grads %.3f MiB, adamw %.3f MiB, "
              "comm buffers %.3f MiB; a step gathers up to %.3f MiB more (units in flight%s)\n",
              layout.c_str(), cp > 1 ? (": dp_shard " + std::to_string(dp) + " x cp " + std::to_string(cp)).c_str() : "",
              double(param) / mib, double(grad) / mib, double(opt) / mib, double(comm) / mib, double(gather) / mib,
              prefetch ? ", with prefetch" : "; no prefetch under tensor parallelism");
  if (r) std::fputs(rank_step_text(*r, ms).c_str(), stdout);
  return 0;
}

// Per rank of dp fully sharded ranks of which ep split each sparse layer's experts
// (model/expert_parallel.h): the shards (experts over dp / ep ranks, the rest over dp), the
// experts' part of them, and the bytes a step's expert dispatch sends (batch x seq tokens per
// rank, evenly routed: ops/moe/expert_parallel.h).
static int print_ep_info(const std::string& m, const ModelConfig& cfg, int64_t seq, int64_t batch, int64_t dp,
                         int64_t ep, bool json) {
  TITAN_CHECK(cfg.num_sparse_layers() > 0, "titan info --ep ", ep, ": ", m, " has no MoE layers");
  TITAN_CHECK(cfg.num_experts % ep == 0, "titan info --ep ", ep, ": num_experts = ", cfg.num_experts,
              " does not divide by ", ep);
  TITAN_CHECK(dp % ep == 0, "titan info --ep ", ep, ": --dp ", dp, " does not divide by it (ep borrows from the data-parallel ranks)");
  const ModelSize s = model_size(cfg, seq);
  const distributed::FsdpPlan plan = distributed::fsdp_plan(cfg, dp, false, DType::F32, 1, ep);
  int64_t expert_bytes = 0;  // this rank's experts, whole
  for (const ParamSpec& sp : local_param_specs(cfg, ep, 0))
    if (sp.expert >= 0) expert_bytes += shape_numel(sp.shape) * 4;
  const int64_t expert_shard = expert_bytes / (dp / ep);
  int64_t dispatch = 0;
  for (int64_t l = 0; l < cfg.num_hidden_layers; ++l)
    if (cfg.layer_kind(l).mlp == MlpKind::MoE)
      dispatch += moe_ep_bytes_per_block(batch * seq, cfg.num_experts_per_tok, cfg.hidden_size, ep);
  const int64_t param = plan.shard_bytes, gather = plan.transient_bytes(true, false);
  const double mib = double(1 << 20);
  if (json) {
    std::printf("{\"model\": \"%s\", \"params\": %lld, \"seq_len\": %lld, \"batch\": %lld, \"dp\": %lld, \"ep\": %lld, "
                "\"experts_per_rank\": %lld, \"rank_expert_bytes\": %lld, \"rank_expert_shard_bytes\": %lld, "
                "\"rank_param_bytes\": %lld, \"rank_grad_bytes\": %lld, \"rank_optimizer_bytes\": %lld, "
                "\"rank_gather_bytes\": %lld, \"rank_dispatch_bytes_per_step\": %lld}\n",
                m.c_str(), (long long)s.params, (long long)seq, (long long)batch, (long long)dp, (long long)ep,
                (long long)(cfg.num_experts / ep), (long long)expert_bytes, (long long)expert_shard, (long long)param,
                (long long)param, (long long)(2 * param), (long long)gather, (long long)dispatch);
    return 0;
  }
  std::printf("model            %s (%s, %lld layers, %lld sparse, %lld experts top-%lld, hidden %lld, moe ffn %lld)\n",
              m.c_str(), cfg.model_type.c_str(), (long long)cfg.num_hidden_layers, (long long)cfg.num_sparse_layers(),
              (long long)cfg.num_experts, (long long)cfg.num_experts_per_tok, (long long)cfg.hidden_size,
              (long long)cfg.moe_intermediate_size);
  std::printf("expert parallel  %lld: rank q of an ep group holds experts [q x %lld, (q + 1) x %lld) of each sparse "
              "layer, %.3f MiB of f32 weights, sharded over %lld rank(s) (expert_fsdp): %.3f MiB each\n",
              (long long)ep, (long long)(cfg.num_experts / ep), (long long)(cfg.num_experts / ep),
              double(expert_bytes) / mib, (long long)(dp / ep), double(expert_shard) / mib);
  std::printf("per rank (FSDP over %lld ranks, experts over %lld): params %.3f MiB, grads %.3f MiB, adamw %.3f MiB; a "
              "step gathers up to %.3f MiB more\n",
              (long long)dp, (long long)(dp / ep), double(param) / mib, double(param) / mib, double(2 * param) / mib,
              double(gather) / mib);
  std::printf("expert dispatch  %.3f MiB sent per rank per step (local batch %lld x seq %lld tokens, evenly routed: "
              "(ep - 1) / ep of each token's %lld slots leave the rank, forward and backward)\n",
              double(dispatch) / mib, (long long)batch, (long long)seq, (long long)cfg.num_experts_per_tok);
  return 0;
}

static int print_info(const std::string& m, const ModelConfig& cfg, int64_t seq, int64_t dp, bool json,
                      const StepMemory* step = nullptr, const LoraConfig* lora = nullptr, DType base = DType::F32,
                      const distributed::RankStepMemory* rank = nullptr, const distributed::MeshStep* ms = nullptr) {
  ModelSize s = model_size(cfg, seq);
  // Per rank of dp fully sharded ranks: the shards, the staging buffer, and what a step gathers.
  // LoRA (train/sharded_state.cpp): the frozen base's value shard only; the adapters whole with
  // their gradients, and this rank's chunk of them (master, reduced gradient, two moments).
  const distributed::FsdpPlan plan = distributed::fsdp_plan(cfg, dp, lora != nullptr, lora ? base : DType::F32);
  int64_t rank_param = dp == 1 ? s.param_bytes() : plan.shard_bytes;
  int64_t rank_grad = dp == 1 ? s.grad_bytes() : plan.shard_bytes;
  int64_t rank_opt = dp == 1 ? s.optimizer_bytes() : 2 * plan.shard_bytes;
  int64_t rank_comm = dp == 1 ? 0 : plan.staging_bytes;
  if (lora && dp > 1) {
    const int64_t a = lora_elems(cfg, *lora), c = (a + dp - 1) / dp;
    rank_param = plan.shard_bytes + (a + c) * 4;
    rank_grad = (a + c) * 4;
    rank_opt = 2 * c * 4;
    rank_comm += dp * std::min<int64_t>(c, distributed::DataParallel::kBucket) * 4;
  }
  const int64_t rank_gather = dp == 1 ? 0 : plan.transient_bytes(true, true);
  const int64_t rank_state = rank_param + rank_grad + rank_opt + rank_comm;
  // A sharded LoRA rank's step peak: its state between steps, the base units gathered at their
  // most, the RoPE tables and the step's activations, one process's less its whole-model bf16
  // weight copies plus one layer's (an f32 base with bf16 GEMMs rounds a layer when its values
  // arrive and drops the copies when it is done).
  const bool rank_step = step && dp > 1 && lora;
  const int64_t rank_peak = !rank_step ? 0
                            : rank_state + rank_gather + step->mem.rope + step->mem.activations -
                                  step->mem.weight_copies + step->mem.weight_copies / cfg.num_hidden_layers;
  const double gib = double(1ull << 30);
  const double state = double(s.param_bytes() + s.grad_bytes() + s.optimizer_bytes());
  if (json) {
    std::printf(
        "{\"model\": \"%s\", \"params\": %lld, \"active_params\": %lld, \"embedding_params\": %lld, "
        "\"flops_per_token\": %.6g, \"seq_len\": %lld, \"param_bytes\": %lld, \"grad_bytes\": %lld, "
        "\"optimizer_bytes\": %lld, \"dp\": %lld, \"rank_param_bytes\": %lld, \"rank_grad_bytes\": %lld, "
        "\"rank_optimizer_bytes\": %lld, \"rank_comm_bytes\": %lld, \"rank_state_bytes\": %lld, "
        "\"rank_gather_bytes\": %lld%s%s%s}\n",
        m.c_str(), (long long)s.params, (long long)s.active_params, (long long)s.embedding_params, s.flops_per_token,
        (long long)seq, (long long)s.param_bytes(), (long long)s.grad_bytes(), (long long)s.optimizer_bytes(),
        (long long)dp, (long long)rank_param, (long long)rank_grad, (long long)rank_opt, (long long)rank_comm,
        (long long)rank_state, (long long)rank_gather, dp == 1 ? step_json(step).c_str() : "",
        rank_step ? (", \"rank_step_peak_bytes\": " + std::to_string(rank_peak)).c_str() : "",
        rank && ms ? rank_step_json(*rank, *ms).c_str() : "");
    return 0;
  }
  std::printf("model            %s (%s, %lld layers, hidden %lld, heads %lld/%lld, head_dim %lld, ffn %lld, vocab %lld%s)\n",
              m.c_str(), cfg.model_type.c_str(), (long long)cfg.num_hidden_layers, (long long)cfg.hidden_size,
              (long long)cfg.num_attention_heads, (long long)cfg.num_key_value_heads, (long long)cfg.head_dim,
              (long long)cfg.intermediate_size, (long long)cfg.vocab_size, cfg.tie_word_embeddings ? ", tied" : "");
  std::printf("parameters       %lld (%.3f B), embedding %lld\n", (long long)s.params, double(s.params) / 1e9,
              (long long)s.embedding_params);
  if (cfg.is_moe()) {
    std::printf("experts          %lld per sparse layer (%lld of %lld layers sparse), top-%lld, moe_ffn %lld\n",
                (long long)cfg.num_experts, (long long)cfg.num_sparse_layers(), (long long)cfg.num_hidden_layers,
                (long long)cfg.num_experts_per_tok, (long long)cfg.moe_intermediate_size);
    std::printf("active params    %lld (%.3f B) per token\n", (long long)s.active_params, double(s.active_params) / 1e9);
  }
  std::printf("flops/token      %.4g (training, seq_len %lld%s)\n", s.flops_per_token, (long long)seq,
              cfg.is_moe() ? ", active parameters only" : "");
  std::printf("weights f32      %.2f GiB\n", double(s.param_bytes()) / gib);
  std::printf("grads f32        %.2f GiB\n", double(s.grad_bytes()) / gib);
  std::printf("adamw states     %.2f GiB\n", double(s.optimizer_bytes()) / gib);
  std::printf("training state   %.2f GiB (%.0f%% of this machine's %.1f GiB), activations extra\n", state / gib,
              100.0 * state / double(machine_memory_bytes()), double(machine_memory_bytes()) / gib);
  // The guide's reference machine has 24 GiB; say plainly when the state alone cannot fit.
  if (state > 24.0 * gib)
    std::printf("fits             NO: %.2f GiB of f32 training state exceeds a 24 GiB machine%s\n", state / gib,
                state > double(machine_memory_bytes()) ? " and this one" : "");
  char heap[96] = "";
  if (step && step->mem.heap > 0)
    std::snprintf(heap, sizeof heap, " (%.3f GiB of them the delta rule's heap)", double(step->mem.heap) / gib);
  if (step && dp == 1)
    std::printf("step memory      %.3f GiB predicted peak for %s, batch %lld x seq %lld: weights %.3f + grads %.3f + "
                "adamw %.3f + activations %.3f GiB%s\n",
                double(step->mem.total()) / gib, step->what.c_str(), (long long)step->batch, (long long)seq,
                double(step->mem.weights) / gib, double(step->mem.grads) / gib, double(step->mem.optimizer) / gib,
                double(step->mem.activations) / gib, heap);
  if (dp > 1 && lora)
    std::printf("per rank (FSDP over %lld ranks, LoRA r=%lld) %.3f GiB between steps: frozen base shard + adapters "
                "%.3f + adapter grads %.3f + adapter adamw %.3f GiB, comm buffers %.3f GiB; a step gathers up to "
                "%.3f GiB more (base parameters of the units in flight, with prefetch)%s\n",
                (long long)dp, (long long)lora->rank, double(rank_param + rank_grad + rank_opt + rank_comm) / gib,
                double(rank_param) / gib, double(rank_grad) / gib, double(rank_opt) / gib, double(rank_comm) / gib,
                double(rank_gather) / gib, base == DType::BF16 ? "; base matmul weights in bf16 (shards and gathers)" : "");
  if (rank_step)
    std::printf("step memory      %.3f GiB predicted peak per rank for %s, batch %lld x seq %lld: state %.3f + "
                "gathered units %.3f + RoPE tables %.3f + activations %.3f GiB\n",
                double(rank_peak) / gib, step->what.c_str(), (long long)step->batch, (long long)seq,
                double(rank_state) / gib,
                double(rank_gather) / gib, double(step->mem.rope) / gib,
                double(rank_peak - rank_state - rank_gather - step->mem.rope) / gib);
  else if (dp > 1)
    std::printf("per rank (FSDP over %lld ranks) %.3f GiB between steps: weights %.3f + grads %.3f + adamw %.3f GiB "
                "(1/%lld each), comm buffers %.3f GiB; a step gathers up to %.3f GiB more (parameters and "
                "gradients of the units in flight, with prefetch; largest unit %.3f GiB)\n",
                (long long)dp, double(rank_state) / gib, double(rank_param) / gib, double(rank_grad) / gib,
                double(rank_opt) / gib, (long long)dp, double(rank_comm) / gib, double(rank_gather) / gib,
                double(plan.largest_unit_bytes) / gib);
  if (rank && ms) std::fputs(rank_step_text(*rank, *ms).c_str(), stdout);
  return 0;
}

// `titan info --config JOB.toml [--dp RANKS] [--section.key value ...]`: the model a training job
// would build (flavor or config.json plus the [model] n_layers / num_experts / top_k overrides), at
// the job's seq_len, and per rank when it runs on RANKS ranks (default: the job's explicit
// degrees) with its [parallelism]: the shard group is RANKS / data_parallel_replicate_degree
// ranks, or 1 when data_parallel_shard_degree is 1; with tensor or context parallelism, each of
// those ranks is a tp x cp block of the mesh (RANKS x tp x cp ranks in all), and a rank's step
// peak follows the job's batch, seq_len, checkpointing and dtype (distributed/step_memory.h).
// Nothing is allocated, so a model too large for this machine can be sized here.
static int info_for_job(const std::vector<std::string>& argv, int64_t ranks, bool json) {
  JobConfig job = parse_job_command_line(argv);
  ModelConfig cfg = job_model_config(job);
  std::string name = cfg.flavor.empty() ? "config.json" : cfg.flavor;
  if (job.model.n_layers > 0 || job.model.num_experts > 0 || job.model.top_k > 0) name += " (overridden by the job)";
  const auto& par = job.parallelism;
  if (ranks <= 0) ranks = par.data_parallel_shard_degree > 0 ? par.data_parallel_shard_degree * par.data_parallel_replicate_degree : 1;
  // RANKS data-parallel ranks are RANKS x tp x cp x pp ranks of the world.
  const int64_t other = par.tensor_parallel_degree * par.context_parallel_degree * par.pipeline_parallel_degree;
  TITAN_CHECK(job.data_parallel_degree(ranks * other) == ranks, "--dp ", ranks, ": the job's [parallelism] degrees give ",
              job.data_parallel_degree(ranks * other), " data-parallel ranks");
  const int64_t shard = par.data_parallel_shard_degree == 1 ? 1 : ranks / par.data_parallel_replicate_degree;
  const LoraConfig lc = job_lora_config(job);
  const DType base = job.lora.enable ? job.lora.base_dtype : DType::F32;
  const auto am = job.activation_checkpoint.mode;
  const Checkpointing ck = am == ActivationCheckpointMode::Full        ? Checkpointing::Full
                           : am == ActivationCheckpointMode::Selective ? Checkpointing::Selective
                                                                       : Checkpointing::None;
  // A rank of the job's mesh (distributed/step_memory.h): its degrees, micro-batch, checkpointing and dtype.
  distributed::MeshStep ms;
  ms.dp_replicate = par.data_parallel_replicate_degree, ms.dp_shard = shard;
  ms.tp = par.tensor_parallel_degree, ms.cp = par.context_parallel_degree;
  ms.sequence_parallel = par.enable_sequence_parallel;
  ms.head_tail = par.context_parallel_load_balancer == CpLoadBalancer::HeadTail;
  ms.reshard_after_forward = par.fsdp_reshard_after_forward != ReshardAfterForward::Never;
  ms.prefetch = par.fsdp_prefetch;
  ms.batch = job.training.local_batch_size, ms.seq = job.training.seq_len, ms.ckpt = ck;
  ms.compute = job.training.mixed_precision_param;
  const bool dense_step = !cfg.is_moe() && !cfg.is_qwen3_5() && !job.lora.enable;
  if (ms.tp > 1 || ms.cp > 1) {
    TITAN_CHECK(par.pipeline_parallel_degree == 1 && par.expert_parallel_degree == 1 && !job.lora.enable,
                "titan info --config: a rank under tensor or context parallelism is predicted without pipeline or ",
                "expert parallelism and LoRA");
    return print_tp_info(name, cfg, ms, dense_step, json);
  }
  // The step's peak: one process (dense or MoE, without expert parallelism), or a sharded LoRA rank (dense).
  const bool sharded = shard > 1 || ms.dp_replicate > 1;
  if ((cfg.is_moe() && (sharded || par.expert_parallel_degree > 1)) || (sharded && !job.lora.enable)) {
    std::optional<distributed::RankStepMemory> r;  // a sharded or replicated rank's step
    if (dense_step) r = distributed::predict_rank_step_memory(cfg, ms);
    return print_info(name, cfg, job.training.seq_len, shard, json, nullptr, job.lora.enable ? &lc : nullptr, base,
                      r ? &*r : nullptr, &ms);
  }
  // A bf16 LoRA base computes in bf16 whatever mixed_precision_param says (as the trainer).
  const StepMemory sm = step_memory(cfg, job.training.local_batch_size, job.training.seq_len, ck,
                                    base == DType::BF16 ? DType::BF16 : job.training.mixed_precision_param,
                                    job.lora.enable ? &lc : nullptr, base);
  return print_info(name, cfg, job.training.seq_len, shard, json, &sm, job.lora.enable ? &lc : nullptr, base);
}

// `titan info --peak [--threads N] [--remeasure] [--json]`: the f32 and bf16 peaks a training run
// on N threads (default: this process's, OMP_NUM_THREADS / TITAN_NUM_THREADS) divides by for MFU,
// from the cache or measured now; --remeasure measures again and replaces the cached entries.
static int print_peak(const std::vector<std::string>& argv) {
  Args args(argv, {"peak", "remeasure", "json"});
  args.check_known({"peak", "remeasure", "json", "threads"});
  const int threads = std::stoi(args.get("threads", "0"));
  TITAN_CHECK(threads >= 0, "--threads must be >= 0 (0: this process's thread count)");
  PeakOptions o;
  o.threads = threads;
  o.remeasure = args.has("remeasure");
  const PeakFlops f32 = mfu_peak(o);
  o.bf16 = true;
  const PeakFlops bf16 = mfu_peak(o);
  if (args.has("json")) {
    auto source = [](const PeakFlops& p) { return p.source == PeakFlops::Source::Cached ? "cached" : "measured"; };
    std::printf("{\"cpu\": \"%s\", \"threads\": %d, \"f32_tflops\": %.6g, \"bf16_tflops\": %.6g, "
                "\"f32_kernel\": \"%s\", \"bf16_kernel\": \"%s\", \"f32_source\": \"%s\", \"bf16_source\": \"%s\", "
                "\"f32_probe_gflops\": %.6g, \"f32_gemm_gflops\": %.6g, \"bf16_probe_gflops\": %.6g, "
                "\"bf16_gemm_gflops\": %.6g, \"cache\": \"%s\"}\n",
                f32.cpu.c_str(), f32.threads, f32.tflops, bf16.tflops, f32.kernel.c_str(), bf16.kernel.c_str(),
                source(f32), source(bf16), f32.probe_gflops, f32.gemm_gflops, bf16.probe_gflops, bf16.gemm_gflops,
                bf16.cache_path.c_str());
    return 0;
  }
  std::printf("%s\n%s\n", f32.describe().c_str(), bf16.describe().c_str());
  return 0;
}

// `titan info --mesh --world N [--dp-replicate R --dp-shard S --cp C --tp T --pp P --ep E]
// [--model M] [--json]`: the device mesh a job of N ranks gets (comm/device_mesh.h): its degrees
// after the rules (with --model, the model's sizes checked too), the group sizes, and every rank's
// coordinates. Nothing is launched.
static int print_mesh(const std::vector<std::string>& argv) {
  Args args(argv, {"mesh", "json"});
  args.check_known({"mesh", "json", "world", "dp-replicate", "dp-shard", "cp", "tp", "pp", "ep", "model"});
  const int64_t world = args.get_int("world", 1, 1, kMaxRanks);
  comm::ParallelDegrees d;
  d.dp_replicate = args.get_int("dp-replicate", 1, 1, kMaxRanks);
  d.dp_shard = args.get_int("dp-shard", -1, -1, kMaxRanks);
  d.cp = args.get_int("cp", 1, 1, kMaxRanks);
  d.tp = args.get_int("tp", 1, 1, kMaxRanks);
  d.pp = args.get_int("pp", 1, 1, kMaxRanks);
  d.ep = args.get_int("ep", 1, 1, kMaxRanks);
  comm::ModelDims md;
  if (args.has("model")) {
    const std::string m = args.get("model");
    struct stat st {};
    const ModelConfig c = (::stat(m.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) ? load_hf_config(m + "/config.json")
                                                                              : flavor_config(m);
    md.heads = c.num_attention_heads, md.kv_heads = c.num_key_value_heads, md.layers = c.num_hidden_layers;
    md.ffn = c.is_moe() ? c.moe_intermediate_size : c.intermediate_size;
    md.experts = c.is_moe() ? c.num_experts : 0;
  }
  const comm::ParallelDims p = comm::ParallelDims::resolve(d, world, md);
  const comm::MeshLayout L(p);
  using A = comm::MeshAxis;
  const A axes[comm::kMeshAxes] = {A::PP, A::DpReplicate, A::DpShard, A::CP, A::TP};
  if (args.has("json")) {
    std::printf("{\"world\": %lld, \"dp_replicate\": %lld, \"dp_shard\": %lld, \"cp\": %lld, \"tp\": %lld, "
                "\"pp\": %lld, \"ep\": %lld, \"fsdp\": %lld, \"batch\": %lld, \"loss\": %lld, \"expert_fsdp\": %lld, "
                "\"ranks\": [",
                (long long)world, (long long)p.dp_replicate, (long long)p.dp_shard, (long long)p.cp, (long long)p.tp,
                (long long)p.pp, (long long)p.ep, (long long)p.fsdp(), (long long)p.batch(), (long long)p.loss(),
                (long long)p.expert_fsdp());
    for (int64_t r = 0; r < world; ++r)
      std::printf("%s[%lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld]", r ? ", " : "", (long long)L.coord(r, A::PP),
                  (long long)L.coord(r, A::DpReplicate), (long long)L.coord(r, A::DpShard),
                  (long long)L.coord(r, A::CP), (long long)L.coord(r, A::TP), (long long)L.ep_rank(r),
                  (long long)L.expert_fsdp_rank(r), (long long)L.batch_rank(r));
    std::printf("], \"rank_columns\": [\"pp\", \"dp_replicate\", \"dp_shard\", \"cp\", \"tp\", \"ep\", "
                "\"expert_fsdp\", \"batch\"]}\n");
    return 0;
  }
  std::printf("mesh             %s\n", p.describe().c_str());
  std::printf("axes             pp %lld x dp_replicate %lld x dp_shard %lld x cp %lld x tp %lld (tp fastest)\n",
              (long long)p.pp, (long long)p.dp_replicate, (long long)p.dp_shard, (long long)p.cp, (long long)p.tp);
  std::printf("groups           fsdp %lld (dp_shard x cp), batch %lld (dp_replicate x dp_shard: the data-parallel "
              "degree), loss %lld (batch x cp), ep %lld, expert_fsdp %lld\n",
              (long long)p.fsdp(), (long long)p.batch(), (long long)p.loss(), (long long)p.ep,
              (long long)p.expert_fsdp());
  if (p.cp > 1)
    std::printf("context parallel each sequence cut over the %lld ranks of a cp group: with head-tail balancing (the "
                "default) cp rank c holds chunks c and %lld - c of %lld\n",
                (long long)p.cp, (long long)(2 * p.cp - 1), (long long)(2 * p.cp));
  const int64_t shown = std::min<int64_t>(world, 64);
  std::printf("rank    pp  dp_rep  dp_shard  cp  tp  ep  expert_fsdp  batch\n");
  for (int64_t r = 0; r < shown; ++r) {
    std::printf("%-6lld", (long long)r);
    const int w[comm::kMeshAxes] = {4, 8, 10, 4, 4};
    for (int i = 0; i < comm::kMeshAxes; ++i) std::printf("%*lld", w[i], (long long)L.coord(r, axes[i]));
    std::printf("%4lld%13lld%7lld\n", (long long)L.ep_rank(r), (long long)L.expert_fsdp_rank(r),
                (long long)L.batch_rank(r));
  }
  if (shown < world) std::printf("... (%lld more ranks; --json lists all)\n", (long long)(world - shown));
  return 0;
}

// `titan info --model M --pp P [--dp N] [--schedule NAME] [--microbatches K] [--stages-per-rank V]
// [--layers-per-stage L] [--batch B] [--seq-len S] [--json]`: what each pipeline rank holds
// (model/pipeline.h: its stages' layers, the embedding on the first stage, norm + head on the last,
// a tied embedding's copy there too) and its training state, FSDP-sharded over N ranks
// (distributed/fsdp.h's plan over the rank's units), the activation and gradient bytes a step sends
// to the next and previous stage (local batch B cut into K microbatches, seq S, f32 rows of
// hidden), and the schedule's bubble and most activations held (pp_schedule.h's simulation).
static int print_pp_info(const std::string& m, const ModelConfig& cfg, const Args& args, int64_t seq, int64_t dp) {
  const bool json = args.has("json");
  const int pp = int(args.get_int("pp", 1, 2, 1024));
  std::string name = args.get("schedule", "1F1B");
  const int v = int(args.get_int("stages-per-rank", distributed::pp_default_stages_per_rank(name), 1, 64));
  const int64_t batch = args.get_int("batch", pp, 1, int64_t(1) << 24);
  const int micro = int(args.get_int("microbatches", batch, 1, 1 << 14));
  TITAN_CHECK(batch % micro == 0, "--microbatches ", micro, " does not divide --batch ", batch);
  const distributed::PpSchedule sch = distributed::make_pp_schedule(name, pp, micro, v, "--microbatches " + std::to_string(micro));
  const distributed::PpSimulation sim = distributed::simulate_pp_schedule(sch);
  PipelineStages st = pipeline_stages(cfg.num_hidden_layers, sch.stages(), args.get_int("layers-per-stage", 0, 0, 1 << 20));
  const int64_t rows = batch / micro, n = cfg.num_hidden_layers;
  const int64_t boundary = rows * seq * cfg.hidden_size * 4;  // one microbatch's activations at a stage border, f32
  constexpr double mib = 1024.0 * 1024.0;
  auto mib3 = [&](int64_t b) {
    char t[32];
    std::snprintf(t, sizeof t, "%.3f", double(b) / mib);
    return std::string(t);
  };
  const ModelSize s = model_size(cfg, seq);
  struct Rank {
    std::string holds;
    int64_t param = 0, gather = 0, sent = 0;
  };
  std::vector<Rank> ranks(static_cast<size_t>(pp));
  for (int r = 0; r < pp; ++r) {
    PipelineStages mine = st;
    mine.held = stages_of_rank(st.num_stages, pp, r);
    const distributed::FsdpPlan plan = distributed::fsdp_plan(cfg, dp, false, DType::F32, 1, 1, mine);
    Rank& k = ranks[size_t(r)];
    k.param = plan.shard_bytes, k.gather = dp > 1 ? plan.transient_bytes(true, false) : 0;
    for (int64_t h : mine.held) {
      k.holds += (k.holds.empty() ? "" : " | ") + describe_stage(st, h);
      // Sends: the output to the next stage (all but the last), the input's gradient to the previous (all but the first).
      k.sent += int64_t(micro) * boundary * ((h + 1 < st.num_stages) + (h > 0));
    }
    if (cfg.tie_word_embeddings && st.holds_unit(0, n, true) && !mine.holds(0) && mine.holds(st.num_stages - 1))
      k.holds += " (+ a copy of the tied embedding for the head)";
  }
  if (json) {
    std::printf("{\"model\": \"%s\", \"params\": %lld, \"pp\": %d, \"dp\": %lld, \"schedule\": \"%s\", "
                "\"stages\": %lld, \"stages_per_rank\": %d, \"microbatches\": %d, \"microbatch_rows\": %lld, "
                "\"seq_len\": %lld, \"bubble_fraction\": %.12g, \"analytic_bubble_fraction\": %.12g, \"layer_begin\": [",
                m.c_str(), (long long)s.params, pp, (long long)dp, sch.name.c_str(), (long long)st.num_stages, v, micro,
                (long long)rows, (long long)seq, sim.bubble_fraction, distributed::pp_analytic_bubble_fraction(sch));
    for (size_t i = 0; i < st.layer_begin.size(); ++i) std::printf("%s%lld", i ? ", " : "", (long long)st.layer_begin[i]);
    std::printf("], \"ranks\": [");
    for (int r = 0; r < pp; ++r) {
      const Rank& k = ranks[size_t(r)];
      std::printf("%s{\"stages\": \"%s\", \"rank_param_bytes\": %lld, \"rank_grad_bytes\": %lld, "
                  "\"rank_optimizer_bytes\": %lld, \"rank_gather_bytes\": %lld, \"sent_bytes_per_step\": %lld, "
                  "\"max_activations_held\": %d}",
                  r ? ", " : "", k.holds.c_str(), (long long)k.param, (long long)k.param, (long long)(2 * k.param),
                  (long long)k.gather, (long long)k.sent, sim.max_in_flight[size_t(r)]);
    }
    std::printf("]}\n");
    return 0;
  }
  std::printf("model            %s (%s, %lld layers, hidden %lld, vocab %lld%s), %lld parameters\n", m.c_str(),
              cfg.model_type.c_str(), (long long)n, (long long)cfg.hidden_size, (long long)cfg.vocab_size,
              cfg.tie_word_embeddings ? ", tied" : "", (long long)s.params);
  std::printf("pipeline         pp %d, %s: %lld stages (%d per rank; stage s on rank s %% %d), %d microbatches of %lld "
              "row(s) x seq %lld\n",
              pp, sch.name.c_str(), (long long)st.num_stages, v, pp, micro, (long long)rows, (long long)seq);
  std::printf("stages           %s\n", describe_stages(st).c_str());
  for (int r = 0; r < pp; ++r) {
    const Rank& k = ranks[size_t(r)];
    std::printf("pp rank %-8d %s\n", r, k.holds.c_str());
    std::printf("                 params %.3f MiB, grads %.3f MiB, adamw %.3f MiB%s%s; sends %.3f MiB per step; "
                "holds at most %d microbatch(es)' activations\n",
                double(k.param) / mib, double(k.param) / mib, double(2 * k.param) / mib,
                dp > 1 ? (" (FSDP over " + std::to_string(dp) + " ranks)").c_str() : "",
                dp > 1 ? ("; a step gathers up to " + mib3(k.gather) + " MiB more").c_str() : "",
                double(k.sent) / mib, sim.max_in_flight[size_t(r)]);
  }
  std::printf("bubble           %.6f simulated (a backward twice a forward, equal stages, free sends; analytic %.6f)\n",
              sim.bubble_fraction, distributed::pp_analytic_bubble_fraction(sch));
  return 0;
}

// `titan info --pp-schedule NAME --pp N --microbatches M [--stages-per-rank V] [--json]`: a
// pipeline schedule (distributed/pp_schedule.h) as each rank's action list, its simulated time
// grid and its bubble fraction against the textbook one. Nothing is launched: no runtime executes
// these schedules yet.
static int print_pp_schedule(const std::vector<std::string>& argv) {
  Args args(argv, {"json"});
  args.check_known({"pp-schedule", "pp", "microbatches", "stages-per-rank", "json"});
  const std::string name = args.require("pp-schedule");
  const int pp = int(args.get_int("pp", 1, 1, 1024));
  const int microbatches = int(args.get_int("microbatches", pp, 1, 1 << 14));
  // Interleaved1F1B needs several stages per rank: 2 unless told.
  const int v = int(args.get_int("stages-per-rank", distributed::pp_default_stages_per_rank(name), 1, 64));
  const distributed::PpSchedule s = distributed::make_pp_schedule(name, pp, microbatches, v);
  const distributed::PpSimulation sim = distributed::simulate_pp_schedule(s);
  if (!args.has("json")) {
    std::fputs(distributed::format_pp_schedule(s, sim).c_str(), stdout);
    return 0;
  }
  std::printf("{\"schedule\": \"%s\", \"pp\": %d, \"microbatches\": %d, \"stages_per_rank\": %d, "
              "\"makespan\": %.12g, \"bubble_fraction\": %.12g, \"analytic_bubble_fraction\": %.12g, \"ranks\": [",
              s.name.c_str(), s.pp, s.microbatches, s.stages_per_rank, sim.makespan, sim.bubble_fraction,
              distributed::pp_analytic_bubble_fraction(s));
  for (int r = 0; r < s.pp; ++r) {
    std::printf("%s[", r ? ", " : "");
    for (size_t i = 0; i < s.ranks[r].size(); ++i) std::printf("%s\"%s\"", i ? ", " : "", s.ranks[r][i].str().c_str());
    std::printf("]");
  }
  std::printf("]}\n");
  return 0;
}

static int cmd_info(const std::vector<std::string>& argv) {
  for (const auto& a : argv)
    if (a == "--peak") return print_peak(argv);
  for (const auto& a : argv)
    if (a == "--pp-schedule" || a.rfind("--pp-schedule=", 0) == 0) return print_pp_schedule(argv);
  for (const auto& a : argv)
    if (a == "--mesh") return print_mesh(argv);
  for (const auto& a : argv)
    if (a == "--config" || a.rfind("--config=", 0) == 0) {
      std::vector<std::string> rest;  // the job command line without --json and --dp N
      bool json = false;
      int64_t ranks = 0;
      for (size_t i = 0; i < argv.size(); ++i) {
        if (argv[i] == "--json") {
          json = true;
        } else if (argv[i] == "--dp") {
          TITAN_CHECK(i + 1 < argv.size(), "--dp needs a number of ranks");
          ranks = parse_int(argv[++i], "--dp", 1, kMaxRanks);
        } else {
          rest.push_back(argv[i]);
        }
      }
      return info_for_job(rest, ranks, json);
    }
  Args args(argv, {"json"});
  args.check_known({"model", "seq-len", "json", "dp", "tp", "ep", "pp", "schedule", "microbatches", "stages-per-rank",
                    "layers-per-stage", "n-layers", "batch", "lora-rank", "lora-base-dtype", "cp", "dp-replicate",
                    "sequence-parallel", "cp-load-balancer", "checkpointing", "dtype", "fsdp-prefetch"});
  const std::string m = args.require("model");
  struct stat st {};
  ModelConfig cfg = (::stat(m.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) ? load_hf_config(m + "/config.json")
                                                                          : flavor_config(m);
  const int64_t seq = args.get_int("seq-len", 2048, 1, kMaxSeqLen);
  const int64_t dp = args.get_int("dp", 1, 1, kMaxRanks);
  cfg.num_hidden_layers = args.get_int("n-layers", cfg.num_hidden_layers, 1, cfg.num_hidden_layers);
  if (args.get_int("pp", 1, 1, 1024) > 1) {
    TITAN_CHECK(args.get_int("tp", 1, 1, kMaxRanks) == 1 && args.get_int("ep", 1, 1, kMaxRanks) == 1 &&
                    args.get_int("cp", 1, 1, kMaxRanks) == 1,
                "titan info --pp: not together with --tp or --ep, nor --cp (the per-rank state of pp x tp, pp x ep and pp x cp is "
                "not predicted yet; the trainer's setup line reports it)");
    return print_pp_info(m, cfg, args, seq, dp);
  }
  const int64_t tp = args.get_int("tp", 1, 1, kMaxRanks), cp = args.get_int("cp", 1, 1, kMaxRanks);
  // A rank of a mesh (distributed/step_memory.h): --dp N shards, --dp-replicate R replicas of them,
  // --tp, --cp; its step at --batch rows x --seq-len, --checkpointing, --dtype.
  distributed::MeshStep ms;
  ms.dp_shard = dp, ms.dp_replicate = args.get_int("dp-replicate", 1, 1, kMaxRanks), ms.tp = tp, ms.cp = cp;
  ms.seq = seq, ms.batch = args.get_int("batch", 1, 1, int64_t(1) << 24);
  ms.sequence_parallel = parse_on_off(args.get("sequence-parallel", "true"), "--sequence-parallel");
  const std::string lb = args.get("cp-load-balancer", "headtail");
  TITAN_CHECK(lb == "headtail" || lb == "none", "--cp-load-balancer must be headtail or none, got '", lb, "'");
  ms.head_tail = lb == "headtail";
  const std::string ck = args.get("checkpointing", "none");
  TITAN_CHECK(ck == "none" || ck == "selective" || ck == "full", "--checkpointing must be none, selective or full, got '",
              ck, "'");
  ms.ckpt = ck == "full" ? Checkpointing::Full : ck == "selective" ? Checkpointing::Selective : Checkpointing::None;
  const std::string dt = args.get("dtype", "float32");
  TITAN_CHECK(parse_dtype(dt, &ms.compute) && (ms.compute == DType::F32 || ms.compute == DType::BF16),
              "--dtype (of the GEMM inputs, [training] mixed_precision_param) must be float32 or bfloat16, got '", dt, "'");
  ms.prefetch = parse_on_off(args.get("fsdp-prefetch", "true"), "--fsdp-prefetch");
  // The step peak covers dense attention models' full fine-tuning.
  const bool dense_step = !cfg.is_moe() && !cfg.is_qwen3_5() && !args.has("lora-rank");
  if (tp > 1 || cp > 1) {
    TITAN_CHECK(args.get_int("ep", 1, 1, kMaxRanks) == 1, "titan info: --ep not together with --tp or --cp");
    TITAN_CHECK(!args.has("lora-rank"), "titan info: --lora-rank not together with --tp or --cp (LoRA under tensor or ",
                "context parallelism is not built)");
    return print_tp_info(m, cfg, ms, dense_step, args.has("json"));
  }
  const int64_t ep = args.get_int("ep", 1, 1, kMaxRanks);
  if (ep > 1) return print_ep_info(m, cfg, seq, args.get_int("batch", 1, 1, int64_t(1) << 24), dp, ep, args.has("json"));
  // One step's predicted peak: batch --batch (1), full fine-tuning or, with --lora-rank R, LoRA
  // rank R on the attention and MLP projections ([lora]'s default targets, alpha 2R).
  LoraConfig lc;
  lc.rank = args.get_int("lora-rank", 0, 0, int64_t(1) << 20);
  lc.alpha = double(2 * lc.rank);
  lc.target_modules = JobConfig().lora.target_modules;
  // --lora-base-dtype: [lora] base_dtype (bfloat16: the frozen base's matmul weights in bf16, its
  // GEMMs in bf16; float32, the default, computes in f32 here).
  DType base = DType::F32;
  if (args.has("lora-base-dtype")) {
    const std::string d = args.get("lora-base-dtype", "");
    TITAN_CHECK(parse_dtype(d, &base) && (base == DType::F32 || base == DType::BF16),
                "--lora-base-dtype must be float32 or bfloat16, got '", d, "'");
    TITAN_CHECK(lc.rank > 0 || base == DType::F32, "--lora-base-dtype bfloat16 needs --lora-rank (a frozen LoRA base)");
  }
  if ((dp > 1 || ms.dp_replicate > 1) && (lc.rank == 0 || cfg.is_moe())) {
    std::optional<distributed::RankStepMemory> r;  // a sharded or replicated rank's step (dense attention models)
    if (dense_step) r = distributed::predict_rank_step_memory(cfg, ms);
    return print_info(m, cfg, seq, dp, args.has("json"), nullptr, lc.rank > 0 ? &lc : nullptr, base,
                      r ? &*r : nullptr, &ms);
  }
  const int64_t batch = ms.batch;
  const StepMemory sm = step_memory(cfg, batch, seq, ms.ckpt, base == DType::BF16 ? base : ms.compute,
                                    lc.rank > 0 ? &lc : nullptr, base);
  return print_info(m, cfg, seq, dp, args.has("json"), &sm, lc.rank > 0 ? &lc : nullptr, base);
}

TITAN_COMMAND("info", "parameters, FLOPs per token and memory of a model folder or flavor; --peak: MFU's peak FLOP/s here",
              cmd_info);

}  // namespace titan::cli
