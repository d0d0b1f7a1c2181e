// Fully sharded data parallelism (FSDP / ZeRO-3) over a Comm, one parameter unit at a time.
//
// Layout. The model's parameter units (DecoderModel::unit_params: the embedding, each decoder
// layer, the final norm + head) are sharded separately. A unit's parameters, flattened in
// ParamStore order, form a vector of P_u elements padded to N x c_u with c_u = ceil(P_u / N);
// rank r owns elements [r c_u, (r+1) c_u). A rank's shard is the concatenation of its chunks of
// every unit, so each parameter has at most one contiguous piece on each rank (spans()).
// Precisely, the flattening is of the values' bytes, each parameter in its own dtype, and c_u is
// counted in 4-byte words (ceil(B_u / 4N) for a unit of B_u bytes); with f32 values a word is an
// element, as above. A frozen bf16 base (LoRA's base_dtype) thus keeps bf16 shards of its
// matmul weights (f32 ones of its norms and embedding), and a gather moves those bytes as they
// are: half the memory and half the bytes on the wire of f32 shards, and the gathered bf16
// weights are the very values the whole bf16 model holds (rounded once, at load or init).
//
// What a rank holds between steps: its shard of the f32 master parameters, of the gradient
// accumulator and of both AdamW moments (4 x sum_u c_u floats, about 4P/N); a frozen base only
// its value shard. The model is built
// `deferred` (no parameter memory); its storages get memory only while a unit is gathered.
//
// A step (through the UnitHooks the model calls, in the order of its schedule,
// model/unit_schedule.h):
//   need(u, Values)  : all-gather the unit's chunks into its full parameters;
//   done(u, Values)  : free them again (after forward only when reshard_after_forward, and not
//                      a tied embedding, which the head reads again; after backward always);
//   need(u, Grads)   : zeroed full gradients for the unit;
//   done(u, Grads)   : reduce-scatter them (sum over ranks, in rank order) and add this rank's
//                      chunk to the sharded accumulator, then free them. Gradient accumulation
//                      therefore adds one reduced micro-batch at a time into the shard.
//   step()           : global L2 norm from the ranks' sums of squares (double, rank order), clip
//                      as torch.nn.utils.clip_grad_norm_, AdamW on the shard. Nothing is gathered:
//                      the next forward gathers what it needs.
//
// Expert parallelism (model/expert_parallel.h): a sparse layer's unit is sharded in parts, runs
// of its parameters each over one group: the experts this rank holds over the expert_fsdp group
// (the ranks that hold the same experts), the rest over the fsdp group as above. Gathers and
// reductions go part by part; the shard is every part's chunk back to back; the global norm is
// still one sum over the fsdp group (it is the ep x expert_fsdp ranks, so each element counts once).
//
// Hybrid (HSDP, data_parallel_replicate_degree R > 1): the Comm given is the shard group (N
// ranks); `replicate` joins the R ranks that hold the same shard. step() first sums the gradient
// shard over `replicate` (rank order), so every replica steps identically; the norm is taken over
// the shard group alone (every replica holds the same shards).
//
// Prefetch: with Options::prefetch, need(u) for the unit the model announces next
// (UnitHooks::prefetch) is issued on a communication thread while the current unit computes;
// every collective of this object runs on that thread in program order, and the calling thread
// waits for a unit's gather only when it needs it. Without it the announcements are ignored (a
// unit is gathered when it is needed, not earlier). Results do not depend on it.
//
// Frozen base (DecoderModel::base_frozen(), LoRA): the units hold values only (f32, or bf16 matmul
// weights). need/done(Grads) only track that the pass is in a unit's backward (for the tied
// embedding's lifetime); nothing is allocated or reduced, and the shard is the parameter chunk
// alone (no gradient or moment shards: step() must not be called; the trained adapters are
// stepped by their owner; spans() is empty, a frozen base being never checkpointed).
//
// Every rank ends each step with bitwise identical shards of the replicated quantities (each
// reduction's result is the same on every rank, comm.h); versus one process the parameters
// differ by f32 reduction-order rounding of the gradient sums.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "comm/comm.h"
#include "model/config.h"
#include "model/pipeline.h"
#include "model/unit_hooks.h"
#include "model/unit_schedule.h"
#include "ops/adamw/adamw.h"

namespace titan {
class ParamStore;
class DecoderModel;
}  // namespace titan

namespace titan::distributed {

using comm::Comm;
using comm::ReduceOp;

// Per-rank sizes of a sharded run, from the model configuration alone (for `titan info`; an Fsdp
// of that model reports the same numbers). In bytes: values in their dtype (f32, or a frozen
// base's bf16 matmul weights), gradients and moments f32 (a trained model's values are f32, so
// each of them is as large as the value shard).
struct FsdpPlan {
  std::vector<int64_t> unit_bytes;  // B_u: the values of the embedding, each layer, the head
  bool tied = true;           // the head reads the embedding unit
  int64_t shard_bytes = 0;    // sum over units of 4 ceil(B_u / 4N): the value shard (and each of grads, m, v)
  int64_t largest_unit_bytes = 0;
  int64_t total_bytes = 0;    // the whole model's values
  int64_t staging_bytes = 0;  // collective staging 4 (N + 1) x bucket (4 (N x bucket + 1) when frozen)
  std::vector<UnitStep> schedule;  // the model's training pass (model/unit_schedule.h)
  bool frozen = false;        // a frozen base: no gradient shards, no full gradients gathered
  // Most gathered parameters plus full gradients alive at once during forward_backward, beyond
  // the shards: the model's schedule replayed with Fsdp's rules of what need / done / prefetch
  // gather and free. With prefetch, a unit's gradients stay alive (being reduced on the
  // communication thread) until the next compute step ends, and announced units are gathered
  // early; a tied embedding keeps its values from its lookup to the head; without resharding
  // after forward, every unit's values stay until its backward.
  int64_t transient_bytes(bool reshard_after_forward, bool prefetch) const;
  // The same replay's gathered bytes while each compute step (Run) of `schedule` runs, in order
  // (transient_bytes is their largest). `schedule` may be replaced by the pass of a checkpointing
  // mode (its recomputation steps run with the unit's values and gradients resident).
  std::vector<int64_t> resident_at_runs(bool reshard_after_forward, bool prefetch) const;
};
// base: the dtype of a frozen base's matmul weights (DecoderModel's weight_dtype).
// tp: the tensor-parallel degree (each rank's units are its local shards, ParamSpec::local_shape).
// ep: the expert-parallel degree (each rank holds E / ep experts of each sparse layer, sharded
// over world / ep ranks).
// pp: the pipeline stages the rank holds (only their units).
FsdpPlan fsdp_plan(const ModelConfig& c, int64_t world, bool frozen = false, DType base = DType::F32, int64_t tp = 1,
                   int64_t ep = 1, const PipelineStages& pp = {});

class Fsdp final : public UnitHooks {
 public:
  struct Options {
    bool reshard_after_forward = true;  // torchtitan's fsdp_reshard_after_forward "always"/"never"
    bool prefetch = true;               // gather the next unit on the communication thread
  };
  // `model` must be built deferred. fill(unit) runs on every rank with the unit's values resident
  // (contents undefined) and must write all of them (init or load, the same on every rank); then
  // this rank keeps its chunk and the memory is freed. Installs itself as the model's hooks.
  // expert: with an expert-parallel model (model/expert_parallel.h), the mesh's expert_fsdp group,
  // over which the experts this rank holds are sharded (its other parameters over `comm`).
  Fsdp(DecoderModel& model, Comm& comm, Options opt, const std::function<void(int64_t unit)>& fill,
       Comm* replicate = nullptr, Comm* expert = nullptr);
  ~Fsdp() override;

  // UnitHooks
  void need(int64_t unit, UnitUse use) override;
  void done(int64_t unit, UnitUse use) override;
  void prefetch(int64_t unit) override;
  void end_pass() override;

  // Tensor parallelism (model/tensor_parallel.h): this Fsdp shards one tp rank's local tensors;
  // `split[i]` says whether parameter i is split over `tp` (else replicated, with the same
  // gradient on every tp rank). step()'s global norm then adds the split parameters' squares over
  // tp and counts the replicated ones once.
  void set_tensor_parallel(Comm* tp, std::vector<bool> split);
  // Pipeline parallelism (model/pipeline.h): this Fsdp shards one rank's stages. step()'s global
  // norm adds the stages' squares over `pp`; with a tied embedding, `tied` joins the ranks of the
  // first and last stage (the same fsdp coordinates), whose two copies' gradient shards are summed
  // before the step (the copy on the last stage counted once, on the first).
  void set_pipeline(Comm* pp, Comm* tied);
  void zero_grad();  // the sharded gradient accumulator
  // Global norm + clip (max_norm > 0) + AdamW on the shard. Returns the norm before clipping; a
  // non-finite norm leaves parameters and moments untouched (every rank sees the same norm).
  double step(double max_norm, const AdamWKernel& adamw, const AdamWParams& hp);

  // This rank's piece of parameter `param` (ParamStore index): elements [offset, offset + count)
  // of its flattening live at `local` in the shard tensors below (f32 models; empty with a bf16
  // frozen base).
  struct Span {
    size_t param;
    int64_t offset, count, local;
  };
  const std::vector<Span>& spans() const { return spans_; }
  Tensor& shard_values() { return p_; }  // f32 elements; with a bf16 base, 4-byte words of bytes
  Tensor& shard_grads() { return g_; }
  Tensor& exp_avg() { return m_; }
  Tensor& exp_avg_sq() { return v_; }

  // Collective: calls f(unit) on every rank with that unit's full values resident, unit by unit
  // (at most one unit's parameters in memory at a time), e.g. to export them.
  void for_each_unit_gathered(const std::function<void(int64_t unit)>& f);
  // Name of the first parameter with a non-finite element in this rank's gradient shard.
  std::optional<std::string> first_non_finite_grad() const;

  const FsdpPlan& plan() const { return plan_; }
  bool frozen() const { return frozen_; }
  const Options& options() const { return opt_; }
  int64_t shard_bytes() const { return shard_ * 4; }  // the value shard (trained: each of grads, m, v too)
  int64_t staging_bytes() const { return int64_t(stage_.nbytes() + out_.nbytes()); }
  // Bytes the value all-gathers have assembled on this rank so far (the units' padded sizes; of
  // them, this rank's own chunks, 1/N, did not cross the wire).
  int64_t gathered_bytes() const { return gathered_bytes_.load(); }
  double comm_seconds() const;  // accumulated time inside collectives (on either thread)
  // Of it, the time the calling thread spent blocked on communication: collectives it ran itself
  // plus waits for the communication thread (the part prefetch did not hide).
  double comm_wait_seconds() const;

 private:
  struct Part;
  struct Unit;
  class Worker;
  Comm* tp_ = nullptr;          // set_tensor_parallel
  Comm* pp_ = nullptr;          // set_pipeline
  Comm* tied_pair_ = nullptr;
  bool tied_copy_ = false;
  std::vector<bool> tp_split_;
  double tp_sum_of_squares() const;
  void gather(Unit& u);         // collective: full values of u from the ranks' chunks
  void reduce_grads(Unit& u);   // collective: sum u's full grads over ranks into g_
  void wait_values(Unit& u);
  void issue_gather(Unit& u);  // issues u's gather unless it is pending or done
  DecoderModel& model_;
  ParamStore& ps_;
  Comm& comm_;
  Comm* replicate_;
  Options opt_;
  bool tied_ = false;  // the head reads the embedding unit
  bool frozen_ = false;  // the model's base is frozen: values only
  std::vector<std::unique_ptr<Unit>> units_;
  std::vector<Span> spans_;
  FsdpPlan plan_;
  int64_t shard_ = 0, bucket_ = 0;  // in 4-byte words (f32 elements)
  Tensor stage_, out_;          // N x bucket and bucket f32: collective staging
  Tensor p_, g_, m_, v_;        // this rank's shard (shard_ words each; g_, m_, v_ empty when frozen)
  std::atomic<int64_t> gathered_bytes_{0};
  std::unique_ptr<Worker> worker_;
  double comm_seconds_ = 0;
};

}  // namespace titan::distributed
