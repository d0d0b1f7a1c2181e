// Data-parallel gradient reduction and optimizer step across the ranks of a Comm.
//
// The parameters are viewed as one flattened f32 vector of P elements (ParamStore order),
// padded to P' = N x chunk with chunk = ceil(P / N) for N ranks; rank r owns [r x chunk,
// (r+1) x chunk).
//
// Mode::Shard (data_parallel_shard_degree = N; ZeRO-1/2 style): every rank keeps the AdamW
// moments of its own chunk only (2 x chunk floats, 1/N of the full state). A step copies the
// local gradients into the flat staging buffer, reduce-scatters them (sum, rank order), computes
// the global L2 norm from the per-rank sums of squares (double, added in rank order), clips the
// chunk as torch.nn.utils.clip_grad_norm_ would, runs AdamW on the chunk, and all-gathers the
// updated chunks back into every rank's parameters. Parameters and gradients stay replicated
// (the model computes with full tensors); per-layer parameter sharding (ZeRO-3) is not done.
//
// Mode::Replicate (data_parallel_replicate_degree = N): the flat gradient is all-reduced (sum)
// and copied back; the caller then clips and steps every parameter exactly as one process does.
//
// Either way every rank ends the step with bitwise identical parameters (each reduction's result
// is the same on every rank, see comm.h), which equal the one-process update up to f32
// reduction-order rounding of the gradient sum.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "dist/comm.h"
#include "model/params.h"
#include "ops/adamw/adamw.h"

namespace titan::dist {

class DataParallel {
 public:
  enum class Mode { Replicate, Shard };
  DataParallel(ParamStore& ps, Comm& comm, Mode mode);

  Mode mode() const { return mode_; }
  int64_t total() const { return total_; }   // P
  int64_t chunk() const { return chunk_; }   // elements owned per rank
  int64_t begin() const { return begin_; }   // this rank's first flat element
  int64_t end() const { return end_; }       // one past its last real element (<= P)

  // Replicate: sum the gradients over ranks, in place in every Param::grad.
  void all_reduce_grads();

  // Shard: reduce-scatter + global norm + clip (when max_norm > 0) + AdamW on this rank's chunk
  // + all-gather of the parameters. Returns the global gradient norm before clipping; a
  // non-finite norm leaves parameters and moments untouched (every rank sees the same norm).
  double shard_step(double max_norm, const AdamWKernel& adamw, const AdamWParams& hp);

  // Shard: the moments of this rank's chunk (f32, chunk elements each).
  Tensor& exp_avg() { return m_; }
  Tensor& exp_avg_sq() { return v_; }
  // Full moments, one tensor per parameter (shapes of the params), gathered from all ranks;
  // every rank must call it (a collective).
  void gather_moments(std::vector<Tensor>* m, std::vector<Tensor>* v);
  // Keep this rank's chunk of full per-parameter moments (any rank count wrote them).
  void scatter_moments(const std::vector<Tensor>& m, const std::vector<Tensor>& v);

  // Bytes this object holds: flat staging buffer, moments (shard) or none (replicate).
  int64_t staging_bytes() const { return flat_.nbytes(); }
  int64_t optimizer_bytes() const { return m_.nbytes() + v_.nbytes(); }
  double comm_seconds() const { return comm_seconds_; }  // accumulated time inside collectives

 private:
  void grads_to_flat();
  void flat_to_grads();
  ParamStore& ps_;
  Comm& comm_;
  Mode mode_;
  int64_t total_ = 0, chunk_ = 0, begin_ = 0, end_ = 0;
  Tensor flat_;            // P' f32: gradients in, parameters out
  Tensor g_, p_, m_, v_;   // Shard: chunk f32 each
  double comm_seconds_ = 0;
};

}  // namespace titan::dist
