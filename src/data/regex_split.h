// The Split pre-tokenizer of tokenizer.json with behavior "Isolated": every regex match becomes a
// piece, and so does every stretch of text between matches. Patterns are written for Oniguruma
// (what `tokenizers` uses) and run here on PCRE2 with JIT, UTF and UCP. The two engines agree on
// \p{..} classes, alternation order, greedy repeats, lookahead and (?i:) case folding; they differ
// on \s: Oniguruma's \s is the White_Space property, PCRE2's also takes U+180E. The pattern is
// therefore compiled with \s and \S rewritten to \p{White_Space} and \P{White_Space}.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace titan::data {

class RegexSplitter {
 public:
  // `origin` names the tokenizer file in errors (a pattern PCRE2 rejects).
  RegexSplitter(const std::string& pattern, const std::string& origin);
  ~RegexSplitter();
  RegexSplitter(const RegexSplitter&) = delete;
  RegexSplitter& operator=(const RegexSplitter&) = delete;

  // Calls emit(piece) for each piece of valid UTF-8 `text`, in order; the pieces concatenate to
  // `text`. Empty matches produce no piece.
  template <class F>
  void split(std::string_view text, F&& emit) const {
    size_t pos = 0, last = 0;
    size_t s, e;
    while (pos < text.size() && next_match(text, pos, &s, &e)) {
      if (s > last) emit(text.substr(last, s - last));
      if (e > s) {
        emit(text.substr(s, e - s));
        pos = last = e;
      } else {
        pos = e + 1;  // empty match: step past one code point
        while (pos < text.size() && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) ++pos;
      }
    }
    if (last < text.size()) emit(text.substr(last));
  }

  // The pattern after the \s rewrite, as compiled.
  const std::string& compiled_pattern() const { return pattern_; }

 private:
  bool next_match(std::string_view text, size_t from, size_t* s, size_t* e) const;
  std::string pattern_;
  std::string origin_;
  void* code_ = nullptr;  // pcre2_code_8*
};

// \s -> \p{White_Space}, \S -> \P{White_Space}; other escapes are copied unchanged.
std::string rewrite_whitespace_classes(const std::string& pattern);

}  // namespace titan::data
