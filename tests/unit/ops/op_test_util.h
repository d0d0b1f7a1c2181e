// Helpers for the op tests: seeded random tensors, tolerant comparisons that report the worst
// element, and a central finite-difference gradient check.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <string>

#include "common/test_util.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "core/threading.h"

namespace titan::optest {

using test::randn;

inline Tensor uniform(const Shape& shape, uint64_t seed, double lo, double hi) {
  Tensor t = Tensor::empty(shape, DType::F32);
  fill_uniform(t, lo, hi, Philox{seed, 11});
  return t;
}

// A 1-D i32 or i64 tensor of token ids (or labels) from a list.
inline Tensor ids_of(std::initializer_list<int64_t> v, DType dt = DType::I64) {
  Tensor t = Tensor::empty({int64_t(v.size())}, dt);
  int64_t i = 0;
  for (int64_t x : v) {
    if (dt == DType::I32) t.data<int32_t>()[i++] = int32_t(x);
    else t.data<int64_t>()[i++] = x;
  }
  return t;
}

// Copy with every element rounded to bf16 (kept as f32).
inline Tensor bf16_rounded(const Tensor& t) {
  Tensor r = t.clone();
  float* p = r.data<float>();
  for (int64_t i = 0; i < r.numel(); ++i) p[i] = bf16_to_f32(f32_to_bf16(p[i]));
  return r;
}

inline bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// Asserts |a - b| <= atol + rtol * |b| elementwise; the message names the worst element.
inline ::testing::AssertionResult close(const Tensor& a, const Tensor& b, double atol, double rtol) {
  if (a.numel() != b.numel()) return ::testing::AssertionFailure() << "sizes differ: " << a.str() << " vs " << b.str();
  const float* x = a.data<float>();
  const float* y = b.data<float>();
  int64_t worst = -1;
  double worst_excess = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double diff = std::fabs(double(x[i]) - double(y[i]));
    const double bound = atol + rtol * std::fabs(double(y[i]));
    if (!(diff <= bound) && (worst < 0 || diff - bound > worst_excess)) {
      worst = i;
      worst_excess = diff - bound;
    }
  }
  if (worst < 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "element " << worst << " of " << a.str() << ": " << x[worst] << " vs "
                                       << y[worst] << " (atol " << atol << ", rtol " << rtol << ")";
}

// sum_i a[i] * r[i] in double: the scalar loss whose gradient w.r.t. a is r.
inline double dot(const Tensor& a, const Tensor& r) {
  double s = 0;
  for (int64_t i = 0; i < a.numel(); ++i) s += double(a.data<float>()[i]) * r.data<float>()[i];
  return s;
}

// Central differences of loss() w.r.t. every element of x (f32, perturbed in place and restored),
// compared with `grad`: |fd - grad| <= tol * max(1, max|grad|). The step actually taken (after
// rounding x +- eps to f32) is the divisor.
inline ::testing::AssertionResult fd_check(Tensor& x, const Tensor& grad, const std::function<double()>& loss,
                                           double eps, double tol) {
  float* p = x.data<float>();
  const float* g = grad.data<float>();
  double scale = 1;
  for (int64_t i = 0; i < grad.numel(); ++i) scale = std::max(scale, std::fabs(double(g[i])));
  for (int64_t i = 0; i < x.numel(); ++i) {
    const float orig = p[i];
    const float hi = float(orig + eps), lo = float(orig - eps);
    p[i] = hi;
    const double lp = loss();
    p[i] = lo;
    const double lm = loss();
    p[i] = orig;
    const double fd = (lp - lm) / (double(hi) - double(lo));
    if (!(std::fabs(fd - g[i]) <= tol * scale))
      return ::testing::AssertionFailure() << "element " << i << ": finite difference " << fd << " vs analytic "
                                           << g[i] << " (tol " << tol * scale << ")";
  }
  return ::testing::AssertionSuccess();
}

// Runs fn with the given number of threads, restoring the previous count.
template <class F>
void with_threads(int n, F&& fn) {
  const int before = num_threads();
  set_num_threads(n);
  fn();
  set_num_threads(before);
}

}  // namespace titan::optest
