#include "model/hf_model.h"

#include <set>

#include "core/pinned_staging.h"
#include "util/json_util.h"

namespace titan {

std::unique_ptr<DecoderModel> load_hf_model(const std::string& dir, const std::string& kernel_variant, bool frozen,
                                          DType weight_dtype) {
  HfCheckpoint ckpt = HfCheckpoint::open(dir);
  // Frozen: the parameters start without memory (deferred) and each takes a view of the file or
  // memory for a copy (load_weights).
  auto model = std::make_unique<DecoderModel>(ckpt.config(), kernel_variant, /*deferred=*/frozen, frozen, weight_dtype);
  load_weights(*model, ckpt);
  return model;
}

std::unique_ptr<DecoderModel> with_weight_dtype(const DecoderModel& src, DType weight_dtype) {
  TITAN_CHECK(!src.lora_enabled(), "model: with_weight_dtype takes a model without LoRA adapters");
  auto m = std::make_unique<DecoderModel>(src.config(), default_variant(), false, /*frozen=*/true, weight_dtype);
  const auto& from = src.params().all();
  auto& to = m->params().all();
  TITAN_ASSERT(from.size() == to.size(), "with_weight_dtype: parameter lists differ");
  for (size_t i = 0; i < to.size(); ++i) to[i].value.copy_(from[i].value);
  return m;
}

void load_weights(DecoderModel& model, const HfCheckpoint& ckpt, int64_t unit) {
  const auto [first, last] = unit >= 0 ? model.unit_params(unit) : std::make_pair(size_t(0), model.params().all().size());
  // Fused expert layers: one read of each fused tensor straight into the stacked storage (the
  // per-expert params are views of it), instead of one slice copy per expert.
  //
  // Storage without memory (a model built deferred for loading, load_hf_model): a parameter that
  // is its storage's whole extent takes the checkpoint's own tensor (a view of the mapping when
  // stored in the parameter's dtype and aligned, else the converted copy get() makes) instead of
  // memory of its own; any other gets memory here, is copied into, and the file pages it was
  // copied from are given back.
  // A model on the GPU: every parameter through one pinned buffer (core/pinned_staging.h), taken
  // at the first and freed on return.
  PinnedStaging staging;
  const auto take = [&](const std::string& name, Tensor& dst) {
    const std::shared_ptr<Storage>& s = dst.storage();
    if (s->resident()) return ckpt.read_into(name, dst, &staging);
    if (uint64_t(s->bytes()) == shape_nbytes(dst.shape(), dst.dtype())) {  // the whole storage
      Tensor src = ckpt.get(name, dst.dtype());
      TITAN_CHECK(src.shape() == dst.shape(), ckpt.dir(), ": tensor ", quote(name), " has shape ",
                  shape_str(src.shape()), ", expected ", shape_str(dst.shape()));
      if (src.is_borrowed())
        ckpt.prefault(name);  // its pages mapped now, not during the first forward
      else
        ckpt.drop_pages(name);
      s->adopt(src.raw(), src.storage());
      return;
    }
    s->allocate();
    ckpt.read_into(name, dst);
    ckpt.drop_pages(name);
  };
  std::set<std::string> done;
  for (int64_t l = 0; l < model.config().num_hidden_layers; ++l) {
    if (unit >= 0 && model.unit_of_layer(l) != unit) continue;
    const HfCheckpoint::FusedExperts f = ckpt.fused_experts(l);
    if (f.gate_up.empty() || !model.expert_gate_up(l)) continue;
    const TensorParallel& tp = model.tensor_parallel();
    if (tp.on()) {  // this rank's rows of each expert's gate and up halves, and its columns of down
      Tensor& gu = *model.expert_gate_up(l);  // [E, 2 I/tp, H]
      const Tensor full = ckpt.get(f.gate_up, gu.dtype());
      const int64_t E = gu.dim(0), Il = gu.dim(1) / 2, H = gu.dim(2);
      TITAN_CHECK(full.shape() == Shape({E, 2 * Il * tp.size(), H}), ckpt.dir(), ": tensor ", quote(f.gate_up),
                  " has shape ", shape_str(full.shape()), ", expected [", E, ", ", 2 * Il * tp.size(), ", ", H, "]");
      for (int64_t e = 0; e < E; ++e)
        for (int half = 0; half < 2; ++half) {
          Tensor src = full.slice0(e, e + 1).view({2 * tp.size(), Il, H}).slice0(half * tp.size() + tp.rank(),
                                                                                   half * tp.size() + tp.rank() + 1);
          gu.slice0(e, e + 1).view({2, Il, H}).slice0(half, half + 1).copy_(src);
        }
      Tensor& dn = *model.expert_down(l);  // [E, H, I/tp]
      const Tensor fd = ckpt.get(f.down, dn.dtype());
      tp_take_shard(fd, 2, tp.rank(), tp.size(), dn);
      ckpt.drop_pages(f.gate_up);
      ckpt.drop_pages(f.down);
    } else if (model.expert_parallel().on()) {  // this rank's experts of the stacked tensors
      for (auto [name, dst] : {std::pair{&f.gate_up, model.expert_gate_up(l)}, std::pair{&f.down, model.expert_down(l)}}) {
        const Tensor full = ckpt.get(*name, dst->dtype());
        const int64_t El = dst->dim(0), e0 = model.expert_parallel().rank() * El;
        TITAN_CHECK(full.ndim() == 3 && full.dim(0) == El * model.expert_parallel().size() &&
                        full.dim(1) == dst->dim(1) && full.dim(2) == dst->dim(2),
                    ckpt.dir(), ": tensor ", quote(*name), " has shape ", shape_str(full.shape()), ", expected [",
                    El * model.expert_parallel().size(), ", ", dst->dim(1), ", ", dst->dim(2), "]");
        if (!dst->storage()->resident()) dst->storage()->allocate();
        dst->copy_(full.slice0(e0, e0 + El));
        ckpt.drop_pages(*name);
      }
    } else {
      take(f.gate_up, *model.expert_gate_up(l));
      take(f.down, *model.expert_down(l));
    }
    done.insert("model.layers." + std::to_string(l) + ".");
  }
  for (size_t i = first; i < last; ++i) {
    Param& p = model.params().all()[i];
    if (!done.empty() && p.name.find(".mlp.experts.") != std::string::npos &&
        done.count(p.name.substr(0, p.name.find("mlp.experts."))))
      continue;
    const ParamSpec& spec = model.param_specs()[i];
    const TensorParallel& tp = model.tensor_parallel();
    if (tp.on() && spec.placement.tp_dim >= 0) {  // this rank's block of the whole tensor
      TITAN_ASSERT(p.value.storage()->resident(), "load_weights: a tensor-parallel shard needs its memory");
      const Tensor full = ckpt.get(p.name, p.value.dtype());
      TITAN_CHECK(full.shape() == Shape(spec.shape), ckpt.dir(), ": tensor ", quote(p.name), " has shape ",
                  shape_str(full.shape()), ", expected ", shape_str(spec.shape));
      tp_take_shard(full, spec.placement.tp_dim, tp.rank(), tp.size(), p.value, spec.placement.tp_segments);
      ckpt.drop_pages(p.name);
      continue;
    }
    take(p.name, p.value);
  }
}

TensorMap model_state(const DecoderModel& model) {
  TensorMap m;
  for (auto& p : model.params().all()) m[p.name] = p.value;
  return m;
}

TensorMap model_grads(const DecoderModel& model) {
  TensorMap m;
  for (auto& p : model.params().all()) m[p.name] = p.grad;
  return m;
}

}  // namespace titan
