#include "distributed/grad_clip.h"

#include <cmath>

namespace titan::distributed {

double sum_of_squares(const ExecContext& ctx, const std::vector<GradRange>& grads) {
  return foreach_sum_squares(ctx, grads);
}

double clip_grad_norm(const ExecContext& ctx, const std::vector<GradRange>& grads, double max_norm,
                      const std::function<double(double)>& global) {
  const double local = sum_of_squares(ctx, grads);
  const double total = std::sqrt(global ? global(local) : local);
  if (!std::isfinite(total) || !(max_norm > 0)) return total;
  const double coef = max_norm / (total + 1e-6);
  if (coef >= 1.0) return total;
  foreach_scale(ctx, grads, float(coef));
  return total;
}

}  // namespace titan::distributed
