// Suffix attention (context parallelism: queries that are the last Sq of Sk key positions): the
// reference equals the matching rows of plain causal attention over Sk whose earlier queries have
// zero output gradient, the "cpu" kernel (both tile implementations) equals the reference for
// offsets inside, at and across tile borders, a sequence cut into suffix pieces recombines into
// the causal result, and Sq == Sk is bitwise the causal kernel.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "core/tensor.h"
#include "ops/attention/attention.h"
#include "ops/attention/tiles.h"

using namespace titan;
using namespace titan::test;

namespace {

struct Case {
  int64_t B, Sq, Sk, Hq, Hkv, D;
  std::string str() const {
    return "B" + std::to_string(B) + " Sq" + std::to_string(Sq) + " Sk" + std::to_string(Sk) + " Hq" +
           std::to_string(Hq) + " Hkv" + std::to_string(Hkv) + " D" + std::to_string(D);
  }
};

struct Out {
  Tensor out, lse, dq, dk, dv;
};

// Suffix forward and backward of q [B, Sq, Hq, D] over k, v [B, Sk, Hkv, D].
Out run_suffix(const AttentionKernel& kern, const Case& c, const Tensor& q, const Tensor& k, const Tensor& v,
               const Tensor& dout) {
  Out r;
  const float scale = float(1.0 / std::sqrt(double(c.D)));
  r.out = Tensor::empty({c.B, c.Sq, c.Hq, c.D}, DType::F32);
  r.lse = Tensor::empty({c.B, c.Hq, c.Sq}, DType::F32);
  r.dq = Tensor::empty(q.shape(), DType::F32);
  r.dk = Tensor::empty(k.shape(), DType::F32);
  r.dv = Tensor::empty(v.shape(), DType::F32);
  const RowView qv = RowView::of(q, c.Hq, c.D), kv = RowView::of(k, c.Hkv, c.D), vv = RowView::of(v, c.Hkv, c.D);
  kern.forward_rows_suffix(ExecContext::host(), qv, kv, vv, c.Sq, c.Sk, scale, r.out, r.lse);
  kern.backward_rows_suffix(ExecContext::host(), qv, kv, vv, r.out, r.lse, dout, c.Sq, c.Sk, scale,
                            RowView::of(r.dq, c.Hq, c.D), RowView::of(r.dk, c.Hkv, c.D), RowView::of(r.dv, c.Hkv, c.D));
  return r;
}

// Rows [s0, s0 + n) of every sequence of x [B, S, ...] as a contiguous [B, n, ...] tensor.
Tensor seq_rows(const Tensor& x, int64_t s0, int64_t n) {
  Shape s = x.shape();
  const int64_t B = s[0], S = s[1], w = x.numel() / (B * S);
  s[1] = n;
  Tensor r = Tensor::empty(s, DType::F32);
  for (int64_t b = 0; b < B; ++b)
    std::copy_n(x.data<float>() + (b * S + s0) * w, n * w, r.data<float>() + b * n * w);
  return r;
}
// lse [B, H, S] columns [s0, s0 + n).
Tensor lse_cols(const Tensor& l, int64_t s0, int64_t n) {
  const int64_t BH = l.dim(0) * l.dim(1), S = l.dim(2);
  Tensor r = Tensor::empty({l.dim(0), l.dim(1), n}, DType::F32);
  for (int64_t i = 0; i < BH; ++i) std::copy_n(l.data<float>() + i * S + s0, n, r.data<float>() + i * n);
  return r;
}

std::vector<Case> cases() {
  return {{1, 5, 12, 2, 1, 8},     {2, 7, 7, 4, 2, 24},    {1, 16, 64, 2, 2, 32},  {2, 32, 130, 4, 2, 16},
          {1, 64, 128, 2, 1, 64},  {1, 70, 200, 3, 3, 5},  {2, 1, 65, 4, 2, 24},   {1, 100, 300, 2, 1, 32},
          {1, 130, 131, 2, 2, 24}};
}

}  // namespace

TEST(AttentionSuffix, ReferenceEqualsCausalRowsWithZeroGradientBefore) {
  const AttentionKernel& ref = kernel<AttentionKernel>("reference");
  for (const Case& c : {Case{2, 5, 12, 4, 2, 8}, Case{1, 9, 20, 2, 1, 6}}) {
    SCOPED_TRACE(c.str());
    const int64_t off = c.Sk - c.Sq;
    const Tensor qf = randn({c.B, c.Sk, c.Hq, c.D}, 1), k = randn({c.B, c.Sk, c.Hkv, c.D}, 2),
                 v = randn({c.B, c.Sk, c.Hkv, c.D}, 3);
    Tensor dof = randn({c.B, c.Sk, c.Hq, c.D}, 4);
    for (int64_t b = 0; b < c.B; ++b)  // the causal queries before the suffix get no gradient
      std::fill_n(dof.data<float>() + b * c.Sk * c.Hq * c.D, off * c.Hq * c.D, 0.f);
    const float scale = float(1.0 / std::sqrt(double(c.D)));
    Tensor out, lse, dq, dk, dv;
    ref.forward(ExecContext::host(), qf, k, v, scale, out, lse);
    ref.backward(ExecContext::host(), qf, k, v, out, lse, dof, scale, dq, dk, dv);
    const Out s = run_suffix(ref, c, seq_rows(qf, off, c.Sq), k, v, seq_rows(dof, off, c.Sq));
    EXPECT_LE(rel_err(s.out, seq_rows(out, off, c.Sq)), 1e-6);
    EXPECT_LE(rel_err(s.lse, lse_cols(lse, off, c.Sq)), 1e-6);
    EXPECT_LE(rel_err(s.dq, seq_rows(dq, off, c.Sq)), 1e-6);
    EXPECT_LE(rel_err(s.dk, dk), 1e-6);
    EXPECT_LE(rel_err(s.dv, dv), 1e-6);
  }
}

TEST(AttentionSuffix, CpuMatchesReference) {
  const AttentionKernel& ref = kernel<AttentionKernel>("reference");
  const AttentionKernel& cpu = kernel<AttentionKernel>("cpu");
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.str());
    const Tensor q = randn({c.B, c.Sq, c.Hq, c.D}, 11), k = randn({c.B, c.Sk, c.Hkv, c.D}, 12),
                 v = randn({c.B, c.Sk, c.Hkv, c.D}, 13), dout = randn({c.B, c.Sq, c.Hq, c.D}, 14);
    const Out want = run_suffix(ref, c, q, k, v, dout);
    for (bool portable : {false, true}) {
      attention::prefer_portable_tiles(portable);
      SCOPED_TRACE(attention::tile_ops().name);
      const Out got = run_suffix(cpu, c, q, k, v, dout);
      EXPECT_LE(rel_err(got.out, want.out), 1e-5);
      EXPECT_LE(rel_err(got.lse, want.lse), 1e-5);
      EXPECT_LE(rel_err(got.dq, want.dq), 1e-5);
      EXPECT_LE(rel_err(got.dk, want.dk), 1e-5);
      EXPECT_LE(rel_err(got.dv, want.dv), 1e-5);
    }
    attention::prefer_portable_tiles(false);
  }
}

TEST(AttentionSuffix, WholeSequenceIsBitwiseTheCausalKernel) {
  const AttentionKernel& cpu = kernel<AttentionKernel>("cpu");
  const Case c{2, 150, 150, 4, 2, 32};
  const Tensor q = randn({c.B, c.Sq, c.Hq, c.D}, 21), k = randn({c.B, c.Sk, c.Hkv, c.D}, 22),
               v = randn({c.B, c.Sk, c.Hkv, c.D}, 23), dout = randn({c.B, c.Sq, c.Hq, c.D}, 24);
  const Out s = run_suffix(cpu, c, q, k, v, dout);
  Tensor out, lse, dq, dk, dv;
  const float scale = float(1.0 / std::sqrt(double(c.D)));
  cpu.forward(ExecContext::host(), q, k, v, scale, out, lse);
  cpu.backward(ExecContext::host(), q, k, v, out, lse, dout, scale, dq, dk, dv);
  for (auto [a, b] : {std::pair{&s.out, &out}, {&s.lse, &lse}, {&s.dq, &dq}, {&s.dk, &dk}, {&s.dv, &dv}})
    EXPECT_TRUE(std::equal(a->data<float>(), a->data<float>() + a->numel(), b->data<float>()));
}

// Context parallelism's decomposition: the causal result of one sequence equals its query chunks
// each attended as a suffix of the keys up to the chunk's end, with dK and dV the sums of the
// chunks' contributions (head-tail order of 4 chunks, as cp = 2 holds them).
TEST(AttentionSuffix, ChunksRecombineIntoCausalAttention) {
  const AttentionKernel& cpu = kernel<AttentionKernel>("cpu");
  const int64_t B = 1, S = 192, Hq = 4, Hkv = 2, D = 16, c = S / 4;
  const Tensor q = randn({B, S, Hq, D}, 31), k = randn({B, S, Hkv, D}, 32), v = randn({B, S, Hkv, D}, 33),
               dout = randn({B, S, Hq, D}, 34);
  Tensor out, lse, dq, dk, dv;
  const float scale = float(1.0 / std::sqrt(double(D)));
  cpu.forward(ExecContext::host(), q, k, v, scale, out, lse);
  cpu.backward(ExecContext::host(), q, k, v, out, lse, dout, scale, dq, dk, dv);
  Tensor dk_sum = Tensor::zeros(k.shape(), DType::F32), dv_sum = Tensor::zeros(v.shape(), DType::F32);
  for (int64_t chunk : {0, 3, 1, 2}) {
    const int64_t end = (chunk + 1) * c;
    const Case cs{B, c, end, Hq, Hkv, D};
    const Out o = run_suffix(cpu, cs, seq_rows(q, chunk * c, c), seq_rows(k, 0, end), seq_rows(v, 0, end),
                             seq_rows(dout, chunk * c, c));
    EXPECT_LE(rel_err(o.out, seq_rows(out, chunk * c, c)), 1e-5) << chunk;
    EXPECT_LE(rel_err(o.lse, lse_cols(lse, chunk * c, c)), 1e-5) << chunk;
    EXPECT_LE(rel_err(o.dq, seq_rows(dq, chunk * c, c)), 1e-5) << chunk;
    for (int64_t i = 0; i < o.dk.numel(); ++i) {
      dk_sum.data<float>()[i] += o.dk.data<float>()[i];
      dv_sum.data<float>()[i] += o.dv.data<float>()[i];
    }
  }
  EXPECT_LE(rel_err(dk_sum, dk), 1e-5);
  EXPECT_LE(rel_err(dv_sum, dv), 1e-5);
}

TEST(AttentionSuffix, RejectsBadShapes) {
  const AttentionKernel& cpu = kernel<AttentionKernel>("cpu");
  const Tensor q = randn({1, 8, 2, 4}, 1), k = randn({1, 6, 2, 4}, 2);
  Tensor out = Tensor::empty({1, 8, 2, 4}, DType::F32), lse = Tensor::empty({1, 2, 8}, DType::F32);
  try {
    cpu.forward_rows_suffix(ExecContext::host(), RowView::of(q, 2, 4), RowView::of(k, 2, 4), RowView::of(k, 2, 4), 8, 6,
                            1.f, out, lse);
    FAIL() << "more queries than keys accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the last sq >= 1 of sk positions"), std::string::npos) << e.what();
  }
}
