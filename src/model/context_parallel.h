// Context parallelism: each sequence of a batch is cut along its tokens over the ranks of the
// mesh's cp group, so activations (and attention's work) per rank fall by cp.
//
// Load balancing (torchtitan's `context_parallel_load_balancer`): under a causal mask a later token
// attends to more keys, so with `headtail` the sequence is cut into 2 cp chunks of S / (2 cp) and
// rank r holds chunks r and 2 cp - 1 - r (one early, one late: equal attention work per rank);
// with `none` rank r holds the one chunk r of S / cp. A rank's tokens are its chunks side by side,
// in that order, for every row of the batch.
//
// Everything but attention acts token by token, so it runs on the local tokens unchanged. Attention
// all-gathers K and V over cp (torchtitan's all-gather design), and each local chunk attends to the
// keys up to its own end (the suffix form of ops/attention/attention.h), at its global positions
// (RoPE and packed documents follow them); the backward reduce-scatters dK and dV back to the
// ranks that hold those tokens. The loss is summed over the local tokens and normalised by the
// global batch's count (the mesh's loss group spans cp), and FSDP shards over dp_shard x cp, so the
// gradients sum over the cp ranks like over data-parallel ones.
#pragma once
#include <cstdint>
#include <vector>

#include "comm/comm.h"
#include "core/tensor.h"

namespace titan {

// A piece of a sequence a rank holds: local tokens [local, local + len) are global tokens
// [global, global + len).
struct SeqChunk {
  int64_t local = 0, global = 0, len = 0;
};

struct ContextParallel {
  comm::Comm* comm = nullptr;  // the mesh's cp group (null or size 1: none)
  bool head_tail = true;       // [parallelism] context_parallel_load_balancer = "headtail" (else "none")
  int64_t size() const { return comm ? comm->size() : 1; }
  int64_t rank() const { return comm ? comm->rank() : 0; }
  bool on() const { return size() > 1; }
  // Tokens a sequence must divide by: 2 cp (head-tail) or cp.
  int64_t seq_multiple() const { return head_tail ? 2 * size() : size(); }
};

// The chunks of a global sequence of S tokens that cp rank r of n holds, in its local order.
// Errors (one line, naming the keys) unless S divides by the layout's multiple.
std::vector<SeqChunk> cp_chunks(int64_t S, int64_t n, int64_t r, bool head_tail);

// This rank's tokens of global [B, S, ...] (contiguous, any dtype): [B, S / cp, ...].
Tensor cp_take_sequence(const Tensor& global, const ContextParallel& cp);

}  // namespace titan
