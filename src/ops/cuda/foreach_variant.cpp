// foreach_sum_squares / foreach_scale (ops/foreach/foreach.h) on ranges in GPU memory: the ranges
// and their chunks as two small device tables, one launch over all of them (two for the sum: the
// chunk sums, then their fixed-order total), ops/cuda/foreach.cuh. Only the total (one double)
// comes back to the host.
#include <vector>

#include "core/error.h"
#include "ops/cuda/launch.h"
#include "ops/cuda/staging.h"
#include "ops/foreach/device.h"

namespace titan::foreach_detail {
namespace {

namespace ck = cuda_kernels;
using cuda_staging::Staged;

struct Tables {
  std::vector<ck::ForeachRange> ranges;
  std::vector<ck::ForeachChunk> chunks;
};

// The device tables of the non-empty ranges; a bad range is refused before anything runs.
Tables tables(const ExecContext& ctx, const std::vector<FloatRange>& ranges, const char* who) {
  TITAN_CHECK(ctx.device.type == DeviceType::CUDA && ctx.device.index == 0, who,
              ": the GPU path runs on cuda:0, not on ", ctx.device.str());
  Tables t;
  const int64_t chunk = ck::foreach_chunk();
  for (size_t i = 0; i < ranges.size(); ++i) {
    const FloatRange& r = ranges[i];
    TITAN_CHECK(r.n >= 0, who, ": range ", i, " has a negative length (", r.n, ")");
    if (r.n == 0) continue;
    TITAN_CHECK(r.data != nullptr, who, ": range ", i, " of ", r.n, " elements has no data");
    for (int64_t at = 0; at < r.n; at += chunk) t.chunks.push_back({int64_t(t.ranges.size()), at});
    t.ranges.push_back({r.data, r.n});
  }
  return t;
}

}  // namespace

double sum_squares_cuda(const ExecContext& ctx, const std::vector<FloatRange>& ranges) {
  const Tables t = tables(ctx, ranges, "foreach_sum_squares");
  if (t.chunks.empty()) return 0.0;
  const int64_t n = int64_t(t.chunks.size());
  Staged sr(t.ranges.data(), t.ranges.size() * sizeof(ck::ForeachRange));
  Staged sc(t.chunks.data(), t.chunks.size() * sizeof(ck::ForeachChunk));
  Staged partial(size_t(n) * sizeof(double)), out(sizeof(double));
  ck::foreach_sum_squares(sr.as<ck::ForeachRange>(), sc.as<ck::ForeachChunk>(), n, partial.as<double>(),
                          out.as<double>(), ctx.stream);
  double s = 0;
  gpu::copy_to_host(&s, out.as<double>(), sizeof s);
  return s;
}

void scale_cuda(const ExecContext& ctx, const std::vector<FloatRange>& ranges, float c) {
  const Tables t = tables(ctx, ranges, "foreach_scale");
  if (t.chunks.empty()) return;
  Staged sr(t.ranges.data(), t.ranges.size() * sizeof(ck::ForeachRange));
  Staged sc(t.chunks.data(), t.chunks.size() * sizeof(ck::ForeachChunk));
  ck::foreach_scale(sr.as<ck::ForeachRange>(), sc.as<ck::ForeachChunk>(), int64_t(t.chunks.size()), c, ctx.stream);
}

}  // namespace titan::foreach_detail
