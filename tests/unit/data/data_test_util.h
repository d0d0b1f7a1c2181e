// Shared helpers for the data tests: the bundled Qwen3 tokenizer, loaded once per process.
#pragma once
#include <string>

#include "data/tokenizer.h"

namespace titan::test {

inline const data::Tokenizer& qwen_tokenizer() {
  static const data::Tokenizer tok = data::Tokenizer::load(std::string(TITAN_SOURCE_DIR) + "/assets/qwen3-tokenizer");
  return tok;
}

inline std::string fixture(const std::string& rel) { return std::string(TITAN_FIXTURES) + "/" + rel; }

}  // namespace titan::test
