#include "distributed/data_parallel.h"

#include <algorithm>
#include <cstring>

#include "core/clock.h"
#include "core/error.h"
#include "distributed/flat_params.h"

namespace titan::distributed {

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

void DataParallel::all_reduce_grads() {
  reduce_scatter_grads();
  all_gather_grads();
}

void DataParallel::reduce_scatter_grads() {
  // Reduce-scatter (sum) of the flat gradient into g_, in buckets: for offset o, the staging
  // holds [q x chunk + o, q x chunk + o + b) of every rank q.
  const int n = comm_.size();
  const size_t np = ps_.all().size();
  float* s = stage_.data<float>();
  for (int64_t o = 0; o < chunk_; o += bucket_) {
    const int64_t b = std::min(bucket_, chunk_ - o);
    std::memset(s, 0, size_t(n) * size_t(b) * sizeof(float));  // padding past P stays 0
    for (int q = 0; q < n; ++q) {
      const int64_t lo = int64_t(q) * chunk_ + o;
      flat_read(ps_, 0, np, true, lo, std::min(lo + b, total_), s + int64_t(q) * b);
    }
    const double t0 = now_seconds();
    comm_.reduce_scatter(s, g_.data<float>() + o, b, ReduceOp::Sum);
    comm_seconds_ += now_seconds() - t0;
  }
}

void DataParallel::all_gather_grads() { gather_into(true, g_.data<float>()); }

void DataParallel::all_gather_values(const float* mine) { gather_into(false, mine); }

void DataParallel::read_value_chunk(float* dst) const {
  const int64_t lo = chunk_begin(), hi = std::min(lo + chunk_, total_);
  std::memset(dst, 0, size_t(chunk_) * sizeof(float));
  if (lo < hi) flat_read(ps_, 0, ps_.all().size(), false, lo, hi, dst);
}

void DataParallel::gather_into(bool grads, const float* mine) {
  const int n = comm_.size();
  const size_t np = ps_.all().size();
  float* s = stage_.data<float>();
  for (int64_t o = 0; o < chunk_; o += bucket_) {
    const int64_t b = std::min(bucket_, chunk_ - o);
    const double t0 = now_seconds();
    comm_.all_gather(mine + o, s, b);
    comm_seconds_ += now_seconds() - t0;
    for (int q = 0; q < n; ++q) {
      const int64_t lo = int64_t(q) * chunk_ + o;
      flat_write(ps_, 0, np, grads, lo, std::min(lo + b, total_), s + int64_t(q) * b);
    }
  }
}

}  // namespace titan::distributed
