// CPU GEMM on oneDNN (chosen by measurement: bench/gemm/RESULTS.md).
//
// Every call runs a oneDNN matmul primitive. Creating one costs far more than most GEMMs here
// (JIT code generation), so primitives are cached by everything they are specialized on:
// transposes, sizes, leading dimensions, input dtype, alpha and beta. The cache is shared by all
// threads (a mutex guards the map; a primitive may execute concurrently from several threads),
// and each call supplies its own scratchpad (thread-local), so concurrent calls never share
// oneDNN's global scratch memory.
//
//   A [m,k] (or stored [k,m] with trans_a) -> matmul src,  strides {lda,1} or {1,lda}
//   B [k,n] (or stored [n,k] with trans_b) -> matmul weights, strides {ldb,1} or {1,ldb}
//   C [m,n] f32, strides {ldc,1};  alpha -> output scale, beta -> sum post-op (C read only then),
//   R (the addend) -> a binary-add post-op reading R [m,n] at strides {ldadd,1} after the sum
//
// A long bf16 reduction into a small output (k >= 16384 and k >= 8 max(m, n): the lm_head's input
// gradient, dlogits [rows, vocab] @ W [vocab, hidden]) runs as its transpose, C^T = op(B)^T op(A)^T,
// into a per-thread buffer that is then transposed into C (with beta and the addend applied there,
// in the order the post-ops would apply them). oneDNN 2.6's brgemm streams that shape's N-major B
// badly: measured on the 2-core AMX Xeon (family 6 model 167) for 688 x 151,936 x 512, bf16 645 ->
// 1151 GFLOP/s as the transpose (bench/train_step/RESULTS.md). oneDNN itself has no fast form of
// it: a transposed ("ba") destination falls to its reference kernel. The choice depends on the
// shape and dtype alone, so a shape always gets the same bits. f32 keeps the plain form: there the
// transpose gained only 280 -> 327 GFLOP/s (1.02-1.05x a step), and its other summation order made
// cli_lora_dist's 1- vs 2-rank adapters (f32, AdamW amplifying rounding) differ 6x more (2.35e-5
// of peak against 3.9e-6, over the test's 2e-5 bar).
//
// A CPU where oneDNN builds no bf16 matmul (oneDNN 2.6 has none without AVX-512: an AVX2-only
// CPU such as the Zen 3 of family 25 model 1) runs bf16 GEMMs as f32 matmuls on operands widened
// to f32 in cache-sized panels (gemm_widened): the same products, f32 sums.
//
// oneDNN in this build runs on the same OpenMP runtime (libgomp) as titan, so it uses
// omp_get_max_threads() threads and never oversubscribes the cores alongside titan's own loops.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "core/error.h"
#include "core/threading.h"
#include "oneapi/dnnl/dnnl.hpp"
#include "ops/matmul/gemv.h"
#include "ops/matmul/matmul.h"
#include "ops/op_checks.h"

namespace titan {
namespace {

struct Key {
  bool ta, tb, swap;
  int64_t m, n, k, lda, ldb, ldc, ldadd;  // ldadd 0: no addend
  DType dt;
  uint32_t alpha_bits, beta_bits;
  bool operator==(const Key& o) const { return std::memcmp(this, &o, sizeof(Key)) == 0; }
};
struct KeyHash {
  size_t operator()(const Key& k) const {
    const unsigned char* p = reinterpret_cast<const unsigned char*>(&k);
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the bytes (padding is zeroed at construction)
    for (size_t i = 0; i < sizeof(Key); ++i) h = (h ^ p[i]) * 1099511628211ull;
    return size_t(h);
  }
};

struct Entry {
  dnnl::matmul prim;
  dnnl::memory::desc a, b, c, add;
  size_t scratch_bytes;
};

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

class PrimitiveCache {
 public:
  // Bounded: when a run somehow cycles through very many shapes, start over rather than grow.
  static constexpr size_t kMaxEntries = 4096;

  std::shared_ptr<const Entry> get(const Key& key) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = map_.find(key);
      if (it != map_.end()) return it->second;
    }
    // Built outside the lock (JIT takes milliseconds); if two threads race, one copy wins.
    auto e = std::make_shared<Entry>(create(key));
    std::lock_guard<std::mutex> lock(mu_);
    if (map_.size() >= kMaxEntries) map_.clear();
    return map_.emplace(key, std::move(e)).first->second;
  }

 private:
  static Entry create(const Key& k) {
    using dims = dnnl::memory::dims;
    const auto dt = k.dt == DType::BF16 ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f32;
    Entry e;
    if (k.swap) {  // src op(B)^T [n, k], weights op(A)^T [k, m], dst C^T [n, m] dense; no post-ops
      e.a = dnnl::memory::desc({k.n, k.k}, dt, k.tb ? dims{k.ldb, 1} : dims{1, k.ldb});
      e.b = dnnl::memory::desc({k.k, k.m}, dt, k.ta ? dims{k.lda, 1} : dims{1, k.lda});
      e.c = dnnl::memory::desc({k.n, k.m}, dnnl::memory::data_type::f32, dims{k.m, 1});
    } else {
      e.a = dnnl::memory::desc({k.m, k.k}, dt, k.ta ? dims{1, k.lda} : dims{k.lda, 1});
      e.b = dnnl::memory::desc({k.k, k.n}, dt, k.tb ? dims{1, k.ldb} : dims{k.ldb, 1});
      e.c = dnnl::memory::desc({k.m, k.n}, dnnl::memory::data_type::f32, dims{k.ldc, 1});
    }
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    float alpha, beta;
    std::memcpy(&alpha, &k.alpha_bits, 4);
    std::memcpy(&beta, &k.beta_bits, 4);
    if (alpha != 1.f) attr.set_output_scales(0, {alpha});
    dnnl::post_ops po;
    if (beta != 0.f && !k.swap) po.append_sum(beta);
    if (k.ldadd != 0 && !k.swap) {
      e.add = dnnl::memory::desc({k.m, k.n}, dnnl::memory::data_type::f32, dims{k.ldadd, 1});
      po.append_binary(dnnl::algorithm::binary_add, e.add);
    }
    if (po.len() > 0) attr.set_post_ops(po);
    try {
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(e.a, e.b, e.c), attr, engine());
      e.scratch_bytes = pd.scratchpad_desc().get_size();
      e.prim = dnnl::matmul(pd);
    } catch (const dnnl::error& err) {
      fail("gemm.cpu: oneDNN cannot build a matmul for m=", k.m, " n=", k.n, " k=", k.k, " (", err.what(), ")");
    }
    return e;
  }

  std::mutex mu_;
  std::unordered_map<Key, std::shared_ptr<const Entry>, KeyHash> map_;
};

PrimitiveCache& cache() {
  static PrimitiveCache c;
  return c;
}

// A per-thread buffer, grown on demand, 64-byte aligned as oneDNN expects.
struct Buf {
  void* p = nullptr;
  size_t size = 0;
  ~Buf() { std::free(p); }
};
void* grow(Buf& buf, size_t bytes) {
  if (bytes > buf.size) {
    std::free(buf.p);
    buf.size = (bytes + 63) / 64 * 64;
    buf.p = std::aligned_alloc(64, buf.size);
    TITAN_CHECK(buf.p != nullptr, "gemm.cpu: out of memory for a ", bytes, "-byte buffer");
  }
  return buf.p;
}
void* scratchpad(size_t bytes) {
  thread_local Buf buf;
  return grow(buf, bytes);
}

bool run_transposed(const GemmArgs& g) {
  constexpr int64_t kLongK = 16384;
  return g.in_dtype == DType::BF16 && g.k >= kLongK && g.k >= 8 * std::max(g.m, g.n);
}

// C = T^T (+ beta C) (+ R), T [n, m] dense: 32 x 32 tiles, blocks of 32 rows of C over the threads.
void transpose_into(const float* t, const GemmArgs& g) {
  const int64_t m = g.m, n = g.n;
  const float beta = g.beta;
  parallel_for((m + 31) / 32, std::max<int64_t>(1, (int64_t(1) << 14) / std::max<int64_t>(1, 32 * n)),
               [&](int64_t b0, int64_t b1) {
                 for (int64_t i0 = 32 * b0; i0 < std::min(m, 32 * b1); i0 += 32)
                   for (int64_t j0 = 0; j0 < n; j0 += 32)
                     for (int64_t i = i0; i < std::min(m, i0 + 32); ++i) {
                       float* c = g.c + i * g.ldc;
                       const float* r = g.add ? g.add + i * g.ldadd : nullptr;
                       for (int64_t j = j0; j < std::min(n, j0 + 32); ++j) {
                         float v = t[j * m + i];
                         if (beta != 0.f) v += beta * c[j];
                         if (r) v += r[j];
                         c[j] = v;
                       }
                     }
               });
}

void gemm_onednn(const GemmArgs& g) {
  Key key;
  std::memset(&key, 0, sizeof key);  // the hash reads padding bytes too
  key.ta = g.trans_a, key.tb = g.trans_b, key.swap = run_transposed(g);
  key.m = g.m, key.n = g.n, key.k = g.k, key.lda = g.lda, key.ldb = g.ldb, key.ldc = g.ldc;
  key.ldadd = g.add ? g.ldadd : 0;
  key.dt = g.in_dtype;
  std::memcpy(&key.alpha_bits, &g.alpha, 4);
  std::memcpy(&key.beta_bits, &g.beta, 4);
  std::shared_ptr<const Entry> e = cache().get(key);

  thread_local dnnl::stream strm(engine());
  dnnl::engine& eng = engine();
  thread_local Buf transposed;
  float* t = key.swap ? static_cast<float*>(grow(transposed, size_t(g.m * g.n) * sizeof(float))) : nullptr;
  dnnl::memory ma(e->a, eng, const_cast<void*>(key.swap ? g.b : g.a));
  dnnl::memory mb(e->b, eng, const_cast<void*>(key.swap ? g.a : g.b));
  dnnl::memory mc(e->c, eng, key.swap ? t : g.c);
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}};
  if (g.add && !key.swap) {  // the binary post-op is the last one: index 1 after a sum, else 0
    const int index = g.beta != 0.f ? 1 : 0;
    args.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(index) | DNNL_ARG_SRC_1,
                 dnnl::memory(e->add, eng, const_cast<float*>(g.add)));
  }
  if (e->scratch_bytes > 0)
    args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(dnnl::memory::desc({int64_t(e->scratch_bytes)},
                                                                      dnnl::memory::data_type::u8, {1}),
                                                   eng, scratchpad(e->scratch_bytes)));
  e->prim.execute(strm, args);
  strm.wait();
  if (key.swap) transpose_into(t, g);
}

// Whether oneDNN builds a bf16 matmul on this CPU (oneDNN 2.6 on an AVX2-only CPU builds none).
// Asked once, with a small matmul.
bool onednn_has_bf16_matmul() {
  static const bool ok = [] {
    try {
      const auto bf = dnnl::memory::data_type::bf16;
      const dnnl::memory::desc a({16, 16}, bf, {16, 1}), b({16, 16}, bf, {16, 1});
      const dnnl::memory::desc c({16, 16}, dnnl::memory::data_type::f32, {16, 1});
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), engine());
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return ok;
}

// The op-coordinate block [r0, r1) x [c0, c1) of a bf16 operand stored with leading dimension ld
// (transposed: stored [cols, rows]) into dst as f32, dense in the stored layout (row stride c1 - c0,
// or r1 - r0 when transposed). Exact: a bf16 value is an f32 with the low 16 bits zero.
void widen_block(const void* src, int64_t ld, bool trans, int64_t r0, int64_t r1, int64_t c0, int64_t c1, float* dst) {
  if (trans) std::swap(r0, c0), std::swap(r1, c1);
  const int64_t cols = c1 - c0;
  const uint16_t* s = static_cast<const uint16_t*>(src);
  parallel_for(r1 - r0, std::max<int64_t>(1, (int64_t(1) << 15) / std::max<int64_t>(1, cols)),
               [&](int64_t i0, int64_t i1) {
                 for (int64_t i = i0; i < i1; ++i) {
                   const uint16_t* in = s + (r0 + i) * ld + c0;
                   uint32_t* out = reinterpret_cast<uint32_t*>(dst + i * cols);
                   for (int64_t j = 0; j < cols; ++j) out[j] = uint32_t(in[j]) << 16;
                 }
               });
}

// A bf16 GEMM where oneDNN has no bf16 matmul: the f32 matmul on the operands widened to f32
// (exact, so the products are the bf16 products; only the f32 summation order is oneDNN's f32
// one). The operands are widened in panels along the largest of m, n and k, so the f32 copies stay
// near panel_bytes (kPanelBytes: cache-sized, read back by the matmul from cache) instead of doubling a whole
// weight: rows of A and C (m), columns of B and C (n), or slices of the reduction (k; C then
// accumulates, beta applying to the first slice and the addend with the last). The operand
// without the panel's dimension is widened once, whole. The plan depends on the shape alone.
constexpr int64_t kPanelBytes = 8 << 20;

void gemm_widened(const GemmArgs& g, int64_t panel_bytes) {
  const int dim = g.m >= g.n && g.m >= g.k ? 0 : g.n >= g.k ? 1 : 2;  // the panel's: m, n or k
  const int64_t len = dim == 0 ? g.m : dim == 1 ? g.n : g.k;
  const int64_t across = dim == 2 ? g.m + g.n : g.k;  // f32 elements widened per unit of the panel
  const int64_t step = std::min(len, std::max<int64_t>(64, panel_bytes / (4 * std::max<int64_t>(1, across)) / 64 * 64));
  thread_local Buf abuf, bbuf;
  const auto a_rows = [&](int64_t r0, int64_t r1, int64_t p0, int64_t p1) {  // op(A)[r0:r1, p0:p1]
    float* d = static_cast<float*>(grow(abuf, size_t((r1 - r0) * (p1 - p0)) * sizeof(float)));
    widen_block(g.a, g.lda, g.trans_a, r0, r1, p0, p1, d);
    return d;
  };
  const auto b_cols = [&](int64_t p0, int64_t p1, int64_t c0, int64_t c1) {  // op(B)[p0:p1, c0:c1]
    float* d = static_cast<float*>(grow(bbuf, size_t((p1 - p0) * (c1 - c0)) * sizeof(float)));
    widen_block(g.b, g.ldb, g.trans_b, p0, p1, c0, c1, d);
    return d;
  };
  const float* whole = dim == 0 ? b_cols(0, g.k, 0, g.n) : dim == 1 ? a_rows(0, g.m, 0, g.k) : nullptr;
  for (int64_t x0 = 0; x0 < len; x0 += step) {
    const int64_t x1 = std::min(len, x0 + step);
    GemmArgs f = g;
    f.in_dtype = DType::F32;
    int64_t i0 = 0, i1 = g.m, j0 = 0, j1 = g.n, p0 = 0, p1 = g.k;
    if (dim == 0) i0 = x0, i1 = x1;
    if (dim == 1) j0 = x0, j1 = x1;
    if (dim == 2) p0 = x0, p1 = x1;
    f.m = i1 - i0, f.n = j1 - j0, f.k = p1 - p0;
    f.a = dim == 1 ? whole : a_rows(i0, i1, p0, p1);
    f.b = dim == 0 ? whole : b_cols(p0, p1, j0, j1);
    f.lda = g.trans_a ? f.m : f.k;
    f.ldb = g.trans_b ? f.k : f.n;
    f.c = g.c + i0 * g.ldc + j0;
    f.add = g.add ? g.add + i0 * g.ldadd + j0 : nullptr;
    if (dim == 2) {  // C accumulates over the slices of k
      if (x0 > 0) f.beta = 1.f;
      if (x1 < len) f.add = nullptr;
    }
    gemm_onednn(f);
  }
}

void gemm_cpu(const ExecContext& ctx, const GemmArgs& g) {
  opcheck::host_context(ctx, "gemm.cpu");
  if (g.in_dtype == DType::BF16 && !onednn_has_bf16_matmul()) return gemm_widened(g, kPanelBytes);
  gemm_onednn(g);
}

const GemmKernel kGemmCpu{"cpu", gemm_cpu};

// A few rows (decoding): the GEMV path streams W once as stored (gemv.h); more go to oneDNN.
void linear_forward_cpu(const ExecContext& ctx, const Tensor& x, const Tensor& w, const Tensor* r, Tensor& y,
                        DType compute) {
  opcheck::host_context(ctx, "linear.cpu");
  if (x.defined() && w.defined() && w.ndim() == 2 && w.dim(1) > 0 && x.numel() > 0 &&
      x.numel() / w.dim(1) <= kGemvMaxRows)
    return linear_forward_gemv(x, w, r, y, compute);
  linear_forward_with(ctx, kGemmCpu, x, w, y, compute, r);
}
void linear_backward_cpu(const ExecContext& ctx, const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx,
                         Tensor* dw, DType compute) {
  opcheck::host_context(ctx, "linear.cpu");
  linear_backward_with(ctx, kGemmCpu, x, w, dy, dx, dw, compute);
}

const LinearKernel kLinearCpu{"cpu", linear_forward_cpu, linear_backward_cpu};

}  // namespace

namespace detail {
void gemm_cpu_bf16_widened(const GemmArgs& g, int64_t panel_bytes) { gemm_widened(g, panel_bytes); }
}  // namespace detail

TITAN_REGISTER_KERNEL(GemmKernel, "cpu", DeviceType::CPU, kGemmCpu);
TITAN_REGISTER_KERNEL(LinearKernel, "cpu", DeviceType::CPU, kLinearCpu);

}  // namespace titan
