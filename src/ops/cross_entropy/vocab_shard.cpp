// The vocabulary-shard row phases of cross-entropy on the CPU (vocab_shard.h).
#include "ops/cross_entropy/vocab_shard.h"

#include <cstring>

#include "core/threading.h"
#include "ops/cross_entropy/cross_entropy.h"
#include "ops/cross_entropy/softmax_rows.h"
#include "ops/op_checks.h"

namespace titan {
namespace {

// z [c, Vl] f32; labels [c] i64 (when given). Returns {c, Vl}.
std::pair<int64_t, int64_t> check(const ExecContext& ctx, const char* who, const Tensor& z, const Tensor* labels) {
  opcheck::host_context(ctx, who);
  opcheck::f32(z, who, "z");
  TITAN_CHECK(z.ndim() == 2, who, ": logits must be [rows, shard vocabulary], got ", z.str());
  if (labels) {
    opcheck::index(*labels, who, "labels");
    TITAN_CHECK(labels->dtype() == DType::I64, who, ": 'labels' must be i64, got ", labels->str());
    opcheck::numel(*labels, z.dim(0), who, "labels");
  }
  return {z.dim(0), z.dim(1)};
}

}  // namespace

void ce_shard_row_max(const ExecContext& ctx, const Tensor& z, float* mx) {
  const auto [c, Vl] = check(ctx, "ce_shard_row_max", z, nullptr);
  const ce_detail::RowOps& ops = ce_detail::row_ops();
  const float* zp = z.data<float>();
  parallel_for(c, 1, [&](int64_t a, int64_t b) {
    for (int64_t i = a; i < b; ++i) mx[i] = ops.max(zp + i * Vl, Vl);
  });
}

void ce_shard_exp_sums(const ExecContext& ctx, Tensor& z, const Tensor& labels, int64_t v0, const float* mx, bool store,
                       float* sum, float* tgt) {
  const auto [c, Vl] = check(ctx, "ce_shard_exp_sums", z, &labels);
  const ce_detail::RowOps& ops = ce_detail::row_ops();
  const int64_t* lab = labels.data<int64_t>();
  float* zp = z.data<float>();
  parallel_for(c, 1, [&](int64_t a, int64_t b) {
    for (int64_t i = a; i < b; ++i) {
      const int64_t l = lab[i], t = l - v0;
      float* zi = zp + i * Vl;
      tgt[i] = l != kIgnoreIndex && t >= 0 && t < Vl ? zi[t] - mx[i] : 0.0f;
      sum[i] = store ? ops.exp_store(zi, Vl, mx[i]) : ops.sum_exp(zi, Vl, mx[i]);
    }
  });
}

void ce_shard_dlogits(const ExecContext& ctx, Tensor& z, const Tensor& labels, int64_t v0, const float* sum,
                      float grad_scale) {
  const auto [c, Vl] = check(ctx, "ce_shard_dlogits", z, &labels);
  const ce_detail::RowOps& ops = ce_detail::row_ops();
  const int64_t* lab = labels.data<int64_t>();
  float* zp = z.data<float>();
  parallel_for(c, 1, [&](int64_t a, int64_t b) {
    for (int64_t i = a; i < b; ++i) {
      const int64_t l = lab[i], t = l - v0;
      float* zi = zp + i * Vl;
      if (l == kIgnoreIndex) {
        std::memset(zi, 0, size_t(Vl) * sizeof(float));
        continue;
      }
      ops.scale(zi, Vl, grad_scale / sum[i], nullptr);
      if (t >= 0 && t < Vl) zi[t] -= grad_scale;
    }
  });
}

}  // namespace titan
