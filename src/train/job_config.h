// Job configuration: TOML job files with torchtitan's section and key names, plus command-line
// overrides `--section.key value` / `--section.key=value` typed by the key's declared type.
// Unknown sections and keys are errors with the closest known key suggested; type errors name the
// file (or option), the key and the expected type. render_toml() writes the effective config back
// (the copy kept in the dump folder).
//
// Every key is one row of the field table (job_config_fields.cpp): its member here, its type (from
// the member's type; keys with a fixed set of values are enums), its allowed values, a one-line
// doc and the checks of its value on its own. Parsing, rendering, validate() and
// `titan train --help-config` all read that table; defaults are the member initializers below.
//
// Defaults follow torchtitan except where this CPU-first system differs on purpose (each noted
// next to the field).
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "comm/parallel_dims.h"
#include "core/device.h"
#include "core/dtype.h"
#include "distributed/pp_schedule.h"

namespace titan {

// Keys with a fixed set of values are enums. Job files and overrides spell the values as
// torchtitan does (OptionNames<E>); this table is the only place those spellings are parsed.
enum class ModelName { Qwen3, Qwen3Moe, Llama, Qwen2, Qwen3_5 };
enum class OptimizerName { AdamW };
enum class DecayType { Linear, Sqrt, Cosine };
enum class ReshardAfterForward { Default, Always, Never };
enum class ActivationCheckpointMode { None, Selective, Full };
enum class CpLoadBalancer { HeadTail, None };
enum class AttnMaskType { Causal, BlockCausal };
enum class DatasetFormat { Text, Chat };
// [training] dataset_streaming: auto streams mixtures and datasets above 1 GiB on disk.
enum class DatasetStreaming { Auto, On, Off };
// One entry of [training] dataset_mix.
struct DatasetMixEntry {
  std::string path;  // as dataset_path: files, folders, globs
  double weight = 1;
  bool operator==(const DatasetMixEntry&) const = default;
};

template <class E>
struct OptionNames;  // static constexpr std::pair<E, const char*> values[]: every value, in order
template <>
struct OptionNames<ModelName> {
  static constexpr std::pair<ModelName, const char*> values[] = {{ModelName::Qwen3, "qwen3"},
                                                                 {ModelName::Qwen3Moe, "qwen3_moe"},
                                                                 {ModelName::Llama, "llama"},
                                                                 {ModelName::Qwen2, "qwen2"},
                                                                 {ModelName::Qwen3_5, "qwen3_5"}};
};
template <>
struct OptionNames<OptimizerName> {
  static constexpr std::pair<OptimizerName, const char*> values[] = {{OptimizerName::AdamW, "AdamW"}};
};
template <>
struct OptionNames<DecayType> {
  static constexpr std::pair<DecayType, const char*> values[] = {
      {DecayType::Linear, "linear"}, {DecayType::Sqrt, "sqrt"}, {DecayType::Cosine, "cosine"}};
};
template <>
struct OptionNames<ReshardAfterForward> {
  static constexpr std::pair<ReshardAfterForward, const char*> values[] = {{ReshardAfterForward::Default, "default"},
                                                                           {ReshardAfterForward::Always, "always"},
                                                                           {ReshardAfterForward::Never, "never"}};
};
template <>
struct OptionNames<ActivationCheckpointMode> {
  static constexpr std::pair<ActivationCheckpointMode, const char*> values[] = {
      {ActivationCheckpointMode::None, "none"},
      {ActivationCheckpointMode::Selective, "selective"},
      {ActivationCheckpointMode::Full, "full"}};
};
template <>
struct OptionNames<AttnMaskType> {
  static constexpr std::pair<AttnMaskType, const char*> values[] = {{AttnMaskType::Causal, "causal"},
                                                                    {AttnMaskType::BlockCausal, "block_causal"}};
};
template <>
struct OptionNames<CpLoadBalancer> {
  static constexpr std::pair<CpLoadBalancer, const char*> values[] = {{CpLoadBalancer::HeadTail, "headtail"},
                                                                      {CpLoadBalancer::None, "none"}};
};
template <>
struct OptionNames<DatasetFormat> {
  static constexpr std::pair<DatasetFormat, const char*> values[] = {{DatasetFormat::Text, "text"},
                                                                     {DatasetFormat::Chat, "chat"}};
};
template <>
struct OptionNames<DatasetStreaming> {
  static constexpr std::pair<DatasetStreaming, const char*> values[] = {
      {DatasetStreaming::Auto, "auto"}, {DatasetStreaming::On, "on"}, {DatasetStreaming::Off, "off"}};
};
template <>
struct OptionNames<DeviceType> {
  static constexpr std::pair<DeviceType, const char*> values[] = {{DeviceType::CPU, "cpu"}, {DeviceType::CUDA, "cuda"}};
};
// Floating dtypes by torch's names; a key may allow a subset (its field's allowed values).
template <>
struct OptionNames<DType> {
  static constexpr std::pair<DType, const char*> values[] = {
      {DType::F32, "float32"}, {DType::BF16, "bfloat16"}, {DType::F16, "float16"}};
};

// The spelling of `v` ("?" for a value without one).
template <class E>
const char* option_name(E v) {
  for (const auto& [e, name] : OptionNames<E>::values)
    if (e == v) return name;
  return "?";
}
// The value spelled `s`, if any (exact, case-sensitive).
template <class E>
std::optional<E> parse_option(std::string_view s) {
  for (const auto& [e, name] : OptionNames<E>::values)
    if (s == name) return e;
  return std::nullopt;
}

struct JobSection {
  std::string dump_folder = "./outputs";
  std::string description = "default job";
};

struct ModelSection {
  ModelName name = ModelName::Qwen3;
  std::string flavor = "debugmodel";
  std::string hf_assets_path;  // HF folder: config.json + tokenizer (+ weights); "" = none
  // Flavor-field overrides for experiments; -1 keeps the flavor's value. num_experts / top_k are
  // stored for the MoE model, which decides their use.
  int64_t n_layers = -1;
  int64_t num_experts = -1;
  int64_t top_k = -1;
  // qwen3_moe: torchtitan's auxiliary-loss-free load balancing; > 0 enables a per-layer expert
  // bias updated by this much (times a sign) before each optimizer step. 0 = off.
  double load_balance_coeff = 0;
  // torchtitan's key: "block_causal" keeps packed documents apart (no attention across their
  // boundaries, positions restarting at each), documents ending at <|endoftext|>.
  AttnMaskType attn_mask_type = AttnMaskType::Causal;
};

struct OptimizerSection {
  OptimizerName name = OptimizerName::AdamW;
  double lr = 8e-4;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
};

struct LrSchedulerSection {
  int64_t warmup_steps = 200;
  std::optional<double> decay_ratio;  // unset: decay over all steps after warm-up
  DecayType decay_type = DecayType::Linear;
  double min_lr_factor = 0.0;
};

struct TrainingSection {
  int64_t local_batch_size = 8;
  int64_t global_batch_size = -1;  // -1: local_batch_size x data-parallel degree (no accumulation)
  int64_t seq_len = 2048;
  double max_norm = 1.0;
  int64_t steps = 10000;
  std::string dataset = "c4_test";  // torchtitan: "c4"; c4_test is the bundled sample
  std::string dataset_path;
  // "chat": JSON lines of conversations (data/chat_data.h), the loss on the assistant's tokens.
  DatasetFormat dataset_format = DatasetFormat::Text;
  bool train_on_prompt = false;  // chat: the loss on every token, not only the assistant's
  bool skip_bad_rows = false;    // skip and count bad dataset rows instead of failing on the first
  std::string dataset_column;    // JSON field / Parquet column; "": "text", chat: "messages"
  std::vector<DatasetMixEntry> dataset_mix;  // several datasets sampled by weight (streamed)
  DatasetStreaming dataset_streaming = DatasetStreaming::Auto;
  int64_t dataset_threads = 2;   // tokenization threads of a streamed dataset
  int64_t seed = 0;  // torchtitan: unset (random); a fixed default keeps runs reproducible
  bool deterministic = false;
  // torchtitan: bfloat16. Here f32 stays the default until bf16 mixed precision measures better.
  DType mixed_precision_param = DType::F32;  // float32 | bfloat16
};

struct ParallelismSection {
  int64_t data_parallel_shard_degree = -1;  // -1: all remaining ranks
  int64_t data_parallel_replicate_degree = 1;
  int64_t tensor_parallel_degree = 1;  // model/tensor_parallel.h
  // With tensor parallelism: the residual stream and norms split by tokens between the
  // tensor-parallel blocks (torchtitan's default, true).
  bool enable_sequence_parallel = true;
  // Pipeline parallelism (model/pipeline.h, distributed/pipeline_runner.h): stages over the
  // pp ranks, each local batch cut into microbatches of pipeline_parallel_microbatch_size rows
  // and run by the schedule (GPipe, 1F1B, Interleaved1F1B: distributed/pp_schedule.h).
  int64_t pipeline_parallel_degree = 1;
  std::string pipeline_parallel_schedule = "1F1B";
  int64_t pipeline_parallel_microbatch_size = 1;
  int64_t pipeline_parallel_layers_per_stage = 0;  // 0: the layers split evenly over the stages
  int64_t pipeline_parallel_stages_per_rank = 0;   // 0: 2 for Interleaved1F1B, 1 otherwise
  // Context parallelism (model/context_parallel.h): each sequence split over cp ranks; FSDP shards
  // over data_parallel_shard_degree x context_parallel_degree. headtail: 2 cp chunks, rank r
  // holding chunks r and 2 cp - 1 - r (balanced causal work); none: one chunk per rank.
  int64_t context_parallel_degree = 1;
  CpLoadBalancer context_parallel_load_balancer = CpLoadBalancer::HeadTail;
  int64_t expert_parallel_degree = 1;
  // Sharded data parallelism (distributed/fsdp.h): free a layer's gathered parameters after its forward
  // and gather them again for backward ("default" = "always", as torchtitan without pipeline
  // parallelism), or keep them until the backward ("never": less communication, more memory).
  ReshardAfterForward fsdp_reshard_after_forward = ReshardAfterForward::Default;
  bool fsdp_prefetch = true;  // gather the next layer on a communication thread during compute
};

struct CheckpointSection {
  bool enable = false;
  std::string folder = "checkpoint";  // relative to job.dump_folder unless absolute
  int64_t interval = 500;
  std::string initial_load_path;
  bool initial_load_in_hf = false;
  bool last_save_in_hf = false;
  DType export_dtype = DType::F32;  // float32 | bfloat16 | float16
  int64_t keep_latest_k = 10;            // 0 keeps all
  int64_t load_step = -1;                // -1: resume from the latest checkpoint
};

struct ActivationCheckpointSection {
  // torchtitan: selective. Here none: recomputation trades compute for memory, and on the CPU
  // memory is rarely the limit for the default model.
  ActivationCheckpointMode mode = ActivationCheckpointMode::None;
};

struct MetricsSection {
  int64_t log_freq = 10;
  bool enable_tensorboard = false;
  std::string save_tb_folder = "tb";  // relative to job.dump_folder
  bool disable_color_printing = false;
  // Peak FLOP/s (in TFLOP/s) that MFU is measured against; 0 = measured at start-up on the
  // machine and threads of the run, for the chosen precision (train/peak_flops.h).
  double peak_tflops = 0.0;
  int64_t perf_warmup_steps = 2;  // first steps reported apart (allocator, caches, page faults)
};

struct KernelsSection {
  std::vector<std::string> replace;  // "pattern=kernel" entries, interpreted by the kernel registry
};

// LoRA fine-tuning (model/lora.h): adapters on the linears the glob patterns name, the base
// frozen (no gradients, no optimizer state); checkpoints hold the adapters and their AdamW state
// and name the base; last_save_in_hf writes a PEFT adapter folder.
struct LoraSection {
  bool enable = false;
  int64_t rank = 8;
  double alpha = 16;
  double dropout = 0;  // only 0 is implemented
  std::vector<std::string> target_modules = {"model.layers.*.self_attn.[qkvo]_proj", "model.layers.*.mlp.**_proj"};
  std::vector<std::string> target_parameters;  // MoE router / expert parameters (PEFT's target_parameters)
  bool use_rslora = false;
  std::string init = "peft";          // PEFT's default: A Kaiming-uniform, B zeros
  DType base_dtype = DType::F32;      // of the frozen base's matmul weights (bf16: bf16 base GEMMs)
  bool round_adapters = true;         // A and B rounded in bf16 GEMMs (false: unrounded, as PEFT on a bf16 base)
  bool allow_other_base = false;      // resume although the base's fingerprint changed
};

struct ComputeSection {
  // 0: leave the thread count as is (TITAN_NUM_THREADS or all cores). At most kMaxThreads.
  int64_t threads = 0;
  // Where the model, its gradients and the AdamW state live and the kernels run: "cpu", or "cuda"
  // (cuda:0, kernel set "cuda"; docs/cuda.md "Training on the GPU"). Not a trajectory key: a
  // checkpoint written on one device resumes on the other.
  DeviceType device = DeviceType::CPU;
};

// Upper bounds that validate() enforces, each far above any real run and low enough that every
// product the trainer forms from them (tokens per micro-batch and per step, batch x ranks x
// accumulation, step counters in double) stays exact in 64-bit integers and doubles.
namespace job_limits {
inline constexpr int64_t kMaxSeqLen = int64_t(1) << 24;         // tokens: above any model's context
inline constexpr int64_t kMaxLocalBatch = int64_t(1) << 24;     // sequences per rank and micro-batch
inline constexpr int64_t kMaxMicroTokens = int64_t(1) << 31;    // local_batch_size x seq_len
inline constexpr int64_t kMaxGlobalBatch = int64_t(1) << 31;    // sequences per optimizer step
inline constexpr int64_t kMaxStepTokens = int64_t(1) << 40;     // global_batch_size x seq_len
inline constexpr int64_t kMaxSteps = int64_t(1) << 40;          // steps, warmup_steps
inline constexpr int64_t kMaxRanks = int64_t(1) << 20;          // parallel degrees and their product
// Fixed rather than a multiple of this machine's cores, so that a job file valid here is valid on
// every machine; above any current machine's hardware threads (more only slow a run down), far
// below where the OpenMP runtime fails to start a team (it crashed at 100000).
inline constexpr int64_t kMaxThreads = 4096;
}  // namespace job_limits

// torchtitan's [comm] timeouts. A collective that has not completed after the timeout means a
// rank is hung (deadlock, SIGSTOP, lost machine): the MPI backend's watchdog ends the job
// (comm::Comm::set_timeout). init_timeout_seconds holds until the first training step completes
// (setup, loading, the first step's warm-up), train_timeout_seconds after it. Not trajectory
// keys (trajectory_config): changing a timeout never blocks a resume.
struct CommSection {
  int64_t init_timeout_seconds = 300;
  int64_t train_timeout_seconds = 100;
};

// torchtitan's [validation]: a held-out loss every freq steps (train/validation.h).
struct ValidationSection {
  bool enable = false;
  std::string dataset;       // a bundled dataset's name, used when dataset_path is ""
  std::string dataset_path;  // files, in [training] dataset_format
  int64_t freq = 10;
  int64_t steps = 1;  // the held-out set is steps x local_batch_size rows, whatever the rank count
  int64_t local_batch_size = 8;
  int64_t seq_len = 2048;
  std::vector<std::string> sample_prompts;  // greedy continuations printed at each validation
  int64_t sample_max_tokens = 16;
};

struct JobConfig {
  JobSection job;
  ModelSection model;
  OptimizerSection optimizer;
  LrSchedulerSection lr_scheduler;
  TrainingSection training;
  ParallelismSection parallelism;
  CheckpointSection checkpoint;
  ActivationCheckpointSection activation_checkpoint;
  MetricsSection metrics;
  KernelsSection kernels;
  LoraSection lora;
  ComputeSection compute;
  CommSection comm;
  ValidationSection validation;

  // Each key's own checks (the field table: ranges, allowed values, parallel degrees that are not
  // implemented yet), then the checks across keys. `origin` names the source in the error (a file
  // or "command line").
  void validate(const std::string& origin) const;

  // Data-parallel degree implied by the config for a world of `world_size` ranks.
  int64_t data_parallel_degree(int64_t world_size = 1) const;
  // global / (local x dp): micro-batches accumulated per optimizer step. Error when not integral.
  int64_t grad_accumulation_steps(int64_t world_size = 1) const;
  // Paths resolved against job.dump_folder (absolute paths are kept).
  std::string checkpoint_folder() const;
  std::string tensorboard_folder() const;
};

// Parse a TOML job file over the defaults. Errors name the file (and line where known).
JobConfig load_job_config_file(const std::string& path);
// Apply TOML text over `cfg` (keys the text does not mention keep their values); origin names the
// text in errors.
void apply_toml(JobConfig& cfg, const std::string& toml_text, const std::string& origin);
// Apply one override; `dotted` is "section.key", value is parsed by the key's type.
void apply_override(JobConfig& cfg, const std::string& dotted, const std::string& value);

// Full command line of `titan train`: `--job.config_file PATH` (alias `--config PATH`) loads a
// file first, then every `--section.key value` / `--section.key=value` is applied in order, then
// the result is validated. Anything else is an error naming the argument.
JobConfig parse_job_command_line(const std::vector<std::string>& args);

// The effective config as TOML (every known key; unset optionals are omitted).
std::string render_toml(const JobConfig& cfg);
// 64-bit FNV-1a over the rendered sections [model], [optimizer], [lr_scheduler], [training],
// [parallelism], [activation_checkpoint], [kernels], as 16 hex digits. The ranks of a job compare
// it at start. Checkpoints store it too, but a resume compares trajectory_config() key by key
// (the hash remains for checkpoints written before those records: see train/resume_check.h).
std::string config_hash(const JobConfig& cfg);

// [parallelism]'s degrees as the mesh takes them (comm/parallel_dims.h).
comm::ParallelDegrees parallel_degrees(const JobConfig& cfg);

// Pipeline parallelism: the stages each rank holds (pipeline_parallel_stages_per_rank; 0 = 2 for
// Interleaved1F1B, 1 for the others) and the schedule a step runs (local_batch_size /
// pipeline_parallel_microbatch_size microbatches); a refusal names those keys.
int64_t pp_stages_per_rank(const JobConfig& cfg);
distributed::PpSchedule pp_schedule_of(const JobConfig& cfg);

// The keys that decide a run's numerical trajectory, as "section.key" -> the value as TOML text
// ("unset" for an unset optional): what a resume must keep. [training] global_batch_size is the
// effective one for `world_size` ranks (local x data-parallel degree x accumulation). Left out,
// because a resumed run may change them without changing its math:
//   [training] steps (a run may be extended; the lr schedule is recomputed for the new total);
//   local_batch_size and [parallelism] (the same global batch, split otherwise: any rank count
//   resumes any checkpoint); [activation_checkpoint] mode (identical gradients); [compute] threads;
//   seed (it only initializes weights, which a resume loads); deterministic (changes no value);
//   paths (dataset_path, hf_assets_path, checkpoint initial_load_path: folders move; the data
//   position checks its dataset's size, the checkpoint its tensors' shapes, and the trainer the
//   model's config.json); [job] [checkpoint] [metrics] [comm].
std::map<std::string, std::string> trajectory_config(const JobConfig& cfg, int64_t world_size);

// All known "section.key" names (for help text and suggestions).
std::vector<std::string> job_config_keys();

// One key as the field table describes it (train/job_config_fields.cpp).
struct JobConfigKeyInfo {
  std::string section, key;
  std::string type;           // integer, number, "number, optional", boolean, string, array of strings
  std::string default_value;  // as render_toml writes it; "unset" for an unset optional
  std::vector<std::string> allowed;  // a key with a fixed set of values: all of them
  std::vector<std::string> known;    // values checked where they are used (model flavors, datasets)
  std::string doc;                   // one line
};
std::vector<JobConfigKeyInfo> job_config_key_info();
// `titan train --help-config`: every section and key with default, type, allowed values and doc.
std::string job_config_help();

}  // namespace titan
