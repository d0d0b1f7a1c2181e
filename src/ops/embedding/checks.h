// Argument checks shared by the embedding variants (see embedding.h for the math).
#pragma once
#include "ops/op_checks.h"

namespace titan::embedding_detail {

// ids: N indices (any shape) in [0, V); weight [V, H] f32; rows: a tensor of N*H f32 with last dim H
// (out in forward, dout in backward). Returns N.
inline int64_t check(const Tensor& ids, const Tensor& weight, const Tensor& rows, const char* rows_name) {
  opcheck::index(ids, "embedding", "ids");
  opcheck::f32(weight, "embedding", "weight");
  opcheck::f32(rows, "embedding", rows_name);
  TITAN_CHECK(weight.ndim() == 2, "embedding: 'weight' must be [V, H], got ", weight.str());
  const int64_t V = weight.dim(0), H = weight.dim(1), N = ids.numel();
  opcheck::numel(rows, N * H, "embedding", rows_name);
  if (N > 0 && H > 0) opcheck::last_dim(rows, H, "embedding", rows_name);
  for (int64_t n = 0; n < N; ++n) {
    int64_t id = opcheck::index_at(ids, n);
    TITAN_CHECK(id >= 0 && id < V, "embedding: token id ", id, " at position ", n, " is outside the vocabulary [0, ",
                V, ")");
  }
  return N;
}

}  // namespace titan::embedding_detail
