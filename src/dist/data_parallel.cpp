#include "dist/data_parallel.h"

#include <algorithm>
#include <chrono>
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

DataParallel::DataParallel(ParamStore& ps, Comm& comm) : ps_(ps), comm_(comm) {
  for (auto& p : ps.all()) {
    TITAN_CHECK(p.value.dtype() == DType::F32 && p.grad.dtype() == DType::F32, "data parallelism: parameter ",
                p.name, " is not f32");
    total_ += p.value.numel();
  }
  const int64_t n = comm.size();
  chunk_ = (total_ + n - 1) / n;
  bucket_ = std::max<int64_t>(1, std::min(chunk_, kBucket));
  stage_ = Tensor::zeros({bucket_ * n}, DType::F32);
  g_ = Tensor::zeros({chunk_}, DType::F32);
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
  std::vector<float*> grads;
  for (auto& p : ps_.all()) grads.push_back(p.grad.data<float>());
  reduce_into_chunk(grads);
  gather_from_chunk(g_.data<float>(), grads);
}

}  // namespace titan::dist
