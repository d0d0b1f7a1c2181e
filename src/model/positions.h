// Token positions of packed documents (block-causal attention): transformers' position_ids of a
// packed row count 0, 1, ... within each document, so a document starts where the position is 0,
// and RoPE and the attention mask follow the documents.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "model/decoder.h"
#include "ops/rope/rope.h"

namespace titan {

// doc_start [B * S] from positions [B, S] i64 (ops/attention/segments.h: the index of each token's
// document start in its sequence): empty when positions is null. Errors unless every position is
// 0 or its predecessor's + 1 (a sequence's first position must be 0).
std::vector<int64_t> document_starts(const Tensor* positions, const Tensor& ids);

// Positions [B, S] i64 of the packed documents of `ids` [B, S]: a new document starts at each
// sequence's first token and after every `separator` token (<|endoftext|>, which ends each
// document of a packed stream), as torchtitan's block_causal mask cuts documents at the eos id.
Tensor positions_after_separator(const Tensor& ids, int64_t separator);

// The token layout of a training or scoring call on ids [B, S]: doc_start (packed documents, from
// positions [B, S]) and, under context parallelism, this rank's chunks of sequences of S x cp
// tokens (ids, labels and positions then hold those chunks: model/context_parallel.h). Errors as
// document_starts, on the chunks' positions (a chunk may start inside a document).
struct SequenceLayout {
  std::vector<int64_t> doc_start;
  std::vector<SeqChunk> chunks;
  int64_t global_seq = 0;
  Positions pos() const {
    return Positions{0, doc_start.empty() ? nullptr : doc_start.data(), chunks.empty() ? nullptr : &chunks,
                     global_seq};
  }
};
SequenceLayout sequence_layout(const Tensor& ids, const Tensor* positions, const ContextParallel& cp);

// RoPE over rows x [B * S, H, D] at the tokens' positions: start + s, or within each document
// (under context parallelism, at the global positions of the rank's chunks).
void rope_rows(const ExecContext& ctx, const RopeKernel& k, bool backward, const RowView& x, int64_t S,
               const Positions& pos, const RopeCache& cache);

}  // namespace titan
