// The pipeline-parallel runtime: see pipeline_runner.h.
#include "distributed/pipeline_runner.h"

#include "core/clock.h"
#include "core/error.h"

namespace titan::distributed {

PipelineRunner::PipelineRunner(DecoderModel& model, comm::Comm& pp, PpSchedule schedule)
    : model_(model), pp_(pp), schedule_(std::move(schedule)) {
  TITAN_CHECK(schedule_.pp == pp.size(), "pipeline: a schedule for ", schedule_.pp, " ranks on a pp group of ",
              pp.size());
  TITAN_CHECK(model.pipeline().num_stages == schedule_.stages(), "pipeline: the model has ",
              model.pipeline().num_stages, " stages, the schedule ", schedule_.stages());
  for (int s = 0; s < schedule_.stages(); ++s)
    TITAN_CHECK(model.pipeline().holds(s) == (schedule_.stage_rank(s) == pp.rank()), "pipeline: rank ", pp.rank(),
                (model.pipeline().holds(s) ? " holds" : " does not hold"), " stage ", s, " against its schedule");
}

double PipelineRunner::run(const std::vector<Microbatch>& mbs, float grad_scale) {
  TITAN_CHECK(int(mbs.size()) == schedule_.microbatches, "pipeline: ", mbs.size(), " microbatches for a schedule of ",
              schedule_.microbatches);
  const double t0 = now_seconds();
  compute_s_ = 0;
  const int last = schedule_.stages() - 1;
  const int64_t H = model_.config().hidden_size;
  using Key = std::pair<int, int>;  // (stage, microbatch)
  std::map<Key, Tensor> act_in, act_out, grad_in, grad_out;
  std::map<Key, std::shared_ptr<DecoderModel::StagePass>> passes;
  auto take = [](std::map<Key, Tensor>& m, Key k) {
    auto it = m.find(k);
    if (it == m.end()) return Tensor();
    Tensor t = it->second;
    m.erase(it);
    return t;
  };
  auto rows = [&](int mb) { return model_.stage_rows(mbs[size_t(mb)].ids.numel()); };
  double loss = 0;
  for (const PpAction& a : schedule_.ranks[size_t(pp_.rank())]) {
    const Key k{a.stage, a.microbatch};
    switch (a.kind) {
      case PpActionKind::Forward: {
        Tensor x = a.stage == 0 ? Tensor() : take(act_in, k);
        if (a.stage > 0 && !x.defined()) x = take(act_out, {a.stage - 1, a.microbatch});  // same rank
        TITAN_CHECK(a.stage == 0 || x.defined(), "pipeline: ", a.str(), " has no input activations");
        Tensor out;
        const Microbatch& m = mbs[size_t(a.microbatch)];
        model_.set_lora_dropout_rows(m.lora_step, m.lora_row0);
        const double tc = now_seconds();
        passes[k] = model_.stage_forward(a.stage, m.ids, m.positions, a.stage ? &x : nullptr, &out);
        compute_s_ += now_seconds() - tc;
        if (a.stage < last) act_out[k] = out;
        break;
      }
      case PpActionKind::Backward: {
        Tensor dy = a.stage == last ? Tensor() : take(grad_in, k);
        if (a.stage < last && !dy.defined()) dy = take(grad_out, {a.stage + 1, a.microbatch});  // same rank
        TITAN_CHECK(a.stage == last || dy.defined(), "pipeline: ", a.str(), " has no output gradient");
        auto it = passes.find(k);
        TITAN_CHECK(it != passes.end(), "pipeline: ", a.str(), " before its forward");
        Tensor dx;
        model_.set_lora_dropout_rows(mbs[size_t(a.microbatch)].lora_step, mbs[size_t(a.microbatch)].lora_row0);
        const double tc = now_seconds();
        loss += model_.stage_backward(*it->second, mbs[size_t(a.microbatch)].labels, grad_scale,
                                      a.stage < last ? &dy : nullptr, &dx);
        compute_s_ += now_seconds() - tc;
        passes.erase(it);
        if (a.stage > 0) grad_out[k] = dx;
        break;
      }
      case PpActionKind::SendActivation: {
        Tensor x = take(act_out, k);
        TITAN_CHECK(x.defined(), "pipeline: ", a.str(), " sends activations not computed");
        pp_.send(x.raw(), x.nbytes(), a.peer_rank);
        break;
      }
      case PpActionKind::RecvActivation: {
        Tensor x = Tensor::empty({rows(a.microbatch), H}, DType::F32);
        pp_.recv(x.raw(), x.nbytes(), a.peer_rank);
        act_in[k] = x;
        break;
      }
      case PpActionKind::SendGrad: {
        Tensor dx = take(grad_out, k);
        TITAN_CHECK(dx.defined(), "pipeline: ", a.str(), " sends a gradient not computed");
        pp_.send(dx.raw(), dx.nbytes(), a.peer_rank);
        break;
      }
      case PpActionKind::RecvGrad: {
        Tensor dy = Tensor::empty({rows(a.microbatch), H}, DType::F32);
        pp_.recv(dy.raw(), dy.nbytes(), a.peer_rank);
        grad_in[k] = dy;
        break;
      }
      case PpActionKind::Unshard:
      case PpActionKind::Reshard:
        break;  // markers: the stage passes gather and free their units (see the header)
    }
  }
  TITAN_ASSERT(passes.empty() && act_in.empty() && grad_in.empty(), "pipeline: the step left work behind");
  run_s_ = now_seconds() - t0;
  return loss;
}

}  // namespace titan::distributed
