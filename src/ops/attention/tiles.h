// Tile primitives of the flash-style "cpu" attention kernel, one implementation per instruction
// set (portable C++ in tiles.cpp, AVX-512 in tiles.avx512.cpp), chosen at run time.
//
// Score tiles are key-major: st[j * kTile + i] holds the score of key j (row) against query i
// (column) of a kTile x kTile block, so per-query softmax statistics are column-wise vector
// reductions with no horizontal sums. Query columns past the end of the sequence are padding: they
// hold finite values that the caller never reads back.
#pragma once
#include <cstdint>

namespace titan::attention {

constexpr int kTile = 64;  // queries per tile (columns) and keys per tile (rows)

struct TileOps {
  const char* name;
  // C[m, n] = (accumulate ? C[m, n] : 0) + sum_k A(m, k) B[k, n] for m < M, n < N, k < K, with
  // A(m, k) = a[m * a_rs + k * a_ks] (either orientation), B rows at stride ldb, C rows at ldc.
  void (*gemm)(int64_t M, int64_t N, int64_t K, const float* a, int64_t a_rs, int64_t a_ks, const float* b,
               int64_t ldb, float* c, int64_t ldc, bool accumulate);
  // Forward online-softmax step over a scaled score tile st[kn][kTile]. On the diagonal block (key
  // block start == query block start) key j is masked for queries i < j. Per query column i:
  //   m' = max(m, max_j st), alpha = exp(m - m'), st = exp(st - m') (0 where masked),
  //   l = alpha l + sum_j st, m = m'.  st then holds the unnormalized probabilities.
  void (*softmax_step)(float* st, int kn, bool diagonal, float* m, float* l, float* alpha);
  // Backward step: st (scaled scores) becomes P = exp(st - lse[i]) (0 where masked) and dpt (dO.V)
  // becomes scale * P * (dpt - dsum[i]), the scaled dS of the flash-attention recurrence.
  void (*backward_step)(float* st, float* dpt, int kn, bool diagonal, const float* lse, const float* dsum,
                        float scale);
};

const TileOps& tile_ops_portable();
const TileOps& tile_ops_avx512();  // call only when the CPU supports AVX-512F

// The implementation the cpu kernel uses: AVX-512 when the CPU has it, else portable. Tests force
// the portable one with prefer_portable(true) to check both on one machine.
const TileOps& tile_ops();
void prefer_portable_tiles(bool on);

}  // namespace titan::attention
