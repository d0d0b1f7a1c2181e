#include "train/trainer.h"

#include <sys/stat.h>

#include <chrono>
#include <cmath>
#include <cstdio>

#include "core/allocator.h"
#include "core/threading.h"
#include "dist/comm.h"
#include "dist/data_parallel.h"
#include "io/hf_checkpoint.h"
#include "model/flops.h"
#include "model/hf_model.h"
#include "model/replace.h"
#include "ops/adamw/adamw.h"
#include "train/checkpoint.h"
#include "train/grad_utils.h"
#include "train/lr_schedule.h"
#include "train/metrics.h"
#include "train/signals.h"
#include "train/train_data.h"

namespace titan {

namespace {

bool is_file(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// AdamW state of every parameter, in the parameter order.
struct OptimizerState {
  std::vector<Tensor> m, v;
  explicit OptimizerState(const ParamStore& ps) {
    for (auto& p : ps.all()) {
      m.push_back(Tensor::zeros(p.value.shape(), DType::F32));
      v.push_back(Tensor::zeros(p.value.shape(), DType::F32));
    }
  }
  std::vector<NamedTensor> named(const ParamStore& ps) {
    std::vector<NamedTensor> out;
    for (size_t i = 0; i < ps.all().size(); ++i) {
      out.push_back({ps.all()[i].name + ".exp_avg", m[i]});
      out.push_back({ps.all()[i].name + ".exp_avg_sq", v[i]});
    }
    return out;
  }
};

std::vector<NamedTensor> named_values(ParamStore& ps) {
  std::vector<NamedTensor> out;
  for (auto& p : ps.all()) out.push_back({p.name, p.value});
  return out;
}
std::vector<NamedTensor> named_grads(ParamStore& ps) {
  std::vector<NamedTensor> out;
  for (auto& p : ps.all()) out.push_back({p.name, p.grad});
  return out;
}

DType export_dtype(const std::string& s) {
  DType d;
  TITAN_CHECK(parse_dtype(s, &d) && d != DType::I32 && d != DType::I64, "[checkpoint] export_dtype must be float32, ",
              "bfloat16 or float16, got '", s, "'");
  return d;
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
  TITAN_CHECK(cfg.model.name == "qwen3" || cfg.model.name == "qwen3_moe", "[model] name '", cfg.model.name,
              "' is not supported (qwen3 or qwen3_moe)");
  TITAN_CHECK(cfg.model.name != "qwen3_moe" || mc.is_moe(), "[model] name is qwen3_moe but the model (",
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

std::unique_ptr<Qwen3Model> build_model(const JobConfig& cfg, bool* loaded_weights) {
  *loaded_weights = false;
  std::unique_ptr<HfCheckpoint> ckpt;
  const ModelConfig mc = job_model_config(cfg, &ckpt);
  auto model = std::make_unique<Qwen3Model>(mc, "cpu");
  if (ckpt) {
    // With a layer override only the kept layers are read (the rest of the file is unused).
    load_weights(*model, *ckpt);
    *loaded_weights = true;
  }
  if (cfg.model.load_balance_coeff > 0) {
    TITAN_CHECK(mc.num_sparse_layers() > 0, "[model] load_balance_coeff applies to qwen3_moe models with sparse layers");
    model->enable_expert_bias();
  }
  return model;
}

TrainResult run_training(const JobConfig& cfg) {
  dist::LocalComm local;
  return run_training(cfg, local);
}

TrainResult run_training(const JobConfig& cfg, dist::Comm& comm) {
  if (cfg.compute.threads > 0) set_num_threads(int(cfg.compute.threads));
  const int64_t world = comm.size(), rank = comm.rank();
  // The expert bias is updated from this process's routed-token counts; across ranks those would
  // have to be summed first, which the data-parallel step does not do yet.
  TITAN_CHECK(world == 1 || cfg.model.load_balance_coeff <= 0, "[model] load_balance_coeff (aux-loss-free MoE ",
              "balancing) is single-process only for now; run it without mpirun or set it to 0");
  const bool lead = rank == 0;  // the one rank that logs, writes metrics, checkpoints and exports
  // Collective first: a rank with another config would otherwise diverge or wait forever.
  comm.check_same("the job config hash", config_hash(cfg));
  TrainResult result;
  bool loaded = false;
  auto model = build_model(cfg, &loaded);
  const ModelConfig& mc = model->config();
  ParamStore& ps = model->params();
  const int64_t seq = cfg.training.seq_len, local_b = cfg.training.local_batch_size;
  const int64_t accum = cfg.grad_accumulation_steps(world);
  const int64_t dp = cfg.data_parallel_degree(world);
  const int64_t global_b = local_b * dp * accum;
  TITAN_CHECK(dp == world, "[parallelism] data-parallel degree ", dp, " (data_parallel_shard_degree x ",
              "data_parallel_replicate_degree) does not match the ", world, " ranks of this run");
  const int64_t replicate = cfg.parallelism.data_parallel_replicate_degree;
  TITAN_CHECK(world == 1 || replicate == 1 || replicate == world, "[parallelism] data_parallel_replicate_degree ",
              replicate, " with data_parallel_shard_degree ", world / replicate,
              ": hybrid sharded data parallelism is not implemented (use one of them alone)");
  std::unique_ptr<dist::DataParallel> dpar;
  if (world > 1)
    dpar = std::make_unique<dist::DataParallel>(
        ps, comm, replicate == world ? dist::DataParallel::Mode::Replicate : dist::DataParallel::Mode::Shard);
  const bool sharded = dpar && dpar->mode() == dist::DataParallel::Mode::Shard;
  if (!loaded) model->init_weights(InitScheme::Torchtitan, uint64_t(cfg.training.seed));
  const bool bf16 = cfg.training.mixed_precision_param == "bfloat16";
  model->set_compute_dtype(bf16 ? DType::BF16 : DType::F32);
  model->set_checkpointing(parse_checkpointing(cfg.activation_checkpoint.mode));

  if (!cfg.kernels.replace.empty()) {
    // The kernel path: swap module kernels by name pattern, one log line per replaced module.
    auto modules = qwen3_kernel_modules(*model, local_b, seq);
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
  // Full AdamW state unless sharded (then DataParallel holds this rank's chunk of it).
  std::unique_ptr<OptimizerState> opt = sharded ? nullptr : std::make_unique<OptimizerState>(ps);
  const AdamWKernel& adamw = kernel<AdamWKernel>("cpu");
  LrSchedule sched(cfg.optimizer.lr, cfg.training.steps, cfg.lr_scheduler.warmup_steps, cfg.lr_scheduler.decay_ratio,
                   parse_decay_type(cfg.lr_scheduler.decay_type), cfg.lr_scheduler.min_lr_factor);

  std::unique_ptr<CheckpointManager> ckm;
  int64_t start_step = 0;
  if (cfg.checkpoint.enable) {
    ckm = std::make_unique<CheckpointManager>(cfg.checkpoint_folder(), cfg.checkpoint.keep_latest_k);
    std::optional<int64_t> resume =
        cfg.checkpoint.load_step >= 0 ? std::optional<int64_t>(cfg.checkpoint.load_step) : ckm->latest_step();
    // Rank 0's view of the folder decides for all ranks.
    int64_t resume_step = resume ? *resume : -1;
    comm.broadcast(&resume_step, sizeof resume_step, 0);
    resume = resume_step >= 0 ? std::optional<int64_t>(resume_step) : std::nullopt;
    if (resume) {
      // Checkpoints hold the full per-parameter state whatever the rank count that wrote them;
      // every rank reads it and a sharded rank keeps its chunk of the moments (resharding).
      auto mt = named_values(ps);
      std::unique_ptr<OptimizerState> full = sharded ? std::make_unique<OptimizerState>(ps) : nullptr;
      OptimizerState& into = sharded ? *full : *opt;
      auto ot = into.named(ps);
      for (auto& b : model->expert_bias_state()) ot.push_back(b);  // MoE balancing state, if any
      TrainState st = ckm->load(*resume, mt, ot);
      if (sharded) dpar->scatter_moments(full->m, full->v);
      TITAN_CHECK(st.config_hash == config_hash(cfg), ckm->step_dir(*resume),
                  ": checkpoint was written by a run with a different model/optimizer/training config");
      data.restore(st.data_state);
      start_step = st.step;
      if (lead) std::fprintf(stderr, "[titan] resumed from %s (step %lld)\n", ckm->step_dir(*resume).c_str(), (long long)st.step);
    }
  }
  if (lead) {
    std::fprintf(stderr, "[titan] memory after setup: %.3f GiB live (weights, grads, optimizer)\n",
                 double(cpu_allocator().stats().live_bytes) / double(1ull << 30));
    const double mib = double(1 << 20);
    const int64_t pbytes = ps.numel() * 4;
    const int64_t obytes = sharded ? dpar->optimizer_bytes() : 2 * pbytes;
    std::fprintf(stderr,
                 "[titan] data parallel: %lld rank(s), %s; per rank: params %.3f MiB, grads %.3f MiB, optimizer %.3f MiB, "
                 "comm staging %.3f MiB\n",
                 (long long)world, !dpar ? "one process" : sharded ? "sharded optimizer state" : "replicated",
                 double(pbytes) / mib, double(pbytes) / mib, double(obytes) / mib,
                 double(dpar ? dpar->staging_bytes() : 0) / mib);
  }

  MetricsOptions mo = metrics_options_from(cfg, size.flops_per_token);
  mo.append_jsonl = start_step > 0;
  if (!lead) {
    mo.console = nullptr;
    mo.dump_folder.clear();
    mo.tensorboard = false;
  }
  MetricsLogger metrics(mo);
  install_stop_handlers();

  auto save_checkpoint = [&](int64_t step) {
    TrainState st;
    st.step = step;
    st.config_hash = config_hash(cfg);
    st.data_state = data.state();
    st.rng_state = std::to_string(cfg.training.seed);
    // The model's own config.json travels with the checkpoint, so export and verification need
    // nothing but the checkpoint folder.
    st.extra["model_config"] = nlohmann::json::parse(hf_config_json(mc, DType::F32));
    st.extra["job_config"] = render_toml(cfg);
    st.extra["world_size"] = world;
    // Sharded: the moments are gathered (a collective) and rank 0 writes the same per-parameter
    // files as one process would, so any rank count can resume them.
    OptimizerState* full = opt.get();
    std::unique_ptr<OptimizerState> gathered;
    if (sharded) {
      gathered = std::make_unique<OptimizerState>(ps);
      dpar->gather_moments(&gathered->m, &gathered->v);
      full = gathered.get();
    }
    if (lead) {
      auto ot = full->named(ps);
      for (auto& b : model->expert_bias_state()) ot.push_back(b);
      result.last_checkpoint = ckm->save(st, named_values(ps), ot);
      std::fprintf(stderr, "[titan] checkpoint %s\n", result.last_checkpoint.c_str());
    } else {
      result.last_checkpoint = ckm->step_dir(step);
    }
    comm.barrier();  // the checkpoint is complete before any rank moves on
  };

  const auto grads = named_grads(ps);
  int64_t step = start_step;
  result.last_step = start_step;
  if (start_step >= cfg.training.steps)
    std::fprintf(stderr, "[titan] the checkpoint is already at step %lld of %lld: nothing to train (raise "
                 "--training.steps to continue, or use another [job] dump_folder to start over)\n",
                 (long long)start_step, (long long)cfg.training.steps);
  while (step < cfg.training.steps) {
    ++step;
    const double t0 = now_s();
    // The whole global batch's micro-batches first: the loss is the mean over every counted
    // token of the global batch, so each micro-batch's gradient is scaled by 1 / total count.
    std::vector<Batch> micro;
    for (int64_t a = 0; a < accum; ++a) micro.push_back(data.next(rank, world));
    const double t_data = now_s() - t0;
    int64_t local_count = 0;
    for (auto& b : micro) local_count += count_labels(b.labels);
    const double comm0 = dpar ? dpar->comm_seconds() : 0.0;
    const double tc0 = now_s();
    const int64_t count = comm.all_reduce_sum(local_count);  // global: the loss is the global token mean
    double t_comm = now_s() - tc0;
    TITAN_CHECK(count > 0, "step ", step, ": the batch has no labelled tokens");
    ps.zero_grad();
    double loss_sum = 0;
    for (auto& b : micro) loss_sum += model->forward_backward(b.inputs, b.labels, float(1.0 / double(count)));
    const double tc1 = now_s();
    const double loss = comm.all_reduce_sum(loss_sum) / double(count);
    t_comm += now_s() - tc1;
    TITAN_CHECK(std::isfinite(loss), "step ", step, ": loss is ", loss, " (non-finite); stopping");
    AdamWParams hp;
    hp.lr = float(sched.lr_at_step(step));
    hp.beta1 = float(cfg.optimizer.beta1);
    hp.beta2 = float(cfg.optimizer.beta2);
    hp.eps = float(cfg.optimizer.eps);
    hp.weight_decay = float(cfg.optimizer.weight_decay);
    hp.step = step;
    // torchtitan updates the expert biases from the step's token counts just before the optimizer.
    if (model->has_expert_bias()) model->update_expert_bias(float(cfg.model.load_balance_coeff));
    double norm = 0;
    if (sharded) {
      // Every rank sees the same global norm, so a non-finite one stops all ranks alike.
      norm = dpar->shard_step(cfg.training.max_norm, adamw, hp);
      if (!std::isfinite(norm)) {
        auto bad = first_non_finite(grads);
        fail("step ", step, ": gradient norm is ", norm, "; first non-finite local gradient on rank ", rank, ": ",
             bad ? *bad : "(none here)");
      }
    } else {
      if (dpar) dpar->all_reduce_grads();
      norm = cfg.training.max_norm > 0 ? clip_grad_norm_(grads, cfg.training.max_norm) : global_l2_norm(grads);
      if (!std::isfinite(norm)) {
        auto bad = first_non_finite(grads);
        fail("step ", step, ": gradient norm is ", norm, "; first non-finite gradient: ", bad ? *bad : "(none found)");
      }
      for (size_t i = 0; i < ps.all().size(); ++i)
        adamw.step(ps.all()[i].value, ps.all()[i].grad, opt->m[i], opt->v[i], hp);
    }
    if (dpar) t_comm += dpar->comm_seconds() - comm0;
    const double t1 = now_s();

    StepRecord rec;
    rec.step = step;
    rec.loss = loss;
    rec.grad_norm = norm;
    rec.lr = hp.lr;
    rec.tokens = global_b / dp * seq;  // this rank's
    rec.world = world;
    rec.comm_seconds = world > 1 ? t_comm : 0.0;
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

  // Parameters are replicated, so rank 0 exports them alone.
  if (lead && cfg.checkpoint.last_save_in_hf && !result.stopped_by_signal) {
    HfExportOptions eo;
    eo.dtype = export_dtype(cfg.checkpoint.export_dtype);
    eo.tokenizer_dir = data.tokenizer_dir();
    result.hf_export = cfg.checkpoint_folder() + "/step-" + std::to_string(result.last_step) + "-hf";
    export_hf_checkpoint(result.hf_export, mc, model_state(*model), eo);
    std::fprintf(stderr, "[titan] exported Hugging Face checkpoint to %s (%s)\n", result.hf_export.c_str(),
                 dtype_name(eo.dtype));
  }
  return result;
}

}  // namespace titan
