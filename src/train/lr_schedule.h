// Learning-rate schedule: torchtitan's linear warmup -> stable -> decay (warmup-stable-decay).
//
// With S = training steps, W = warmup steps (clamped to S), D = round(S * decay_ratio) (clamped
// to S - W) or S - W when decay_ratio is unset, torchtitan adds one virtual step so that the last
// real step's lr is not 0: stable = S + 1 - W - D. For the 0-based scheduler index i:
//   i <  W            factor = (i + 1) / W                                  (linear warmup)
//   i <  W + stable   factor = 1
//   otherwise         p = (i + 1 - W - stable) / D
//                     f = 1 - p (linear) | 1 - sqrt(p) (sqrt) | (1 + cos(pi p)) / 2 (cosine)
//                     factor = min_lr_factor + (1 - min_lr_factor) * f
// lr = base_lr * factor. torchtitan's LambdaLR evaluates index 0 for the first optimizer step and
// index s - 1 for training step s (1-based), which is what lr_at_step() does.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "train/job_config.h"  // DecayType

namespace titan {

// linear | sqrt | cosine ([lr_scheduler] decay_type's spellings), error otherwise.
DecayType parse_decay_type(const std::string& s);

class LrSchedule {
 public:
  LrSchedule(double base_lr, int64_t training_steps, int64_t warmup_steps, std::optional<double> decay_ratio,
             DecayType decay_type, double min_lr_factor);

  // Multiplier for scheduler index i >= 0 (torchtitan's lambda).
  double factor(int64_t i) const;
  // lr used by the optimizer update of training step `step` (1-based).
  double lr_at_step(int64_t step) const { return base_lr_ * factor(step - 1); }

  int64_t warmup_steps() const { return warmup_; }
  int64_t stable_steps() const { return stable_; }  // includes the virtual last step
  int64_t decay_steps() const { return decay_; }

 private:
  double base_lr_;
  int64_t warmup_, stable_, decay_;
  DecayType type_;
  double min_factor_;
};

// The schedule a job config describes: [optimizer] lr, [training] steps, [lr_scheduler] *.
LrSchedule make_lr_schedule(const JobConfig& cfg);

}  // namespace titan
