// Token id batches as text: one sequence per line, ids separated by spaces, all lines of equal
// length (the input of `titan score`). Blank lines are skipped; any other byte than a digit, a space
// or a tab (a NUL, say) is an error naming the file, the line and the byte.
#pragma once
#include <string>

#include "core/tensor.h"

namespace titan {

// Returns i64 [sequences, positions]; errors name the file, line and reason.
Tensor read_token_lines(const std::string& path);
Tensor parse_token_lines(const std::string& text, const std::string& origin);
// Next-token labels of i64 [B, S] ids: labels[b, t] = ids[b, t + 1], and -100 (ignored) at the
// last position, as transformers shifts labels = input_ids inside its loss.
Tensor next_token_labels(const Tensor& ids);

}  // namespace titan
