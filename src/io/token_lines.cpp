#include "io/token_lines.h"

#include <cerrno>
#include <cstdlib>
#include <vector>

#include "util/strings.h"

namespace titan {

Tensor parse_token_lines(const std::string& text, const std::string& origin) {
  std::vector<int64_t> ids;
  int64_t rows = 0, cols = -1, line_no = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    std::string line = trim(std::string_view(text).substr(pos, nl - pos));
    pos = nl + 1;
    ++line_no;
    if (line.empty()) continue;
    int64_t n = 0;
    const char* p = line.c_str();
    while (*p) {
      while (*p == ' ' || *p == '\t') ++p;
      if (!*p) break;
      char* end = nullptr;
      errno = 0;
      long long v = std::strtoll(p, &end, 10);
      TITAN_CHECK(end != p && (*end == 0 || *end == ' ' || *end == '\t') && errno == 0 && v >= 0, origin, ":", line_no,
                  ": expected non-negative integer token ids separated by spaces");
      ids.push_back(v);
      ++n;
      p = end;
    }
    TITAN_CHECK(cols < 0 || n == cols, origin, ":", line_no, ": sequence has ", n, " tokens, expected ", cols,
                " (all sequences must have equal length)");
    cols = n;
    ++rows;
  }
  TITAN_CHECK(rows > 0, origin, ": no token sequences");
  TITAN_CHECK(cols >= 2, origin, ": sequences need at least 2 tokens (one predicted position)");
  Tensor t = Tensor::empty({rows, cols}, DType::I64);
  std::copy(ids.begin(), ids.end(), t.data<int64_t>());
  return t;
}

Tensor next_token_labels(const Tensor& ids) {
  const int64_t B = ids.dim(0), S = ids.dim(1);
  Tensor labels = Tensor::empty({B, S}, DType::I64);
  const int64_t* in = ids.data<int64_t>();
  int64_t* out = labels.data<int64_t>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < S; ++t) out[b * S + t] = t + 1 < S ? in[b * S + t + 1] : -100;
  return labels;
}

Tensor read_token_lines(const std::string& path) { return parse_token_lines(read_file(path), path); }

}  // namespace titan
