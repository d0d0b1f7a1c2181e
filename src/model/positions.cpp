#include "model/positions.h"

#include "ops/attention/segments.h"

namespace titan {

std::vector<int64_t> document_starts(const Tensor* positions, const Tensor& ids) {
  if (!positions) return {};
  TITAN_CHECK(positions->defined() && positions->dtype() == DType::I64 && positions->shape() == ids.shape(),
              "positions must be i64 ", shape_str(ids.shape()), ", got ",
              positions->defined() ? positions->str() : std::string("undefined"));
  const int64_t B = ids.dim(0), S = ids.dim(1);
  const int64_t* p = positions->data<int64_t>();
  std::vector<int64_t> start(size_t(B * S));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s) {
      const int64_t v = p[b * S + s];
      TITAN_CHECK(v == 0 || (s > 0 && v == p[b * S + s - 1] + 1), "positions: sequence ", b, " token ", s,
                  " has position ", v, " (a packed document's positions count 0, 1, ... from its first token)");
      start[size_t(b * S + s)] = s - v;
    }
  return start;
}

SequenceLayout sequence_layout(const Tensor& ids, const Tensor* positions, const ContextParallel& cp) {
  SequenceLayout r;
  if (!cp.on()) {
    r.doc_start = document_starts(positions, ids);
    return r;
  }
  const int64_t B = ids.dim(0), S = ids.dim(1);
  r.global_seq = S * cp.size();
  r.chunks = cp_chunks(r.global_seq, cp.size(), cp.rank(), cp.head_tail);
  if (!positions) return r;
  TITAN_CHECK(positions->defined() && positions->dtype() == DType::I64 && positions->shape() == ids.shape(),
              "positions must be i64 ", shape_str(ids.shape()), ", got ",
              positions->defined() ? positions->str() : std::string("undefined"));
  const int64_t* p = positions->data<int64_t>();
  r.doc_start.resize(size_t(B * S));
  for (int64_t b = 0; b < B; ++b)
    for (const SeqChunk& c : r.chunks)
      for (int64_t i = 0; i < c.len; ++i) {
        const int64_t s = c.local + i, g = c.global + i, v = p[b * S + s];
        TITAN_CHECK(v >= 0 && v <= g && (i == 0 || v == 0 || v == p[b * S + s - 1] + 1), "positions: sequence ", b,
                    " token ", g, " has position ", v, " (a packed document's positions count 0, 1, ... from its ",
                    "first token)");
        r.doc_start[size_t(b * S + s)] = g - v;
      }
  return r;
}

Tensor positions_after_separator(const Tensor& ids, int64_t separator) {
  const int64_t B = ids.dim(0), S = ids.dim(1);
  Tensor pos = Tensor::empty({B, S}, DType::I64);
  const int64_t* t = ids.data<int64_t>();
  int64_t* p = pos.data<int64_t>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s)
      p[b * S + s] = s == 0 || t[b * S + s - 1] == separator ? 0 : p[b * S + s - 1] + 1;
  return pos;
}

void rope_rows(const ExecContext& ctx, const RopeKernel& k, bool backward, const RowView& x, int64_t S,
               const Positions& pos, const RopeCache& cache) {
  auto run = [&](const RowView& v, int64_t seq, int64_t start) {
    backward ? k.backward_rows(ctx, v, seq, start, cache) : k.forward_rows(ctx, v, seq, start, cache);
  };
  if (pos.chunks) {  // context parallelism: each chunk (each document's part of it) at its global positions
    TITAN_CHECK(pos.start == 0, "rope: context parallelism with a cached prefix is not supported");
    for (int64_t b = 0; b < x.n / S; ++b)
      for (const SeqChunk& c : *pos.chunks)
        for (int64_t a = c.local, e; a < c.local + c.len; a = e) {
          const int64_t* ds = pos.doc_start ? pos.doc_start + b * S : nullptr;
          e = a + 1;
          while (e < c.local + c.len && (!ds || ds[e] == ds[a])) ++e;
          const int64_t g = c.global + (a - c.local);
          run(x.rows(b * S + a, e - a), e - a, ds ? g - ds[a] : g);
        }
    return;
  }
  if (!pos.doc_start) return run(x, S, pos.start);
  TITAN_CHECK(pos.start == 0, "rope: packed documents with a cached prefix are not supported");
  // One call per document, at positions 0..n-1 of its own.
  attention::for_each_document(pos.doc_start, x.n / S, S,
                               [&](int64_t b, int64_t a, int64_t e) { run(x.rows(b * S + a, e - a), e - a, 0); });
}

}  // namespace titan
