// Replicated data parallelism (data_parallel_replicate_degree): every rank holds every parameter,
// gradient and optimizer state; gradients are summed across ranks after backward. (Sharded data
// parallelism is distributed/fsdp.h.)
//
// The parameters are viewed as one flattened f32 vector of P elements (ParamStore order),
// padded to P' = N x chunk with chunk = ceil(P / N) for N ranks; rank r owns [r x chunk,
// (r+1) x chunk). Collectives move the flat vector in buckets: for bucket offset o, a staging
// buffer holds [q x chunk + o, q x chunk + o + B) for every rank q (N x B floats, B = kBucket
// at most), so no full-size flat copy of the parameters or gradients is ever made.
//
// The same object serves a sharded optimizer over replicated values (ZeRO-2, used for LoRA
// adapters under FSDP, train/sharded_state.cpp): reduce_scatter_grads() leaves rank r the summed
// gradient of its chunk, the optimizer steps that chunk, all_gather_values() sends every rank's
// updated chunk to all.
//
// Either way every rank ends the step with bitwise identical parameters (each reduction's result
// is the same on every rank, see comm.h), which equal the one-process update up to f32
// reduction-order rounding of the gradient sum (and of the norm).
//
// A ParamStore on the GPU (a model on cuda:0) takes the device path instead: its gradients are
// summed in place by NCCL, one all_reduce per run of adjacent gradients (the parameters of a fused
// buffer are one), all issued as ONE NCCL group (comm::NcclStepGroup) on the communicator's stream
// after the compute stream's work so far, which then waits for the group's end: no host staging,
// no host wait. The communicator must be the NCCL backend (make_nccl_comm, backends.h). The sums
// are NCCL's (ring/tree order, the same result on every rank), not Comm's rank order. The
// ZeRO-2 halves (reduce_scatter_grads, all_gather_*, read_value_chunk) are host-only and refuse a
// GPU store.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "comm/comm.h"
#include "comm/nccl_comm.h"
#include "core/tensor.h"
#include "model/params.h"

namespace titan::distributed {

using comm::Comm;
using comm::ReduceOp;

class DataParallel {
 public:
  // compute_stream: the stream a GPU model's kernels run on (its exec().stream; null, the default
  // stream); unused for a host store.
  DataParallel(ParamStore& ps, Comm& comm, void* compute_stream = nullptr);
  bool on_device() const { return nccl_ != nullptr; }

  int64_t total() const { return total_; }   // P
  int64_t chunk() const { return chunk_; }   // elements reduced per rank

  // Sum the gradients over ranks, in place in every Param::grad: reduce_scatter_grads() then
  // all_gather_grads(); for a GPU store one NCCL group of all_reduces (above).
  void all_reduce_grads();
  // grad_chunk() = this rank's chunk [rank x chunk, (rank+1) x chunk) of the summed flat gradient
  // (rank order; elements past P are 0).
  void reduce_scatter_grads();
  // Every Param::grad = the ranks' grad_chunk()s.
  void all_gather_grads();
  // dst[0, chunk) = this rank's chunk of the flat values (0 past P).
  void read_value_chunk(float* dst) const;
  // Every Param::value = the ranks' chunks (`mine`: this rank's, chunk() floats).
  void all_gather_values(const float* mine);
  Tensor& grad_chunk() { return g_; }
  int64_t chunk_begin() const { return int64_t(comm_.rank()) * chunk_; }

  static constexpr int64_t kBucket = int64_t(1) << 20;  // elements per rank per collective call

  // Bytes this object holds: staging (N x bucket) and the reduced gradient chunk (none on the GPU).
  int64_t staging_bytes() const { return int64_t(stage_.nbytes() + g_.nbytes()); }
  // Accumulated time inside collectives; on the GPU only the host's time to issue the group (the
  // collectives themselves run asynchronously on the communication stream).
  double comm_seconds() const { return comm_seconds_; }

 private:
  ParamStore& ps_;
  void gather_into(bool grads, const float* mine);
  void host_only(const char* what) const;
  // The device path's all_reduces (pointer, count), in issue order: runs of adjacent gradients.
  std::vector<std::pair<float*, int64_t>> grad_runs() const;
  Comm& comm_;
  comm::NcclComm* nccl_ = nullptr;  // the device path's communicator (a GPU store)
  void* stream_ = nullptr;          // its compute stream
  int64_t total_ = 0, chunk_ = 0;
  int64_t bucket_ = 0;
  Tensor stage_;           // N x bucket f32
  Tensor g_;               // chunk f32: this rank's summed gradient
  double comm_seconds_ = 0;
};

}  // namespace titan::distributed
