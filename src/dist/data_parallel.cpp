#include "dist/data_parallel.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "core/error.h"

namespace titan::dist {

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Calls f(param index, offset in the param, flat offset, count) for each piece of the flat range
// [lo, hi) (ParamStore order).
template <class F>
void for_each_span(const ParamStore& ps, int64_t lo, int64_t hi, F&& f) {
  int64_t off = 0;
  for (size_t i = 0; i < ps.all().size() && off < hi; ++i) {
    const int64_t n = ps.all()[i].value.numel();
    const int64_t a = std::max(off, lo), b = std::min(off + n, hi);
    if (a < b) f(i, a - off, a, b - a);
    off += n;
  }
}

}  // namespace

DataParallel::DataParallel(ParamStore& ps, Comm& comm, Mode mode) : ps_(ps), comm_(comm), mode_(mode) {
  for (auto& p : ps.all()) {
    TITAN_CHECK(p.value.dtype() == DType::F32 && p.grad.dtype() == DType::F32, "data parallelism: parameter ",
                p.name, " is not f32");
    total_ += p.value.numel();
  }
  const int64_t n = comm.size();
  chunk_ = (total_ + n - 1) / n;
  begin_ = std::min(total_, int64_t(comm.rank()) * chunk_);
  end_ = std::min(total_, begin_ + chunk_);
  bucket_ = std::max<int64_t>(1, std::min(chunk_, kBucket));
  stage_ = Tensor::zeros({bucket_ * n}, DType::F32);
  g_ = Tensor::zeros({chunk_}, DType::F32);
  if (mode == Mode::Shard) {
    p_ = Tensor::zeros({chunk_}, DType::F32);
    m_ = Tensor::zeros({chunk_}, DType::F32);
    v_ = Tensor::zeros({chunk_}, DType::F32);
  }
}

std::vector<float*> DataParallel::grad_ptrs() const {
  std::vector<float*> out;
  for (auto& p : ps_.all()) out.push_back(p.grad.data<float>());
  return out;
}
std::vector<float*> DataParallel::value_ptrs() const {
  std::vector<float*> out;
  for (auto& p : ps_.all()) out.push_back(p.value.data<float>());
  return out;
}

void DataParallel::reduce_into_chunk(const std::vector<float*>& src) {
  const int n = comm_.size();
  float* s = stage_.data<float>();
  for (int64_t o = 0; o < chunk_; o += bucket_) {
    const int64_t b = std::min(bucket_, chunk_ - o);
    std::memset(s, 0, size_t(n) * size_t(b) * sizeof(float));  // padding past P stays 0
    for (int q = 0; q < n; ++q) {
      const int64_t lo = int64_t(q) * chunk_ + o;
      for_each_span(ps_, lo, std::min(lo + b, total_), [&](size_t i, int64_t po, int64_t fo, int64_t cnt) {
        std::memcpy(s + int64_t(q) * b + (fo - lo), src[i] + po, size_t(cnt) * sizeof(float));
      });
    }
    const double t0 = now_s();
    comm_.reduce_scatter(s, g_.data<float>() + o, b, ReduceOp::Sum);
    comm_seconds_ += now_s() - t0;
  }
}

void DataParallel::gather_from_chunk(const float* chunk, const std::vector<float*>& dst) {
  const int n = comm_.size();
  float* s = stage_.data<float>();
  for (int64_t o = 0; o < chunk_; o += bucket_) {
    const int64_t b = std::min(bucket_, chunk_ - o);
    const double t0 = now_s();
    comm_.all_gather(chunk + o, s, b);
    comm_seconds_ += now_s() - t0;
    for (int q = 0; q < n; ++q) {
      const int64_t lo = int64_t(q) * chunk_ + o;
      for_each_span(ps_, lo, std::min(lo + b, total_), [&](size_t i, int64_t po, int64_t fo, int64_t cnt) {
        std::memcpy(dst[i] + po, s + int64_t(q) * b + (fo - lo), size_t(cnt) * sizeof(float));
      });
    }
  }
}

void DataParallel::all_reduce_grads() {
  TITAN_ASSERT(mode_ == Mode::Replicate);
  const auto grads = grad_ptrs();
  reduce_into_chunk(grads);
  gather_from_chunk(g_.data<float>(), grads);
}

double DataParallel::shard_step(double max_norm, const AdamWKernel& adamw, const AdamWParams& hp) {
  TITAN_ASSERT(mode_ == Mode::Shard);
  reduce_into_chunk(grad_ptrs());
  // Sum of squares of my chunk in double, in element order; the ranks' sums in rank order.
  float* g = g_.data<float>();
  double ss = 0;
  for (int64_t i = 0; i < chunk_; ++i) ss += double(g[i]) * double(g[i]);
  const double t0 = now_s();
  const double norm = std::sqrt(comm_.all_reduce_sum(ss));
  comm_seconds_ += now_s() - t0;
  if (!std::isfinite(norm)) return norm;
  if (max_norm > 0) {
    const double coef = max_norm / (norm + 1e-6);
    if (coef < 1.0) {
      const float c = float(coef);
      for (int64_t i = 0; i < chunk_; ++i) g[i] *= c;
    }
  }
  // My chunk of the (replicated, identical) parameters; padding stays 0 (0 grad, 0 moments).
  float* p = p_.data<float>();
  for_each_span(ps_, begin_, end_, [&](size_t i, int64_t po, int64_t fo, int64_t cnt) {
    std::memcpy(p + (fo - begin_), ps_.all()[i].value.data<float>() + po, size_t(cnt) * sizeof(float));
  });
  adamw.step(p_, g_, m_, v_, hp);
  gather_from_chunk(p, value_ptrs());
  return norm;
}

void DataParallel::gather_moments(std::vector<Tensor>* m, std::vector<Tensor>* v) {
  TITAN_ASSERT(mode_ == Mode::Shard);
  for (int which = 0; which < 2; ++which) {
    std::vector<Tensor>& out = which ? *v : *m;
    out.clear();
    std::vector<float*> dst;
    for (auto& p : ps_.all()) {
      out.push_back(Tensor::empty(p.value.shape(), DType::F32));
      dst.push_back(out.back().data<float>());
    }
    gather_from_chunk((which ? v_ : m_).data<float>(), dst);
  }
}

void DataParallel::scatter_moments(const std::vector<Tensor>& m, const std::vector<Tensor>& v) {
  TITAN_ASSERT(mode_ == Mode::Shard && m.size() == ps_.all().size() && v.size() == m.size());
  std::memset(m_.data<float>(), 0, m_.nbytes());
  std::memset(v_.data<float>(), 0, v_.nbytes());
  for_each_span(ps_, begin_, end_, [&](size_t i, int64_t po, int64_t fo, int64_t cnt) {
    std::memcpy(m_.data<float>() + (fo - begin_), m[i].data<float>() + po, size_t(cnt) * sizeof(float));
    std::memcpy(v_.data<float>() + (fo - begin_), v[i].data<float>() + po, size_t(cnt) * sizeof(float));
  });
}

}  // namespace titan::dist
