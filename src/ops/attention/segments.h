// Block-causal attention over packed documents (torchtitan's attn_mask_type = "block_causal").
//
// A row of the batch holds several documents back to back; seg[b * S + s] is the index, within
// its sequence, of the first token of the document that token s belongs to. Query s then sees
// the keys t with seg[s] <= t <= s: its own document's prefix, never a token of another document.
// Documents are contiguous runs: seg[s] == s (a document starts) or seg[s] == seg[s - 1].
// seg == nullptr is plain causal attention.
#pragma once
#include <cstdint>

#include "core/error.h"

namespace titan::attention {

// Checks seg [B * S] as above; errors name `who` and the first bad entry.
inline void check_segments(const int64_t* seg, int64_t B, int64_t S, const char* who) {
  if (!seg) return;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s) {
      const int64_t v = seg[b * S + s];
      TITAN_CHECK(v == s || (s > 0 && v == seg[b * S + s - 1]), who, ": segment start ", v, " of token ", s,
                  " of sequence ", b, " is neither the token itself nor its predecessor's segment start");
    }
}

// Calls f(b, first, end) for every document [first, end) of every sequence, in order.
template <class F>
void for_each_document(const int64_t* seg, int64_t B, int64_t S, F&& f) {
  for (int64_t b = 0; b < B; ++b)
    for (int64_t a = 0; a < S;) {
      int64_t e = a + 1;
      while (e < S && seg[b * S + e] == a) ++e;
      f(b, a, e);
      a = e;
    }
}

}  // namespace titan::attention
