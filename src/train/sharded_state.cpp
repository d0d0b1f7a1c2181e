// ModelState over distributed::Fsdp: see model_state.h.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>

#include "core/clock.h"
#include "distributed/data_parallel.h"
#include "distributed/flat_params.h"
#include "distributed/fsdp.h"
#include "distributed/grad_clip.h"
#include "distributed/pipeline_runner.h"
#include "model/base_fingerprint.h"
#include "model/peft_adapter.h"
#include "ops/registry.h"
#include "train/model_state.h"
#include "train/tensor_region.h"

namespace titan {

namespace {

distributed::Fsdp::Options fsdp_options(const JobConfig& cfg) {
  distributed::Fsdp::Options o;
  o.reshard_after_forward = cfg.parallelism.fsdp_reshard_after_forward != ReshardAfterForward::Never;
  // Prefetch runs FSDP's gathers on a thread of their own while the layer computes. Under tensor,
  // expert or pipeline parallelism the layer (or the pipeline's sends) itself calls collectives on this thread at the same time, which
  // an MPI initialised MPI_THREAD_SERIALIZED does not allow (an 8-rank dp_replicate x dp_shard x tp
  // run crashed inside MPI_Allgather about one run in two): there the gathers run on the calling
  // thread, in the same order, with the same results.
  o.prefetch = cfg.parallelism.fsdp_prefetch && cfg.parallelism.tensor_parallel_degree == 1 &&
               cfg.parallelism.expert_parallel_degree == 1 && cfg.parallelism.pipeline_parallel_degree == 1;
  return o;
}

// LoRA under FSDP: the frozen base is sharded by Fsdp (values only: no gradient or moment shards),
// and the adapters, a fraction of a percent of the parameters, are whole on every rank (the layers
// read them as resident tensors, no gather per unit), with their gradients reduced and their
// optimizer sharded, ZeRO-2 style, over the shard group: each micro-batch accumulates the full
// adapter gradients locally; step() reduce-scatters them (sum in rank order; with HSDP the chunk
// is then summed over the replicas), clips with the global norm, runs AdamW on this rank's chunk
// of the flattened adapters (master values, exp_avg, exp_avg_sq: 3 x P_a / N floats) and
// all-gathers the updated chunks into every rank's adapters.
struct ShardedAdapters {
  distributed::DataParallel dp;
  Tensor p, m, v;  // this rank's chunk: master values, exp_avg, exp_avg_sq
  ShardedAdapters(ParamStore& ps, comm::Comm& shard) : dp(ps, shard) {
    p = Tensor::zeros({dp.chunk()}, DType::F32);
    m = Tensor::zeros({dp.chunk()}, DType::F32);
    v = Tensor::zeros({dp.chunk()}, DType::F32);
    dp.read_value_chunk(p.data<float>());
  }
  // Calls f(param index, offset in the param, offset in the chunk, count) for this rank's pieces.
  template <class F>
  void for_each_piece(const ParamStore& ps, F&& f) const {
    const int64_t lo = dp.chunk_begin(), hi = std::min(lo + dp.chunk(), dp.total());
    distributed::for_each_flat_span(ps, 0, ps.all().size(), lo, hi,
                             [&](size_t i, int64_t po, int64_t fo, int64_t c) { f(i, po, fo - lo, c); });
  }
};

class ShardedState final : public ModelState {
 public:
  ShardedState(const JobConfig& cfg, comm::DeviceMesh& mesh)
      : comm_(mesh.world()), shard_comm_(mesh.fsdp()), adamw_(kernel<AdamWKernel>(default_variant())) {
    // The mesh's fsdp group shards; with dp_replicate > 1 (HSDP) its dp_replicate group holds
    // the replicas of each shard.
    replicas_ = int(mesh.dims().dp_replicate);
    replica_ = int(mesh.coord(comm::MeshAxis::DpReplicate));
    if (replicas_ > 1) replicate_comm_ = &mesh.dp_replicate();
    // Tensor parallelism: the model holds this tp rank's local tensors (model/tensor_parallel.h),
    // which the fsdp group shards; checkpoints place them in the whole tensors.
    TensorParallel tp;
    if (mesh.dims().tp > 1) {
      tp_comm_ = &mesh.tp();
      tp.comm = tp_comm_, tp.sequence_parallel = cfg.parallelism.enable_sequence_parallel;
      // The ranks of the first replica write a checkpoint: each fsdp group of its tp ranks.
      writers_ = comm_.split(replica_, comm_.rank());
    }
    // Expert parallelism: the model holds this ep rank's experts (model/expert_parallel.h), which
    // the expert_fsdp group shards; the rest is sharded over the fsdp group as usual.
    ExpertParallel ep;
    comm::Comm* expert_shard = nullptr;
    if (mesh.dims().ep > 1) {
      ep_comm_ = ep.comm = &mesh.ep();
      expert_shard = &mesh.expert_fsdp();
    }
    // Pipeline parallelism: the model holds this pp rank's stages (model/pipeline.h); every rank
    // of the first replica writes a checkpoint (its stages' pieces).
    PipelineStages pp;
    std::optional<distributed::PpSchedule> schedule;
    if (mesh.dims().pp > 1) {
      pp_comm_ = &mesh.pp();
      schedule = pp_schedule_of(cfg);
      const ModelConfig mc = job_model_config(cfg);
      pp = pipeline_stages(mc.num_hidden_layers, schedule->stages(), cfg.parallelism.pipeline_parallel_layers_per_stage);
      pp.held = stages_of_rank(pp.num_stages, mesh.dims().pp, pp_comm_->rank());
      if (!writers_) writers_ = comm_.split(replica_, comm_.rank());
      // The ranks of the first and last stage at the same other coordinates: a tied embedding's two copies.
      const int r = pp_comm_->rank(), n = pp_comm_->size();
      tied_pair_ = pp_comm_->split(r == 0 || r == n - 1 ? 0 : 1, r);
    }
    JobModel jm = build_job_model(cfg, /*deferred=*/true, tp, ep, pp);
    loaded_ = jm.hf != nullptr;
    const uint64_t seed = uint64_t(cfg.training.seed);
    fsdp_ = std::make_unique<distributed::Fsdp>(*jm.model, shard_comm(), fsdp_options(cfg),
                                         [&](int64_t unit) { jm.fill(unit, seed); }, replicate_comm_, expert_shard);
    model_ = std::move(jm.model);
    if (pp_comm_) {
      const int r = pp_comm_->rank(), n = pp_comm_->size();
      const bool pair = model_->config().tie_word_embeddings && (r == 0 || r == n - 1);
      fsdp_->set_pipeline(pp_comm_, pair ? tied_pair_.get() : nullptr);
      runner_ = std::make_unique<distributed::PipelineRunner>(*model_, *pp_comm_, *schedule);
    }
    if (tp_comm_) {
      std::vector<bool> split;
      for (const ParamSpec& sp : model_->param_specs()) split.push_back(sp.placement.tp_dim >= 0);
      fsdp_->set_tensor_parallel(tp_comm_, std::move(split));
    }
    if (cfg.lora.enable) {  // the model was built frozen; the adapters as one process makes them
      model_->enable_lora(job_lora_config(cfg), seed);
      if (cfg.checkpoint.initial_load_in_hf) {
        lora_base_ = std::filesystem::absolute(cfg.checkpoint.initial_load_path).lexically_normal().string();
        lora_fp_ = base_fingerprint(lora_base_);
      }
      lora_ = std::make_unique<ShardedAdapters>(model_->lora_params(), shard_comm());
    }
  }
  ~ShardedState() override {
    runner_.reset();
    fsdp_.reset();  // before the communicators it uses
  }
  distributed::PipelineRunner* pipeline() override { return runner_.get(); }
  bool sharded() const override { return true; }
  void zero_grad() override {
    if (lora_) model_->lora_params().zero_grad();
    else fsdp_->zero_grad();
  }

  double step(int64_t step, double max_norm, const AdamWParams& hp) override {
    // Every rank sees the same global norm, so a non-finite one stops all ranks alike.
    const double norm = lora_ ? step_adapters(max_norm, hp) : fsdp_->step(max_norm, adamw_, hp);
    if (!std::isfinite(norm)) {
      auto bad = fsdp_->first_non_finite_grad();
      if (lora_) bad = first_non_finite_adapter_grad();
      fail("step ", step, ": gradient norm is ", norm, "; first non-finite gradient in rank ", comm_.rank(),
           "'s shard: ", bad ? *bad : "(none here)");
    }
    return norm;
  }

  std::string save(CheckpointManager& ckm, const TrainState& st) override {
    // The first replica's shard group writes (the other replicas hold the same shards).
    std::string dir = ckm.step_dir(st.step);
    TrainState s0 = st;
    if (lora_) s0.extra["lora"] = lora_checkpoint_record(*model_, lora_base_, lora_fp_);
    if (replica_ == 0) {
      std::vector<TensorPiece> model, opt;
      pieces(&model, &opt, /*for_save=*/true);
      // The MoE balancing state is replicated: rank 0 writes it whole.
      if (comm_.rank() == 0)
        for (auto& b : model_->expert_bias_state()) opt.push_back({b.name, b.tensor.shape(), 0, b.tensor});
      comm::Comm& w = writers_ ? *writers_ : shard_comm();
      ShardedSave s;
      s.rank = w.rank(), s.world = w.size();
      s.barrier = [&w] { w.barrier(); };
      dir = ckm.save_sharded(s0, s, model, opt);
    }
    if (replicas_ > 1) comm_.barrier();
    return dir;
  }

  TrainState load(const CheckpointManager& ckm, int64_t step) override {
    std::vector<TensorPiece> model, opt;
    pieces(&model, &opt, /*for_save=*/false);
    for (auto& b : model_->expert_bias_state()) opt.push_back({b.name, b.tensor.shape(), 0, b.tensor});
    // The names the checkpoint must hold: the whole model's (under expert parallelism this rank
    // reads the pieces of its experts only, but the others' must be there all the same).
    std::vector<std::string> model_names, opt_names;
    std::vector<std::string> whole;
    if ((ep_comm_ || pp_comm_) && !lora_)
      for (const ParamSpec& sp : model_param_specs(model_->config())) whole.push_back(sp.name);
    else if (pp_comm_)  // every stage's adapters
      for (const LoraAdapter& ad : lora_select(model_->config(), model_->lora_config())) {
        whole.push_back(lora_a_name(ad.module));
        whole.push_back(lora_b_name(ad.module));
      }
    else
      for (auto& p : trained().all()) whole.push_back(p.name);
    for (const std::string& n : whole) {
      model_names.push_back(n);
      opt_names.push_back(n + ".exp_avg");
      opt_names.push_back(n + ".exp_avg_sq");
    }
    for (auto& b : model_->expert_bias_state()) opt_names.push_back(b.name);
    TrainState st = ckm.load_pieces(step, model_names, model, opt_names, opt);
    if (lora_) lora_->dp.all_gather_values(lora_->p.data<float>());  // every rank's adapters whole
    return st;
  }

  void export_hf(const std::string& dir, const HfExportOptions& opt) override {
    // One unit's parameters in memory at a time; rank 0 streams them into the files.
    // (The first replica's shard group gathers; rank 0 is in it.)
    if (lora_) {  // a PEFT adapter folder, written by rank 0
      export_adapters(dir);
      comm_.barrier();
      return;
    }
    std::unique_ptr<HfExportWriter> w;
    if (comm_.rank() == 0) w = std::make_unique<HfExportWriter>(dir, model_->config(), opt);
    ParamStore& ps = model_->params();
    if (replica_ == 0)
      fsdp_->for_each_unit_gathered([&](int64_t unit) {
        if (ep_comm_ || pp_comm_) return export_unit(unit, w.get());
        if (!w && !tp_comm_) return;
        auto [p0, p1] = model_->unit_params(unit);
        for (size_t i = p0; i < p1; ++i) {
          const Param& p = ps.all()[i];
          const ParamSpec& sp = model_->param_specs()[i];
          if (tp_comm_ && sp.placement.tp_dim >= 0) {  // the tp ranks' shards joined (collective over tp)
            Tensor full = Tensor::empty(Shape(sp.shape), p.value.dtype());
            tp_gather_shards(*tp_comm_, p.value, sp.placement.tp_dim, full, sp.placement.tp_segments);
            if (w) w->add(p.name, full);
          } else if (w) {
            w->add(p.name, p.value);
          }
        }
      });
    if (w) w->finish();
    comm_.barrier();
  }

  Memory memory() const override {
    Memory m;
    m.params = m.grads = fsdp_->shard_bytes();
    m.optimizer = 2 * m.params;
    m.transient = fsdp_->plan().transient_bytes(fsdp_->options().reshard_after_forward, fsdp_->options().prefetch);
    m.staging = fsdp_->staging_bytes();
    if (lora_) {  // the base shard (bf16 weights at 2 bytes), the adapters whole with their gradients, the adapter chunks
      const int64_t a = model_->lora_params().numel(), c = lora_->dp.chunk();
      m.params = fsdp_->shard_bytes() + (a + c) * 4;
      m.grads = (a + c) * 4;
      m.optimizer = 2 * c * 4;
      m.staging += lora_->dp.staging_bytes() - c * 4;  // (the reduced chunk is counted in grads)
    }
    return m;
  }
  // The adapters' collectives run on the training thread: all of their time is waiting.
  double comm_seconds() const override { return fsdp_->comm_seconds() + adapter_comm_seconds(); }
  double comm_wait_seconds() const override { return fsdp_->comm_wait_seconds() + adapter_comm_seconds(); }
  int64_t gathered_bytes() const override { return fsdp_->gathered_bytes(); }

 private:
  ParamStore& trained() { return lora_ ? model_->lora_params() : model_->params(); }

  // Expert or pipeline parallelism: unit `unit`'s tensors in the one-process order, assembled on
  // the first rank of the stage that holds it (its pp coordinate, every other coordinate 0; a
  // sparse layer's experts joined from that stage's ep groups first, a collective over ep) and
  // written by rank 0, which receives them when that rank is another. A tied embedding comes from
  // the first stage.
  void export_unit(int64_t unit, HfExportWriter* w) {
    const ModelConfig& c = model_->config();
    const PipelineStages& st = model_->pipeline();
    const int64_t stage = st.stage_of_unit(unit, c.num_hidden_layers);
    const int pp = pp_comm_ ? pp_comm_->size() : 1, owner = int(stage % pp);
    const int sender = owner * (comm_.size() / pp);  // pp is the mesh's outermost axis
    const bool holds = !pp_comm_ || pp_comm_->rank() == owner;
    const int64_t l = unit - 1;
    Tensor gu, dn;  // [E, 2 MI, H], [E, H, MI]: the layer's experts from every ep rank
    if (holds && ep_comm_ && l >= 0 && l < c.num_hidden_layers && model_->expert_gate_up(l)) {
      const int64_t n = ep_comm_->size();
      const Tensor& lgu = *model_->expert_gate_up(l);
      const Tensor& ldn = *model_->expert_down(l);
      gu = Tensor::empty({lgu.dim(0) * n, lgu.dim(1), lgu.dim(2)}, DType::F32);
      dn = Tensor::empty({ldn.dim(0) * n, ldn.dim(1), ldn.dim(2)}, DType::F32);
      ep_comm_->all_gather(lgu.data<float>(), gu.data<float>(), lgu.numel());
      ep_comm_->all_gather(ldn.data<float>(), dn.data<float>(), ldn.numel());
    }
    // Tensor parallelism: the stage's tp ranks join their shards of each split tensor (a
    // collective over tp on every rank that holds the unit; the sender keeps the whole tensors).
    std::map<std::string, Tensor> joined;
    if (holds && tp_comm_) {
      auto [p0, p1] = model_->unit_params(unit);
      for (size_t i = p0; i < p1; ++i) {
        const ParamSpec& sp = model_->param_specs()[i];
        if (sp.placement.tp_dim < 0) continue;
        const Param& p = model_->params().all()[i];
        Tensor full = Tensor::empty(Shape(sp.shape), p.value.dtype());
        tp_gather_shards(*tp_comm_, p.value, sp.placement.tp_dim, full, sp.placement.tp_segments);
        if (comm_.rank() == sender) joined[p.name] = full;
      }
    }
    if (comm_.rank() != sender && comm_.rank() != 0) return;
    std::vector<ParamSpec> specs;
    for (ParamSpec& sp : model_param_specs(c))
      if (sp.unit == unit) specs.push_back(std::move(sp));
    if (comm_.rank() == sender) {
      auto [p0, p1] = model_->unit_params(unit);
      std::map<std::string, size_t> local;
      for (size_t i = p0; i < p1; ++i) local[model_->params().all()[i].name] = i;
      const int64_t MI = c.moe_intermediate_size;
      for (const ParamSpec& sp : specs) {
        Tensor t;
        if (sp.expert < 0) {
          auto it = joined.find(sp.name);
          t = it != joined.end() ? it->second : model_->params().all()[local.at(sp.name)].value;
        } else {  // gate_proj, up_proj: the halves of the expert's gate_up rows; down_proj: its down matrix
          const Tensor e_gu = gu.slice0(sp.expert, sp.expert + 1).view({2 * MI, c.hidden_size});
          if (sp.name.ends_with(".gate_proj.weight")) t = e_gu.slice0(0, MI);
          else if (sp.name.ends_with(".up_proj.weight")) t = e_gu.slice0(MI, 2 * MI);
          else t = dn.slice0(sp.expert, sp.expert + 1).view({c.hidden_size, MI});
        }
        if (sender == 0) w->add(sp.name, t);
        else comm_.send(t.raw(), t.nbytes(), 0);
      }
      return;
    }
    for (const ParamSpec& sp : specs) {  // rank 0, from the sender
      Tensor t = Tensor::empty(Shape(sp.shape), DType::F32);
      comm_.recv(t.raw(), t.nbytes(), sender);
      w->add(sp.name, t);
    }
  }

  // LoRA: the PEFT folder, the bytes one process writes. Every rank holds its adapters whole (the
  // optimizer's chunks are gathered after each step); under tensor parallelism the split ones are
  // joined from their tp shards first (a collective over tp, on every rank). Under pipeline
  // parallelism rank 0 builds the whole model's adapters on a model without base memory (deferred,
  // frozen), takes its own stages' values and receives the others' from the first rank of their
  // stage (pp coordinate, every other coordinate 0), each stage sending its adapters in model order.
  void export_adapters(const std::string& dir) {
    const auto& ps = model_->lora_params().all();
    const auto& specs = model_->lora_param_specs();
    std::vector<Tensor> joined(ps.size());
    for (size_t i = 0; i < ps.size(); ++i) {
      const int d = specs[i].placement.tp_dim;
      if (!tp_comm_ || d < 0) {
        joined[i] = ps[i].value;
        continue;
      }
      joined[i] = Tensor::empty(Shape(specs[i].shape), DType::F32);
      tp_gather_shards(*tp_comm_, ps[i].value, d, joined[i]);
    }
    const int pp = pp_comm_ ? pp_comm_->size() : 1, per = comm_.size() / pp, me = comm_.rank();
    if (me != 0 && me % per == 0) {  // the first rank of another stage
      for (const Tensor& t : joined) comm_.send(t.raw(), t.nbytes(), 0);
      return;
    }
    if (me != 0) return;
    if (!pp_comm_ && !tp_comm_) return save_peft_adapter(*model_, dir, lora_base_, true, lora_fp_);
    const PipelineStages& st = model_->pipeline();
    const ModelConfig& c = model_->config();
    DecoderModel whole(c, default_variant(), /*deferred=*/true, /*frozen=*/true, model_->weight_dtype());
    whole.enable_lora(model_->lora_config(), 0);
    std::map<std::string, size_t> mine;
    for (size_t i = 0; i < ps.size(); ++i) mine[ps[i].name] = i;
    auto& wp = whole.lora_params().all();
    for (const LoraAdapter& ad : whole.lora_adapters()) {
      const int q = int(st.stage_of_unit(1 + ad.layer, c.num_hidden_layers) % pp);  // the layer's stage's pp rank
      for (size_t k = 0; k < 2; ++k) {
        Tensor& t = wp[ad.param + k].value;
        if (q == 0) t.copy_(joined[mine.at(wp[ad.param + k].name)]);
        else comm_.recv(t.raw(), t.nbytes(), q * per);
      }
    }
    save_peft_adapter(whole, dir, lora_base_, true, lora_fp_);
  }

  double adapter_comm_seconds() const { return lora_ ? lora_->dp.comm_seconds() + adapter_comm_ : 0.0; }

  double step_adapters(double max_norm, const AdamWParams& hp) {
    lora_->dp.reduce_scatter_grads();
    Tensor& g = lora_->dp.grad_chunk();
    const int64_t c = lora_->dp.chunk();
    if (replicate_comm_ && replicate_comm_->size() > 1) {  // HSDP: the replicas' chunks summed
      const double t0 = now_seconds();
      replicate_comm_->all_reduce(g.data<float>(), c, comm::ReduceOp::Sum);
      adapter_comm_ += now_seconds() - t0;
    }
    const double norm =
        distributed::clip_grad_norm(model_->exec(), {{g.data<float>(), c}}, max_norm, [this](double ss) {
          const double t0 = now_seconds();
          if (tp_comm_) ss = adapter_tp_sum_of_squares();
          double total = shard_comm().all_reduce_sum(ss);
          if (tp_comm_) total = tp_comm_->all_reduce_sum(total);  // every tp rank's shards of the split adapters
          if (pp_comm_) total = pp_comm_->all_reduce_sum(total);  // every stage's adapters
          adapter_comm_ += now_seconds() - t0;
          return total;
        });
    if (!std::isfinite(norm)) return norm;
    adamw_.step(model_->exec(), lora_->p, g, lora_->m, lora_->v, hp);  // padding past the adapters stays 0
    lora_->dp.all_gather_values(lora_->p.data<float>());
    return norm;
  }

  // Tensor parallelism: this rank's part of the adapters' squared gradient norm over the tp group:
  // the split adapters' pieces, and the replicated ones' (the same on every tp rank) on tp rank 0 only.
  double adapter_tp_sum_of_squares() {
    std::vector<distributed::GradRange> r;
    float* g = lora_->dp.grad_chunk().data<float>();
    const auto& specs = model_->lora_param_specs();
    lora_->for_each_piece(model_->lora_params(), [&](size_t i, int64_t, int64_t local, int64_t c) {
      if (specs[i].placement.tp_dim >= 0 || tp_comm_->rank() == 0) r.push_back({g + local, c});
    });
    return distributed::sum_of_squares(model_->exec(), r);
  }

  std::optional<std::string> first_non_finite_adapter_grad() {
    std::optional<std::string> bad;
    const float* g = lora_->dp.grad_chunk().data<float>();
    lora_->for_each_piece(model_->lora_params(), [&](size_t i, int64_t, int64_t local, int64_t c) {
      for (int64_t k = 0; k < c && !bad; ++k)
        if (!std::isfinite(g[local + k])) bad = model_->lora_params().all()[i].name;
    });
    return bad;
  }

  // This rank's pieces of the parameters and of both moments (views of the shard tensors). With
  // tensor parallelism each span is a range of a local tensor, which is a box of the whole one:
  // its boxes there (a replicated parameter is written by tp rank 0 alone, read by every rank).
  void pieces(std::vector<TensorPiece>* model, std::vector<TensorPiece>* opt, bool for_save) {
    if (lora_) {  // the adapters' chunk (the base is named in state.json, not stored)
      ParamStore& ps = model_->lora_params();
      lora_->for_each_piece(ps, [&](size_t i, int64_t po, int64_t local, int64_t c) {
        const Param& p = ps.all()[i];
        if (tp_comm_) {
          push_tp_pieces(model, opt, p.value.shape(), model_->lora_param_specs()[i], po, c, local, lora_->p, lora_->m,
                         lora_->v, for_save);
          return;
        }
        auto view = [&](Tensor& t) { return t.slice0(local, local + c); };
        model->push_back({p.name, p.value.shape(), po, view(lora_->p)});
        opt->push_back({p.name + ".exp_avg", p.value.shape(), po, view(lora_->m)});
        opt->push_back({p.name + ".exp_avg_sq", p.value.shape(), po, view(lora_->v)});
      });
      return;
    }
    ParamStore& ps = model_->params();
    // Pipeline: the last stage's copy of a tied embedding is not saved (the first stage's is).
    const bool tied_copy = pp_comm_ && model_->config().tie_word_embeddings && !model_->pipeline().holds(0);
    for (const distributed::Fsdp::Span& s : fsdp_->spans()) {
      const Param& p = ps.all()[s.param];
      if (for_save && tied_copy && model_->param_specs()[s.param].unit == 0) continue;
      if (tp_comm_) {
        push_tp_pieces(model, opt, p.value.shape(), model_->param_specs()[s.param], s.offset, s.count, s.local,
                       fsdp_->shard_values(), fsdp_->exp_avg(), fsdp_->exp_avg_sq(), for_save);
        continue;
      }
      auto view = [&](Tensor& t) { return t.slice0(s.local, s.local + s.count); };
      model->push_back({p.name, p.value.shape(), s.offset, view(fsdp_->shard_values())});
      opt->push_back({p.name + ".exp_avg", p.value.shape(), s.offset, view(fsdp_->exp_avg())});
      opt->push_back({p.name + ".exp_avg_sq", p.value.shape(), s.offset, view(fsdp_->exp_avg_sq())});
    }
  }
  // Tensor parallelism: elements [offset, offset + count) of this rank's local tensor `local` of sp
  // (at `at` in the shard tensors vals, m, v) as pieces of the whole tensor: boxes in this tp
  // rank's block of it. A replicated tensor is written by tp rank 0 alone and read by every rank.
  void push_tp_pieces(std::vector<TensorPiece>* model, std::vector<TensorPiece>* opt, const Shape& local,
                      const ParamSpec& sp, int64_t offset, int64_t count, int64_t at, Tensor& vals, Tensor& m,
                      Tensor& v, bool for_save) {
    const int d = sp.placement.tp_dim;
    if (d < 0 && for_save && tp_comm_->rank() != 0) return;
    Shape shift(local.size(), 0);
    if (d >= 0) shift[size_t(d)] = tp_comm_->rank() * local[size_t(d)];
    const Shape full(sp.shape);
    std::vector<TensorRegion> boxes = range_boxes(local, offset, count);
    if (!sp.placement.tp_segments.empty()) {
      // A fused tensor split part by part along dim 0 (model/param_spec.h Placement::tp_segments):
      // each box's rows cut at the local parts' borders, each piece moved to this rank's block of
      // its part. (A box of several rows spans whole trailing dims, so its pieces stay in order.)
      TITAN_ASSERT(d == 0, sp.name, ": tp_segments along dim 0 only");
      std::vector<TensorRegion> cut;
      const int64_t n = tp_comm_->size();
      for (const TensorRegion& b : boxes) {
        int64_t l0 = 0, g0 = 0;  // the part's first row in the local tensor, in the whole one
        for (const int64_t g : sp.placement.tp_segments) {
          const int64_t rows = g / n, lo = std::max(l0, b.box_offset[0]),
                        hi = std::min(l0 + rows, b.box_offset[0] + b.box_shape[0]);
          if (lo < hi) {
            TensorRegion piece = b;
            piece.box_offset[0] = g0 + tp_comm_->rank() * rows + (lo - l0);
            piece.box_shape[0] = hi - lo;
            cut.push_back(piece);
          }
          l0 += rows, g0 += g;
        }
      }
      boxes = std::move(cut);
      shift.assign(local.size(), 0);
    }
    for (TensorRegion& b : boxes) {
      for (size_t k = 0; k < shift.size(); ++k) b.box_offset[k] += shift[k];
      const int64_t n = b.numel();
      auto view = [&](Tensor& t) { return t.slice0(at, at + n); };
      model->push_back({sp.name, full, 0, view(vals), b.box_offset, b.box_shape});
      opt->push_back({sp.name + ".exp_avg", full, 0, view(m), b.box_offset, b.box_shape});
      opt->push_back({sp.name + ".exp_avg_sq", full, 0, view(v), b.box_offset, b.box_shape});
      at += n;
    }
  }
  comm::Comm& shard_comm() { return shard_comm_; }
  comm::Comm& comm_;
  comm::Comm& shard_comm_;
  int replicas_ = 1, replica_ = 0;
  comm::Comm* replicate_comm_ = nullptr;  // hybrid only
  comm::Comm* tp_comm_ = nullptr;         // tensor parallel only (the mesh's tp group)
  comm::Comm* ep_comm_ = nullptr;         // expert parallel only (the mesh's ep group)
  comm::Comm* pp_comm_ = nullptr;         // pipeline parallel only (the mesh's pp group)
  std::unique_ptr<comm::Comm> tied_pair_;  // pipeline: the first and last stage's ranks
  std::unique_ptr<distributed::PipelineRunner> runner_;
  std::unique_ptr<comm::Comm> writers_;   // tensor parallel: the first replica's ranks, which save
  const AdamWKernel& adamw_;
  std::unique_ptr<distributed::Fsdp> fsdp_;
  std::unique_ptr<ShardedAdapters> lora_;  // LoRA: the adapters' sharded optimizer
  std::string lora_base_;                  // the base HF folder of a LoRA run ("" when initialised here)
  std::string lora_fp_;                    // its fingerprint (model/base_fingerprint.h)
  double adapter_comm_ = 0;                // time in the adapters' replica sum and norm
};

}  // namespace

std::unique_ptr<ModelState> make_sharded_state(const JobConfig& cfg, comm::DeviceMesh& mesh) {
  return std::make_unique<ShardedState>(cfg, mesh);
}

}  // namespace titan
