#include "distributed/data_parallel.h"

#include <algorithm>
#include <cstring>

#include "core/clock.h"
#include "core/error.h"
#include "distributed/flat_params.h"

namespace titan::distributed {

DataParallel::DataParallel(ParamStore& ps, Comm& comm, void* compute_stream)
    : ps_(ps), comm_(comm), stream_(compute_stream) {
  const Device dev = ps.all().empty() ? cpu() : ps.all().front().value.device();
  for (auto& p : ps.all()) {
    TITAN_CHECK(p.value.dtype() == DType::F32 && p.grad.dtype() == DType::F32, "data parallelism: parameter ",
                p.name, " is not f32");
    TITAN_CHECK(p.value.device() == dev && p.grad.device() == dev, "data parallelism: parameter ", p.name,
                " or its gradient is not on ", dev.str(), " as parameter ", ps.all().front().name, " is");
    total_ += p.value.numel();
  }
  const int64_t n = comm.size();
  chunk_ = (total_ + n - 1) / n;
  if (dev.type == DeviceType::CUDA) {
    // NCCL sums device memory in place: no staging, no reduced chunk.
    nccl_ = dynamic_cast<comm::NcclComm*>(&comm);
    TITAN_CHECK(nccl_ != nullptr, "data parallelism of a model on ", dev.str(),
                ": its gradients are summed by NCCL, but the communicator is '", comm.backend(),
                "' (distributed::make_nccl_comm gives the NCCL one)");
    // The same verdict on every rank (max == min over the ranks), so no rank is left waiting.
    const size_t runs = grad_runs().size();
    auto agree = [&](double v) { return comm.all_reduce_max(v) == -comm.all_reduce_max(-v); };
    const bool same_runs = agree(double(runs)), same_total = agree(double(total_));
    TITAN_CHECK(same_runs && same_total, "data parallelism of a model on ", dev.str(),
                ": the ranks' gradients differ (rank ", comm.rank(), " has ", total_, " elements in ", runs,
                " buffers)");
    return;
  }
  bucket_ = std::max<int64_t>(1, std::min(chunk_, kBucket));
  stage_ = Tensor::zeros({bucket_ * n}, DType::F32);
  g_ = Tensor::zeros({chunk_}, DType::F32);
}

std::vector<std::pair<float*, int64_t>> DataParallel::grad_runs() const {
  // Every rank must issue the same collectives: runs are joined by the model's structure (views of
  // one fused buffer, adjacent), never by where an allocator happened to place two tensors. Taken
  // at each step, so a gradient tensor replaced between steps is still the one reduced.
  std::vector<std::pair<float*, int64_t>> runs;
  const Storage* prev = nullptr;
  for (const Param& p : ps_.all()) {
    const int64_t k = p.grad.numel();
    if (k == 0) continue;
    float* g = static_cast<float*>(p.grad.raw());
    if (prev == p.grad.storage().get() && runs.back().first + runs.back().second == g)
      runs.back().second += k;
    else
      runs.push_back({g, k});
    prev = p.grad.storage().get();
  }
  return runs;
}

void DataParallel::host_only(const char* what) const {
  TITAN_CHECK(!nccl_, "data parallelism: ", what, " is not built for gradients on the GPU (only all_reduce_grads)");
}

void DataParallel::all_reduce_grads() {
  if (nccl_) {
    const double t0 = now_seconds();
    comm::NcclStepGroup group(*nccl_);
    for (const auto& [g, k] : grad_runs()) group.all_reduce(g, k, ReduceOp::Sum);
    group.issue(stream_);
    group.join(stream_);  // the compute stream's next work (clipping, AdamW) sees the sums
    comm_seconds_ += now_seconds() - t0;
    return;
  }
  reduce_scatter_grads();
  all_gather_grads();
}

void DataParallel::reduce_scatter_grads() {
  host_only("reduce_scatter_grads");
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

void DataParallel::all_gather_grads() {
  host_only("all_gather_grads");
  gather_into(true, g_.data<float>());
}

void DataParallel::all_gather_values(const float* mine) {
  host_only("all_gather_values");
  gather_into(false, mine);
}

void DataParallel::read_value_chunk(float* dst) const {
  host_only("read_value_chunk");
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
