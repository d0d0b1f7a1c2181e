#include "data/added_tokens.h"

#include <algorithm>

namespace titan::data {

void AddedTokenMatcher::add(std::string content, uint32_t id) {
  if (content.empty()) return;  // an empty token can never be matched
  uint32_t k = uint32_t(tokens_.size());
  uint8_t first = static_cast<uint8_t>(content[0]);
  tokens_.emplace_back(std::move(content), id);
  auto& v = by_first_[first];
  v.push_back(k);
  std::stable_sort(v.begin(), v.end(),
                   [&](uint32_t a, uint32_t b) { return tokens_[a].first.size() > tokens_[b].first.size(); });
}

}  // namespace titan::data
