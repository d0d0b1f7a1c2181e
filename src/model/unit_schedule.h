// The order in which a pass of the model uses its parameter units, as data.
//
// Parameter units are the granularity of fully sharded data parallelism (distributed/fsdp.h): unit 0 is
// the embedding, unit 1 + l decoder layer l, the last unit (n_layers + 1) the final norm and, when
// untied, lm_head (ParamSpec::unit in model/param_spec.h). A unit's parameters are contiguous in
// ParamStore order.
//
// A pass is a list of steps:
//   Need(u, use)   the unit's values and/or gradients must be resident from now on (gradients
//                  zeroed when they are made resident);
//   Prefetch(u)    the values of unit u come next (a hint);
//   Run(u, phase)  one compute step of the model on unit u;
//   Done(u, use)   values: not needed again in this pass until the next Need; gradients: this
//                  pass's contributions to the unit are complete.
// DecoderModel executes exactly this list (it calls its UnitHooks for Need, Prefetch and Done and
// computes at each Run, checking that the Run it is at is the one it computes), and what plans
// memory around the hooks replays the same list (distributed::fsdp_plan) instead of restating the order.
//
// Score (forward only; a generation step is one too):
//   embedding: Need(0,V) Prefetch(1) Run(0,F) Done(0,V)
//   layer l:   Need(1+l,V) Prefetch(next unit) Run(1+l,F) Done(1+l,V)
//   head:      Need(h,V) [tied: Need(0,V)] Run(h,F) [tied: Done(0,V)] Done(h,V)
// Train: the same forward, then
//   head:      Need(h,V+G) [tied: Need(0,V+G)] Prefetch(last layer) Run(h,B) [tied: Done(0,V)] Done(h,V+G)
//              (the head's Run is its forward, the loss and its backward in one step)
//   layer l, from the last: Need(1+l,V+G) [l > 0: Prefetch(l)] [checkpointing: Run(1+l,R)]
//              Run(1+l,B) Done(1+l,V+G)
//   embedding: Need(0,G) Run(0,B) Done(0,G)
// and every pass ends with UnitHooks::end_pass().
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"

namespace titan {

// What of a unit a step is about: its values, its gradients, or both (a bitmask).
enum class UnitUse : uint8_t { None = 0, Values = 1, Grads = 2, ValuesGrads = 3 };
constexpr UnitUse operator|(UnitUse a, UnitUse b) { return UnitUse(uint8_t(a) | uint8_t(b)); }
constexpr bool uses(UnitUse set, UnitUse what) { return (uint8_t(set) & uint8_t(what)) == uint8_t(what); }
std::string use_str(UnitUse u);  // "values", "grads", "values+grads"

// Forward; Recompute: a layer's forward run again inside the backward (activation checkpointing);
// Backward (the head's: forward, loss and backward together).
enum class Phase : uint8_t { Forward, Recompute, Backward };

enum class Pass : uint8_t { Score, Train };

// What to keep between forward and backward. Full recomputes each layer from its input during
// backward; Selective keeps the attention block (the expensive part) and recomputes the MLP.
enum class Checkpointing { None, Selective, Full };

struct UnitStep {
  enum class Kind : uint8_t { Need, Prefetch, Run, Done };
  Kind kind;
  int64_t unit;
  UnitUse use = UnitUse::None;  // Need, Done
  Phase phase = Phase::Forward;  // Run
  bool operator==(const UnitStep&) const = default;
};
std::string step_str(const UnitStep& s);  // "need 3 values+grads", "run 2 recompute"

std::vector<UnitStep> unit_schedule(const ModelConfig& c, Pass pass, Checkpointing ckpt = Checkpointing::None);

// One microbatch through one pipeline stage (model/pipeline.h) holding units [u0, u1): the
// forward's steps of those units (the head has none: it runs in the backward), or the backward's:
//   head (u1 = n + 2): Need(h,V+G) [tied: Need(0,V+G)] Prefetch(last layer) Run(h,B) [tied: Done(0,V+G)]
//                      Done(h,V+G)   (the tied copy's gradient is complete on this stage here)
//   its layers from the last, as in the whole pass; the embedding (u0 = 0): Need(0,G) Run(0,B) Done(0,G).
std::vector<UnitStep> stage_schedule(const ModelConfig& c, bool backward, int64_t u0, int64_t u1,
                                     Checkpointing ckpt = Checkpointing::None);

}  // namespace titan
