// Strict JSON for file formats we read (safetensors headers, config.json, index files):
// nlohmann-json silently keeps the last of duplicate keys, so duplicates are detected here during
// parsing and refused. Errors are one line naming the origin (file) and the reason.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace titan {

// Parses `text`; a syntax error or a duplicate key in any object is a titan::Error naming origin.
nlohmann::json parse_json_strict(std::string_view text, const std::string& origin);

// `s` with non-printable bytes escaped as \xNN and cut with "..." after max_len bytes.
std::string printable(std::string_view s, size_t max_len = 80);
// `s` quoted for an error message: non-printable bytes escaped (so the message stays one line),
// long strings cut with "..." after max_len bytes.
std::string quote(std::string_view s, size_t max_len = 80);

// The JSON type of j in words ("string", "number", "object"...), for type errors.
const char* json_kind(const nlohmann::json& j);

}  // namespace titan
