// Data-parallel gradient reduction and optimizer step across the ranks of a Comm.
//
// The parameters are viewed as one flattened f32 vector of P elements (ParamStore order),
// padded to P' = N x chunk with chunk = ceil(P / N) for N ranks; rank r owns [r x chunk,
// (r+1) x chunk). Collectives move the flat vector in buckets: for bucket offset o, a staging
// buffer holds [q x chunk + o, q x chunk + o + B) for every rank q (N x B floats, B = kBucket
// at most), so no full-size flat copy of the parameters or gradients is ever made.
//
// Mode::Shard (data_parallel_shard_degree = N; ZeRO-1/2 style): every rank keeps the AdamW
// moments of its own chunk only (2 x chunk floats, 1/N of the full state). A step reduce-scatters
// the gradients (sum, rank order) into this rank's chunk, computes the global L2 norm from the
// per-rank sums of squares (double, added in rank order), clips the chunk as
// torch.nn.utils.clip_grad_norm_ would, runs AdamW on the chunk, and all-gathers the updated
// chunks into every rank's parameters. Parameters and full gradients stay replicated (the model
// computes with full tensors); per-layer parameter sharding (ZeRO-3) is not done.
//
// Mode::Replicate (data_parallel_replicate_degree = N): the same reduce-scatter, then an
// all-gather of the summed chunk back into every Param::grad; the caller clips and steps every
// parameter exactly as one process does.
//
// Either way every rank ends the step with bitwise identical parameters (each reduction's result
// is the same on every rank, see comm.h), which equal the one-process update up to f32
// reduction-order rounding of the gradient sum (and of the norm).
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

  static constexpr int64_t kBucket = int64_t(1) << 20;  // elements per rank per collective call

  // Bytes this object holds: staging (N x bucket) + reduced gradient chunk (+ parameter chunk
  // when sharded), and the moments (sharded only).
  int64_t staging_bytes() const { return stage_.nbytes() + g_.nbytes() + p_.nbytes(); }
  int64_t optimizer_bytes() const { return m_.nbytes() + v_.nbytes(); }
  double comm_seconds() const { return comm_seconds_; }  // accumulated time inside collectives

 private:
  // Reduce-scatter (sum) of the flat vector read from src[i] (per parameter) into g_.
  void reduce_into_chunk(const std::vector<float*>& src);
  // All-gather of a chunk-sized buffer into the flat vector written to dst[i] (per parameter).
  void gather_from_chunk(const float* chunk, const std::vector<float*>& dst);
  std::vector<float*> grad_ptrs() const;
  std::vector<float*> value_ptrs() const;
  ParamStore& ps_;
  Comm& comm_;
  Mode mode_;
  int64_t total_ = 0, chunk_ = 0, begin_ = 0, end_ = 0;
  int64_t bucket_ = 0;
  Tensor stage_;           // N x bucket f32
  Tensor g_;               // chunk f32: this rank's summed gradient
  Tensor p_, m_, v_;       // Shard: chunk f32 each (parameters, AdamW moments)
  double comm_seconds_ = 0;
};

}  // namespace titan::dist
