// Partial RoPE (Qwen3.5's partial_rotary_factor): the first rd entries of each head vector rotated
// as HF's x * cos + rotate_half(x) * sin over those rd (the rest left as it is), in place, each
// row at its own position; backward: the transposed rotation (dx from dy, in place).
// x: an f32 row view of n token rows of h head vectors of width d >= rd (rd even); cache:
// [P, rd] (make_rope_cache with head_dim rd); pos: n positions, one per row, each < P; a negative
// position leaves its row as it is (a padding column of a generating batch). CPU only.
#pragma once
#include "core/exec_context.h"
#include "ops/rope/rope.h"
#include "ops/row_view.h"

namespace titan {

void rope_partial(const ExecContext& ctx, const RowView& x, int64_t rd, const RopeCache& cache, const int64_t* pos,
                  bool backward);

}  // namespace titan
