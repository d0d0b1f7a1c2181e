// Left-padded batch bookkeeping, as generate keeps it for a decoder-only model: each row's prompt
// is right-aligned in a [rows, width] grid after pad[r] pad tokens; the attention mask is 0 on the
// pad and 1 elsewhere; position ids count from 0 at a row's first real token (transformers:
// cumsum(mask) - 1, and 1 on the pad). Every generation step appends one column to all rows (a
// finished row gets the pad id, still masked in, as generate does); positions continue.
//
// The stand-in logits source recomputes each row unpadded (row(r)); a batched KV-cache forward
// reads ids / mask / positions directly.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace titan::infer {

struct LeftPaddedBatch {
  int64_t rows = 0, width = 0;
  uint32_t pad_id = 0;
  std::vector<uint32_t> ids;        // [rows, width]
  std::vector<uint8_t> mask;        // [rows, width]
  std::vector<int64_t> positions;   // [rows, width]
  std::vector<int64_t> pad;         // [rows] leading pad columns

  // Errors on an empty prompt (there is no position to predict from).
  static LeftPaddedBatch make(const std::vector<std::vector<uint32_t>>& prompts, uint32_t pad_id);
  // One more column: next[r] for active rows, pad_id for the others.
  void append(const std::vector<uint32_t>& next, const std::vector<bool>& active);
  // Row r without its padding (the prompt followed by every appended token).
  std::vector<uint32_t> row(int64_t r) const;
  uint32_t at(int64_t r, int64_t c) const { return ids[size_t(r * width + c)]; }
};

}  // namespace titan::infer
