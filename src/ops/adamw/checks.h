// Argument checks shared by the AdamW variants (see adamw.h for the update).
#pragma once
#include <charconv>
#include <cmath>

#include "ops/adamw/adamw.h"
#include "ops/op_checks.h"

namespace titan::adamw_detail {

inline void check(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, const AdamWParams& hp) {
  opcheck::f32(p, "adamw", "param");
  opcheck::f32(g, "adamw", "grad");
  opcheck::f32(m, "adamw", "exp_avg");
  opcheck::f32(v, "adamw", "exp_avg_sq");
  opcheck::numel(g, p.numel(), "adamw", "grad");
  opcheck::numel(m, p.numel(), "adamw", "exp_avg");
  opcheck::numel(v, p.numel(), "adamw", "exp_avg_sq");
  TITAN_CHECK(hp.step >= 1, "adamw: step must be >= 1 (1-based), got ", hp.step);
  TITAN_CHECK(std::isfinite(hp.lr) && hp.lr >= 0, "adamw: lr must be finite and >= 0, got ", hp.lr);
  TITAN_CHECK(hp.beta1 >= 0 && hp.beta1 < 1, "adamw: beta1 must be in [0, 1), got ", hp.beta1);
  TITAN_CHECK(hp.beta2 >= 0 && hp.beta2 < 1, "adamw: beta2 must be in [0, 1), got ", hp.beta2);
  TITAN_CHECK(hp.eps >= 0 && std::isfinite(hp.eps), "adamw: eps must be finite and >= 0, got ", hp.eps);
  TITAN_CHECK(std::isfinite(hp.weight_decay) && hp.weight_decay >= 0, "adamw: weight_decay must be finite and >= 0, got ",
              hp.weight_decay);
}

// The f32 value's shortest decimal spelling read back as a double: 0.9f -> 0.9, 0.999f -> 0.999.
// AdamWParams holds f32, but a recipe's "beta2 = 0.999" reaches torch as the double 0.999, and
// 1 - 0.999f differs from 1 - 0.999 by 1.3e-5 relative, far above f32 rounding of the update. The
// decimal round trip gives back the number the user wrote.
inline double decimal_widen(float f) {
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof buf, f);
  double d = f;
  std::from_chars(buf, r.ptr, d);
  return d;
}

// Hyperparameters in double, as torch.optim.AdamW derives them from Python floats.
struct Hyper {
  double lr, beta1, beta2, eps, wd;
  double bias_correction1, bias_correction2;  // 1 - beta^t
  explicit Hyper(const AdamWParams& hp)
      : lr(decimal_widen(hp.lr)),
        beta1(decimal_widen(hp.beta1)),
        beta2(decimal_widen(hp.beta2)),
        eps(decimal_widen(hp.eps)),
        wd(decimal_widen(hp.weight_decay)),
        bias_correction1(1.0 - std::pow(beta1, double(hp.step))),
        bias_correction2(1.0 - std::pow(beta2, double(hp.step))) {}
};

}  // namespace titan::adamw_detail
