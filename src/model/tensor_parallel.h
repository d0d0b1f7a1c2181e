// Tensor parallelism inside the decoder, as Megatron lays it out (model/param_spec.h Placement):
//
//   column-parallel  q/k/v (whole KV groups per rank: rank r holds KV heads [r nkv/tp, (r+1) nkv/tp)
//                    and the query heads that read them), gate/up, and the vocabulary of the
//                    embedding and lm_head: a rank holds rows [r n/tp, (r+1) n/tp) of the weight;
//                    Qwen3.5's Gated DeltaNet by whole linear key heads and the value heads that
//                    read them (in_proj_qkv and conv1d: that block of each of the q, k, v parts,
//                    Placement::tp_segments; in_proj_z/b/a, A_log, dt_bias by value head), its
//                    gated attention by whole KV groups (q_proj's per-head query and gate rows);
//   row-parallel     o_proj, down_proj, out_proj: a rank holds columns [r n/tp, (r+1) n/tp) and its GEMM
//                    gives a partial sum, all-reduced (sequence parallel: reduce-scattered) over
//                    the tp group before the residual add;
//   replicated       the norms (q/k norms and the Gated DeltaNet's gated norm act per head on
//                    local heads, so their gradient is a partial sum, reduced over tp), the router.
//
// The model is built from these local shapes (DecoderModel with a TensorParallel): its parameters
// keep their HF names with the local shape of their spec, a checkpoint piece or an export places
// them in the full tensor by ParamSpec::placement. The fused cross-entropy runs on the vocabulary
// shard: each row's max and sum of exponentials and its target logit are reduced across tp, so no
// rank ever holds a [tokens, vocab] tensor.
//
// Sequence parallelism (sequence_parallel): between the tensor-parallel regions the residual
// stream, the norms and the residual adds are split by tokens: rank r holds token rows
// [r T/tp, (r+1) T/tp) of the batch's T = B*S rows; an all-gather of the normed rows enters each
// column-parallel block and a reduce-scatter leaves each row-parallel one, so the activations a
// rank keeps between blocks fall by tp. T must divide by tp.
#pragma once
#include <cstdint>
#include <span>

#include "comm/comm.h"
#include "core/tensor.h"

namespace titan {

struct TensorParallel {
  comm::Comm* comm = nullptr;  // the mesh's tp group (null or size 1: none)
  bool sequence_parallel = false;
  int64_t size() const { return comm ? comm->size() : 1; }
  int64_t rank() const { return comm ? comm->rank() : 0; }
  bool on() const { return size() > 1; }
  bool sp() const { return on() && sequence_parallel; }
};

// local (contiguous) = block `rank` of `global` cut into n equal parts along dim (any dtype).
// segments (ParamSpec::Placement::tp_segments): the whole tensor's extents along dim of consecutive
// parts that are each cut into n blocks (a fused projection: Gated DeltaNet's in_proj_qkv holds its
// q, k and v rows, and a rank takes its block of each); empty: one part, the whole dim.
void tp_take_shard(const Tensor& global, int dim, int64_t rank, int64_t n, Tensor& local,
                   std::span<const int64_t> segments = {});
// Collective over tp: global (contiguous, every rank) = the ranks' local blocks joined along dim
// (of each segment, as tp_take_shard cuts them).
void tp_gather_shards(comm::Comm& tp, const Tensor& local, int dim, Tensor& global,
                      std::span<const int64_t> segments = {});

}  // namespace titan
