#include "train/job_config_fields.h"

#include <cmath>
#include <optional>
#include <type_traits>

#include "data/dataset.h"
#include "model/config.h"

namespace titan::job_fields {
namespace {

Field make(const char* s, const char* k, Kind kind, void* p, const char* doc, std::vector<Check> checks) {
  Field f;
  f.section = s, f.key = k, f.kind = kind, f.ptr = p, f.doc = doc, f.checks = std::move(checks);
  return f;
}

// A field's kind follows from its member's type.
Field field(const char* s, const char* k, int64_t* p, const char* doc, std::vector<Check> checks = {}) {
  return make(s, k, Kind::Int, p, doc, std::move(checks));
}
Field field(const char* s, const char* k, double* p, const char* doc, std::vector<Check> checks = {}) {
  return make(s, k, Kind::Double, p, doc, std::move(checks));
}
Field field(const char* s, const char* k, std::optional<double>* p, const char* doc, std::vector<Check> checks = {}) {
  return make(s, k, Kind::OptDouble, p, doc, std::move(checks));
}
Field field(const char* s, const char* k, bool* p, const char* doc) { return make(s, k, Kind::Bool, p, doc, {}); }
Field field(const char* s, const char* k, std::string* p, const char* doc, std::vector<Check> checks = {},
            std::vector<std::string> (*known)() = nullptr) {
  Field f = make(s, k, Kind::String, p, doc, std::move(checks));
  f.known_values = known;
  return f;
}
Field field(const char* s, const char* k, std::vector<std::string>* p, const char* doc) {
  return make(s, k, Kind::StringList, p, doc, {});
}
Field field(const char* s, const char* k, std::vector<DatasetMixEntry>* p, const char* doc) {
  return make(s, k, Kind::Mix, p, doc, {});
}
// An enum key: every value OptionNames<E> spells, or only `allowed` when given.
template <class E>
  requires std::is_enum_v<E>
Field field(const char* s, const char* k, E* p, const char* doc, std::vector<E> allowed = {}) {
  Field f = make(s, k, Kind::Enum, p, doc, {});
  for (const auto& [e, name] : OptionNames<E>::values) {
    bool ok = allowed.empty();
    for (E a : allowed) ok |= a == e;
    if (ok) f.choices.emplace_back(int(e), name);
  }
  f.get_enum = [](const void* q) { return int(*static_cast<const E*>(q)); };
  f.set_enum = [](void* q, int v) { *static_cast<E*>(q) = E(v); };
  f.enum_name = [](int v) { return option_name(E(v)); };
  return f;
}

std::string up_to(int64_t limit) { return "must be <= " + std::to_string(limit); }

std::vector<std::string> dataset_names() {
  std::vector<std::string> out;
  for (const auto& d : data::dataset_registry()) out.push_back(d.name);
  return out;
}

}  // namespace

const std::vector<std::string>& section_names() {
  static const std::vector<std::string> names = {"job",      "model",      "optimizer",
                                                 "lr_scheduler", "training", "parallelism",
                                                 "checkpoint", "activation_checkpoint", "metrics",
                                                 "kernels",  "lora",       "compute",    "comm",
                                                 "validation"};
  return names;
}

std::vector<Field> fields_of(JobConfig& c) {
  using namespace job_limits;
  const Check at_least_1{[](int64_t v) { return v >= 1; }, "must be >= 1"};
  const Check minus1_or_at_least_1{[](int64_t v) { return v == -1 || v >= 1; }, "must be -1 or >= 1"};
  const Check unit_interval{[](double v) { return v >= 0 && v <= 1; }, "must be in [0, 1]"};
  const Check beta{[](double v) { return v >= 0 && v < 1; }, "must be in [0, 1)"};
  const Check ranks_bound{[](int64_t v) { return v <= kMaxRanks; }, up_to(kMaxRanks) + " ranks"};
  const Check positive_seconds{[](int64_t v) { return v > 0; }, "must be > 0 (seconds)"};
  return {
      field("job", "dump_folder", &c.job.dump_folder,
            "folder of the run: checkpoints, metrics.jsonl, TensorBoard events, summary.json, the run lock"),
      field("job", "description", &c.job.description, "free text naming the job"),

      field("model", "name", &c.model.name,
            "family: qwen3 runs any model, qwen3_moe only MoE, qwen3_5 only Qwen3.5 (flavor \"4B\" = qwen3_5-4B)"),
      field("model", "flavor", &c.model.flavor,
            "built-in model size and shape (torchtitan init); unused when a config.json defines the model", {},
            &flavor_names),
      field("model", "hf_assets_path", &c.model.hf_assets_path,
            "Hugging Face folder: its config.json defines the model, its tokenizer.json tokenizes (\"\": none)"),
      field("model", "n_layers", &c.model.n_layers, "keep only the first N decoder layers (-1: all the model has)",
            {{[](int64_t v) { return v == -1 || v >= 1; }, "must be -1 (flavor's) or >= 1"}}),
      field("model", "num_experts", &c.model.num_experts, "qwen3_moe: routed experts per layer (-1: the model's)",
            {minus1_or_at_least_1}),
      field("model", "top_k", &c.model.top_k, "qwen3_moe: experts per token (-1: the model's)",
            {minus1_or_at_least_1}),
      field("model", "load_balance_coeff", &c.model.load_balance_coeff,
            "qwen3_moe: aux-loss-free balancing, the expert-bias update per step (0 = off)",
            {{[](double v) { return v >= 0 && std::isfinite(v); }, "must be >= 0 (0 = off)"}}),
      field("model", "attn_mask_type", &c.model.attn_mask_type,
            "block_causal: packed documents (ending at <|endoftext|>) attend within themselves, positions restart"),

      field("optimizer", "name", &c.optimizer.name, "optimizer, with PyTorch's semantics"),
      field("optimizer", "lr", &c.optimizer.lr, "peak learning rate, reached after the warm-up",
            {{[](double v) { return v > 0 && std::isfinite(v); }, "must be a positive number"}}),
      field("optimizer", "beta1", &c.optimizer.beta1, "AdamW decay of the first moment", {beta}),
      field("optimizer", "beta2", &c.optimizer.beta2, "AdamW decay of the second moment", {beta}),
      field("optimizer", "eps", &c.optimizer.eps, "AdamW epsilon added to the denominator",
            {{[](double v) { return v > 0; }, "must be > 0"}}),
      field("optimizer", "weight_decay", &c.optimizer.weight_decay, "AdamW decoupled weight decay",
            {{[](double v) { return v >= 0; }, "must be >= 0"}}),

      field("lr_scheduler", "warmup_steps", &c.lr_scheduler.warmup_steps,
            "steps of linear warm-up to lr (clamped to [training] steps)",
            {{[](int64_t v) { return v >= 0; }, "must be >= 0"},
             {[](int64_t v) { return v <= kMaxSteps; }, up_to(kMaxSteps) + " (2^40, as [training] steps)"}}),
      field("lr_scheduler", "decay_ratio", &c.lr_scheduler.decay_ratio,
            "fraction of the steps that decay at the end (unset: every step after the warm-up)", {unit_interval}),
      field("lr_scheduler", "decay_type", &c.lr_scheduler.decay_type, "shape of the decay from lr to its minimum"),
      field("lr_scheduler", "min_lr_factor", &c.lr_scheduler.min_lr_factor,
            "lr at the end of the decay, as a fraction of lr", {unit_interval}),

      field("training", "local_batch_size", &c.training.local_batch_size, "sequences per rank and micro-batch",
            {at_least_1, {[](int64_t v) { return v <= kMaxLocalBatch; },
                          up_to(kMaxLocalBatch) + " (sequences per rank and micro-batch)"}}),
      field("training", "global_batch_size", &c.training.global_batch_size,
            "sequences per optimizer step: local x data-parallel degree x accumulated micro-batches (-1: none)",
            {minus1_or_at_least_1,
             {[](int64_t v) { return v <= kMaxGlobalBatch; },
              up_to(kMaxGlobalBatch) + " (sequences per optimizer step)"}}),
      field("training", "seq_len", &c.training.seq_len, "tokens per sequence (documents packed back to back)",
            {at_least_1,
             {[](int64_t v) { return v <= kMaxSeqLen; }, up_to(kMaxSeqLen) + " (longer than any model's context)"}}),
      field("training", "max_norm", &c.training.max_norm, "clip the global L2 norm of the gradients to this",
            {{[](double v) { return v > 0; }, "must be > 0"}}),
      field("training", "steps", &c.training.steps, "optimizer steps of the run (raise it to extend a finished run)",
            {at_least_1, {[](int64_t v) { return v <= kMaxSteps; },
                          up_to(kMaxSteps) + " (2^40: step counters stay exact in the lr schedule)"}}),
      field("training", "dataset", &c.training.dataset, "a bundled dataset's name (used when dataset_path is \"\")",
            {{[](const std::string& v) { return !v.empty(); }, "must not be empty"}}, &dataset_names),
      field("training", "dataset_path", &c.training.dataset_path,
            "dataset files, folders (HF data/<split>-N-of-M too) or globs, comma-separated; \"\": dataset"),
      field("training", "dataset_format", &c.training.dataset_format,
            "text: documents packed as a stream; chat: conversations via the chat template, whole per row"),
      field("training", "train_on_prompt", &c.training.train_on_prompt,
            "chat: the loss on every token, not only on the assistant's turns"),
      field("training", "dataset_column", &c.training.dataset_column,
            "the JSON field or Parquet column of the documents (\"\": text; chat: messages)"),
      field("training", "dataset_mix", &c.training.dataset_mix,
            "[{path = ..., weight = ...}, ...]: datasets whose documents are drawn by weight (seeded)"),
      field("training", "dataset_streaming", &c.training.dataset_streaming,
            "text and chat: tokenize while training (on) or all first (off); auto: mixtures, data > 1 GiB"),
      field("training", "dataset_threads", &c.training.dataset_threads,
            "tokenization threads of a streamed dataset", {at_least_1, {[](int64_t v) { return v <= 256; }, "must be <= 256"}}),
      field("training", "skip_bad_rows", &c.training.skip_bad_rows,
            "skip and count bad dataset rows (malformed JSON, a missing field, invalid UTF-8) instead of failing"),
      field("training", "seed", &c.training.seed, "seed of the weight initialization (a resume loads the weights)"),
      field("training", "deterministic", &c.training.deterministic,
            "torchtitan's flag: accepted, no effect in this build"),
      field("training", "mixed_precision_param", &c.training.mixed_precision_param,
            "dtype of the matmul inputs; weights, gradients and AdamW state stay float32",
            {DType::F32, DType::BF16}),

      field("parallelism", "data_parallel_shard_degree", &c.parallelism.data_parallel_shard_degree,
            "ranks each parameter is sharded over (FSDP); -1: all ranks the other degrees leave",
            {{[](int64_t v) { return v == -1 || v >= 1; }, "must be -1 (all remaining ranks) or >= 1"}, ranks_bound}),
      field("parallelism", "data_parallel_replicate_degree", &c.parallelism.data_parallel_replicate_degree,
            "replicas of the shard group (with shard degree > 1: HSDP; with 1: plain replication)",
            {at_least_1, ranks_bound}),
      field("parallelism", "tensor_parallel_degree", &c.parallelism.tensor_parallel_degree,
            "ranks each layer's heads, MLP and vocabulary are split over (Megatron's column/row-parallel linears)",
            {at_least_1, ranks_bound}),
      field("parallelism", "enable_sequence_parallel", &c.parallelism.enable_sequence_parallel,
            "with tensor parallelism: split the residual stream and the norms by tokens between the tensor-parallel blocks"),
      field("parallelism", "fsdp_reshard_after_forward", &c.parallelism.fsdp_reshard_after_forward,
            "free a layer's gathered parameters after its forward (default = always) or keep them for the backward"),
      field("parallelism", "fsdp_prefetch", &c.parallelism.fsdp_prefetch,
            "gather the next layer on a communication thread while this one computes (off under tp, ep and pp)"),
      field("parallelism", "pipeline_parallel_degree", &c.parallelism.pipeline_parallel_degree,
            "ranks the layers are split over as pipeline stages (activations sent between them)",
            {at_least_1, ranks_bound}),
      field("parallelism", "pipeline_parallel_schedule", &c.parallelism.pipeline_parallel_schedule,
            "GPipe, 1F1B or Interleaved1F1B (titan info --pp-schedule prints one)"),
      field("parallelism", "pipeline_parallel_microbatch_size", &c.parallelism.pipeline_parallel_microbatch_size,
            "rows per pipeline microbatch; local_batch_size / this = microbatches per step", {at_least_1}),
      field("parallelism", "pipeline_parallel_layers_per_stage", &c.parallelism.pipeline_parallel_layers_per_stage,
            "layers of every stage but the first and last, which share the rest (0: split evenly)",
            {{[](int64_t v) { return v >= 0; }, "must be >= 0 (0: split evenly)"}}),
      field("parallelism", "pipeline_parallel_stages_per_rank", &c.parallelism.pipeline_parallel_stages_per_rank,
            "stages each pipeline rank holds (Interleaved1F1B: >= 2; 0: 2 for it, 1 otherwise)",
            {{[](int64_t v) { return v >= 0; }, "must be >= 0"}}),
      field("parallelism", "context_parallel_degree", &c.parallelism.context_parallel_degree,
            "ranks each sequence is split over (attention gathers K/V over them); FSDP shards over dp_shard x this",
            {at_least_1, ranks_bound}),
      field("parallelism", "context_parallel_load_balancer", &c.parallelism.context_parallel_load_balancer,
            "headtail: rank r holds sequence chunks r and 2cp-1-r of 2cp (equal causal work); none: chunk r of cp"),
      field("parallelism", "expert_parallel_degree", &c.parallelism.expert_parallel_degree,
            "ranks the experts of each MoE layer are split over (borrowed from data_parallel_shard_degree)",
            {at_least_1, ranks_bound}),

      field("checkpoint", "enable", &c.checkpoint.enable,
            "write training checkpoints and resume from the latest one in folder"),
      field("checkpoint", "folder", &c.checkpoint.folder, "checkpoint folder, relative to dump_folder unless absolute"),
      field("checkpoint", "interval", &c.checkpoint.interval,
            "steps between checkpoints (the last step and a stop signal write one too)", {at_least_1}),
      field("checkpoint", "initial_load_path", &c.checkpoint.initial_load_path,
            "Hugging Face folder the run starts from, with initial_load_in_hf (\"\": none)"),
      field("checkpoint", "initial_load_in_hf", &c.checkpoint.initial_load_in_hf,
            "load initial_load_path as a Hugging Face checkpoint (config.json + safetensors)"),
      field("checkpoint", "last_save_in_hf", &c.checkpoint.last_save_in_hf,
            "export a Hugging Face folder (<folder>/step-N-hf) when the run ends"),
      field("checkpoint", "export_dtype", &c.checkpoint.export_dtype, "dtype of the Hugging Face export's weights"),
      field("checkpoint", "keep_latest_k", &c.checkpoint.keep_latest_k,
            "checkpoints kept, the oldest deleted first (0 keeps all)",
            {{[](int64_t v) { return v >= 0; }, "must be >= 0 (0 keeps all)"}}),
      field("checkpoint", "load_step", &c.checkpoint.load_step, "step to resume from (-1: the latest)",
            {{[](int64_t v) { return v >= -1; }, "must be -1 (latest) or a step >= 0"}}),

      field("activation_checkpoint", "mode", &c.activation_checkpoint.mode,
            "activations kept for the backward: all (none), all but the MLP's (selective), each layer's input (full)"),

      field("metrics", "log_freq", &c.metrics.log_freq,
            "steps between log lines (step 1, the last warm-up step and the last step are always logged)",
            {at_least_1}),
      field("metrics", "enable_tensorboard", &c.metrics.enable_tensorboard, "write TensorBoard event files"),
      field("metrics", "save_tb_folder", &c.metrics.save_tb_folder, "TensorBoard folder, relative to dump_folder"),
      field("metrics", "disable_color_printing", &c.metrics.disable_color_printing, "no ANSI colors on the console"),
      field("metrics", "peak_tflops", &c.metrics.peak_tflops,
            "peak TFLOP/s that MFU is against (0: measured at start-up on the run's threads, cached)",
            {{[](double v) { return v >= 0; }, "must be >= 0 (0 = measured on this machine)"}}),
      field("metrics", "perf_warmup_steps", &c.metrics.perf_warmup_steps,
            "first steps flagged as warm-up and kept out of the run summary",
            {{[](int64_t v) { return v >= 0; }, "must be >= 0"}}),

      field("kernels", "replace", &c.kernels.replace,
            "\"pattern=op.variant\" entries: the kernels of the modules whose HF name matches the glob"),

      field("lora", "enable", &c.lora.enable, "train LoRA adapters on a frozen base instead of every parameter"),
      field("lora", "rank", &c.lora.rank, "rank r of each adapter (A [r, in], B [out, r])",
            {at_least_1, {[](int64_t v) { return v <= (int64_t(1) << 20); }, "must be <= 2^20"}}),
      field("lora", "alpha", &c.lora.alpha, "scale numerator: scale = alpha / rank (alpha / sqrt(rank) with use_rslora)",
            {{[](double v) { return v > 0 && std::isfinite(v); }, "must be a positive number"}}),
      field("lora", "dropout", &c.lora.dropout,
            "training dropout on the adapters' input (PEFT's lora_dropout; masks by seed, step, sample)",
            {{[](double v) { return v >= 0 && v < 1; }, "must be in [0, 1)"}}),
      field("lora", "target_modules", &c.lora.target_modules,
            "glob patterns over HF module names (e.g. \"model.layers.*.self_attn.[qkvo]_proj\")"),
      field("lora", "target_parameters", &c.lora.target_parameters,
            "globs over MoE router/expert parameters (\"model.layers.*.mlp.experts.*\", \"...mlp.gate.weight\")"),
      field("lora", "use_rslora", &c.lora.use_rslora, "rank-stabilized scale alpha / sqrt(rank)"),
      field("lora", "init", &c.lora.init, "adapter init: peft (A Kaiming-uniform, B zeros)",
            {{[](const std::string& v) { return v == "peft"; }, "must be \"peft\""}}),
      field("lora", "allow_other_base", &c.lora.allow_other_base,
            "resume although the base's fingerprint is not the one the checkpoint recorded"),
      field("lora", "base_dtype", &c.lora.base_dtype, "dtype the frozen base's matmul weights are kept in (bf16: bf16 base GEMMs, adapters f32)",
            {DType::F32, DType::BF16}),
      field("lora", "round_adapters", &c.lora.round_adapters,
            "round A and B to bf16 in bf16 GEMMs (false: unrounded, as PEFT keeps adapters f32 on a bf16 base)"),

      field("compute", "threads", &c.compute.threads,
            "threads of each process (0: leave as is, TITAN_NUM_THREADS or every core)",
            {{[](int64_t v) { return v >= 0; }, "must be >= 0 (0 = leave as is)"},
             {[](int64_t v) { return v <= kMaxThreads; },
              up_to(kMaxThreads) +
                  " (0 = leave as is; more threads than the machine has only slow a run down, and far more crash the "
                  "OpenMP runtime)"}}),

      field("compute", "device", &c.compute.device,
            "where model, gradients, optimizer state live and kernels run (cuda: cuda:0, docs/cuda.md)"),

      field("comm", "init_timeout_seconds", &c.comm.init_timeout_seconds,
            "a collective unfinished after this long, until the first step ends, means a hung rank: the job ends",
            {positive_seconds}),
      field("comm", "train_timeout_seconds", &c.comm.train_timeout_seconds,
            "the same timeout after the first step", {positive_seconds}),

      field("validation", "enable", &c.validation.enable, "a held-out loss and perplexity every freq steps"),
      field("validation", "dataset", &c.validation.dataset,
            "a bundled dataset's name (used when dataset_path is \"\"; \"\" too: c4_demo)"),
      field("validation", "dataset_path", &c.validation.dataset_path,
            "held-out files, in [training] dataset_format"),
      field("validation", "freq", &c.validation.freq, "steps between validations (the last step validates too)",
            {at_least_1}),
      field("validation", "steps", &c.validation.steps,
            "held-out batches: the set is steps x local_batch_size rows, split over the ranks", {at_least_1}),
      field("validation", "local_batch_size", &c.validation.local_batch_size, "rows per forward on a rank",
            {at_least_1, {[](int64_t v) { return v <= kMaxLocalBatch; }, up_to(kMaxLocalBatch)}}),
      field("validation", "seq_len", &c.validation.seq_len, "tokens per held-out row",
            {at_least_1, {[](int64_t v) { return v <= kMaxSeqLen; }, up_to(kMaxSeqLen)}}),
      field("validation", "sample_prompts", &c.validation.sample_prompts,
            "prompts whose greedy continuation is printed at each validation (one process only)"),
      field("validation", "sample_max_tokens", &c.validation.sample_max_tokens,
            "tokens generated per sample prompt", {at_least_1}),
  };
}

}  // namespace titan::job_fields
