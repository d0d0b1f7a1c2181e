// Cutting added tokens out of text the way `tokenizers` does (an Aho-Corasick search with
// leftmost-longest semantics): scanning left to right, the first position where some added token
// matches wins, and there the longest token.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace titan::data {

class AddedTokenMatcher {
 public:
  void add(std::string content, uint32_t id);
  bool empty() const { return tokens_.empty(); }

  // Calls emit(segment, id) in text order: id >= 0 for an added token, -1 for the text between.
  // Empty in-between segments are not emitted.
  template <class F>
  void split(std::string_view text, F&& emit) const {
    if (tokens_.empty()) {
      if (!text.empty()) emit(text, int64_t(-1));
      return;
    }
    size_t last = 0, i = 0, n = text.size();
    while (i < n) {
      const auto& cands = by_first_[static_cast<uint8_t>(text[i])];
      bool hit = false;
      for (uint32_t k : cands) {  // longest first
        const std::string& t = tokens_[k].first;
        if (t.size() <= n - i && text.compare(i, t.size(), t) == 0) {
          if (i > last) emit(text.substr(last, i - last), int64_t(-1));
          emit(text.substr(i, t.size()), int64_t(tokens_[k].second));
          i += t.size();
          last = i;
          hit = true;
          break;
        }
      }
      if (!hit) ++i;
    }
    if (last < n) emit(text.substr(last), int64_t(-1));
  }

 private:
  std::vector<std::pair<std::string, uint32_t>> tokens_;
  std::array<std::vector<uint32_t>, 256> by_first_;
};

}  // namespace titan::data
