// Number of counted rows (label != -100): the divisor of the mean loss, known before the pass so
// that the backward scale 1/count can be handed to forward_backward up front.
#include "ops/cross_entropy/cross_entropy.h"
#include "ops/op_checks.h"

namespace titan {

int64_t count_labels(const Tensor& labels) {
  opcheck::index(labels, "cross_entropy", "labels");
  int64_t c = 0;
  for (int64_t n = 0; n < labels.numel(); ++n) c += opcheck::index_at(labels, n) != kIgnoreIndex;
  return c;
}

}  // namespace titan
