#include "train/model_state.h"

#include <sys/stat.h>

#include <cmath>
#include <filesystem>

#include "comm/nccl_comm.h"
#include "distributed/backends.h"
#include "distributed/data_parallel.h"
#include "model/base_fingerprint.h"
#include "model/hf_model.h"
#include "model/peft_adapter.h"
#include "ops/registry.h"
#include "train/grad_utils.h"
#include "util/strings.h"

namespace titan {

namespace {

}  // namespace

ModelConfig job_model_config(const JobConfig& cfg, std::unique_ptr<HfCheckpoint>* ckpt_out) {
  std::unique_ptr<HfCheckpoint> ckpt;
  ModelConfig mc;
  if (cfg.checkpoint.initial_load_in_hf && !cfg.checkpoint.initial_load_path.empty()) {
    ckpt = std::make_unique<HfCheckpoint>(HfCheckpoint::open(cfg.checkpoint.initial_load_path));
    mc = ckpt->config();
  } else if (!cfg.model.hf_assets_path.empty() && is_regular_file(cfg.model.hf_assets_path + "/config.json")) {
    mc = load_hf_config(cfg.model.hf_assets_path + "/config.json");
  } else {
    mc = flavor_config(cfg.model.flavor, cfg.model.name == ModelName::Qwen3_5 ? "qwen3_5" : "");
  }
  // [model] name: "qwen3" runs whatever the flavor / config.json is (torchtitan's qwen3 family has
  // the MoE flavors too); "qwen3_moe" additionally insists on a mixture-of-experts model, and
  // "llama" / "qwen2" on a config.json of that model_type (they have no built-in flavors).
  if (cfg.model.name == ModelName::Llama || cfg.model.name == ModelName::Qwen2) {
    const char* want = cfg.model.name == ModelName::Llama ? "llama" : "qwen2";
    TITAN_CHECK(mc.model_type == want, "[model] name is ", want, " but the model (",
                mc.flavor.empty() ? std::string("config.json") : "flavor " + mc.flavor, ") is a ", mc.model_type);
  }
  // "qwen3_5": a Qwen3.5 model, dense or MoE (a qwen3_5 flavor -- the published sizes by their bare
  // name, "4B", or as "qwen3_5-4B"; debug-qwen3_5* -- or a Qwen3.5 config.json).
  TITAN_CHECK(cfg.model.name != ModelName::Qwen3_5 || mc.is_qwen3_5(), "[model] name is qwen3_5 but the model (",
              mc.flavor.empty() ? std::string("config.json") : "flavor " + mc.flavor, ") is a ", mc.model_type);
  TITAN_CHECK(cfg.model.name != ModelName::Qwen3Moe || mc.is_moe(), "[model] name is qwen3_moe but the model (",
              mc.flavor.empty() ? std::string("config.json") : "flavor " + mc.flavor, ") is a dense qwen3");
  TITAN_CHECK(mc.is_moe() || (cfg.model.num_experts < 0 && cfg.model.top_k < 0),
              "[model] num_experts / top_k apply to qwen3_moe models only");
  if (cfg.model.n_layers > 0) {
    TITAN_CHECK(cfg.model.n_layers <= mc.num_hidden_layers, "[model] n_layers ", cfg.model.n_layers,
                " exceeds the model's ", mc.num_hidden_layers, " layers");
    mc.num_hidden_layers = cfg.model.n_layers;
    if (!mc.layer_mixers.empty()) mc.layer_mixers.resize(size_t(cfg.model.n_layers));  // the first n layers' kinds
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

void JobModel::fill(int64_t unit, uint64_t seed) {
  if (hf) load_weights(*model, *hf, unit);
  else model->init_weights(InitScheme::Torchtitan, seed, unit);
}

JobModel build_job_model(const JobConfig& cfg, bool deferred, const TensorParallel& tp, const ExpertParallel& ep,
                         const PipelineStages& pp) {
  JobModel jm;
  const ModelConfig mc = job_model_config(cfg, &jm.hf);
  // [lora] base_dtype bf16: an HF load converts while reading (a bf16 file copies as is); a base
  // initialised here gets its f32 init rounded once (init_weights), one unit at a time when sharded.
  const DType wdt = cfg.lora.enable ? cfg.lora.base_dtype : DType::F32;
  const DeviceType dev = cfg.compute.device;
  jm.model = std::make_unique<DecoderModel>(mc, default_variant(dev), deferred, /*frozen=*/cfg.lora.enable, wdt, tp, ep,
                                            pp, Device{dev, 0});
  if (cfg.model.load_balance_coeff > 0) {
    TITAN_CHECK(mc.num_sparse_layers() > 0, "[model] load_balance_coeff applies to qwen3_moe models with sparse layers");
    jm.model->enable_expert_bias();
  }
  return jm;
}

LoraConfig job_lora_config(const JobConfig& cfg) {
  LoraConfig c;
  c.rank = cfg.lora.rank, c.alpha = cfg.lora.alpha, c.dropout = cfg.lora.dropout;
  c.target_modules = cfg.lora.target_modules, c.use_rslora = cfg.lora.use_rslora;
  c.target_parameters = cfg.lora.target_parameters;
  c.round_adapters = cfg.lora.round_adapters;
  return c;
}

nlohmann::json lora_checkpoint_record(const DecoderModel& m, const std::string& base, const std::string& base_fingerprint) {
  std::vector<std::string> modules, params;
  for (const auto& a : m.lora_adapters()) (a.is_parameter() ? params : modules).push_back(a.module);
  const LoraConfig& c = m.lora_config();
  nlohmann::json j = {{"base", base}, {"rank", c.rank}, {"alpha", c.alpha}, {"use_rslora", c.use_rslora},
                      {"target_modules", modules}};
  if (!params.empty()) j["target_parameters"] = params;
  if (!base_fingerprint.empty()) j["base_fingerprint"] = base_fingerprint;
  return j;
}

std::unique_ptr<ModelState> make_model_state(const JobConfig& cfg, comm::DeviceMesh& mesh) {
  // Sharded over the mesh's fsdp group (hybrid when dp_replicate > 1 too); or, with an fsdp
  // degree of 1, replicas holding everything, gradients summed over the loss group.
  TITAN_CHECK(cfg.lora.enable || cfg.lora.base_dtype == DType::F32,
              "[lora] base_dtype = \"bfloat16\" needs [lora] enable = true (only a frozen LoRA base is kept in bf16)");
  TITAN_CHECK(cfg.lora.enable || cfg.lora.round_adapters,
              "[lora] round_adapters = false needs [lora] enable = true (it sets the adapters' GEMM precision)");
  // [compute] device = "cuda": one process holding the whole model on cuda:0 (docs/cuda.md "Training
  // on the GPU"); the layouts below are CPU-only for now, each refused here in one line.
  if (cfg.compute.device == DeviceType::CUDA) {
    const comm::ParallelDims& d = mesh.dims();
    const char* what = d.fsdp() > 1 ? "data_parallel_shard_degree > 1 (FSDP)"
                       : d.tp > 1   ? "tensor_parallel_degree > 1"
                       : d.pp > 1   ? "pipeline_parallel_degree > 1"
                       : d.cp > 1   ? "context_parallel_degree > 1"
                       : d.ep > 1   ? "expert_parallel_degree > 1"
                                    : nullptr;
    TITAN_CHECK(!what, "[compute] device = \"cuda\" does not support [parallelism] ", what,
                " yet; train on the CPU, or on one GPU (data-parallel replicas only)");
    TITAN_CHECK(!cfg.lora.enable,
                "[compute] device = \"cuda\" does not support [lora] enable yet; train LoRA on the CPU");
  }
  // Tensor parallelism always takes the sharded path (an fsdp group of one rank when dp_shard is 1):
  // its pieces place each rank's shards in the whole tensors (sharded_state.cpp).
  if (mesh.dims().fsdp() > 1 || mesh.dims().tp > 1 || mesh.dims().pp > 1) return make_sharded_state(cfg, mesh);
  return make_full_state(cfg, mesh.loss());
}

namespace {

class FullState final : public ModelState {
 public:
  FullState(const JobConfig& cfg, comm::Comm& comm)
      : comm_(comm), adamw_(kernel<AdamWKernel>(default_variant(cfg.compute.device), cfg.compute.device)) {
    JobModel jm = build_job_model(cfg, false);
    jm.fill(-1, uint64_t(cfg.training.seed));
    loaded_ = jm.hf != nullptr;
    model_ = std::move(jm.model);
    // LoRA: the trained parameters are the adapters; the base is frozen (no gradients, no moments).
    if (cfg.lora.enable) {
      model_->enable_lora(job_lora_config(cfg), uint64_t(cfg.training.seed));
      model_->freeze_base();
           if (cfg.checkpoint.initial_load_in_hf) {
        lora_base_ = std::filesystem::absolute(cfg.checkpoint.initial_load_path).lexically_normal().string();
        lora_fp_ = base_fingerprint(lora_base_);
      }
    }
    // The AdamW moments live with the parameters (cuda:0 in a GPU run).
    for (auto& p : trained().all()) {
      m_.push_back(Tensor::zeros(p.value.shape(), DType::F32, p.value.device()));
      v_.push_back(Tensor::zeros(p.value.shape(), DType::F32, p.value.device()));
      grads_.push_back({p.name, p.grad});
    }
    // Data-parallel replicas: gradients summed over the ranks, through the job's communicator on
    // the CPU; on the GPU through NCCL (one rank per GPU, bootstrapped over it), summed in place as
    // one NCCL group after the compute stream (distributed/data_parallel.h).
    if (comm.size() > 1 && cfg.compute.device != DeviceType::CPU) {
      nccl_ = distributed::make_nccl_comm(comm);
      dp_ = std::make_unique<distributed::DataParallel>(trained(), *nccl_, model_->exec().stream);
    } else if (comm.size() > 1) {
      dp_ = std::make_unique<distributed::DataParallel>(trained(), comm);
    }
  }
  bool sharded() const override { return false; }
  void zero_grad() override { trained().zero_grad(); }

  double step(int64_t step, double max_norm, const AdamWParams& hp) override {
    if (dp_) dp_->all_reduce_grads();
    const double norm = distributed::clip_grad_norm(model_->exec(), grad_ranges(grads_, "gradient norm"),
                                                    max_norm);  // max_norm <= 0: the norm only
    if (!std::isfinite(norm)) {
      auto bad = first_non_finite(grads_);
      fail("step ", step, ": gradient norm is ", norm, "; first non-finite gradient: ", bad ? *bad : "(none found)");
    }
    ParamStore& ps = trained();
    std::vector<AdamWTensors> list(ps.all().size());  // one list step: a single launch for the cuda variant
    for (size_t i = 0; i < ps.all().size(); ++i) list[i] = {&ps.all()[i].value, &ps.all()[i].grad, &m_[i], &v_[i]};
    adamw_step_all(model_->exec(), adamw_, list, hp);
    return norm;
  }

  std::string save(CheckpointManager& ckm, const TrainState& st) override {
    std::string dir = ckm.step_dir(st.step);
    TrainState s = st;
    if (model_->lora_enabled()) s.extra["lora"] = lora_checkpoint_record(*model_, lora_base_, lora_fp_);
    if (comm_.rank() == 0) dir = ckm.save(s, values(), optimizer());
    comm_.barrier();  // the checkpoint is complete before any rank moves on
    return dir;
  }

  TrainState load(const CheckpointManager& ckm, int64_t step) override {
    auto mt = values();
    auto ot = optimizer();
    return ckm.load(step, mt, ot);
  }

  void export_hf(const std::string& dir, const HfExportOptions& opt) override {
    // LoRA: a PEFT adapter folder (the base is unchanged; titan export --merge-lora merges).
    if (comm_.rank() == 0 && model_->lora_enabled()) save_peft_adapter(*model_, dir, lora_base_, true, lora_fp_);
    else if (comm_.rank() == 0) export_hf_checkpoint(dir, model_->config(), model_state(*model_), opt);
    comm_.barrier();
  }

  Memory memory() const override {
    Memory m;
    for (const ParamStore* ps : {&model_->params(), &model_->lora_params()})
      for (const Param& p : ps->all()) m.params += int64_t(p.value.nbytes());  // a bf16 base's weights at 2 bytes
    m.grads = trained().numel() * 4;
    m.optimizer = 2 * m.grads;
    m.staging = dp_ ? dp_->staging_bytes() : 0;
    return m;
  }
  double comm_seconds() const override { return dp_ ? dp_->comm_seconds() : 0.0; }

 private:
  // The parameters this run trains: the adapters with LoRA, else every parameter.
  ParamStore& trained() { return model_->lora_enabled() ? model_->lora_params() : model_->params(); }
  const ParamStore& trained() const { return model_->lora_enabled() ? model_->lora_params() : model_->params(); }
  // What a checkpoint holds: the trained parameters (with LoRA the base is named, not stored).
  std::vector<NamedTensor> values() {
    std::vector<NamedTensor> out;
    for (auto& p : trained().all()) out.push_back({p.name, p.value});
    return out;
  }
  std::vector<NamedTensor> optimizer() {
    std::vector<NamedTensor> out;
    ParamStore& ps = trained();
    for (size_t i = 0; i < ps.all().size(); ++i) {
      out.push_back({ps.all()[i].name + ".exp_avg", m_[i]});
      out.push_back({ps.all()[i].name + ".exp_avg_sq", v_[i]});
    }
    for (auto& b : model_->expert_bias_state()) out.push_back(b);  // MoE balancing state, if any
    return out;
  }
  comm::Comm& comm_;
  const AdamWKernel& adamw_;
  std::vector<Tensor> m_, v_;
  std::vector<NamedTensor> grads_;
  std::unique_ptr<comm::NcclComm> nccl_;  // a GPU run's data-parallel communicator (before dp_: outlives it)
  std::unique_ptr<distributed::DataParallel> dp_;
  std::string lora_base_;  // the base HF folder of a LoRA run ("" when initialised here)
  std::string lora_fp_;    // its fingerprint (model/base_fingerprint.h)
};

}  // namespace

std::unique_ptr<ModelState> make_full_state(const JobConfig& cfg, comm::Comm& comm) {
  return std::make_unique<FullState>(cfg, comm);
}

}  // namespace titan
