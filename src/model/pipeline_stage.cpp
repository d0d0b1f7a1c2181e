// One microbatch through one pipeline stage (model/pipeline.h): the stage's part of
// forward_backward, split at the stage's borders, on the stage schedule (model/unit_schedule.h).
#include <cstring>

#include "model/decoder_layer.h"
#include "model/positions.h"

namespace titan {

using layer_util::f32;

struct DecoderModel::StagePass {
  int64_t stage = 0, B = 0, S = 0;
  Tensor ids;
  std::vector<int64_t> doc_start;
  ActivationStore store;
  Positions pos() const { return Positions{0, doc_start.empty() ? nullptr : doc_start.data()}; }
};

std::shared_ptr<DecoderModel::StagePass> DecoderModel::stage_forward(int64_t stage, const Tensor& ids,
                                                                     const Tensor* positions, const Tensor* x_in,
                                                                     Tensor* x_out) {
  const int64_t n = cfg_.num_hidden_layers, last = pp_.num_stages - 1;
  TITAN_CHECK(stage >= 0 && stage <= last && pp_.holds(stage), "pipeline: stage ", stage, " is not held here");
  TITAN_CHECK(ids.ndim() == 2 && ids.dtype() == DType::I64, "token ids must be i64 [batch, seq], got ", ids.str());
  auto p = std::make_shared<StagePass>();
  p->stage = stage, p->B = ids.dim(0), p->S = ids.dim(1), p->ids = ids;
  p->doc_start = document_starts(positions, ids);
  const int64_t T = p->B * p->S, H = cfg_.hidden_size;
  if (p->S > rope_.max_pos()) rope_ = rope_cache(p->S);
  const int64_t u0 = pp_.unit_begin(stage, n), u1 = pp_.unit_end(stage, n);
  const size_t l0 = size_t(pp_.layer_begin[size_t(stage)]), l1 = size_t(pp_.layer_begin[size_t(stage) + 1]);
  round_weights_for_compute();
  const TrainPass train_pass(lora_seq_, p->S);
  Steps steps(*this, stage_schedule(cfg_, false, u0, u1, ckpt_));
  const int64_t Tr = tp_rows(T);  // the residual stream's rows on this rank
  Tensor x;
  if (stage == 0) {
    steps.at(0, Phase::Forward);
    embed(ids.view({T}), x);
  } else {
    TITAN_CHECK(x_in && x_in->shape() == Shape({Tr, H}) && x_in->dtype() == DType::F32, "pipeline: stage ", stage,
                " needs its input activations f32 [", Tr, ", ", H, "]");
    x = f32({Tr, H});
    x.copy_(*x_in);
  }
  p->store.x.assign(size_t(n) + 1, Tensor());
  p->store.layers.assign(size_t(n), LayerActs());
  forward_layer_range(l0, l1, x, p->B, p->S, p->pos(), &p->store, steps, nullptr, nullptr);
  if (stage < last) {
    TITAN_CHECK(x_out, "pipeline: stage ", stage, " needs somewhere to put its output");
    *x_out = x;
    p->store.x[l1] = Tensor();  // the next stage keeps it
  }
  steps.finish();
  if (!hold_wbf_) wbf_.reset();
  return p;
}

double DecoderModel::stage_backward(StagePass& p, const Tensor& labels, float grad_scale, const Tensor* dy_out,
                                    Tensor* dx_in) {
  const int64_t n = cfg_.num_hidden_layers, last = pp_.num_stages - 1, stage = p.stage;
  const int64_t T = p.B * p.S, H = cfg_.hidden_size;
  const int64_t u0 = pp_.unit_begin(stage, n), u1 = pp_.unit_end(stage, n);
  const size_t l0 = size_t(pp_.layer_begin[size_t(stage)]), l1 = size_t(pp_.layer_begin[size_t(stage) + 1]);
  round_weights_for_compute();
  const TrainPass train_pass(lora_seq_, p.S);
  Steps steps(*this, stage_schedule(cfg_, true, u0, u1, ckpt_));
  const int64_t Tr = tp_rows(T);  // the residual stream's rows on this rank
  Tensor dx;
  double loss = 0;
  if (stage == last) {  // head: final norm, fused lm_head + cross-entropy forward and backward, norm backward
    TITAN_CHECK(labels.numel() == T && labels.dtype() == DType::I64, "pipeline: labels must be i64 [", p.B, ", ",
                p.S, "], got ", labels.str());
    steps.at(n + 1, Phase::Backward);
    loss = head_forward_backward(p.store.x[l1], labels, grad_scale, dx);
    p.store.x[l1] = Tensor();
  } else {
    TITAN_CHECK(dy_out && dy_out->shape() == Shape({Tr, H}), "pipeline: stage ", stage,
                " needs the gradient of its output f32 [", Tr, ", ", H, "]");
    dx = f32({Tr, H});
    dx.copy_(*dy_out);
  }
  std::vector<Tensor> dlogits(static_cast<size_t>(n));
  backward_layers(p.store, dx, dlogits, p.B, p.S, p.pos(), steps, l0, l1);
  if (stage == 0) {
    steps.at(0, Phase::Backward);
    embed_backward(p.ids.view({T}), dx);
  } else {
    TITAN_CHECK(dx_in, "pipeline: stage ", stage, " needs somewhere to put its input gradient");
    *dx_in = dx;
  }
  steps.finish();
  if (!hold_wbf_) wbf_.reset();
  p.store = ActivationStore();
  return loss;
}

}  // namespace titan
