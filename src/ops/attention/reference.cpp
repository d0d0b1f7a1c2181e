// Reference causal GQA attention: Hugging Face eager semantics spelled out with plain loops in
// double. For query s of head h (kv head g = h / (Hq / Hkv)) over keys t <= s:
//   z_t = scale * q_s . k_t,  P_t = exp(z_t - m) / sum_u exp(z_u - m)  (m = max_t z_t),
//   out_s = sum_t P_t v_t,    lse_s = m + log sum_t exp(z_t - m).
// Backward (softmax Jacobian): dP_t = dO_s . v_t, D_s = sum_t P_t dP_t, dS_t = P_t (dP_t - D_s),
//   dq_s = scale sum_t dS_t k_t,  dk_t += scale dS_t q_s,  dv_t += P_t dO_s.
// Block-causal (seg given): the sums run over seg[s] <= t <= s instead of 0 <= t <= s.
// One [S] row of scores is held at a time.
#include "ops/attention/reference.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/attention/attention.h"
#include "ops/op_checks.h"

namespace titan::attention {
namespace {

// Element offsets of row (b, s, head) in [B, S, H, D].
inline int64_t at(const Dims& d, int64_t H, int64_t b, int64_t s, int64_t h) { return ((b * d.S + s) * H + h) * d.D; }

double dot(const double* a, const double* b, int64_t n) {
  double r = 0;
  for (int64_t i = 0; i < n; ++i) r += a[i] * b[i];
  return r;
}

// The first key query (b, s) sees.
inline int64_t first_key(const Dims& d, const int64_t* seg, int64_t b, int64_t s) { return seg ? seg[b * d.S + s] : 0; }

// Fills p[t0..s] with the softmax probabilities of query (b, s, h) over keys t0..s; returns the
// log-sum-exp.
double probabilities(const Dims& d, const double* q, const double* k, double scale, int64_t b, int64_t s, int64_t h,
                     int64_t t0, double* p) {
  const int64_t g = h / d.group();
  const double* qs = q + at(d, d.Hq, b, s, h);
  double m = -INFINITY;
  for (int64_t t = t0; t <= s; ++t) {
    p[t] = scale * dot(qs, k + at(d, d.Hkv, b, t, g), d.D);
    m = std::max(m, p[t]);
  }
  double sum = 0;
  for (int64_t t = t0; t <= s; ++t) sum += (p[t] = std::exp(p[t] - m));
  for (int64_t t = t0; t <= s; ++t) p[t] /= sum;
  return m + std::log(sum);
}

}  // namespace

void reference_forward(const Dims& d, const double* q, const double* k, const double* v, double scale, double* out,
                       double* lse, const int64_t* seg) {
  std::vector<double> p(size_t(d.S));
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t h = 0; h < d.Hq; ++h) {
      const int64_t g = h / d.group();
      for (int64_t s = 0; s < d.S; ++s) {
        const int64_t t0 = first_key(d, seg, b, s);
        lse[(b * d.Hq + h) * d.S + s] = probabilities(d, q, k, scale, b, s, h, t0, p.data());
        double* o = out + at(d, d.Hq, b, s, h);
        std::fill(o, o + d.D, 0.0);
        for (int64_t t = t0; t <= s; ++t) {
          const double* vt = v + at(d, d.Hkv, b, t, g);
          for (int64_t i = 0; i < d.D; ++i) o[i] += p[t] * vt[i];
        }
      }
    }
}

void reference_backward(const Dims& d, const double* q, const double* k, const double* v, const double* dout,
                        double scale, double* dq, double* dk, double* dv, const int64_t* seg) {
  std::fill(dk, dk + d.B * d.S * d.Hkv * d.D, 0.0);
  std::fill(dv, dv + d.B * d.S * d.Hkv * d.D, 0.0);
  std::vector<double> p(size_t(d.S)), dp(size_t(d.S));
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t h = 0; h < d.Hq; ++h) {
      const int64_t g = h / d.group();
      for (int64_t s = 0; s < d.S; ++s) {
        const int64_t t0 = first_key(d, seg, b, s);
        probabilities(d, q, k, scale, b, s, h, t0, p.data());
        const double* dos = dout + at(d, d.Hq, b, s, h);
        const double* qs = q + at(d, d.Hq, b, s, h);
        double D = 0;
        for (int64_t t = t0; t <= s; ++t) {
          dp[t] = dot(dos, v + at(d, d.Hkv, b, t, g), d.D);
          D += p[t] * dp[t];
        }
        double* dqs = dq + at(d, d.Hq, b, s, h);
        std::fill(dqs, dqs + d.D, 0.0);
        for (int64_t t = t0; t <= s; ++t) {
          const double ds = p[t] * (dp[t] - D) * scale;
          const double* kt = k + at(d, d.Hkv, b, t, g);
          double* dkt = dk + at(d, d.Hkv, b, t, g);
          double* dvt = dv + at(d, d.Hkv, b, t, g);
          for (int64_t i = 0; i < d.D; ++i) {
            dqs[i] += ds * kt[i];
            dkt[i] += ds * qs[i];
            dvt[i] += p[t] * dos[i];
          }
        }
      }
    }
}

namespace {

// A view's vectors gathered into a contiguous [n, h, d] array of doubles, and scattered back.
std::vector<double> to_double(const RowView& v) {
  const auto p = v.ptr<float>();
  std::vector<double> r(size_t(v.vectors() * v.d));
  for (int64_t i = 0; i < v.vectors(); ++i)
    for (int64_t j = 0; j < v.d; ++j) r[size_t(i * v.d + j)] = p.vec(i)[j];
  return r;
}
void from_double(const std::vector<double>& src, const RowView& v) {
  const auto p = v.ptr<float>();
  for (int64_t i = 0; i < v.vectors(); ++i)
    for (int64_t j = 0; j < v.d; ++j) p.vec(i)[j] = float(src[size_t(i * v.d + j)]);
}
std::vector<double> to_double(const Tensor& t) {
  const float* p = t.data<float>();
  return std::vector<double>(p, p + t.numel());
}
void from_double(const std::vector<double>& src, Tensor& t) {
  float* p = t.data<float>();
  for (size_t i = 0; i < src.size(); ++i) p[i] = float(src[i]);
}

void forward_segments(const ExecContext& ctx, const RowView& q, const RowView& k, const RowView& v, int64_t seq,
                      const int64_t* seg, float scale, Tensor& out, Tensor& lse) {
  opcheck::host_context(ctx, "attention.reference");
  Dims d = check_rows_forward(q, k, v, seq, scale, out, lse, "attention.reference forward");
  check_segments(seg, d.B, d.S, "attention.reference forward");
  auto qd = to_double(q), kd = to_double(k), vd = to_double(v);
  std::vector<double> od(size_t(out.numel())), ld(size_t(lse.numel()));
  reference_forward(d, qd.data(), kd.data(), vd.data(), scale, od.data(), ld.data(), seg);
  from_double(od, out);
  from_double(ld, lse);
}

void forward(const ExecContext& ctx, const RowView& q, const RowView& k, const RowView& v, int64_t seq, float scale,
             Tensor& out, Tensor& lse) {
  opcheck::host_context(ctx, "attention.reference");
  forward_segments(ctx, q, k, v, seq, nullptr, scale, out, lse);
}

void backward_segments(const ExecContext& ctx, const RowView& q, const RowView& k, const RowView& v, const Tensor& out,
                       const Tensor& lse, const Tensor& dout, int64_t seq, const int64_t* seg, float scale,
                       const RowView& dq, const RowView& dk, const RowView& dv) {
  opcheck::host_context(ctx, "attention.reference");
  Dims d = check_rows_backward(q, k, v, out, lse, dout, seq, scale, dq, dk, dv, "attention.reference backward");
  check_segments(seg, d.B, d.S, "attention.reference backward");
  auto qd = to_double(q), kd = to_double(k), vd = to_double(v), dod = to_double(dout);
  std::vector<double> dqd(qd.size()), dkd(kd.size()), dvd(vd.size());
  reference_backward(d, qd.data(), kd.data(), vd.data(), dod.data(), scale, dqd.data(), dkd.data(), dvd.data(), seg);
  from_double(dqd, dq);
  from_double(dkd, dk);
  from_double(dvd, dv);
}

void backward(const ExecContext& ctx, const RowView& q, const RowView& k, const RowView& v, const Tensor& out,
              const Tensor& lse, const Tensor& dout, int64_t seq, float scale, const RowView& dq, const RowView& dk,
              const RowView& dv) {
  opcheck::host_context(ctx, "attention.reference");
  backward_segments(ctx, q, k, v, out, lse, dout, seq, nullptr, scale, dq, dk, dv);
}

// The suffix forms: the queries (and dO) placed at the last Sq of Sk positions of a zero-padded
// sequence, attended as plain causal attention over Sk; padding queries have zero q and dO, so
// they add nothing to dK and dV, and their rows of the outputs are dropped.
std::vector<double> padded(const std::vector<double>& rows, const Dims& d, int64_t sk) {
  const int64_t w = d.Hq * d.D, off = sk - d.S;
  std::vector<double> r(size_t(d.B * sk * w), 0.0);
  for (int64_t b = 0; b < d.B; ++b)
    std::copy_n(rows.data() + b * d.S * w, d.S * w, r.data() + (b * sk + off) * w);
  return r;
}
std::vector<double> suffix_rows(const std::vector<double>& full, const Dims& d, int64_t sk) {
  const int64_t w = d.Hq * d.D, off = sk - d.S;
  std::vector<double> r(size_t(d.B * d.S * w));
  for (int64_t b = 0; b < d.B; ++b)
    std::copy_n(full.data() + (b * sk + off) * w, d.S * w, r.data() + b * d.S * w);
  return r;
}

void forward_suffix(const ExecContext& ctx, const RowView& q, const RowView& k, const RowView& v, int64_t sq,
                    int64_t sk, float scale, Tensor& out, Tensor& lse) {
  opcheck::host_context(ctx, "attention.reference");
  const Dims d = check_rows_suffix_forward(q, k, v, sq, sk, scale, out, lse, "attention.reference forward");
  Dims full = d;
  full.S = sk;
  auto qd = padded(to_double(q), d, sk), kd = to_double(k), vd = to_double(v);
  std::vector<double> od(qd.size()), ld(size_t(d.B * d.Hq * sk));
  reference_forward(full, qd.data(), kd.data(), vd.data(), scale, od.data(), ld.data());
  from_double(suffix_rows(od, d, sk), out);
  float* L = lse.data<float>();
  for (int64_t bh = 0; bh < d.B * d.Hq; ++bh)
    for (int64_t s = 0; s < sq; ++s) L[bh * sq + s] = float(ld[size_t(bh * sk + sk - sq + s)]);
}

void backward_suffix(const ExecContext& ctx, const RowView& q, const RowView& k, const RowView& v, const Tensor& out,
                     const Tensor& lse, const Tensor& dout, int64_t sq, int64_t sk, float scale, const RowView& dq,
                     const RowView& dk, const RowView& dv) {
  opcheck::host_context(ctx, "attention.reference");
  const Dims d =
      check_rows_suffix_backward(q, k, v, out, lse, dout, sq, sk, scale, dq, dk, dv, "attention.reference backward");
  Dims full = d;
  full.S = sk;
  auto qd = padded(to_double(q), d, sk), kd = to_double(k), vd = to_double(v), dod = padded(to_double(dout), d, sk);
  std::vector<double> dqd(qd.size()), dkd(kd.size()), dvd(vd.size());
  reference_backward(full, qd.data(), kd.data(), vd.data(), dod.data(), scale, dqd.data(), dkd.data(), dvd.data());
  from_double(suffix_rows(dqd, d, sk), dq);
  from_double(dkd, dk);
  from_double(dvd, dv);
}

const AttentionKernel kReference{"reference", forward,        backward,       forward_segments,
                                 backward_segments, forward_suffix, backward_suffix};
TITAN_REGISTER_KERNEL(AttentionKernel, "reference", DeviceType::CPU, kReference);

}  // namespace
}  // namespace titan::attention
