// titan::gemm: argument defaults, validation and the empty cases shared by every variant.
#include <cstring>

#include "core/error.h"
#include "ops/matmul/matmul.h"

namespace titan {

void gemm(const ExecContext& ctx, const GemmKernel& kern, GemmArgs g) {
  TITAN_CHECK(g.m >= 0 && g.n >= 0 && g.k >= 0, "gemm: negative size m=", g.m, " n=", g.n, " k=", g.k);
  TITAN_CHECK(g.in_dtype == DType::F32 || g.in_dtype == DType::BF16, "gemm: input dtype must be f32 or bf16, got ",
              dtype_name(g.in_dtype));
  // Stored shapes: A is [m, k] or, transposed, [k, m]; B is [k, n] or [n, k]; C is [m, n].
  const int64_t a_cols = g.trans_a ? g.m : g.k, b_cols = g.trans_b ? g.k : g.n;
  if (g.lda == 0) g.lda = a_cols;
  if (g.ldb == 0) g.ldb = b_cols;
  if (g.ldc == 0) g.ldc = g.n;
  if (g.ldadd == 0) g.ldadd = g.n;
  TITAN_CHECK(g.lda >= a_cols && g.ldb >= b_cols && g.ldc >= g.n, "gemm: leading dimension too small (lda=", g.lda,
              " needs ", a_cols, ", ldb=", g.ldb, " needs ", b_cols, ", ldc=", g.ldc, " needs ", g.n, ")");
  if (g.m == 0 || g.n == 0) return;
  TITAN_CHECK(g.c != nullptr, "gemm: null C");
  TITAN_CHECK(g.ldadd >= g.n, "gemm: leading dimension of the addend too small (ldadd=", g.ldadd, " needs ", g.n, ")");
  if (g.k == 0) {  // empty product: C = beta * C (+ R)
    for (int64_t i = 0; i < g.m; ++i) {
      float* row = g.c + i * g.ldc;
      if (g.beta == 0.f)
        std::memset(row, 0, size_t(g.n) * sizeof(float));
      else
        for (int64_t j = 0; j < g.n; ++j) row[j] *= g.beta;
      if (g.add)
        for (int64_t j = 0; j < g.n; ++j) row[j] += g.add[i * g.ldadd + j];
    }
    return;
  }
  TITAN_CHECK(g.a != nullptr && g.b != nullptr, "gemm: null A or B");
  kern.gemm(ctx, g);
}

}  // namespace titan
