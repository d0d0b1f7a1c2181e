// JSON-lines documents (the c4 format: one JSON object per line with a "text" string field).
// A malformed line or a line without the field is an error naming the file and line, unless
// skip_bad_lines is set, in which case it is skipped and counted. Blank lines are ignored.
#pragma once
#include <cstdint>
#include <functional>
#include <istream>
#include <string>
#include <string_view>

namespace titan::data {

// What the error on a bad line suggests, unless the caller knows better (titan tokenize has
// --skip-bad-lines; a training job has no such option, so the remedy is the line or tokenize).
inline constexpr const char* kDefaultBadLineHint =
    "fix or remove the line, or skip bad lines with `titan tokenize --skip-bad-lines` and train on its .bin";

struct JsonlOptions {
  std::string field = "text";
  bool skip_bad_lines = false;
  std::string bad_line_hint;  // "": kDefaultBadLineHint
};

struct JsonlStats {
  uint64_t lines = 0;       // lines read, blank ones included
  uint64_t documents = 0;   // texts handed out
  uint64_t skipped = 0;     // bad lines skipped (skip_bad_lines)
  uint64_t bytes = 0;       // bytes read
};

// Extracts `field` from one JSON line into *text. On failure returns false with the reason.
bool parse_jsonl_line(std::string_view line, const std::string& field, std::string* text, std::string* why);

// Reads documents from `in` (named `origin` in errors), calling fn(text) for each. `stats` is
// updated as lines are read, so a caller can show progress from it.
void read_jsonl(std::istream& in, const std::string& origin, const JsonlOptions& opt,
                const std::function<void(std::string&& text)>& fn, JsonlStats* stats);
void read_jsonl_file(const std::string& path, const JsonlOptions& opt,
                     const std::function<void(std::string&& text)>& fn, JsonlStats* stats);

}  // namespace titan::data
