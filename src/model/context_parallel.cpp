#include "model/context_parallel.h"

#include <cstring>

#include "core/error.h"

namespace titan {

std::vector<SeqChunk> cp_chunks(int64_t S, int64_t n, int64_t r, bool head_tail) {
  const int64_t m = head_tail ? 2 * n : n;
  TITAN_CHECK(n >= 1 && r >= 0 && r < n, "context parallelism: rank ", r, " of ", n);
  TITAN_CHECK(S > 0 && S % m == 0, "context parallelism: a sequence of ", S, " tokens ([training] seq_len) does not ",
              "divide into ", m, " chunks ([parallelism] context_parallel_degree = ", n,
              head_tail ? " with context_parallel_load_balancer = \"headtail\": 2 chunks per rank)"
                        : " with context_parallel_load_balancer = \"none\")");
  const int64_t c = S / m;
  if (!head_tail) return {SeqChunk{0, r * c, c}};
  return {SeqChunk{0, r * c, c}, SeqChunk{c, (m - 1 - r) * c, c}};
}

Tensor cp_take_sequence(const Tensor& global, const ContextParallel& cp) {
  if (!cp.on()) return global;
  TITAN_CHECK(global.defined() && global.ndim() >= 2,
              "context parallelism: a batch must be [B, S, ...], got ",
              global.defined() ? global.str() : std::string("undefined"));
  const int64_t B = global.dim(0), S = global.dim(1), Sl = S / cp.size();
  const std::vector<SeqChunk> chunks = cp_chunks(S, cp.size(), cp.rank(), cp.head_tail);
  Shape s = global.shape();
  s[1] = Sl;
  Tensor local = Tensor::empty(s, global.dtype());
  const size_t row = global.nbytes() / size_t(B * S);  // bytes per token
  const auto* src = static_cast<const char*>(global.raw());
  auto* dst = static_cast<char*>(local.raw());
  for (int64_t b = 0; b < B; ++b)
    for (const SeqChunk& c : chunks)
      std::memcpy(dst + size_t(b * Sl + c.local) * row, src + size_t(b * S + c.global) * row, size_t(c.len) * row);
  return local;
}

}  // namespace titan
