#include "dist/data_parallel.h"

#include <chrono>
#include <cmath>
#include <cstring>

#include "core/error.h"

namespace titan::dist {

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Copies between the flat vector and the parameter tensors (ParamStore order), restricted to the
// flat range [lo, hi).
template <class F>
void for_each_span(ParamStore& ps, int64_t lo, int64_t hi, F&& f) {
  int64_t off = 0;
  for (auto& p : ps.all()) {
    const int64_t n = p.value.numel();
    const int64_t a = std::max(off, lo), b = std::min(off + n, hi);
    if (a < b) f(p, a - off, a, b - a);  // (param, offset in param, flat offset, count)
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
  flat_ = Tensor::zeros({chunk_ * n}, DType::F32);
  if (mode == Mode::Shard) {
    g_ = Tensor::zeros({chunk_}, DType::F32);
    p_ = Tensor::zeros({chunk_}, DType::F32);
    m_ = Tensor::zeros({chunk_}, DType::F32);
    v_ = Tensor::zeros({chunk_}, DType::F32);
  }
}

void DataParallel::grads_to_flat() {
  float* f = flat_.data<float>();
  for_each_span(ps_, 0, total_, [&](Param& p, int64_t po, int64_t fo, int64_t cnt) {
    std::memcpy(f + fo, p.grad.data<float>() + po, size_t(cnt) * sizeof(float));
  });
}

void DataParallel::flat_to_grads() {
  const float* f = flat_.data<float>();
  for_each_span(ps_, 0, total_, [&](Param& p, int64_t po, int64_t fo, int64_t cnt) {
    std::memcpy(p.grad.data<float>() + po, f + fo, size_t(cnt) * sizeof(float));
  });
}

void DataParallel::all_reduce_grads() {
  TITAN_ASSERT(mode_ == Mode::Replicate);
  grads_to_flat();
  const double t0 = now_s();
  comm_.all_reduce(flat_.data<float>(), flat_.numel(), ReduceOp::Sum);
  comm_seconds_ += now_s() - t0;
  flat_to_grads();
}

double DataParallel::shard_step(double max_norm, const AdamWKernel& adamw, const AdamWParams& hp) {
  TITAN_ASSERT(mode_ == Mode::Shard);
  grads_to_flat();
  double t0 = now_s();
  comm_.reduce_scatter(flat_.data<float>(), g_.data<float>(), chunk_, ReduceOp::Sum);
  // Sum of squares of my chunk in double, in element order; the ranks' sums in rank order.
  float* g = g_.data<float>();
  double ss = 0;
  for (int64_t i = 0; i < chunk_; ++i) ss += double(g[i]) * double(g[i]);
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
  for_each_span(ps_, begin_, end_, [&](Param& prm, int64_t po, int64_t fo, int64_t cnt) {
    std::memcpy(p + (fo - begin_), prm.value.data<float>() + po, size_t(cnt) * sizeof(float));
  });
  adamw.step(p_, g_, m_, v_, hp);
  t0 = now_s();
  comm_.all_gather(p, flat_.data<float>(), chunk_);
  comm_seconds_ += now_s() - t0;
  const float* f = flat_.data<float>();
  for_each_span(ps_, 0, total_, [&](Param& prm, int64_t po, int64_t fo, int64_t cnt) {
    std::memcpy(prm.value.data<float>() + po, f + fo, size_t(cnt) * sizeof(float));
  });
  return norm;
}

void DataParallel::gather_moments(std::vector<Tensor>* m, std::vector<Tensor>* v) {
  TITAN_ASSERT(mode_ == Mode::Shard);
  m->clear();
  v->clear();
  for (int which = 0; which < 2; ++which) {
    const double t0 = now_s();
    comm_.all_gather((which ? v_ : m_).data<float>(), flat_.data<float>(), chunk_);
    comm_seconds_ += now_s() - t0;
    std::vector<Tensor>& out = which ? *v : *m;
    for (auto& p : ps_.all()) out.push_back(Tensor::empty(p.value.shape(), DType::F32));
    const float* f = flat_.data<float>();
    size_t i = 0;
    for_each_span(ps_, 0, total_, [&](Param&, int64_t po, int64_t fo, int64_t cnt) {
      std::memcpy(out[i++].data<float>() + po, f + fo, size_t(cnt) * sizeof(float));
    });
  }
}

void DataParallel::scatter_moments(const std::vector<Tensor>& m, const std::vector<Tensor>& v) {
  TITAN_ASSERT(mode_ == Mode::Shard && m.size() == ps_.all().size() && v.size() == m.size());
  std::memset(m_.data<float>(), 0, m_.nbytes());
  std::memset(v_.data<float>(), 0, v_.nbytes());
  int64_t off = 0;
  for (size_t i = 0; i < ps_.all().size(); ++i) {
    const int64_t n = ps_.all()[i].value.numel();
    const int64_t a = std::max(off, begin_), b = std::min(off + n, end_);
    if (a < b) {
      std::memcpy(m_.data<float>() + (a - begin_), m[i].data<float>() + (a - off), size_t(b - a) * sizeof(float));
      std::memcpy(v_.data<float>() + (a - begin_), v[i].data<float>() + (a - off), size_t(b - a) * sizeof(float));
    }
    off += n;
  }
}

}  // namespace titan::dist
