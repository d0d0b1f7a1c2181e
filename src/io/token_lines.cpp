#include "io/token_lines.h"

#include <charconv>
#include <cstdio>
#include <string_view>
#include <vector>

#include "util/strings.h"

namespace titan {

// How a byte that has no place in a token-id line is named in the error.
static std::string byte_name(unsigned char c) {
  if (c == 0) return "a NUL byte";
  char buf[32];
  if (c >= 0x21 && c < 0x7f) std::snprintf(buf, sizeof buf, "'%c'", c);
  else std::snprintf(buf, sizeof buf, "byte 0x%02x", c);
  return buf;
}

Tensor parse_token_lines(const std::string& text, const std::string& origin) {
  // Every byte of a line is part of an id or a separator (space, tab; a final '\r'). The line is
  // a string_view, not a C string: a NUL byte is an error, not the end of the line.
  std::vector<int64_t> ids;
  int64_t rows = 0, cols = -1, line_no = 0;
  size_t pos = 0;
  const std::string_view all(text);
  while (pos < all.size()) {
    size_t nl = all.find('\n', pos);
    if (nl == std::string_view::npos) nl = all.size();
    std::string_view line = all.substr(pos, nl - pos);
    pos = nl + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    int64_t n = 0;
    size_t i = 0;
    while (i < line.size()) {
      if (line[i] == ' ' || line[i] == '\t') {
        ++i;
        continue;
      }
      const char* b = line.data() + i;
      const char* e = line.data() + line.size();
      int64_t v = 0;
      auto r = std::from_chars(b, e, v);
      if (r.ec == std::errc::result_out_of_range) fail(origin, ":", line_no, ": token id ", std::string(b, r.ptr), " is too large");
      TITAN_CHECK(r.ec == std::errc() && v >= 0, origin, ":", line_no, ": ", byte_name(static_cast<unsigned char>(*b)),
                  " at column ", i + 1, "; expected non-negative integer token ids separated by spaces");
      i = size_t(r.ptr - line.data());
      TITAN_CHECK(i == line.size() || line[i] == ' ' || line[i] == '\t', origin, ":", line_no, ": ",
                  byte_name(static_cast<unsigned char>(line[i])), " at column ", i + 1,
                  "; expected non-negative integer token ids separated by spaces");
      ids.push_back(v);
      ++n;
    }
    if (n == 0) continue;  // blank line
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
