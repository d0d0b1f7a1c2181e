// Causal GQA attention: the double reference against finite differences and against the
// definition (head mapping, one-token sequences), the "cpu" kernel (both tile implementations)
// against the reference on odd shapes, thread-count independence, and argument errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "core/threading.h"
#include "ops/attention/attention.h"
#include "ops/attention/reference.h"
#include "ops/attention/tiles.h"

using namespace titan;
using namespace titan::test;
using attention::Dims;

namespace {

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::equal(a.data<float>(), a.data<float>() + a.numel(), b.data<float>());
}

struct Case {
  int64_t B, S, Hq, Hkv, D;
  std::string str() const {
    return "B" + std::to_string(B) + " S" + std::to_string(S) + " Hq" + std::to_string(Hq) + " Hkv" +
           std::to_string(Hkv) + " D" + std::to_string(D);
  }
};

struct Grads {
  Tensor out, lse, dq, dk, dv;
};

Grads run(const AttentionKernel& kern, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout,
        float scale) {
  Grads r;
  kern.forward(ExecContext::host(), q, k, v, scale, r.out, r.lse);
  kern.backward(ExecContext::host(), q, k, v, r.out, r.lse, dout, scale, r.dq, r.dk, r.dv);
  return r;
}

struct Inputs {
  Tensor q, k, v, dout;
  float scale;
};

Inputs inputs(const Case& c, double qstd = 1.0) {
  return {randn({c.B, c.S, c.Hq, c.D}, 1, qstd), randn({c.B, c.S, c.Hkv, c.D}, 2),
          randn({c.B, c.S, c.Hkv, c.D}, 3), randn({c.B, c.S, c.Hq, c.D}, 4), float(1.0 / std::sqrt(double(c.D)))};
}

void expect_close(const Case& c, const Grads& got, const Grads& ref, double tol) {
  EXPECT_LE(rel_err(got.out, ref.out), tol) << c.str() << " out";
  EXPECT_LE(rel_err(got.lse, ref.lse), tol) << c.str() << " lse";
  EXPECT_LE(rel_err(got.dq, ref.dq), tol) << c.str() << " dq";
  EXPECT_LE(rel_err(got.dk, ref.dk), tol) << c.str() << " dk";
  EXPECT_LE(rel_err(got.dv, ref.dv), tol) << c.str() << " dv";
}

std::vector<Case> odd_cases() {
  std::vector<Case> cases;
  int i = 0;
  for (int64_t S : {1, 7, 65, 130})
    for (int64_t D : {24, 64, 128})
      for (int64_t ratio : {1, 2, 4}) {
        const int64_t B = 1 + (i++ % 2), Hkv = (S == 130 && D == 128) ? 1 : 2;
        cases.push_back({B, S, ratio * Hkv, Hkv, D});
      }
  cases.push_back({1, 300, 2, 1, 32});  // five key blocks split into several backward ranges
  cases.push_back({2, 257, 3, 3, 5});   // tiny odd head dim, one token past four blocks
  return cases;
}

}  // namespace

TEST(AttentionReference, BackwardMatchesFiniteDifferencesInDouble) {
  for (Dims d : {Dims{2, 5, 4, 2, 3}, Dims{1, 4, 2, 2, 5}, Dims{1, 3, 3, 1, 2}}) {
    const int64_t nq = d.B * d.S * d.Hq * d.D, nk = d.B * d.S * d.Hkv * d.D;
    const size_t uq = static_cast<size_t>(nq), uk = static_cast<size_t>(nk);
    std::vector<double> q(uq), k(uk), v(uk), w(uq);
    Philox rng{7, 99};
    uint64_t ctr = 0;
    for (auto* vec : {&q, &k, &v, &w})
      for (double& x : *vec) x = rng.normal(ctr++);
    const double scale = 0.7;
    // loss = sum(out * w), so dout = w.
    auto loss = [&]() {
      std::vector<double> out(uq), lse(static_cast<size_t>(d.B * d.Hq * d.S));
      attention::reference_forward(d, q.data(), k.data(), v.data(), scale, out.data(), lse.data());
      double s = 0;
      for (int64_t i = 0; i < nq; ++i) s += out[size_t(i)] * w[size_t(i)];
      return s;
    };
    std::vector<double> dq(uq), dk(uk), dv(uk);
    attention::reference_backward(d, q.data(), k.data(), v.data(), w.data(), scale, dq.data(), dk.data(),
                                  dv.data());
    const double eps = 1e-6;
    for (auto [x, g, name] : {std::tuple{&q, &dq, "dq"}, std::tuple{&k, &dk, "dk"}, std::tuple{&v, &dv, "dv"}}) {
      for (size_t i = 0; i < x->size(); ++i) {
        const double keep = (*x)[i];
        (*x)[i] = keep + eps;
        const double up = loss();
        (*x)[i] = keep - eps;
        const double down = loss();
        (*x)[i] = keep;
        EXPECT_NEAR((*g)[i], (up - down) / (2 * eps), 1e-8) << name << "[" << i << "]";
      }
    }
  }
}

TEST(AttentionReference, FollowsTheDefinition) {
  // Each kv head's values are one constant vector, so every output row of query head h equals the
  // constant of kv head h / (Hq / Hkv) whatever the probabilities are (HF repeat_kv order).
  const Case c{2, 6, 8, 2, 4};
  Inputs in = inputs(c);
  for (int64_t i = 0; i < in.v.numel(); ++i) in.v.data<float>()[i] = float((i / c.D) % c.Hkv + 1);
  Tensor out, lse;
  kernel<AttentionKernel>("reference").forward(ExecContext::host(), in.q, in.k, in.v, in.scale, out, lse);
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t s = 0; s < c.S; ++s)
      for (int64_t h = 0; h < c.Hq; ++h)
        EXPECT_NEAR(out.data<float>()[((b * c.S + s) * c.Hq + h) * c.D], float(h / 4 + 1), 1e-6);
  // The first query sees only key 0: out = v_0 and lse = its scaled score.
  in = inputs(c);
  kernel<AttentionKernel>("reference").forward(ExecContext::host(), in.q, in.k, in.v, in.scale, out, lse);
  for (int64_t h = 0; h < c.Hq; ++h) {
    double z = 0;
    for (int64_t i = 0; i < c.D; ++i)
      z += double(in.q.data<float>()[h * c.D + i]) * in.k.data<float>()[(h / 4) * c.D + i];
    EXPECT_NEAR(lse.data<float>()[h * c.S], in.scale * z, 1e-6);
    for (int64_t i = 0; i < c.D; ++i)
      EXPECT_EQ(out.data<float>()[h * c.D + i], in.v.data<float>()[(h / 4) * c.D + i]);
  }
}

TEST(AttentionCpu, MatchesReferenceOnOddShapes) {
  const AttentionKernel& ref = kernel<AttentionKernel>("reference");
  const AttentionKernel& cpu = kernel<AttentionKernel>("cpu");
  for (const Case& c : odd_cases()) {
    const Inputs in = inputs(c);
    const Grads want = run(ref, in.q, in.k, in.v, in.dout, in.scale);
    for (bool portable : {false, true}) {
      attention::prefer_portable_tiles(portable);
      SCOPED_TRACE(attention::tile_ops().name);
      expect_close(c, run(cpu, in.q, in.k, in.v, in.dout, in.scale), want, 1e-5);
    }
    attention::prefer_portable_tiles(false);
  }
}

TEST(AttentionCpu, PeakedSoftmaxStaysAccurate) {
  // Scores of size ~100: exp overflows unless the running max is subtracted.
  const Case c{1, 97, 4, 2, 64};
  const Inputs in = inputs(c, 12.0);
  const Grads want = run(kernel<AttentionKernel>("reference"), in.q, in.k, in.v, in.dout, in.scale);
  expect_close(c, run(kernel<AttentionKernel>("cpu"), in.q, in.k, in.v, in.dout, in.scale), want, 1e-5);
}

TEST(AttentionCpu, BitwiseIndependentOfThreadCount) {
  const AttentionKernel& cpu = kernel<AttentionKernel>("cpu");
  for (const Case& c : {Case{1, 200, 4, 1, 64}, Case{2, 130, 4, 2, 24}, Case{4, 96, 8, 4, 128}}) {
    const Inputs in = inputs(c);
    const int keep = num_threads();
    set_num_threads(1);
    const Grads one = run(cpu, in.q, in.k, in.v, in.dout, in.scale);
    set_num_threads(2);
    const Grads two = run(cpu, in.q, in.k, in.v, in.dout, in.scale);
    set_num_threads(keep);
    EXPECT_TRUE(bitwise_equal(one.out, two.out)) << c.str();
    EXPECT_TRUE(bitwise_equal(one.lse, two.lse)) << c.str();
    EXPECT_TRUE(bitwise_equal(one.dq, two.dq)) << c.str();
    EXPECT_TRUE(bitwise_equal(one.dk, two.dk)) << c.str();
    EXPECT_TRUE(bitwise_equal(one.dv, two.dv)) << c.str();
  }
}

TEST(Attention, RejectsBadArguments) {
  for (const char* variant : {"reference", "cpu"}) {
    const AttentionKernel& kern = kernel<AttentionKernel>(variant);
    const Case c{1, 4, 4, 2, 8};
    const Inputs in = inputs(c);
    auto expect_error = [&](auto&& call, const std::string& needle) {
      try {
        call();
        ADD_FAILURE() << variant << ": no error, expected one containing '" << needle << "'";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << variant << ": " << e.what();
      }
    };
    Tensor out, lse;
    expect_error([&] { kern.forward(ExecContext::host(), in.q.to(DType::BF16), in.k, in.v, in.scale, out, lse); },
                 "must be f32");
    expect_error(
        [&] {
          kern.forward(ExecContext::host(), in.q, randn({1, 4, 3, 8}, 5), randn({1, 4, 3, 8}, 6), in.scale, out, lse);
        },
        "multiple of kv heads");
    expect_error(
        [&] {
          kern.forward(ExecContext::host(), in.q, in.k, randn({1, 4, 2, 7}, 6), in.scale, out, lse);
        },
        "same shape");
    expect_error(
        [&] {
          kern.forward(ExecContext::host(), in.q, randn({1, 5, 2, 8}, 5), randn({1, 5, 2, 8}, 6), in.scale, out, lse);
        },
        "does not match");
    expect_error(
        [&] {
          kern.forward(ExecContext::host(), in.q.view({4, 4, 8}), in.k, in.v, in.scale, out, lse);
        },
        "4-d");
    expect_error([&] { kern.forward(ExecContext::host(), in.q, in.k, in.v, NAN, out, lse); }, "scale");
    Tensor bad_out = Tensor::zeros({1, 4, 4, 9}, DType::F32);
    expect_error([&] { kern.forward(ExecContext::host(), in.q, in.k, in.v, in.scale, bad_out, lse); }, "'out'");
    EXPECT_FALSE(lse.defined()) << "a rejected call allocated an output";
    kern.forward(ExecContext::host(), in.q, in.k, in.v, in.scale, out, lse);
    Tensor dq, dk, dv, short_lse = Tensor::zeros({1, 4, 3}, DType::F32);
    expect_error(
        [&] { kern.backward(ExecContext::host(), in.q, in.k, in.v, out, short_lse, in.dout, in.scale, dq, dk, dv); },
        "'lse'");
    expect_error(
        [&] {
          kern.backward(ExecContext::host(), in.q, in.k, in.v, out, lse, in.dout.to(DType::BF16), in.scale, dq, dk, dv);
        },
        "must be f32");
  }
}

TEST(Attention, OverwritesPreallocatedOutputs) {
  // Outputs passed in defined (here full of NaN) are overwritten, never accumulated into.
  const Case c{2, 70, 4, 2, 24};
  const Inputs in = inputs(c);
  for (const char* variant : {"reference", "cpu"}) {
    const AttentionKernel& kern = kernel<AttentionKernel>(variant);
    const Grads fresh = run(kern, in.q, in.k, in.v, in.dout, in.scale);
    Grads pre;
    for (Tensor* t : {&pre.out, &pre.dq, &pre.dk, &pre.dv}) {
      *t = Tensor::empty(t == &pre.dk || t == &pre.dv ? in.k.shape() : in.q.shape(), DType::F32);
      t->fill_(NAN);
    }
    pre.lse = Tensor::empty({c.B, c.Hq, c.S}, DType::F32);
    pre.lse.fill_(NAN);
    const void* kept = pre.dq.raw();
    kern.forward(ExecContext::host(), in.q, in.k, in.v, in.scale, pre.out, pre.lse);
    kern.backward(ExecContext::host(), in.q, in.k, in.v, pre.out, pre.lse, in.dout, in.scale, pre.dq, pre.dk, pre.dv);
    EXPECT_EQ(pre.dq.raw(), kept) << variant << ": the given dq was replaced instead of written";
    EXPECT_TRUE(bitwise_equal(pre.out, fresh.out)) << variant;
    EXPECT_TRUE(bitwise_equal(pre.lse, fresh.lse)) << variant;
    EXPECT_TRUE(bitwise_equal(pre.dq, fresh.dq)) << variant;
    EXPECT_TRUE(bitwise_equal(pre.dk, fresh.dk)) << variant;
    EXPECT_TRUE(bitwise_equal(pre.dv, fresh.dv)) << variant;
  }
}

// Row views (the model's layout): q, k and v read as columns of one fused [B * S, W] buffer, dq, dk
// and dv written into the columns of another, pad columns on both untouched. The same kernel on
// views and on contiguous copies gives the same bits: a view changes where rows are read, not
// the arithmetic.
TEST(Attention, RowViewsOfAFusedBufferMatchContiguousTensors) {
  for (const Case& c : {Case{1, 1, 1, 1, 4}, Case{2, 70, 4, 2, 24}, Case{1, 130, 2, 1, 64}}) {
    const int64_t T = c.B * c.S, Q = c.Hq * c.D, K = c.Hkv * c.D, W = Q + 2 * K + 3;  // 3 pad columns
    const Tensor buf = randn({T, W}, 50), dout = randn({c.B, c.S, c.Hq, c.D}, 51);
    auto cols = [&](const Tensor& t, int64_t c0, int64_t h) { return RowView::columns(t, c0, h, c.D); };
    // contiguous copies of the three column blocks
    auto copy = [&](int64_t c0, int64_t h) {
      Tensor t = Tensor::empty({c.B, c.S, h, c.D}, DType::F32);
      for (int64_t r = 0; r < T; ++r)
        std::copy_n(buf.data<float>() + r * W + c0, h * c.D, t.data<float>() + r * h * c.D);
      return t;
    };
    const Tensor q = copy(0, c.Hq), k = copy(Q, c.Hkv), v = copy(Q + K, c.Hkv);
    const float scale = 0.37f;
    for (const char* variant : {"reference", "cpu"}) {
      const AttentionKernel& kern = kernel<AttentionKernel>(variant);
      const Grads want = run(kern, q, k, v, dout, scale);
      Tensor out = Tensor::empty(q.shape(), DType::F32), lse = Tensor::empty({c.B, c.Hq, c.S}, DType::F32);
      kern.forward_rows(ExecContext::host(), cols(buf, 0, c.Hq), cols(buf, Q, c.Hkv), cols(buf, Q + K, c.Hkv), c.S,
                        scale, out, lse);
      EXPECT_TRUE(bitwise_equal(out, want.out) && bitwise_equal(lse, want.lse)) << variant << " " << c.str();
      Tensor g = randn({T, W}, 52), g0 = g.clone();
      kern.backward_rows(ExecContext::host(), cols(buf, 0, c.Hq), cols(buf, Q, c.Hkv), cols(buf, Q + K, c.Hkv),
                         want.out, want.lse, dout, c.S, scale, cols(g, 0, c.Hq), cols(g, Q, c.Hkv),
                         cols(g, Q + K, c.Hkv));
      for (int64_t r = 0; r < T; ++r) {
        const float* row = g.data<float>() + r * W;
        auto same = [&](const Tensor& t, int64_t c0, int64_t h) {
          return std::equal(row + c0, row + c0 + h * c.D, t.data<float>() + r * h * c.D);
        };
        ASSERT_TRUE(same(want.dq, 0, c.Hq) && same(want.dk, Q, c.Hkv) && same(want.dv, Q + K, c.Hkv))
            << variant << " " << c.str() << " row " << r;
        ASSERT_TRUE(std::equal(row + W - 3, row + W, g0.data<float>() + r * W + W - 3)) << "pad columns written";
      }
    }
  }
}

// ---- block-causal (packed documents) ----
namespace {

// Segment starts [B * S] of documents with the given lengths per sequence (each row's lengths sum to S).
std::vector<int64_t> segments(const std::vector<std::vector<int64_t>>& lengths, int64_t S) {
  std::vector<int64_t> seg;
  for (const auto& row : lengths) {
    int64_t a = 0;
    for (int64_t n : row) {
      for (int64_t i = 0; i < n; ++i) seg.push_back(a);
      a += n;
    }
    EXPECT_EQ(a, S);
  }
  return seg;
}

Grads run_seg(const AttentionKernel& kern, const Inputs& in, const int64_t* seg) {
  Grads r;
  kern.forward(ExecContext::host(), in.q, in.k, in.v, in.scale, r.out, r.lse, seg);
  kern.backward(ExecContext::host(), in.q, in.k, in.v, r.out, r.lse, in.dout, in.scale, r.dq, r.dk, r.dv, seg);
  return r;
}

// Rows [a, e) of sequence b of a [B, S, H, D] tensor, as a [1, e - a, H, D] copy.
Tensor doc_rows(const Tensor& t, int64_t b, int64_t a, int64_t e) {
  const int64_t row = t.dim(2) * t.dim(3);
  Tensor r = Tensor::empty({1, e - a, t.dim(2), t.dim(3)}, DType::F32);
  std::copy_n(t.data<float>() + (b * t.dim(1) + a) * row, (e - a) * row, r.data<float>());
  return r;
}

}  // namespace

// Each document of a packed row, run alone as a causal sequence, gives that row's rows: the
// reference's block mask is the definition, and the cpu kernel equals it bitwise.
TEST(AttentionSegments, PackedRowEqualsItsDocumentsRunOneByOne) {
  const Case c{2, 150, 4, 2, 24};
  const Inputs in = inputs(c);
  const std::vector<int64_t> seg = segments({{1, 70, 9, 70}, {150}}, c.S);
  for (const char* var : {"reference", "cpu"}) {
    const AttentionKernel& kern = kernel<AttentionKernel>(var);
    const Grads packed = run_seg(kern, in, seg.data());
    attention::for_each_document(seg.data(), c.B, c.S, [&](int64_t b, int64_t a, int64_t e) {
      const Inputs one{doc_rows(in.q, b, a, e), doc_rows(in.k, b, a, e), doc_rows(in.v, b, a, e),
                       doc_rows(in.dout, b, a, e), in.scale};
      const Grads alone = run(kern, one.q, one.k, one.v, one.dout, one.scale);
      SCOPED_TRACE(std::string(var) + " doc " + std::to_string(b) + ":" + std::to_string(a));
      const double tol = std::string(var) == "cpu" ? 0.0 : 1e-7;  // the reference sums in another order per row
      EXPECT_LE(rel_err(doc_rows(packed.out, b, a, e), alone.out), tol);
      EXPECT_LE(rel_err(doc_rows(packed.dq, b, a, e), alone.dq), tol);
      EXPECT_LE(rel_err(doc_rows(packed.dk, b, a, e), alone.dk), tol);
      EXPECT_LE(rel_err(doc_rows(packed.dv, b, a, e), alone.dv), tol);
      for (int64_t h = 0; h < c.Hq; ++h)
        for (int64_t i = 0; i < e - a; ++i)
          EXPECT_NEAR(packed.lse.data<float>()[(b * c.Hq + h) * c.S + a + i],
                      alone.lse.data<float>()[h * (e - a) + i], 1e-6);
    });
  }
}

TEST(AttentionSegments, CpuMatchesReferenceAndReferenceMatchesFiniteDifferences) {
  const Case c{2, 67, 4, 1, 16};
  const Inputs in = inputs(c);
  const std::vector<int64_t> seg = segments({{3, 64}, {20, 1, 1, 45}}, c.S);
  const Grads want = run_seg(kernel<AttentionKernel>("reference"), in, seg.data());
  expect_close(c, run_seg(kernel<AttentionKernel>("cpu"), in, seg.data()), want, 1e-5);
  // The masked reference against finite differences of L = sum(dout * out), in double.
  const Dims d{1, 6, 2, 1, 3};
  const std::vector<int64_t> s6 = segments({{2, 4}}, 6);
  const int64_t nq = d.B * d.S * d.Hq * d.D, nk = d.B * d.S * d.Hkv * d.D;
  std::vector<double> q(nq), k(nk), v(nk), dout(nq), out(nq), lse(d.B * d.Hq * d.S), dq(nq), dk(nk), dv(nk);
  const Philox rng{7, 9};
  uint64_t counter = 0;
  for (auto* vec : {&q, &k, &v, &dout})
    for (auto& x : *vec) x = rng.normal(counter++);
  attention::reference_backward(d, q.data(), k.data(), v.data(), dout.data(), 0.7, dq.data(), dk.data(), dv.data(),
                                s6.data());
  auto loss = [&] {
    attention::reference_forward(d, q.data(), k.data(), v.data(), 0.7, out.data(), lse.data(), s6.data());
    double l = 0;
    for (int64_t i = 0; i < nq; ++i) l += out[i] * dout[i];
    return l;
  };
  const double eps = 1e-6;
  for (auto [x, g] : {std::pair{&q, &dq}, std::pair{&k, &dk}, std::pair{&v, &dv}})
    for (size_t i = 0; i < x->size(); ++i) {
      const double keep = (*x)[i];
      (*x)[i] = keep + eps;
      const double lp = loss();
      (*x)[i] = keep - eps;
      const double lm = loss();
      (*x)[i] = keep;
      EXPECT_NEAR((*g)[i], (lp - lm) / (2 * eps), 1e-7) << i;
    }
}

TEST(AttentionSegments, RejectsSegmentsThatAreNotContiguousDocuments) {
  const Case c{1, 4, 2, 1, 8};
  const Inputs in = inputs(c);
  const std::vector<int64_t> bad{0, 0, 1, 2};  // token 2 starts at 1, which is not its predecessor's start
  Grads r;
  try {
    kernel<AttentionKernel>("cpu").forward(ExecContext::host(), in.q, in.k, in.v, in.scale, r.out, r.lse, bad.data());
    FAIL() << "accepted bad segments";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("segment start 1 of token 2"), std::string::npos) << e.what();
  }
}
