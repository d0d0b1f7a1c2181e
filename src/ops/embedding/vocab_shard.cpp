// embedding_shard_forward / _backward on the CPU (vocab_shard.h).
#include "ops/embedding/vocab_shard.h"

#include <cstring>

#include "core/threading.h"
#include "ops/op_checks.h"

namespace titan {
namespace {

// ids i64 [T]; table [n, H] f32; rows [T, H] f32. Returns {T, H, n}.
struct Dims {
  int64_t T, H, n;
};
Dims check(const char* who, const Tensor& ids, const Tensor& table, const Tensor& rows) {
  opcheck::defined(ids, who, "ids");
  TITAN_CHECK(ids.dtype() == DType::I64, who, ": 'ids' must be i64, got ", ids.str());
  opcheck::f32(table, who, "table");
  opcheck::f32(rows, who, "rows");
  TITAN_CHECK(table.ndim() == 2, who, ": the table must be [n, H], got ", table.str());
  const int64_t T = ids.numel(), H = table.dim(1);
  TITAN_CHECK(rows.numel() == T * H, who, ": rows ", rows.str(), " must hold [", T, ", ", H, "]");
  return {T, H, table.dim(0)};
}

}  // namespace

void embedding_shard_forward(const ExecContext& ctx, const Tensor& ids, const Tensor& shard, int64_t v0, int64_t vocab,
                             Tensor& out) {
  opcheck::host_context(ctx, "embedding_shard_forward");
  const auto [T, H, n] = check("embedding_shard_forward", ids, shard, out);
  const int64_t* id = ids.data<int64_t>();
  for (int64_t t = 0; t < T; ++t)
    TITAN_CHECK(id[t] >= 0 && id[t] < vocab, "embedding: token id ", id[t], " at position ", t,
                " outside the vocabulary [0, ", vocab, ")");
  const float* e = shard.data<float>();
  float* y = out.data<float>();
  parallel_for(T, 64, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t r = id[t] - v0;
      if (r >= 0 && r < n)
        std::memcpy(y + t * H, e + r * H, size_t(H) * sizeof(float));
      else
        std::memset(y + t * H, 0, size_t(H) * sizeof(float));
    }
  });
}

void embedding_shard_backward(const ExecContext& ctx, const Tensor& ids, const Tensor& dout, int64_t v0,
                              Tensor& dshard) {
  opcheck::host_context(ctx, "embedding_shard_backward");
  const auto [T, H, n] = check("embedding_shard_backward", ids, dshard, dout);
  const int64_t* id = ids.data<int64_t>();
  const float* d = dout.data<float>();
  float* g = dshard.data<float>();
  // Columns in parallel, tokens in order: each element's sum has one fixed order.
  parallel_for(H, 16, [&](int64_t c0, int64_t c1) {
    for (int64_t t = 0; t < T; ++t) {
      const int64_t r = id[t] - v0;
      if (r < 0 || r >= n) continue;
      for (int64_t c = c0; c < c1; ++c) g[r * H + c] += d[t * H + c];
    }
  });
}

}  // namespace titan
