// Flash-style causal GQA attention on CPU ("cpu" variant). Work is cut into kTile x kTile blocks of
// (keys x queries); key blocks entirely above the diagonal are skipped, so no [S, S] score matrix
// exists, only one block per thread at a time. Tile arithmetic lives in tiles.h (AVX-512 or portable).
//
// Forward, one task per (query block, b, h), online softmax over the key blocks <= the query block:
//   St = K_j (scale Q_i)^T, m' = max(m, colmax St), P = exp(St - m'), l = e^{m-m'} l + colsum P,
//   O = e^{m-m'} O + P^T V_j;  finally out = O / l and lse = m + log l.
// Backward (flash-attention 2), one task per (b, kv head, range of key blocks), which owns dK and dV
// of its key rows and accumulates dQ of its query heads with no other writer:
//   P = exp(St - lse), dP = V_j dO_i^T, dS = P * (dP - D) with D = rowsum(dO * O),
//   dV_j += P dO_i, dK_j += scale dS Q_i, dQ_i += scale dS^T K_j.
// When there are few (b, kv head) pairs the key blocks are split into several ranges whose dQ
// contributions go to separate buffers summed in range order afterwards. The split depends only on
// the shapes, so results are bitwise identical for any thread count.
//
// Block-causal (packed documents): each document is attended as a sequence of its own (views of
// its rows, its lse rows gathered and scattered), so a packed row's result is bitwise that of its
// documents run one by one, and no work is spent on the masked blocks between documents.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/threading.h"
#include "ops/attention/attention.h"
#include "ops/attention/shape.h"
#include "ops/attention/tiles.h"
#include "ops/op_checks.h"

namespace titan::attention {
namespace {

int64_t num_blocks(int64_t S) { return (S + kTile - 1) / kTile; }

// Rows of q, dO and O are short (D floats) pieces of long strides that the hardware prefetcher
// does not follow; their first touch comes from memory, so it is requested a few rows ahead.
constexpr int64_t kAhead = 32;
inline void prefetch_row(const float* p, int64_t n) {
  for (int64_t c = 0; c < n; c += 16) __builtin_prefetch(p + c);
}

// dst[c * ldd + r] = mul * src[r * lds + c] for r < rows, c < cols.
void transpose_scaled(const float* __restrict src, int64_t lds, int64_t rows, int64_t cols, float mul,
                      float* __restrict dst, int64_t ldd) {
  for (int64_t r = 0; r < rows; ++r) {
    if (r + kAhead < rows) prefetch_row(src + (r + kAhead) * lds, cols);
    for (int64_t c = 0; c < cols; ++c) dst[c * ldd + r] = mul * src[r * lds + c];
  }
}

// dst[r * cols + c] = src[r * lds + c]: one head's rows out of an interleaved [.., H, D] tensor into
// a packed [rows, D] block.
void pack_rows(const float* __restrict src, int64_t lds, int64_t rows, int64_t cols, float* __restrict dst) {
  for (int64_t r = 0; r < rows; ++r) {
    if (r + kAhead < rows) prefetch_row(src + (r + kAhead) * lds, cols);
    std::copy_n(src + r * lds, cols, dst + r * cols);
  }
}
void unpack_rows(const float* __restrict src, int64_t rows, int64_t cols, float* __restrict dst, int64_t ldd) {
  for (int64_t r = 0; r < rows; ++r) std::copy_n(src + r * cols, cols, dst + r * ldd);
}

// The three product shapes of a tile. On a diagonal block (key block == query block, so kn == qn)
// key j is visible to query i only when j <= i; with the block cut in halves at kHalf, keys of the
// second half never reach queries of the first, and that quarter of the work is skipped.
constexpr int64_t kHalf = kTile / 2;

// Key-major tile t[j * kTile + i] = sum_c A[j, c] Bt[c, i] (St = K (sQ)^T, dPt = V dO^T); A rows at
// stride lda, Bt rows (one per head-dim index) at stride ldb, starting at the block's first query.
void keys_by_queries(const TileOps& ops, bool diag, int64_t kn, int64_t D, const float* A, int64_t lda,
                     const float* Bt, int64_t ldb, float* t) {
  if (!diag) return ops.gemm(kn, kTile, D, A, lda, 1, Bt, ldb, t, kTile, false);
  ops.gemm(std::min(kn, kHalf), kTile, D, A, lda, 1, Bt, ldb, t, kTile, false);
  if (kn > kHalf)
    ops.gemm(kn - kHalf, kTile - kHalf, D, A + kHalf * lda, lda, 1, Bt + kHalf, ldb, t + kHalf * kTile + kHalf, kTile,
             false);
}

// Per key row j: C[j, :] += sum_i t[j * kTile + i] X[i, :]  (dV += P dO, dK += dS Q).
void keys_from_queries(const TileOps& ops, bool diag, int64_t kn, int64_t qn, int64_t D, const float* t,
                       const float* X, int64_t ldx, float* C, int64_t ldc) {
  if (!diag) return ops.gemm(kn, D, qn, t, kTile, 1, X, ldx, C, ldc, true);
  ops.gemm(std::min(kn, kHalf), D, qn, t, kTile, 1, X, ldx, C, ldc, true);
  if (kn > kHalf)
    ops.gemm(kn - kHalf, D, qn - kHalf, t + kHalf * kTile + kHalf, kTile, 1, X + kHalf * ldx, ldx, C + kHalf * ldc,
             ldc, true);
}

// Per query row i: C[i, :] (+)= sum_j t[j * kTile + i] Y[j, :]  (O += P^T V, dQ += dS^T K).
void queries_from_keys(const TileOps& ops, bool diag, int64_t qn, int64_t kn, int64_t D, const float* t,
                       const float* Y, int64_t ldy, float* C, int64_t ldc, bool accumulate) {
  if (!diag) return ops.gemm(qn, D, kn, t, 1, kTile, Y, ldy, C, ldc, accumulate);
  ops.gemm(std::min(qn, kHalf), D, std::min(kn, kHalf), t, 1, kTile, Y, ldy, C, ldc, accumulate);
  if (qn > kHalf) ops.gemm(qn - kHalf, D, kn, t + kHalf, 1, kTile, Y, ldy, C + kHalf * ldc, ldc, accumulate);
}

// The forward of queries that are the last Sq = d.S of Sk positions (Sk == Sq: plain causal).
// Query blocks are laid on the key positions, so a block's diagonal is the key block at its own
// start; the columns of the first block before position off = Sk - Sq are padding.
void forward_impl(const Dims& d, int64_t Sk, const RowView& q, const RowView& k, const RowView& v, float scale,
                  Tensor& out, Tensor& lse) {
  const TileOps& ops = tile_ops();
  // Token row strides: qs, ks, vs of the (possibly strided) inputs, os of out (contiguous).
  const int64_t D = d.D, Sq = d.S, off = Sk - Sq, nb = num_blocks(Sk), qb0 = off / kTile, qs = q.ld, ks = k.ld,
                vs = v.ld, os = d.Hq * D;
  const float* Q = q.t.data<float>();  // [B * Sq rows at qs, Hq, D]
  const float* K = k.t.data<float>();  // [B * Sk rows at ks, Hkv, D]
  const float* V = v.t.data<float>();  // [B * Sk rows at vs, Hkv, D]
  float* O = out.data<float>();        // [B, Sq, Hq, D]
  float* L = lse.data<float>();        // [B, Hq, Sq]
  const int64_t heads = d.B * d.Hq;
  parallel_for((nb - qb0) * heads, 1, [&](int64_t t0, int64_t t1) {
    thread_local std::vector<float> buf;
    buf.resize(size_t(2 * D * kTile + kTile * kTile + 3 * kTile));
    float* qt = buf.data();          // [D, kTile]  scale * Q_i^T, zero outside the queries
    float* acc = qt + D * kTile;     // [kTile, D]  unnormalized output rows
    float* st = acc + kTile * D;     // [kTile, kTile]  scores / probabilities, key-major
    float* m = st + kTile * kTile;   // [kTile] running max
    float* l = m + kTile;            // [kTile] running sum
    float* alpha = l + kTile;        // [kTile] rescale factor of this step
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t qb = nb - 1 - t / heads, b = (t % heads) / d.Hq, h = t % d.Hq, g = h / d.group();
      // Columns [c0, qn) of the block are queries (key positions q0 + c0 ..).
      const int64_t q0 = qb * kTile, qn = std::min<int64_t>(kTile, Sk - q0), c0 = std::max<int64_t>(0, off - q0);
      if (qn < kTile || c0 > 0) std::fill_n(qt, D * kTile, 0.f);
      transpose_scaled(Q + (b * Sq + q0 + c0 - off) * qs + h * D, qs, qn - c0, D, scale, qt + c0, kTile);
      std::fill(m, m + kTile, -INFINITY);
      std::fill(l, l + kTile, 0.f);
      for (int64_t kb = 0; kb <= qb; ++kb) {
        const int64_t k0 = kb * kTile, kn = std::min<int64_t>(kTile, Sk - k0);
        const float* krows = K + (b * Sk + k0) * ks + g * D;
        const float* vrows = V + (b * Sk + k0) * vs + g * D;
        const bool diag = kb == qb;
        keys_by_queries(ops, diag, kn, D, krows, ks, qt, kTile, st);
        ops.softmax_step(st, int(kn), diag, m, l, alpha);
        if (kb > 0)
          for (int64_t i = 0; i < qn; ++i) {
            const float a = alpha[i];  // a local copy: acc and alpha share a buffer, so this vectorizes
            float* row = acc + i * D;
            for (int64_t c = 0; c < D; ++c) row[c] *= a;
          }
        queries_from_keys(ops, diag, qn, kn, D, st, vrows, vs, acc, D, kb > 0);
      }
      for (int64_t i = c0; i < qn; ++i) {
        float* orow = O + (b * Sq + q0 + i - off) * os + h * D;
        const float li = l[i];
        for (int64_t c = 0; c < D; ++c) orow[c] = acc[i * D + c] / li;
        L[(b * d.Hq + h) * Sq + q0 + i - off] = m[i] + std::log(l[i]);
      }
    }
  });
}

void forward(const ExecContext& ctx, const RowView& q, const RowView& k, const RowView& v, int64_t seq, float scale,
             Tensor& out, Tensor& lse) {
  opcheck::host_context(ctx, "attention.cpu");
  const Dims d = check_rows_forward(q, k, v, seq, scale, out, lse, "attention.cpu forward");
  forward_impl(d, d.S, q, k, v, scale, out, lse);
}

// Key-block ranges for the backward: about `want` ranges of equal work, the work of key block kb
// being the number of query blocks that see it (nb - max(kb, qb0), query blocks starting at qb0).
// Returns the range starts plus nb.
std::vector<int64_t> key_ranges(int64_t nb, int64_t qb0, int64_t want) {
  std::vector<int64_t> starts{0};
  double total = 0;
  for (int64_t kb = 0; kb < nb; ++kb) total += double(nb - std::max(kb, qb0));
  double done = 0;
  for (int64_t kb = 0; kb + 1 < nb && int64_t(starts.size()) < want; ++kb) {
    done += double(nb - std::max(kb, qb0));
    if (done >= total * double(starts.size()) / double(want)) starts.push_back(kb + 1);
  }
  starts.push_back(nb);
  return starts;
}

// The backward of forward_impl: queries at the last Sq = d.S of Sk key positions. Positions before
// off = Sk - Sq are padding queries with zero q and dO rows, which add nothing to dK and dV.
void backward_impl(const Dims& d, int64_t Sk, const RowView& q, const RowView& k, const RowView& v, const Tensor& out,
                   const Tensor& lse, const Tensor& dout, float scale, const RowView& dq, const RowView& dk,
                   const RowView& dv) {
  const TileOps& ops = tile_ops();
  // Token row strides of the views (qs, ks, vs; dqs, dks, dvs) and of out / dout (os, contiguous).
  const int64_t D = d.D, Sq = d.S, off = Sk - Sq, nb = num_blocks(Sk), qb0 = off / kTile, Sp = nb * kTile,
                os = d.Hq * D;
  const int64_t qs = q.ld, ks = k.ld, vs = v.ld, dqs = dq.ld, dks = dk.ld, dvs = dv.ld;
  const float* Q = q.t.data<float>();   // [B * Sq rows at qs, Hq, D]
  const float* K = k.t.data<float>();   // [B * Sk rows at ks, Hkv, D]
  const float* V = v.t.data<float>();   // [B * Sk rows at vs, Hkv, D]
  const float* O = out.data<float>();   // [B, Sq, Hq, D]
  const float* dO = dout.data<float>(); // [B, Sq, Hq, D]
  const float* L = lse.data<float>();   // [B, Hq, Sq]
  float* dQ = dq.t.data<float>();
  float* dK = dk.t.data<float>();
  float* dV = dv.t.data<float>();

  // At least 16 tasks where the sequence allows, from the shapes alone (never the thread count).
  const int64_t pairs = d.B * d.Hkv;
  const std::vector<int64_t> ranges = key_ranges(nb, qb0, std::min(nb, (16 + pairs - 1) / pairs));
  const int64_t nr = int64_t(ranges.size()) - 1;
  Tensor partial;  // [nr, B, Sq, Hq, D] dQ of each key range (contiguous), when nr > 1
  if (nr > 1) partial = Tensor::empty({nr, d.B, Sq, d.Hq, D}, DType::F32);

  // Per task, everything the tile products touch is packed into dense per-head blocks: the products
  // then walk dense rows instead of D-float pieces at a stride of H * D, which for power-of-two
  // strides fall into a few L1 sets and evict each other. The transposed copies get a row length
  // of Sp + 16 floats for the same reason (their rows are read in 64-float pieces).
  const int64_t ldt = Sp + 16;
  parallel_for(pairs * nr, 1, [&](int64_t t0, int64_t t1) {
    // O(Sk D) per task, so a local buffer (long sequences would otherwise pin megabytes per thread).
    std::vector<float> buf(size_t(2 * D * ldt + 2 * Sp + 2 * kTile * kTile + 7 * Sk * D));
    float* qt = buf.data();           // [D, ldt] scale * Q^T of one head, zero outside the queries
    float* dot = qt + D * ldt;        // [D, ldt] dO^T
    float* lsep = dot + D * ldt;      // [Sp] lse
    float* dsum = lsep + Sp;          // [Sp] D = rowsum(dO * O)
    float* st = dsum + Sp;            // [kTile, kTile] scores, then P (key-major)
    float* dpt = st + kTile * kTile;  // [kTile, kTile] dP, then scale * dS
    float* qp = dpt + kTile * kTile;  // [Sk, D] Q rows of one head (rows from lo; zero before off)
    float* dop = qp + Sk * D;         // [Sk, D] dO rows (likewise)
    float* dqp = dop + Sk * D;        // [Sk, D] dQ accumulator
    float* kp = dqp + Sk * D;         // [Sk, D] K rows of the kv head (rows lo..hi)
    float* vp = kp + Sk * D;          // [Sk, D] V rows
    float* dkp = vp + Sk * D;         // [Sk, D] dK accumulator
    float* dvp = dkp + Sk * D;        // [Sk, D] dV accumulator
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t r = t % nr, b = (t / nr) / d.Hkv, g = (t / nr) % d.Hkv;
      const int64_t kb0 = ranges[size_t(r)], kb1 = ranges[size_t(r) + 1];
      const int64_t lo = kb0 * kTile, hi = std::min(Sk, kb1 * kTile);  // key rows owned; queries from lo
      const int64_t qlo = std::max(lo, off);                            // the first real query row
      pack_rows(K + (b * Sk + lo) * ks + g * D, ks, hi - lo, D, kp + lo * D);
      pack_rows(V + (b * Sk + lo) * vs + g * D, vs, hi - lo, D, vp + lo * D);
      std::fill(dkp + lo * D, dkp + hi * D, 0.f);
      std::fill(dvp + lo * D, dvp + hi * D, 0.f);
      for (int64_t h = g * d.group(); h < (g + 1) * d.group(); ++h) {
        const int64_t qhead = (b * Sq) * qs + h * D;  // offset of row (b, 0, h) in q
        const int64_t ohead = (b * Sq) * os + h * D;  // ... in out, dout and the dQ partials
        std::fill(qp + lo * D, qp + qlo * D, 0.f);
        std::fill(dop + lo * D, dop + qlo * D, 0.f);
        pack_rows(Q + qhead + (qlo - off) * qs, qs, Sk - qlo, D, qp + qlo * D);
        pack_rows(dO + ohead + (qlo - off) * os, os, Sk - qlo, D, dop + qlo * D);
        std::fill(dqp + lo * D, dqp + Sk * D, 0.f);
        // Transposed copies, zero past the end.
        for (int64_t c = 0; c < D; ++c) {
          std::fill(qt + c * ldt + Sk, qt + (c + 1) * ldt, 0.f);
          std::fill(dot + c * ldt + Sk, dot + (c + 1) * ldt, 0.f);
        }
        transpose_scaled(qp + lo * D, D, Sk - lo, D, scale, qt + lo, ldt);
        transpose_scaled(dop + lo * D, D, Sk - lo, D, 1.f, dot + lo, ldt);
        // D = rowsum(dO * O) in double, eight partial sums so the loop vectorizes.
        for (int64_t s = lo; s < Sp; ++s) {
          double part[8] = {};
          const bool real = s >= off && s < Sk;
          if (real && s + kAhead < Sk) prefetch_row(O + ohead + (s - off + kAhead) * os, D);
          if (real) {
            const float* dorow = dop + s * D;
            const float* orow = O + ohead + (s - off) * os;
            int64_t c = 0;
            for (; c + 8 <= D; c += 8)
              for (int u = 0; u < 8; ++u) part[u] += double(dorow[c + u]) * double(orow[c + u]);
            for (; c < D; ++c) part[0] += double(dorow[c]) * double(orow[c]);
          }
          lsep[s] = real ? L[(b * d.Hq + h) * Sq + s - off] : 0.f;
          dsum[s] = float(((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7])));
        }
        for (int64_t kb = kb0; kb < kb1; ++kb) {
          const int64_t k0 = kb * kTile, kn = std::min<int64_t>(kTile, Sk - k0);
          const float *krows = kp + k0 * D, *vrows = vp + k0 * D;
          float *dkrows = dkp + k0 * D, *dvrows = dvp + k0 * D;
          for (int64_t qb = std::max(kb, qb0); qb < nb; ++qb) {
            const int64_t q0 = qb * kTile, qn = std::min<int64_t>(kTile, Sk - q0);
            const bool diag = qb == kb;
            keys_by_queries(ops, diag, kn, D, krows, D, qt + q0, ldt, st);    // St = K (sQ)^T
            keys_by_queries(ops, diag, kn, D, vrows, D, dot + q0, ldt, dpt);  // dPt = V dO^T
            ops.backward_step(st, dpt, int(kn), diag, lsep + q0, dsum + q0, scale);
            keys_from_queries(ops, diag, kn, qn, D, st, dop + q0 * D, D, dvrows, D);            // dV += P dO
            keys_from_queries(ops, diag, kn, qn, D, dpt, qp + q0 * D, D, dkrows, D);            // dK += s dS Q
            queries_from_keys(ops, diag, qn, kn, D, dpt, krows, D, dqp + q0 * D, D, true);     // dQ += s dS^T K
          }
        }
        if (nr > 1)
          unpack_rows(dqp + qlo * D, Sk - qlo, D, partial.data<float>() + r * d.B * Sq * os + ohead + (qlo - off) * os,
                      os);
        else
          unpack_rows(dqp + qlo * D, Sk - qlo, D, dQ + (b * Sq) * dqs + h * D + (qlo - off) * dqs, dqs);
      }
      unpack_rows(dkp + lo * D, hi - lo, D, dK + (b * Sk + lo) * dks + g * D, dks);
      unpack_rows(dvp + lo * D, hi - lo, D, dV + (b * Sk + lo) * dvs + g * D, dvs);
    }
  });

  if (nr > 1) {
    const float* part = partial.data<float>();
    const int64_t stride = d.B * Sq * os;
    parallel_for(d.B * Sq, 16, [&](int64_t r0, int64_t r1) {
      for (int64_t row = r0; row < r1; ++row) {  // row = b * Sq + s - off
        const int64_t s = row % Sq + off;
        float* dst = dQ + row * dqs;
        std::fill_n(dst, os, 0.f);
        for (int64_t r = 0; r < nr && ranges[size_t(r)] * kTile <= s; ++r)
          for (int64_t c = 0; c < os; ++c) dst[c] += part[r * stride + row * os + c];
      }
    });
  }
}

void backward(const ExecContext& ctx, const RowView& q, const RowView& k, const RowView& v, const Tensor& out,
              const Tensor& lse, const Tensor& dout, int64_t seq, float scale, const RowView& dq, const RowView& dk,
              const RowView& dv) {
  opcheck::host_context(ctx, "attention.cpu");
  const Dims d = check_rows_backward(q, k, v, out, lse, dout, seq, scale, dq, dk, dv, "attention.cpu backward");
  backward_impl(d, d.S, q, k, v, out, lse, dout, scale, dq, dk, dv);
}

void forward_suffix(const ExecContext& ctx, const RowView& q, const RowView& k, const RowView& v, int64_t sq,
                    int64_t sk, float scale, Tensor& out, Tensor& lse) {
  opcheck::host_context(ctx, "attention.cpu");
  const Dims d = check_rows_suffix_forward(q, k, v, sq, sk, scale, out, lse, "attention.cpu forward");
  forward_impl(d, sk, q, k, v, scale, out, lse);
}

void backward_suffix(const ExecContext& ctx, const RowView& q, const RowView& k, const RowView& v, const Tensor& out,
                     const Tensor& lse, const Tensor& dout, int64_t sq, int64_t sk, float scale, const RowView& dq,
                     const RowView& dk, const RowView& dv) {
  opcheck::host_context(ctx, "attention.cpu");
  const Dims d =
      check_rows_suffix_backward(q, k, v, out, lse, dout, sq, sk, scale, dq, dk, dv, "attention.cpu backward");
  backward_impl(d, sk, q, k, v, out, lse, dout, scale, dq, dk, dv);
}

// Elements [e0, e0 + n) of a contiguous tensor, as a 1-d view.
Tensor flat_part(const Tensor& t, int64_t e0, int64_t n) { return t.view({t.numel()}).slice0(e0, e0 + n); }

void forward_segments(const ExecContext& ctx, const RowView& q, const RowView& k, const RowView& v, int64_t seq,
                      const int64_t* seg, float scale, Tensor& out, Tensor& lse) {
  opcheck::host_context(ctx, "attention.cpu");
  const Dims d = check_rows_forward(q, k, v, seq, scale, out, lse, "attention.cpu forward");
  check_segments(seg, d.B, d.S, "attention.cpu forward");
  const int64_t os = d.Hq * d.D;
  float* L = lse.data<float>();  // [B, Hq, S]
  for_each_document(seg, d.B, d.S, [&](int64_t b, int64_t a, int64_t e) {
    const int64_t n = e - a, r0 = b * d.S + a;
    Tensor o = flat_part(out, r0 * os, n * os), l = Tensor::empty({1, d.Hq, n}, DType::F32);
    forward(ctx, q.rows(r0, n), k.rows(r0, n), v.rows(r0, n), n, scale, o, l);
    for (int64_t h = 0; h < d.Hq; ++h) std::copy_n(l.data<float>() + h * n, n, L + (b * d.Hq + h) * d.S + a);
  });
}

void backward_segments(const ExecContext& ctx, const RowView& q, const RowView& k, const RowView& v, const Tensor& out,
                       const Tensor& lse, const Tensor& dout, int64_t seq, const int64_t* seg, float scale,
                       const RowView& dq, const RowView& dk, const RowView& dv) {
  opcheck::host_context(ctx, "attention.cpu");
  const Dims d = check_rows_backward(q, k, v, out, lse, dout, seq, scale, dq, dk, dv, "attention.cpu backward");
  check_segments(seg, d.B, d.S, "attention.cpu backward");
  const int64_t os = d.Hq * d.D;
  const float* L = lse.data<float>();
  for_each_document(seg, d.B, d.S, [&](int64_t b, int64_t a, int64_t e) {
    const int64_t n = e - a, r0 = b * d.S + a;
    Tensor l = Tensor::empty({1, d.Hq, n}, DType::F32);
    for (int64_t h = 0; h < d.Hq; ++h) std::copy_n(L + (b * d.Hq + h) * d.S + a, n, l.data<float>() + h * n);
    backward(ctx, q.rows(r0, n), k.rows(r0, n), v.rows(r0, n), flat_part(out, r0 * os, n * os), l,
             flat_part(dout, r0 * os, n * os), n, scale, dq.rows(r0, n), dk.rows(r0, n), dv.rows(r0, n));
  });
}

const AttentionKernel kCpu{"cpu", forward, backward, forward_segments, backward_segments, forward_suffix,
                           backward_suffix};
TITAN_REGISTER_KERNEL(AttentionKernel, "cpu", DeviceType::CPU, kCpu);

}  // namespace
}  // namespace titan::attention
