// Argument checks of gated_rmsnorm (gated_rmsnorm.h).
#include "ops/gated_rmsnorm/gated_rmsnorm.h"
#include "ops/op_checks.h"

namespace titan::gated_rmsnorm {

int64_t check(const Tensor& x, const Tensor& z, const Tensor& w, std::initializer_list<const Tensor*> same,
              const char* who) {
  opcheck::f32(x, who, "x");
  opcheck::f32(z, who, "z");
  opcheck::f32(w, who, "w");
  TITAN_CHECK(w.ndim() == 1 && w.numel() > 0, who, ": 'w' must be [D], got ", w.str());
  opcheck::last_dim(x, w.numel(), who, "x");
  opcheck::same_shape(x, z, who, "x", "z");
  for (const Tensor* t : same) {
    opcheck::f32(*t, who, "output");
    opcheck::same_shape(x, *t, who, "x", "output");
  }
  return x.numel() / w.numel();
}

}  // namespace titan::gated_rmsnorm
