// Argument checks shared by the RoPE variants (see rope.h for the math).
#pragma once
#include "ops/op_checks.h"
#include "ops/rope/rope.h"
#include "ops/row_view.h"

namespace titan::rope_detail {

struct Dims {
  int64_t b, s, h, d;
};

// x: f32 rows [B * S, H, D] with D the cache's head_dim; positions start .. start + S - 1 cached.
inline Dims check(const RowView& x, int64_t seq, int64_t start, const RopeCache& cache, const char* name) {
  opcheck::f32(cache.cos, "rope", "cos cache");
  opcheck::f32(cache.sin, "rope", "sin cache");
  check_view(x, DType::F32, "rope", name);
  TITAN_CHECK(cache.cos.ndim() == 2 && cache.cos.shape() == cache.sin.shape(),
              "rope: cos/sin caches must both be [P, D], got ", cache.cos.str(), " and ", cache.sin.str());
  TITAN_CHECK(x.d == cache.head_dim(), "rope: head_dim of '", name, "' (", x.d, ") does not match the cache's ",
              cache.head_dim());
  TITAN_CHECK(seq > 0 && x.n % seq == 0, "rope: '", name, "' has ", x.n, " token rows, not a multiple of the sequence length ",
              seq);
  TITAN_CHECK(start >= 0 && start + seq <= cache.max_pos(), "rope: positions ", start, "..", start + seq - 1,
              " exceed the cache's ", cache.max_pos(), " positions");
  return {x.n / seq, seq, x.h, x.d};
}

}  // namespace titan::rope_detail
