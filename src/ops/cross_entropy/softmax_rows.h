// Row passes of the cross-entropy over one row of V logits (f32), each in a fixed lane order so
// results depend only on the row. AVX2 versions in softmax_rows.cpp; AVX-512 ones in
// softmax_rows.avx512.cpp, chosen at run time when the CPU has AVX-512F.
#pragma once
#include <cstdint>

namespace titan::ce_detail {

struct RowOps {
  // max_v z[v]
  float (*max)(const float* z, int64_t V);
  // sum_v e^(z[v] - m)
  float (*sum_exp)(const float* z, int64_t V, float m);
  // y[v] = c * e^(z[v] - m), the same f32 values sum_exp adds up, scaled, written to `out` (f32,
  // may be z itself) or, when out is null, to `bf16` (RNE): the softmax gradient in one pass that
  // writes only what the GEMMs after it read (no f32 write-back of e^(z - m) first)
  void (*scaled_exp)(const float* z, int64_t V, float m, float c, float* out, uint16_t* bf16);
};

const RowOps& row_ops();  // the best for this CPU
const RowOps& row_ops_avx2();
const RowOps* row_ops_avx512();  // null when not compiled in

}  // namespace titan::ce_detail
