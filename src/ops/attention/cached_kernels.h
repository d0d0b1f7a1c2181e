// The AVX-512 passes of attention_cached (cached.avx512.cpp), for one query token's heads over one
// kv head's contiguous keys and values ([nk, D], f32 or bf16): called by cached.cpp on CPUs with
// AVX-512 where cached_avx512_fits(D).
#pragma once
#include <cstdint>

namespace titan::detail {

// Head dims the passes take: whole 64-byte lines of K and V rows (32 bf16 or 16 f32 columns), and
// at most kCachedAvx512MaxD (scores_t keeps the split q rows on the stack).
constexpr int64_t kCachedAvx512MaxD = 512;
inline bool cached_avx512_fits(int64_t D, bool bf16) { return D <= kCachedAvx512MaxD && D % (bf16 ? 32 : 16) == 0; }

// p[u * ldp + j] = scale * q[u] . k_j for U (1 or 2) query heads; vpf (optional): the same keys'
// values, prefetched into L2 for the p.V pass that follows.
void cached_scores_avx512(const float* const* q, int U, const void* k, bool bf16, int64_t nk, int64_t D, float scale,
                          float* p, int64_t ldp, const void* vpf);
// o[u * D + c] = sum_j p[u * ldp + j] v_j[c] for U (1 or 2) query heads.
void cached_weighted_avx512(const float* p, int64_t ldp, int U, const void* v, bool bf16, int64_t nk, int64_t D,
                            float* o);

}  // namespace titan::detail
