#include "train/trainer.h"

#include <sys/stat.h>

#include <cmath>
#include <cstdio>

#include "core/allocator.h"
#include "core/clock.h"
#include "core/threading.h"
#include "dist/comm.h"
#include "io/hf_checkpoint.h"
#include "model/flops.h"
#include "model/hf_model.h"
#include "model/replace.h"
#include "ops/adamw/adamw.h"
#include "train/checkpoint.h"
#include "train/model_state.h"
#include "train/resume_check.h"
#include "train/run_folder.h"
#include "train/grad_utils.h"
#include "train/lr_schedule.h"
#include "train/metrics.h"
#include "train/peak_flops.h"
#include "train/signals.h"
#include "train/train_data.h"

namespace titan {

namespace {

bool is_file(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}


std::string dp_mode_text(int64_t replicate, int64_t world) {
  if (replicate == 1) return "fully sharded (FSDP)";
  return "hybrid (HSDP): sharded over " + std::to_string(world / replicate) + " ranks x " + std::to_string(replicate) +
         " replicas";
}

Checkpointing model_checkpointing(ActivationCheckpointMode m) {
  switch (m) {
    case ActivationCheckpointMode::None: return Checkpointing::None;
    case ActivationCheckpointMode::Selective: return Checkpointing::Selective;
    case ActivationCheckpointMode::Full: return Checkpointing::Full;
  }
  return Checkpointing::None;
}

}  // namespace

ModelConfig job_model_config(const JobConfig& cfg, std::unique_ptr<HfCheckpoint>* ckpt_out) {
  std::unique_ptr<HfCheckpoint> ckpt;
  ModelConfig mc;
  if (cfg.checkpoint.initial_load_in_hf && !cfg.checkpoint.initial_load_path.empty()) {
    ckpt = std::make_unique<HfCheckpoint>(HfCheckpoint::open(cfg.checkpoint.initial_load_path));
    mc = ckpt->config();
  } else if (!cfg.model.hf_assets_path.empty() && is_file(cfg.model.hf_assets_path + "/config.json")) {
    mc = load_hf_config(cfg.model.hf_assets_path + "/config.json");
  } else {
    mc = flavor_config(cfg.model.flavor);
  }
  // [model] name: "qwen3" runs whatever the flavor / config.json is (torchtitan's qwen3 family has
  // the MoE flavors too); "qwen3_moe" additionally insists on a mixture-of-experts model.
  TITAN_CHECK(cfg.model.name != ModelName::Qwen3Moe || mc.is_moe(), "[model] name is qwen3_moe but the model (",
              mc.flavor.empty() ? std::string("config.json") : "flavor " + mc.flavor, ") is a dense qwen3");
  TITAN_CHECK(mc.is_moe() || (cfg.model.num_experts < 0 && cfg.model.top_k < 0),
              "[model] num_experts / top_k apply to qwen3_moe models only");
  if (cfg.model.n_layers > 0) {
    TITAN_CHECK(cfg.model.n_layers <= mc.num_hidden_layers, "[model] n_layers ", cfg.model.n_layers,
                " exceeds the model's ", mc.num_hidden_layers, " layers");
    mc.num_hidden_layers = cfg.model.n_layers;
  }
  if (cfg.model.num_experts > 0) {
    TITAN_CHECK(!ckpt || cfg.model.num_experts == mc.num_experts, "[model] num_experts ", cfg.model.num_experts,
                " differs from the loaded checkpoint's ", mc.num_experts, " experts (the router shape would not match)");
    mc.num_experts = cfg.model.num_experts;
  }
  if (cfg.model.top_k > 0) mc.num_experts_per_tok = cfg.model.top_k;
  mc.validate("[model] overrides");
  if (ckpt_out) *ckpt_out = std::move(ckpt);
  return mc;
}

TrainResult run_training(const JobConfig& cfg) {
  dist::LocalComm local;
  return run_training(cfg, local);
}

TrainResult run_training(const JobConfig& cfg, dist::Comm& comm) {
  if (cfg.compute.threads > 0) set_num_threads(int(cfg.compute.threads));
  const int64_t world = comm.size(), rank = comm.rank();
  const bool lead = rank == 0;  // the one rank that logs, writes metrics, checkpoints and exports
  // A collective that outlives the timeout means a hung rank: the watchdog ends the job.
  comm.set_timeout(double(cfg.comm.init_timeout_seconds), "[comm] init_timeout_seconds");
  // Collective first: a rank with another config would otherwise diverge or wait forever.
  comm.check_same("the job config hash", config_hash(cfg));
  // Before any work: the dump folder locked for this run, it and the checkpoint folder writable.
  const auto folder_locks = prepare_run_folders(cfg, comm);
  TrainResult result;
  const int64_t seq = cfg.training.seq_len, local_b = cfg.training.local_batch_size;
  const int64_t accum = cfg.grad_accumulation_steps(world);
  const int64_t dp = cfg.data_parallel_degree(world);
  const int64_t global_b = local_b * dp * accum;
  TITAN_CHECK(dp == world, "[parallelism] data-parallel degree ", dp, " (data_parallel_shard_degree x ",
              "data_parallel_replicate_degree) does not match the ", world, " ranks of this run");
  std::unique_ptr<ModelState> state = make_model_state(cfg, comm);
  Qwen3Model& model = state->model();
  const ModelConfig& mc = model.config();
  const bool loaded = state->loaded_weights();
  const bool bf16 = cfg.training.mixed_precision_param == DType::BF16;
  model.set_compute_dtype(cfg.training.mixed_precision_param);
  model.set_checkpointing(model_checkpointing(cfg.activation_checkpoint.mode));

  if (!cfg.kernels.replace.empty()) {
    // The kernel path: swap module kernels by name pattern, one log line per replaced module.
    auto modules = qwen3_kernel_modules(model, local_b, seq);
    std::vector<std::string> lines;
    apply_kernel_replacements(modules, cfg.kernels.replace, &lines);
    if (lead)
      for (auto& l : lines) std::fprintf(stderr, "%s\n", l.c_str());
  }
  ModelSize size = model_size(mc, seq);
  char moe_buf[96] = "";
  if (mc.is_moe())  // FLOPs (and MFU) count the active parameters only
    std::snprintf(moe_buf, sizeof moe_buf, " (%.3fM active: %lld experts, top-%lld)", double(size.active_params) / 1e6,
                  (long long)mc.num_experts, (long long)mc.num_experts_per_tok);
  const std::string moe_note = moe_buf;
  if (lead)
    std::fprintf(stderr,
                 "[titan] model %s: %lld layers, hidden %lld, vocab %lld, %.3fM params%s, %s weights; %.3g FLOPs/token\n",
               mc.flavor.empty() ? "(config.json)" : mc.flavor.c_str(), (long long)mc.num_hidden_layers,
               (long long)mc.hidden_size, (long long)mc.vocab_size, double(size.params) / 1e6,
               moe_note.c_str(),
               loaded ? "loaded" : "torchtitan-init", size.flops_per_token);
  if (lead) std::fprintf(stderr, "[titan] batch: global %lld = local %lld x dp %lld x accumulation %lld, seq_len %lld, %s\n",
               (long long)global_b, (long long)local_b, (long long)dp, (long long)accum, (long long)seq,
               bf16 ? "bf16 matmuls, f32 master weights" : "f32");

  TrainData data(cfg, mc);
  const LrSchedule sched = make_lr_schedule(cfg);

  // The model's own config.json travels with each checkpoint, so export and verification need
  // nothing but the checkpoint folder (and a resume checks it).
  const nlohmann::json model_config_json = nlohmann::json::parse(hf_config_json(mc, DType::F32));
  std::unique_ptr<CheckpointManager> ckm;
  int64_t start_step = 0;
  if (cfg.checkpoint.enable) {
    ckm = std::make_unique<CheckpointManager>(cfg.checkpoint_folder(), cfg.checkpoint.keep_latest_k);
    std::optional<int64_t> resume =
        cfg.checkpoint.load_step >= 0 ? std::optional<int64_t>(cfg.checkpoint.load_step) : ckm->latest_step();
    // Rank 0's view of the folder decides for all ranks.
    int64_t resume_step = resume ? *resume : -1;
    comm.broadcast(&resume_step, sizeof resume_step, 0);
    if (resume_step >= 0) {
      // The config first (state.json alone), then the tensors: a refused resume reads no weights.
      const std::vector<std::string> notes = check_resume_config(
          ckm->read_state(resume_step), ckm->step_dir(resume_step), cfg, world, model_config_json);
      // Any rank count may have written it: each rank reads what its layout needs (resharding).
      TrainState st = state->load(*ckm, resume_step);
      data.restore(st.data_state);
      start_step = st.step;
      if (lead) std::fprintf(stderr, "[titan] resumed from %s (step %lld)\n", ckm->step_dir(resume_step).c_str(), (long long)st.step);
      if (lead)
        for (auto& n : notes) std::fprintf(stderr, "[titan] %s\n", n.c_str());
    }
  }
  if (lead) {
    std::fprintf(stderr, "[titan] memory after setup: %.3f GiB live (weights, grads, optimizer)\n",
                 double(cpu_allocator().stats().live_bytes) / double(1ull << 30));
    const double mib = double(1 << 20);
    const ModelState::Memory m = state->memory();
    std::fprintf(stderr,
                 "[titan] data parallel: %lld rank(s), %s; per rank: params %.3f MiB, grads %.3f MiB, optimizer %.3f MiB, "
                 "gathered units up to %.3f MiB, comm staging %.3f MiB\n",
                 (long long)world, world == 1 ? "one process" : !state->sharded() ? "replicated"
                 : dp_mode_text(cfg.parallelism.data_parallel_replicate_degree, world).c_str(),
                 double(m.params) / mib, double(m.grads) / mib, double(m.optimizer) / mib, double(m.transient) / mib,
                 double(m.staging) / mib);
  }

  MetricsOptions mo = metrics_options_from(cfg, size.flops_per_token);
  if (lead) {  // the rank that logs: MFU's peak, [metrics] peak_tflops or measured here (cached)
    PeakOptions po;
    po.override_tflops = cfg.metrics.peak_tflops;
    po.bf16 = bf16;
    const PeakFlops peak = mfu_peak(po);
    mo.peak_flops = peak.tflops * 1e12;
    std::fprintf(stderr, "%s\n", peak.describe().c_str());
  }
  mo.resume_step = start_step;
  if (!lead) {
    mo.console = nullptr;
    mo.dump_folder.clear();
    mo.tensorboard = false;
  }
  MetricsLogger metrics(mo);
  if (metrics.dropped_jsonl_lines() > 0)
    std::fprintf(stderr, "[titan] %s/metrics.jsonl: dropped %lld line(s) logged after step %lld by the run that "
                 "stopped (resuming from that step's checkpoint)\n", mo.dump_folder.c_str(),
                 (long long)metrics.dropped_jsonl_lines(), (long long)start_step);
  install_stop_handlers();

  auto save_checkpoint = [&](int64_t step) {
    TrainState st;
    st.step = step;
    st.config_hash = config_hash(cfg);
    st.data_state = data.state();
    st.rng_state = std::to_string(cfg.training.seed);
    st.extra["model_config"] = model_config_json;
    st.extra["job_config"] = render_toml(cfg);
    record_resume_config(st, cfg, world);
    st.extra["world_size"] = world;
    dist::ScopedTimeout none(comm, 0);  // ranks wait for the slowest writer, for as long as that takes
    result.last_checkpoint = state->save(*ckm, st);
    if (lead) std::fprintf(stderr, "[titan] checkpoint %s\n", result.last_checkpoint.c_str());
  };

  int64_t step = start_step;
  result.last_step = start_step;
  if (start_step >= cfg.training.steps)
    std::fprintf(stderr, "[titan] the checkpoint is already at step %lld of %lld: nothing to train (raise "
                 "--training.steps to continue, or use another [job] dump_folder to start over)\n",
                 (long long)start_step, (long long)cfg.training.steps);
  while (step < cfg.training.steps) {
    ++step;
    const double t0 = now_seconds();
    // The whole global batch's micro-batches first: the loss is the mean over every counted
    // token of the global batch, so each micro-batch's gradient is scaled by 1 / total count.
    std::vector<Batch> micro;
    for (int64_t a = 0; a < accum; ++a) micro.push_back(data.next(rank, world));
    const double t_data = now_seconds() - t0;
    int64_t local_count = 0;
    for (auto& b : micro) local_count += count_labels(b.labels);
    const double comm0 = state->comm_seconds(), wait0 = state->comm_wait_seconds();
    const double tc0 = now_seconds();
    const int64_t count = comm.all_reduce_sum(local_count);  // global: the loss is the global token mean
    double t_comm = now_seconds() - tc0;
    TITAN_CHECK(count > 0, "step ", step, ": the batch has no labelled tokens");
    state->zero_grad();
    double loss_sum = 0;
    for (auto& b : micro) loss_sum += model.forward_backward(b.inputs, b.labels, float(1.0 / double(count)));
    const double tc1 = now_seconds();
    const double loss = comm.all_reduce_sum(loss_sum) / double(count);
    t_comm += now_seconds() - tc1;
    TITAN_CHECK(std::isfinite(loss), "step ", step, ": loss is ", loss, " (non-finite); stopping");
    AdamWParams hp;
    hp.lr = float(sched.lr_at_step(step));
    hp.beta1 = float(cfg.optimizer.beta1);
    hp.beta2 = float(cfg.optimizer.beta2);
    hp.eps = float(cfg.optimizer.eps);
    hp.weight_decay = float(cfg.optimizer.weight_decay);
    hp.step = step;
    // torchtitan updates the expert biases from the step's token counts (summed over the ranks)
    // just before the optimizer.
    if (model.has_expert_bias()) {
      const double tb = now_seconds();
      for (auto& t : model.expert_bias_state())
        if (t.name.ends_with(".tokens_per_expert")) comm.all_reduce(t.tensor.data<float>(), t.tensor.numel(), dist::ReduceOp::Sum);
      t_comm += now_seconds() - tb;
      model.update_expert_bias(float(cfg.model.load_balance_coeff));
    }
    const double norm = state->step(step, cfg.training.max_norm, hp);
    // The trainer's own collectives (t_comm so far) block this thread too.
    const double t_wait = t_comm + state->comm_wait_seconds() - wait0;
    t_comm += state->comm_seconds() - comm0;
    const double t1 = now_seconds();

    StepRecord rec;
    rec.step = step;
    rec.loss = loss;
    rec.grad_norm = norm;
    rec.lr = hp.lr;
    rec.tokens = global_b / dp * seq;  // this rank's
    rec.world = world;
    rec.comm_seconds = world > 1 ? t_comm : 0.0;
    rec.comm_wait_seconds = world > 1 ? t_wait : 0.0;
    if (world > 1) rec.max_rank_peak_bytes = comm.all_reduce_max(double(cpu_allocator().stats().peak_bytes));
    rec.step_seconds = t1 - t0;
    rec.data_seconds = t_data;
    if (lead) metrics.record(rec);
    result.last_step = step;
    result.last_loss = loss;

    // A signal may reach the ranks at different times: stop when any rank saw one.
    const bool stop = world > 1 ? comm.all_reduce_max(stop_requested() ? 1.0 : 0.0) > 0 : stop_requested();
    if (ckm && ((cfg.checkpoint.interval > 0 && step % cfg.checkpoint.interval == 0) || stop ||
                step == cfg.training.steps))
      save_checkpoint(step);
    if (step == start_step + 1) comm.set_timeout(double(cfg.comm.train_timeout_seconds), "[comm] train_timeout_seconds");
    if (stop) {
      if (lead && stop_signal() != 0)
        std::fprintf(stderr, "[titan] stopping on signal %d after step %lld\n", stop_signal(), (long long)step);
      else if (lead)
        std::fprintf(stderr, "[titan] stopping after step %lld: another rank received a stop signal\n", (long long)step);
      result.stopped_by_signal = true;
      break;
    }
  }
  if (lead) metrics.finish();
  uninstall_stop_handlers();

  // Collective (a sharded state gathers one unit at a time); rank 0 writes.
  if (cfg.checkpoint.last_save_in_hf && !result.stopped_by_signal) {
    HfExportOptions eo;
    eo.dtype = cfg.checkpoint.export_dtype;
    eo.tokenizer_dir = data.tokenizer_dir();
    result.hf_export = cfg.checkpoint_folder() + "/step-" + std::to_string(result.last_step) + "-hf";
    dist::ScopedTimeout none(comm, 0);  // ranks wait while rank 0 writes each unit
    state->export_hf(result.hf_export, eo);
    if (lead)
      std::fprintf(stderr, "[titan] exported Hugging Face checkpoint to %s (%s)\n", result.hf_export.c_str(),
                   dtype_name(eo.dtype));
  }
  return result;
}

}  // namespace titan
