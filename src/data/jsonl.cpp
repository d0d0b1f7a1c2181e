#include "data/jsonl.h"

#include <sys/stat.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "util/strings.h"

namespace titan::data {

bool parse_jsonl_line(std::string_view line, const std::string& field, std::string* text, std::string* why) {
  nlohmann::json j = nlohmann::json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    // Parse again with exceptions only to get the position and reason of the failure.
    try {
      nlohmann::json again = nlohmann::json::parse(line.begin(), line.end());
      (void)again;
      *why = "malformed JSON";
    } catch (const nlohmann::json::exception& e) {
      std::string msg = e.what();
      // nlohmann prefixes "[json.exception.parse_error.101] parse error at line 1, column N: ".
      size_t p = msg.find("column");
      *why = "malformed JSON (" + (p == std::string::npos ? msg : msg.substr(p)) + ")";
    }
    return false;
  }
  if (!j.is_object()) {
    *why = "the line is not a JSON object";
    return false;
  }
  auto it = j.find(field);
  if (it == j.end()) {
    *why = "no \"" + field + "\" field";
    return false;
  }
  if (!it->is_string()) {
    *why = "the \"" + field + "\" field is not a string";
    return false;
  }
  *text = std::move(it->get_ref<std::string&>());
  return true;
}

void read_jsonl(std::istream& in, const std::string& origin, const JsonlOptions& opt,
                const std::function<void(std::string&& text)>& fn, JsonlStats* stats) {
  JsonlStats local;
  JsonlStats& st = stats ? *stats : local;
  std::string line, text, why;
  while (std::getline(in, line)) {
    ++st.lines;
    st.bytes += line.size() + 1;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    if (!parse_jsonl_line(line, opt.field, &text, &why)) {
      TITAN_CHECK(opt.skip_bad_lines, origin, ":", st.lines, ": ", why, " (",
                  opt.bad_line_hint.empty() ? kDefaultBadLineHint : opt.bad_line_hint, ")");
      ++st.skipped;
      continue;
    }
    ++st.documents;
    fn(std::move(text));
  }
  TITAN_CHECK(!in.bad(), origin, ": read error");
}

void read_jsonl_file(const std::string& path, const JsonlOptions& opt,
                     const std::function<void(std::string&& text)>& fn, JsonlStats* stats) {
  // A folder opens as a stream that reads nothing: say what it is instead of "no documents".
  check_regular_file(path);  // a folder, or a named pipe that would block open() for ever
  std::ifstream in(path, std::ios::binary);
  TITAN_CHECK(in.is_open(), path, ": cannot open for reading");
  read_jsonl(in, path, opt, fn, stats);
}

}  // namespace titan::data
