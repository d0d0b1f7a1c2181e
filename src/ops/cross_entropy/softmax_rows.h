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
  // z[v] <- e^(z[v] - m) in place; returns their sum
  float (*exp_store)(float* z, int64_t V, float m);
  // c * z[v]: in place (bf16 null), or only into bf16 (RNE) with z left as it is: the bf16 GEMMs
  // after it read only the bf16 copy, so the f32 row is not written a second time
  void (*scale)(float* z, int64_t V, float c, uint16_t* bf16);
};

const RowOps& row_ops();  // the best for this CPU
const RowOps& row_ops_avx2();
const RowOps* row_ops_avx512();  // null when not compiled in

}  // namespace titan::ce_detail
