// Argument checks shared by the RoPE variants (see rope.h for the math).
#pragma once
#include "ops/op_checks.h"
#include "ops/rope/rope.h"

namespace titan::rope_detail {

struct Dims {
  int64_t b, s, h, d;
};

inline Dims check(const Tensor& x, const RopeCache& cache, const char* name) {
  opcheck::f32(x, "rope", name);
  opcheck::f32(cache.cos, "rope", "cos cache");
  opcheck::f32(cache.sin, "rope", "sin cache");
  TITAN_CHECK(x.ndim() == 4, "rope: '", name, "' must be [B, S, H, D], got ", x.str());
  TITAN_CHECK(cache.cos.ndim() == 2 && cache.cos.shape() == cache.sin.shape(),
              "rope: cos/sin caches must both be [P, D], got ", cache.cos.str(), " and ", cache.sin.str());
  const Dims d{x.dim(0), x.dim(1), x.dim(2), x.dim(3)};
  TITAN_CHECK(d.d == cache.head_dim(), "rope: head_dim of '", name, "' ", x.str(), " does not match the cache's ",
              cache.head_dim());
  TITAN_CHECK(d.s <= cache.max_pos(), "rope: sequence length ", d.s, " exceeds the cache's ", cache.max_pos(),
              " positions");
  return d;
}

}  // namespace titan::rope_detail
