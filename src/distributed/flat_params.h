// Parameters [first, last) of a ParamStore seen as one flat f32 vector: their row-major elements
// back to back in store order. Data-parallel collectives move ranges of it (distributed/data_parallel.h
// over the whole store, distributed/fsdp.h per unit) without ever building the flat copy.
// The values may also be seen as one flat byte vector, each parameter's value in its own dtype
// (a bf16 LoRA base: bf16 weights next to f32 norms); for f32 values byte 4k starts element k.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "model/params.h"

namespace titan::distributed {

// Calls f(param index, offset in the param, flat offset, count) for each piece of the flat range
// [lo, hi).
template <class F>
void for_each_flat_span(const ParamStore& ps, size_t first, size_t last, int64_t lo, int64_t hi, F&& f) {
  int64_t off = 0;
  for (size_t i = first; i < last && off < hi; ++i) {
    const int64_t n = ps.all()[i].value.numel();
    const int64_t a = std::max(off, lo), b = std::min(off + n, hi);
    if (a < b) f(i, a - off, a, b - a);
    off += n;
  }
}

// dst[0, hi - lo) = flat range [lo, hi) of the params' gradients (grads) or values.
inline void flat_read(const ParamStore& ps, size_t first, size_t last, bool grads, int64_t lo, int64_t hi, float* dst) {
  for_each_flat_span(ps, first, last, lo, hi, [&](size_t i, int64_t po, int64_t fo, int64_t c) {
    const Param& p = ps.all()[i];
    std::memcpy(dst + (fo - lo), (grads ? p.grad : p.value).data<float>() + po, size_t(c) * sizeof(float));
  });
}

// Flat range [lo, hi) of the params' gradients (grads) or values = src[0, hi - lo).
inline void flat_write(const ParamStore& ps, size_t first, size_t last, bool grads, int64_t lo, int64_t hi,
                       const float* src) {
  for_each_flat_span(ps, first, last, lo, hi, [&](size_t i, int64_t po, int64_t fo, int64_t c) {
    const Param& p = ps.all()[i];
    std::memcpy((grads ? p.grad : p.value).data<float>() + po, src + (fo - lo), size_t(c) * sizeof(float));
  });
}

// Calls f(param index, byte offset in the param's value, flat byte offset, bytes) for each piece of
// the flat byte range [lo, hi) of the values.
template <class F>
void for_each_value_byte_span(const ParamStore& ps, size_t first, size_t last, int64_t lo, int64_t hi, F&& f) {
  int64_t off = 0;
  for (size_t i = first; i < last && off < hi; ++i) {
    const int64_t n = int64_t(ps.all()[i].value.nbytes());
    const int64_t a = std::max(off, lo), b = std::min(off + n, hi);
    if (a < b) f(i, a - off, a, b - a);
    off += n;
  }
}

// dst[0, hi - lo) = flat byte range [lo, hi) of the values; and the reverse.
inline void value_bytes_read(const ParamStore& ps, size_t first, size_t last, int64_t lo, int64_t hi, void* dst) {
  for_each_value_byte_span(ps, first, last, lo, hi, [&](size_t i, int64_t po, int64_t fo, int64_t c) {
    std::memcpy(static_cast<char*>(dst) + (fo - lo), static_cast<const char*>(ps.all()[i].value.raw()) + po, size_t(c));
  });
}
inline void value_bytes_write(const ParamStore& ps, size_t first, size_t last, int64_t lo, int64_t hi, const void* src) {
  for_each_value_byte_span(ps, first, last, lo, hi, [&](size_t i, int64_t po, int64_t fo, int64_t c) {
    std::memcpy(static_cast<char*>(ps.all()[i].value.raw()) + po, static_cast<const char*>(src) + (fo - lo), size_t(c));
  });
}

}  // namespace titan::distributed
