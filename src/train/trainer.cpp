#include "train/trainer.h"

#include <cmath>
#include <cstdio>

#include "core/allocator.h"
#include "core/clock.h"
#include "core/threading.h"
#include "comm/comm.h"
#include "model/flops.h"
#include "model/hf_model.h"
#include "model/replace.h"
#include "ops/adamw/adamw.h"
#include "train/peak_flops.h"
#include "distributed/pipeline_runner.h"
#include "train/resume_check.h"
#include "train/signals.h"

namespace titan {

namespace {

std::string dp_mode_text(const comm::ParallelDims& d, bool sp, bool head_tail) {
  std::string s = d.dp_replicate == 1 ? "fully sharded (FSDP) over " + std::to_string(d.fsdp()) + " rank(s)"
                                      : "hybrid (HSDP): sharded over " + std::to_string(d.fsdp()) + " ranks x " +
                                            std::to_string(d.dp_replicate) + " replicas";
  if (d.tp > 1) s += "; tensor parallel " + std::to_string(d.tp) + (sp ? " (sequence parallel)" : "");
  if (d.cp > 1) s += "; context parallel " + std::to_string(d.cp) + (head_tail ? " (head-tail chunks)" : "");
  if (d.pp > 1) s += "; pipeline parallel " + std::to_string(d.pp);
  if (d.ep > 1)
    s += "; expert parallel " + std::to_string(d.ep) + " (experts sharded over " + std::to_string(d.expert_fsdp()) +
         " rank(s))";
  return s;
}

Checkpointing model_checkpointing(ActivationCheckpointMode m) {
  switch (m) {
    case ActivationCheckpointMode::None: return Checkpointing::None;
    case ActivationCheckpointMode::Selective: return Checkpointing::Selective;
    case ActivationCheckpointMode::Full: return Checkpointing::Full;
  }
  return Checkpointing::None;
}

// The SIGINT/SIGTERM handlers of the loop: installed for its duration, also when it throws.
class StopHandlers {
 public:
  StopHandlers() { install_stop_handlers(); }
  ~StopHandlers() { release(); }
  void release() {
    if (installed_) uninstall_stop_handlers();
    installed_ = false;
  }

 private:
  bool installed_ = true;
};

}  // namespace

// ---- setup ----

Trainer::Trainer(const JobConfig& cfg, comm::Comm& comm)
    : cfg_(cfg), comm_(comm), world_(comm.size()), rank_(comm.rank()), lead_(comm.rank() == 0) {
  init_run();
  build_model();
  log_model();
  data_ = std::make_unique<TrainData>(cfg_, model().config());
  if (lead_ && !data_->describe().empty()) std::fprintf(stderr, "[titan] %s\n", data_->describe().c_str());
  sched_ = std::make_unique<LrSchedule>(make_lr_schedule(cfg_));
  // The model's own config.json travels with each checkpoint, so export and verification need
  // nothing but the checkpoint folder (and a resume checks it).
  model_config_json_ = nlohmann::json::parse(hf_config_json(model().config(), DType::F32));
  resume();
  log_memory();
  init_metrics();
  add_hook(make_metrics_hook());
  add_hook(make_checkpoint_hook());
  add_hook(make_hf_export_hook());
  if (cfg_.validation.enable) add_hook(make_validation_hook(*this));
}

Trainer::~Trainer() = default;

void Trainer::add_hook(std::unique_ptr<TrainerHook> hook) { hooks_.push_back(std::move(hook)); }

// Threads, the collective checks and the run folders: before any work.
void Trainer::init_run() {
  if (cfg_.compute.threads > 0) set_num_threads(int(cfg_.compute.threads));
  // A collective that outlives the timeout means a hung rank: the watchdog ends the job.
  comm_.set_timeout(double(cfg_.comm.init_timeout_seconds), "[comm] init_timeout_seconds");
  // Collective first: a rank with another config would otherwise diverge or wait forever.
  comm_.check_same("the job config hash", config_hash(cfg_));
  // The dump folder locked for this run, it and the checkpoint folder writable.
  folder_locks_ = prepare_run_folders(cfg_, comm_);
  seq_ = cfg_.training.seq_len;
  local_batch_ = cfg_.training.local_batch_size;
  // The mesh: every sub-communicator made once; data, dropout and the loss follow its batch and
  // loss groups, the sharded state its fsdp and dp_replicate groups.
  mesh_ = std::make_unique<comm::DeviceMesh>(comm_, comm::ParallelDims::resolve(parallel_degrees(cfg_), world_));
  accum_ = cfg_.grad_accumulation_steps(world_);
  dp_ = mesh_->dims().batch();
  batch_rank_ = mesh_->batch_rank();
  TITAN_CHECK(dp_ == cfg_.data_parallel_degree(world_), "[parallelism] data-parallel degree ",
              cfg_.data_parallel_degree(world_), " differs from the mesh's batch degree ", dp_);
  global_batch_ = local_batch_ * dp_ * accum_;
}

// The model state (weights, gradients, optimizer: full or sharded), its precision, activation
// checkpointing and kernel replacements.
void Trainer::build_model() {
  state_ = make_model_state(cfg_, *mesh_);
  DecoderModel& m = model();
  // Context parallelism: the model attends over the cp group; next_global_batch hands it this
  // rank's chunks of each sequence.
  m.set_context_parallel(ContextParallel{&mesh_->cp(), cfg_.parallelism.context_parallel_load_balancer ==
                                                          CpLoadBalancer::HeadTail});
  // A bf16 LoRA base ([lora] base_dtype) computes its GEMMs in bf16 whatever mixed_precision_param
  // says: the same arithmetic as f32 weights with mixed_precision_param = bfloat16 (docs/lora.md).
  m.set_compute_dtype(m.weight_dtype() == DType::BF16 ? DType::BF16 : cfg_.training.mixed_precision_param);
  m.set_checkpointing(model_checkpointing(cfg_.activation_checkpoint.mode));
  if (!cfg_.kernels.replace.empty()) {
    TITAN_CHECK(cfg_.compute.device == DeviceType::CPU,
                "[kernels] replace applies to [compute] device = \"cpu\" (a GPU run uses kernel set cuda throughout)");
    // The kernel path: swap module kernels by name pattern, one log line per replaced module.
    auto modules = decoder_kernel_modules(m, local_batch_, seq_);
    std::vector<std::string> lines;
    apply_kernel_replacements(modules, cfg_.kernels.replace, &lines);
    if (lead_)
      for (auto& l : lines) std::fprintf(stderr, "%s\n", l.c_str());
  }
  const ModelSize size = model_size(m.config(), seq_);
  flops_per_token_ = size.flops_per_token;
  // LoRA: the frozen base's weight gradients are not computed (2N of the 6N), the adapters' are
  // (6 per adapter parameter: their own forward, input gradient and weight gradient).
  // (The adapters' whole count: under tensor parallelism lora_params() holds this rank's blocks.)
  if (m.lora_enabled()) {
    int64_t adapters = 0;
    for (const ParamSpec& sp : m.lora_param_specs()) adapters += shape_numel(sp.shape);
    flops_per_token_ += -2.0 * double(size.matmul_params) + 6.0 * double(adapters);
  }
  // The lm_head [V, H]: forward, input gradient and (unless frozen) weight gradient.
  head_flops_per_row_ = (m.lora_enabled() ? 4.0 : 6.0) * double(m.config().vocab_size) * double(m.config().hidden_size);
  // Tensor parallelism: each rank of a tp group computes its 1/tp of every token's matmuls (the
  // norms and elementwise work it repeats or splits are not counted in either case).
  const double tp = double(m.tensor_parallel().size());
  flops_per_token_ /= tp;
  head_flops_per_row_ /= tp;
  // Pipeline parallelism: each rank computes its stages, about 1/pp of the layers (the embedding
  // and the head fall on the first and last stage; the count divides evenly).
  const double pp = double(cfg_.parallelism.pipeline_parallel_degree);
  flops_per_token_ /= pp;
  head_flops_per_row_ /= pp;
}

void Trainer::log_model() const {
  if (!lead_) return;
  const ModelConfig& mc = state_->model().config();
  const ModelSize size = model_size(mc, seq_);
  char moe_buf[96] = "";
  if (mc.is_moe())  // FLOPs (and MFU) count the active parameters only
    std::snprintf(moe_buf, sizeof moe_buf, " (%.3fM active: %lld experts, top-%lld)", double(size.active_params) / 1e6,
                  (long long)mc.num_experts, (long long)mc.num_experts_per_tok);
  std::fprintf(stderr,
               "[titan] model %s: %lld layers, hidden %lld, vocab %lld, %.3fM params%s, %s weights; %.3g FLOPs/token\n",
               mc.flavor.empty() ? "(config.json)" : mc.flavor.c_str(), (long long)mc.num_hidden_layers,
               (long long)mc.hidden_size, (long long)mc.vocab_size, double(size.params) / 1e6, moe_buf,
               state_->loaded_weights() ? "loaded" : "torchtitan-init", size.flops_per_token);
  std::fprintf(stderr, "[titan] batch: global %lld = local %lld x dp %lld x accumulation %lld, seq_len %lld, %s\n",
               (long long)global_batch_, (long long)local_batch_, (long long)dp_, (long long)accum_, (long long)seq_,
               state_->model().weight_dtype() == DType::BF16 ? "bf16 matmuls, frozen base in bf16, adapters f32"
               : cfg_.training.mixed_precision_param == DType::BF16 ? "bf16 matmuls, f32 master weights"
                                                                     : "f32");
  if (cfg_.compute.device != DeviceType::CPU)
    std::fprintf(stderr,
                 "[titan] device: %s (kernel set %s; parameters, gradients, AdamW state and activations there)\n",
                 state_->model().exec().device.str().c_str(), default_variant(cfg_.compute.device));
}

// With [checkpoint] enable: the manager, and the resume from [checkpoint] load_step or the latest
// checkpoint of the folder.
void Trainer::resume() {
  if (!cfg_.checkpoint.enable) return;
  ckm_ = std::make_unique<CheckpointManager>(cfg_.checkpoint_folder(), cfg_.checkpoint.keep_latest_k);
  std::optional<int64_t> found =
      cfg_.checkpoint.load_step >= 0 ? std::optional<int64_t>(cfg_.checkpoint.load_step) : ckm_->latest_step();
  // Rank 0's view of the folder decides for all ranks.
  int64_t resume_step = found ? *found : -1;
  comm_.broadcast(&resume_step, sizeof resume_step, 0);
  if (resume_step < 0) return;
  // The config first (state.json alone), then the tensors: a refused resume reads no weights.
  const std::vector<std::string> notes = check_resume_config(
      ckm_->read_state(resume_step), ckm_->step_dir(resume_step), cfg_, world_, model_config_json_);
  // Any rank count may have written it: each rank reads what its layout needs (resharding).
  TrainState st = state_->load(*ckm_, resume_step);
  data_->restore(st.data_state);
  start_step_ = step_ = st.step;
  if (!lead_) return;
  std::fprintf(stderr, "[titan] resumed from %s (step %lld)\n", ckm_->step_dir(resume_step).c_str(), (long long)st.step);
  for (auto& n : notes) std::fprintf(stderr, "[titan] %s\n", n.c_str());
}

void Trainer::log_memory() const {
  if (!lead_) return;
  const Device dev = state_->model().exec().device;
  const double live = double(allocator_for(dev).stats().live_bytes);
  // The line scripts parse (tests/cli/lora_dist.sh); a GPU run's adds the device at the end.
  const std::string where = dev.type == DeviceType::CPU ? "" : " on " + dev.str();
  std::fprintf(stderr, "[titan] memory after setup: %.3f GiB live (%.2f MiB: weights, grads, optimizer)%s\n",
               live / double(1ull << 30), live / double(1 << 20), where.c_str());
  const double mib = double(1 << 20);
  DecoderModel& model = state_->model();
  if (model.lora_enabled()) {
    const LoraConfig& c = model.lora_config();
    const int64_t n = model.lora_params().numel(), base = model.params().numel();
    std::fprintf(stderr,
                 "[titan] lora: %zu adapted modules, rank %lld, alpha %g, scale %g%s; trains %lld parameters (%.3f%% of "
                 "the frozen base's %lld)%s\n",
                 model.lora_adapters().size(), (long long)c.rank, c.alpha, c.scale(), c.use_rslora ? " (rslora)" : "",
                 (long long)n, 100.0 * double(n) / double(base), (long long)base,
                 state_->sharded() ? "; base sharded (values only), adapters whole on each rank with their gradients "
                                     "reduce-scattered and AdamW sharded"
                                   : "");
  }
  const ModelState::Memory m = state_->memory();
  std::fprintf(stderr,
               "[titan] data parallel: %lld rank(s), %s; per rank: params %.3f MiB, grads %.3f MiB, optimizer %.3f MiB, "
               "gathered units up to %.3f MiB, comm staging %.3f MiB\n",
               (long long)world_, world_ == 1 ? "one process" : !state_->sharded() ? "replicated"
               : dp_mode_text(mesh_->dims(), cfg_.parallelism.enable_sequence_parallel,
                              cfg_.parallelism.context_parallel_load_balancer == CpLoadBalancer::HeadTail)
                     .c_str(),
               double(m.params) / mib, double(m.grads) / mib, double(m.optimizer) / mib, double(m.transient) / mib,
               double(m.staging) / mib);
  if (const distributed::PipelineRunner* pr = state_->pipeline()) {
    // Which stages (model/pipeline.h) each pp rank holds; the memory above is rank 0's (the first stage).
    const distributed::PpSchedule& sch = pr->schedule();
    const PipelineStages& st = model.pipeline();
    std::string where;
    for (int64_t s = 0; s < st.num_stages; ++s)
      where += (s ? " | " : "") + describe_stage(st, s) + " on pp rank " + std::to_string(s % sch.pp);
    std::fprintf(stderr, "[titan] pipeline: %s, %lld stage(s), %d microbatch(es) of %lld row(s) per step: %s\n",
                 sch.name.c_str(), (long long)st.num_stages, sch.microbatches,
                 (long long)cfg_.parallelism.pipeline_parallel_microbatch_size, where.c_str());
  }
}

// The metrics logger: rank 0 logs (console, metrics.jsonl, TensorBoard) against MFU's peak
// ([metrics] peak_tflops, or measured here and cached); other ranks record nothing.
void Trainer::init_metrics() {
  MetricsOptions mo = metrics_options_from(cfg_, flops_per_token_);
  if (lead_ && cfg_.compute.device != DeviceType::CPU && cfg_.metrics.peak_tflops <= 0) {
    // This machine's CPU peak says nothing of a GPU's; no GPU peak is assumed either.
    std::fprintf(stderr, "[titan] MFU: not reported for %s (set [metrics] peak_tflops to the GPU's peak)\n",
                 state_->model().exec().device.str().c_str());
  } else if (lead_) {
    PeakOptions po;
    po.override_tflops = cfg_.metrics.peak_tflops;
    po.bf16 = cfg_.training.mixed_precision_param == DType::BF16;
    const PeakFlops peak = mfu_peak(po);
    mo.peak_flops = peak.tflops * 1e12;
    std::fprintf(stderr, "%s\n", peak.describe().c_str());
  }
  mo.resume_step = start_step_;
  if (!lead_) {
    mo.console = nullptr;
    mo.dump_folder.clear();
    mo.tensorboard = false;
  }
  metrics_ = std::make_unique<MetricsLogger>(mo);
  if (metrics_->dropped_jsonl_lines() > 0)
    std::fprintf(stderr, "[titan] %s/metrics.jsonl: dropped %lld line(s) logged after step %lld by the run that "
                 "stopped (resuming from that step's checkpoint)\n", mo.dump_folder.c_str(),
                 (long long)metrics_->dropped_jsonl_lines(), (long long)start_step_);
}

// ---- the loop ----

TrainResult Trainer::train() {
  StopHandlers stop_handlers;
  result_.last_step = start_step_;
  if (start_step_ >= cfg_.training.steps)
    std::fprintf(stderr, "[titan] the checkpoint is already at step %lld of %lld: nothing to train (raise "
                 "--training.steps to continue, or use another [job] dump_folder to start over)\n",
                 (long long)start_step_, (long long)cfg_.training.steps);
  for (auto& h : hooks_) h->on_train_begin(*this);
  while (step_ < cfg_.training.steps) {
    const StepRecord rec = train_step();
    result_.last_step = rec.step;
    result_.last_loss = rec.loss;
    stopping_ = poll_stop();
    for (auto& h : hooks_) h->on_step_end(*this, rec);
    if (rec.step == start_step_ + 1)
      comm_.set_timeout(double(cfg_.comm.train_timeout_seconds), "[comm] train_timeout_seconds");
    if (stopping_) {
      if (lead_ && stop_signal() != 0)
        std::fprintf(stderr, "[titan] stopping on signal %d after step %lld\n", stop_signal(), (long long)rec.step);
      else if (lead_)
        std::fprintf(stderr, "[titan] stopping after step %lld: another rank received a stop signal\n",
                     (long long)rec.step);
      result_.stopped_by_signal = true;
      break;
    }
  }
  stop_handlers.release();  // a signal from here on (the export) ends the process as usual
  for (auto& h : hooks_) h->on_train_end(*this, result_);
  return result_;
}

// A signal may reach the ranks at different times: stop when any rank saw one.
bool Trainer::poll_stop() {
  return world_ > 1 ? comm_.all_reduce_max(stop_requested() ? 1.0 : 0.0) > 0 : stop_requested();
}

StepRecord Trainer::train_step() {
  const int64_t step = ++step_;
  const double t0 = now_seconds();
  int64_t local_count = 0;
  const std::vector<Batch> micro = next_global_batch(&local_count);
  const double t_data = now_seconds() - t0;
  const double comm0 = state_->comm_seconds(), wait0 = state_->comm_wait_seconds();
  const int64_t gathered0 = state_->gathered_bytes(), dispatched0 = state_->dispatch_bytes();
  const int64_t tp0 = mesh_->tp().sent_bytes(), cp0 = mesh_->cp().sent_bytes();
  // The trainer's own collectives; they block this thread too.
  double t_comm = 0;
  auto timed = [&t_comm](auto&& f) {
    const double tc = now_seconds();
    auto r = f();
    t_comm += now_seconds() - tc;
    return r;
  };
  // Global: the loss is the mean over every labelled token of the global batch.
  const int64_t count = timed([&] { return mesh_->loss().all_reduce_sum(local_count); });
  TITAN_CHECK(count > 0, "step ", step, ": the batch has no labelled tokens");
  state_->zero_grad();
  const double loss_sum = forward_backward_step(micro, count);
  const double loss = timed([&] { return mesh_->loss().all_reduce_sum(loss_sum); }) / double(count);
  TITAN_CHECK(std::isfinite(loss), "step ", step, ": loss is ", loss, " (non-finite); stopping");
  const AdamWParams hp = optimizer_params(step);
  const double norm = optimizer_step(hp, &t_comm);
  const double t_wait = t_comm + state_->comm_wait_seconds() - wait0;
  t_comm += state_->comm_seconds() - comm0;
  const double t1 = now_seconds();

  StepRecord rec;
  rec.step = step;
  rec.loss = loss;
  rec.grad_norm = norm;
  rec.lr = hp.lr;
  rec.tokens = global_batch_ / dp_ * seq_ / cfg_.parallelism.context_parallel_degree;  // this rank's
  rec.flops = flops_per_token_ * double(rec.tokens) - head_flops_per_row_ * double(rec.tokens - step_head_rows_);
  rec.world = world_;
  rec.token_ranks = dp_ * cfg_.parallelism.context_parallel_degree;
  rec.comm_seconds = world_ > 1 ? t_comm : 0.0;
  rec.comm_wait_seconds = world_ > 1 ? t_wait : 0.0;
  rec.gather_bytes = state_->gathered_bytes() - gathered0;
  rec.dispatch_bytes = state_->dispatch_bytes() - dispatched0;
  rec.tp_bytes = mesh_->tp().sent_bytes() - tp0, rec.cp_bytes = mesh_->cp().sent_bytes() - cp0;
  if (pp_run_s_ > 0) rec.pp_bubble = 1.0 - pp_compute_s_ / pp_run_s_;
  pp_compute_s_ = pp_run_s_ = 0;
  if (world_ > 1)
    rec.max_rank_peak_bytes =
        comm_.all_reduce_max(double(allocator_for(state_->model().exec().device).stats().peak_bytes));
  rec.step_seconds = t1 - t0;
  rec.data_seconds = t_data;
  rec.dataset_tokens = data_->dataset_tokens();
  return rec;
}

// This rank's micro-batches of the whole global batch, first: each micro-batch's gradient is
// scaled by 1 / the global batch's labelled-token count, known only once all are read.
std::vector<Batch> Trainer::next_global_batch(int64_t* local_count) {
  std::vector<Batch> micro;
  for (int64_t a = 0; a < accum_; ++a) micro.push_back(data_->next(batch_rank_, dp_));
  // Context parallelism: the cp ranks of a batch coordinate read the same rows and keep their
  // chunks of each (the loss group's count then sums every labelled token once).
  if (const ContextParallel& cp = model().context_parallel(); cp.on())
    for (Batch& b : micro) {
      b.inputs = cp_take_sequence(b.inputs, cp);
      b.labels = cp_take_sequence(b.labels, cp);
      if (b.positions.defined()) b.positions = cp_take_sequence(b.positions, cp);
    }
  *local_count = 0;
  for (auto& b : micro) *local_count += count_labels(b.labels);
  return micro;
}

double Trainer::forward_backward_step(const std::vector<Batch>& micro, int64_t global_count) {
  DecoderModel& m = model();
  double loss_sum = 0;
  step_head_rows_ = 0;
  if (distributed::PipelineRunner* pr = state_->pipeline()) {
    // Pipeline parallelism: each accumulation micro-batch is cut into the schedule's microbatches
    // of pipeline_parallel_microbatch_size rows and run through the stages; the loss sum lives on
    // the last stage and is shared over the pp group (the others add 0).
    const int64_t rows = cfg_.parallelism.pipeline_parallel_microbatch_size;
    for (size_t a = 0; a < micro.size(); ++a) {
      const Batch& b = micro[a];
      step_head_rows_ += DecoderModel::head_rows(b.labels);
      std::vector<distributed::PipelineRunner::Microbatch> mbs;
      for (int64_t r0 = 0; r0 < b.inputs.dim(0); r0 += rows) {
        distributed::PipelineRunner::Microbatch mb;
        mb.ids = b.inputs.slice0(r0, r0 + rows), mb.labels = b.labels.slice0(r0, r0 + rows);
        mb.lora_step = step_, mb.lora_row0 = (int64_t(a) * dp_ + batch_rank_) * local_batch_ + r0;
        mbs.push_back(mb);
      }
      TITAN_CHECK(!b.positions.defined(), "pipeline parallelism: packed documents (block-causal positions) are not "
                  "carried through the stages in this build ([training] attn_mask_type = \"causal\")");
      loss_sum += pr->run(mbs, float(1.0 / double(global_count)));
      pp_compute_s_ += pr->compute_seconds(), pp_run_s_ += pr->run_seconds();
    }
    return mesh_->pp().all_reduce_sum(loss_sum);
  }
  for (size_t a = 0; a < micro.size(); ++a) {
    const Batch& b = micro[a];
    step_head_rows_ += DecoderModel::head_rows(b.labels);
    // LoRA dropout masks follow the sample's index in the global batch (micro-batch a of the
    // step holds rows [a x dp x local, (a + 1) x dp x local), this rank's from its batch
    // coordinate x local on): the same mask for any rank count and after a resume.
    m.set_lora_dropout_rows(step_, (int64_t(a) * dp_ + batch_rank_) * local_batch_);
    loss_sum += m.forward_backward(b.inputs, b.labels, float(1.0 / double(global_count)),
                                   b.positions.defined() ? &b.positions : nullptr);
  }
  return loss_sum;
}

AdamWParams Trainer::optimizer_params(int64_t step) const {
  AdamWParams hp;
  hp.lr = float(sched_->lr_at_step(step));
  hp.beta1 = float(cfg_.optimizer.beta1);
  hp.beta2 = float(cfg_.optimizer.beta2);
  hp.eps = float(cfg_.optimizer.eps);
  hp.weight_decay = float(cfg_.optimizer.weight_decay);
  hp.step = step;
  return hp;
}

// The expert-bias update, then the gradients summed over ranks, clipped, and AdamW
// (ModelState::step). Returns the norm before clipping.
double Trainer::optimizer_step(const AdamWParams& hp, double* comm_seconds) {
  update_expert_bias(comm_seconds);
  return state_->step(hp.step, cfg_.training.max_norm, hp);
}

// torchtitan updates the MoE expert biases from the step's token counts (summed over the ranks)
// just before the optimizer.
void Trainer::update_expert_bias(double* comm_seconds) {
  DecoderModel& m = model();
  if (!m.has_expert_bias()) return;
  const double t0 = now_seconds();
  for (auto& t : m.expert_bias_state())
    if (t.name.ends_with(".tokens_per_expert")) comm_.all_reduce(t.tensor.data<float>(), t.tensor.numel(), comm::ReduceOp::Sum);
  *comm_seconds += now_seconds() - t0;
  m.update_expert_bias(float(cfg_.model.load_balance_coeff));
}

// ---- checkpoint and export ----

std::string Trainer::save_checkpoint(int64_t step) {
  TITAN_CHECK(ckm_, "save_checkpoint: [checkpoint] enable is false");
  TrainState st;
  st.step = step;
  st.config_hash = config_hash(cfg_);
  st.data_state = data_->state();
  st.rng_state = std::to_string(cfg_.training.seed);
  st.extra["model_config"] = model_config_json_;
  st.extra["job_config"] = render_toml(cfg_);
  record_resume_config(st, cfg_, world_);
  st.extra["world_size"] = world_;
  comm::ScopedTimeout none(comm_, 0);  // ranks wait for the slowest writer, for as long as that takes
  result_.last_checkpoint = state_->save(*ckm_, st);
  if (lead_) std::fprintf(stderr, "[titan] checkpoint %s\n", result_.last_checkpoint.c_str());
  return result_.last_checkpoint;
}

// Collective (a sharded state gathers one unit at a time); rank 0 writes.
std::string Trainer::export_hf() {
  HfExportOptions eo;
  eo.dtype = cfg_.checkpoint.export_dtype;
  eo.tokenizer_dir = data_->tokenizer_dir();
  eo.replace = true;  // the run's own step folder (a resumed run exports its step again)
  result_.hf_export = cfg_.checkpoint_folder() + "/step-" + std::to_string(step_) + "-hf";
  comm::ScopedTimeout none(comm_, 0);  // ranks wait while rank 0 writes each unit
  state_->export_hf(result_.hf_export, eo);
  if (lead_)
    std::fprintf(stderr, "[titan] exported Hugging Face checkpoint to %s (%s)\n", result_.hf_export.c_str(),
                 dtype_name(eo.dtype));
  return result_.hf_export;
}

// ---- entry points ----

TrainResult run_training(const JobConfig& cfg) {
  comm::LocalComm local;
  return run_training(cfg, local);
}

TrainResult run_training(const JobConfig& cfg, comm::Comm& comm) {
  Trainer trainer(cfg, comm);
  return trainer.train();
}

}  // namespace titan
