// Pieces the parallel-layout tests share (tensor, context, expert and pipeline parallelism against
// one process): the batch they feed every layout, and a tensor-parallel rank's parameter gathered
// whole for the comparison.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "comm/comm.h"
#include "core/tensor.h"
#include "model/config.h"
#include "model/decoder.h"
#include "model/tensor_parallel.h"

namespace titan::test {

struct Batch {
  Tensor ids, labels, positions;
};

// B rows of S tokens: ids and labels from fixed hashes (every fifth label ignored, -100), and the
// positions: 0..S-1 in each row, restarting at every column in doc_starts (packed documents).
inline Batch make_batch(const ModelConfig& c, int64_t B, int64_t S, const std::vector<int64_t>& doc_starts = {}) {
  Batch b{Tensor::empty({B, S}, DType::I64), Tensor::empty({B, S}, DType::I64), Tensor::empty({B, S}, DType::I64)};
  for (int64_t i = 0; i < B * S; ++i) {
    b.ids.data<int64_t>()[i] = (i * 7919 + 13) % c.vocab_size;
    b.labels.data<int64_t>()[i] = i % 5 == 3 ? -100 : (i * 104729 + 5) % c.vocab_size;
    const int64_t col = i % S;
    int64_t start = 0;
    for (int64_t d : doc_starts)
      if (d <= col) start = std::max(start, d);
    b.positions.data<int64_t>()[i] = col - start;
  }
  return b;
}

// Parameter i of a tensor-parallel rank's model, value and gradient, gathered over tp into the
// whole tensors (as they are when the parameter is not split).
inline std::pair<Tensor, Tensor> gathered_param(comm::Comm& tp, const DecoderModel& m, size_t i) {
  const Param& p = m.params().all()[i];
  const ParamSpec& s = m.param_specs()[i];
  if (s.placement.tp_dim < 0) return {p.value, p.grad};
  Tensor v = Tensor::empty(Shape(s.shape), DType::F32), g = Tensor::empty(Shape(s.shape), DType::F32);
  tp_gather_shards(tp, p.value, s.placement.tp_dim, v, s.placement.tp_segments);
  tp_gather_shards(tp, p.grad, s.placement.tp_dim, g, s.placement.tp_segments);
  return {v, g};
}

}  // namespace titan::test
