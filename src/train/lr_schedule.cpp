#include "train/lr_schedule.h"

#include <cmath>

#include "core/error.h"
#include "train/job_config.h"

namespace titan {

DecayType parse_decay_type(const std::string& s) {
  if (auto d = parse_option<DecayType>(s)) return *d;
  std::string list;
  for (const auto& [d, name] : OptionNames<DecayType>::values) list += (list.empty() ? "" : ", ") + std::string(name);
  fail("[lr_scheduler] decay_type \"", s, "\" is not one of: ", list);
}

LrSchedule::LrSchedule(double base_lr, int64_t steps, int64_t warmup, std::optional<double> decay_ratio,
                       DecayType type, double min_lr_factor)
    : base_lr_(base_lr), type_(type), min_factor_(min_lr_factor) {
  TITAN_CHECK(steps >= 1, "[training] steps must be >= 1");
  TITAN_CHECK(warmup >= 0, "[lr_scheduler] warmup_steps must be >= 0");
  warmup_ = warmup > steps ? steps : warmup;
  if (decay_ratio) {
    // Python's round() (half to even) on steps * ratio, as torchtitan does.
    decay_ = int64_t(std::nearbyint(double(steps) * *decay_ratio));
    if (warmup_ + decay_ > steps) decay_ = steps - warmup_;
  } else {
    decay_ = steps - warmup_;
  }
  stable_ = steps + 1 - warmup_ - decay_;
}

double LrSchedule::factor(int64_t i) const {
  TITAN_ASSERT(i >= 0);
  if (i < warmup_) return double(i + 1) / double(warmup_);
  if (i < warmup_ + stable_ || decay_ == 0) return 1.0;
  // Past the decay window (only reachable beyond the configured steps): hold the final value.
  double p = double(i + 1 - warmup_ - stable_) / double(decay_);
  if (p > 1.0) p = 1.0;
  double f = 0.0;
  switch (type_) {
    case DecayType::Linear: f = 1.0 - p; break;
    case DecayType::Sqrt: f = 1.0 - std::sqrt(p); break;
    case DecayType::Cosine: f = 0.5 * (1.0 + std::cos(M_PI * p)); break;
  }
  // One rounding (std::fma), as the x86-64-v3 build's contraction has always computed it, now on
  // every target whether the compiler contracts or not (torchtitan's Python rounds twice).
  return std::fma(1.0 - min_factor_, f, min_factor_);
}

LrSchedule make_lr_schedule(const JobConfig& c) {
  return LrSchedule(c.optimizer.lr, c.training.steps, c.lr_scheduler.warmup_steps, c.lr_scheduler.decay_ratio,
                    c.lr_scheduler.decay_type, c.lr_scheduler.min_lr_factor);
}

}  // namespace titan
