// Parsing tokenizer.json quickly: the two big tables (model.vocab, about 150k entries, and
// model.merges, about 150k pairs) are collected straight from the SAX event stream into vectors;
// only the small rest of the file becomes a JSON DOM. This halves the time to load a tokenizer.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace titan::data {

struct BpeTablesText {
  bool has_vocab = false, has_merges = false;
  std::vector<std::pair<std::string, uint64_t>> vocab;         // byte-level token string, id
  std::vector<std::pair<std::string, std::string>> merges;     // byte-level strings, in rank order
};

// Returns the document without model.vocab and model.merges, which go to *tables. Errors (syntax,
// or a table of the wrong shape) are titan::Error naming `origin`.
nlohmann::json parse_tokenizer_json(std::string_view bytes, const std::string& origin, BpeTablesText* tables);

}  // namespace titan::data
