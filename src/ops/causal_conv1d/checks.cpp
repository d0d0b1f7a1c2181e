// Argument checks of causal_conv1d (causal_conv1d.h).
#include "ops/attention/segments.h"
#include "ops/causal_conv1d/causal_conv1d.h"
#include "ops/op_checks.h"

namespace titan::conv1d {

Dims check(const Tensor& x, const Tensor& w, const int64_t* seg, const Tensor& state_in, const Tensor& y,
           const Tensor& state_out, const char* who) {
  opcheck::f32(x, who, "x");
  opcheck::f32(w, who, "w");
  TITAN_CHECK(x.ndim() == 3, who, ": 'x' must be [B, S, C], got ", x.str());
  TITAN_CHECK(w.ndim() == 2 && w.dim(0) == x.dim(2) && w.dim(1) >= 1, who, ": 'w' must be [C, K] with C = ", x.dim(2),
              ", got ", w.str());
  const Dims d{x.dim(0), x.dim(1), x.dim(2), w.dim(1)};
  for (const auto& [t, name] : {std::pair{&state_in, "state_in"}, std::pair{&state_out, "state_out"}})
    if (t->defined()) {
      opcheck::f32(*t, who, name);
      TITAN_CHECK(t->shape() == Shape({d.B, d.C, d.K - 1}), who, ": '", name, "' must be [B, C, K - 1], got ", t->str());
    }
  if (y.defined()) {
    opcheck::f32(y, who, "y");
    opcheck::same_shape(x, y, who, "x", "y/dy/dx");
  }
  attention::check_segments(seg, d.B, d.S, who);
  return d;
}

}  // namespace titan::conv1d
