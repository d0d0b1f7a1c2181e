// Python string semantics the Jinja interpreter needs, on UTF-8 text (internal to src/data/jinja*):
// whitespace as str.isspace, code-point indexing, float repr and json.dumps.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "data/jinja.h"

namespace titan::data::jinja {

// Python's str.isspace for one code point.
bool py_isspace(uint32_t cp);
// Byte length of s without its trailing / leading Python whitespace.
size_t rstrip_len(std::string_view s);
size_t lstrip_len(std::string_view s);  // bytes of leading whitespace

void append_code_point(std::string& out, uint32_t cp);
// Code points of UTF-8 text (invalid bytes, which the interpreter never produces from valid
// input, decode as U+FFFD).
std::vector<uint32_t> code_points(std::string_view s);
std::string from_code_points(const uint32_t* cp, size_t n);

// str.strip / lstrip / rstrip with chars (nullptr: whitespace).
std::string py_strip(std::string_view s, const std::string* chars, bool left, bool right);
// str.split(sep, maxsplit); sep nullptr: runs of whitespace, empty strings dropped. Stops after
// kMaxItems + 1 parts (more is the caller's error).
std::vector<std::string> py_split(std::string_view s, const std::string* sep, int64_t maxsplit);
// repr(float) (shortest round trip; 'inf', 'nan').
std::string py_float_repr(double v);
// json.dumps(v, ensure_ascii=False, indent=indent (< 0: None)) with Python's default separators.
std::string py_json_dumps(const Value& v, int64_t indent);

}  // namespace titan::data::jinja
