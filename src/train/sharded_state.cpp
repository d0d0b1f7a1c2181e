// ModelState over dist::Fsdp: see model_state.h.
#include <cmath>
#include <cstdio>

#include "dist/fsdp.h"
#include "ops/registry.h"
#include "train/model_state.h"

namespace titan {

namespace {

dist::Fsdp::Options fsdp_options(const JobConfig& cfg) {
  dist::Fsdp::Options o;
  o.reshard_after_forward = cfg.parallelism.fsdp_reshard_after_forward != ReshardAfterForward::Never;
  o.prefetch = cfg.parallelism.fsdp_prefetch;
  return o;
}

class ShardedState final : public ModelState {
 public:
  ShardedState(const JobConfig& cfg, dist::Comm& comm) : comm_(comm), adamw_(kernel<AdamWKernel>("cpu")) {
    // Ranks r = replica x S + s: shard groups of S consecutive ranks, replicated R times.
    replicas_ = int(cfg.parallelism.data_parallel_replicate_degree);
    TITAN_CHECK(replicas_ >= 1 && comm.size() % replicas_ == 0, "[parallelism] data_parallel_replicate_degree ",
                replicas_, " does not divide the ", comm.size(), " ranks");
    const int s = comm.size() / replicas_;
    replica_ = comm.rank() / s;
    if (replicas_ > 1) {
      shard_comm_ = comm.split(replica_, comm.rank() % s);
      replicate_comm_ = comm.split(comm.rank() % s, replica_);
    }
    JobModel jm = build_job_model(cfg, /*deferred=*/true);
    loaded_ = jm.hf != nullptr;
    const uint64_t seed = uint64_t(cfg.training.seed);
    fsdp_ = std::make_unique<dist::Fsdp>(*jm.model, shard_comm(), fsdp_options(cfg),
                                         [&](int64_t unit) { jm.fill(unit, seed); }, replicate_comm_.get());
    model_ = std::move(jm.model);
  }
  ~ShardedState() override { fsdp_.reset(); }  // before the communicators it uses
  bool sharded() const override { return true; }
  void zero_grad() override { fsdp_->zero_grad(); }

  double step(int64_t step, double max_norm, const AdamWParams& hp) override {
    // Every rank sees the same global norm, so a non-finite one stops all ranks alike.
    const double norm = fsdp_->step(max_norm, adamw_, hp);
    if (!std::isfinite(norm)) {
      auto bad = fsdp_->first_non_finite_grad();
      fail("step ", step, ": gradient norm is ", norm, "; first non-finite gradient in rank ", comm_.rank(),
           "'s shard: ", bad ? *bad : "(none here)");
    }
    return norm;
  }

  std::string save(CheckpointManager& ckm, const TrainState& st) override {
    // The first replica's shard group writes (the other replicas hold the same shards).
    std::string dir = ckm.step_dir(st.step);
    if (replica_ == 0) {
      std::vector<TensorPiece> model, opt;
      pieces(&model, &opt);
      // The MoE balancing state is replicated: rank 0 writes it whole.
      if (comm_.rank() == 0)
        for (auto& b : model_->expert_bias_state()) opt.push_back({b.name, b.tensor.shape(), 0, b.tensor});
      ShardedSave s;
      s.rank = shard_comm().rank(), s.world = shard_comm().size();
      s.barrier = [this] { shard_comm().barrier(); };
      dir = ckm.save_sharded(st, s, model, opt);
    }
    if (replicas_ > 1) comm_.barrier();
    return dir;
  }

  TrainState load(const CheckpointManager& ckm, int64_t step) override {
    std::vector<TensorPiece> model, opt;
    pieces(&model, &opt);
    for (auto& b : model_->expert_bias_state()) opt.push_back({b.name, b.tensor.shape(), 0, b.tensor});
    std::vector<std::string> model_names, opt_names;
    for (auto& p : model_->params().all()) {
      model_names.push_back(p.name);
      opt_names.push_back(p.name + ".exp_avg");
      opt_names.push_back(p.name + ".exp_avg_sq");
    }
    for (auto& b : model_->expert_bias_state()) opt_names.push_back(b.name);
    return ckm.load_pieces(step, model_names, model, opt_names, opt);
  }

  void export_hf(const std::string& dir, const HfExportOptions& opt) override {
    // One unit's parameters in memory at a time; rank 0 streams them into the files.
    // (The first replica's shard group gathers; rank 0 is in it.)
    std::unique_ptr<HfExportWriter> w;
    if (comm_.rank() == 0) w = std::make_unique<HfExportWriter>(dir, model_->config(), opt);
    ParamStore& ps = model_->params();
    if (replica_ == 0)
      fsdp_->for_each_unit_gathered([&](int64_t unit) {
        if (!w) return;
        auto [p0, p1] = model_->unit_params(unit);
        for (size_t i = p0; i < p1; ++i) w->add(ps.all()[i].name, ps.all()[i].value);
      });
    if (w) w->finish();
    comm_.barrier();
  }

  Memory memory() const override {
    Memory m;
    m.params = m.grads = fsdp_->shard_elems() * 4;
    m.optimizer = 2 * m.params;
    m.transient = fsdp_->plan().transient_elems(fsdp_->options().reshard_after_forward, fsdp_->options().prefetch) * 4;
    m.staging = fsdp_->staging_bytes();
    return m;
  }
  double comm_seconds() const override { return fsdp_->comm_seconds(); }
  double comm_wait_seconds() const override { return fsdp_->comm_wait_seconds(); }

 private:
  // This rank's pieces of the parameters and of both moments (views of the shard tensors).
  void pieces(std::vector<TensorPiece>* model, std::vector<TensorPiece>* opt) {
    ParamStore& ps = model_->params();
    for (const dist::Fsdp::Span& s : fsdp_->spans()) {
      const Param& p = ps.all()[s.param];
      auto view = [&](Tensor& t) { return t.slice0(s.local, s.local + s.count); };
      model->push_back({p.name, p.value.shape(), s.offset, view(fsdp_->shard_values())});
      opt->push_back({p.name + ".exp_avg", p.value.shape(), s.offset, view(fsdp_->exp_avg())});
      opt->push_back({p.name + ".exp_avg_sq", p.value.shape(), s.offset, view(fsdp_->exp_avg_sq())});
    }
  }
  dist::Comm& shard_comm() { return shard_comm_ ? *shard_comm_ : comm_; }
  dist::Comm& comm_;
  int replicas_ = 1, replica_ = 0;
  std::unique_ptr<dist::Comm> shard_comm_, replicate_comm_;  // hybrid only
  const AdamWKernel& adamw_;
  std::unique_ptr<dist::Fsdp> fsdp_;
};

}  // namespace

std::unique_ptr<ModelState> make_sharded_state(const JobConfig& cfg, dist::Comm& comm) {
  return std::make_unique<ShardedState>(cfg, comm);
}

}  // namespace titan
