#include "util/numbers.h"

#include <charconv>
#include <cmath>
#include <sstream>

#include "core/error.h"

namespace titan {

namespace {

template <class T>
std::optional<T> whole(std::string_view s) {
  T v{};
  const char* e = s.data() + s.size();
  auto r = std::from_chars(s.data(), e, v);
  if (s.empty() || r.ec != std::errc() || r.ptr != e) return std::nullopt;
  return v;
}

// The text as typed, quoted, with control and non-ASCII bytes as \xNN so the error stays one line.
std::string shown(std::string_view s) {
  static const char hex[] = "0123456789abcdef";
  std::string out = "'";
  for (unsigned char c : s.substr(0, 80)) {
    if (c >= 0x20 && c < 0x7f) {
      out += char(c);
    } else {
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out + (s.size() > 80 ? "...'" : "'");
}

// Every char is a digit, after at most one leading '-': a number too large for its type.
bool all_digits(std::string_view s) {
  if (!s.empty() && s[0] == '-') s.remove_prefix(1);
  if (s.empty()) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

template <class T>
[[noreturn]] void out_of_range(std::string_view text, std::string_view what, T min, T max) {
  fail(what, ": ", text, " is out of range [", min, ", ", max, "]");
}

}  // namespace

std::optional<int64_t> to_int64(std::string_view s) { return whole<int64_t>(s); }
std::optional<uint64_t> to_uint64(std::string_view s) { return whole<uint64_t>(s); }

std::optional<double> to_double(std::string_view s) {
  // from_chars also reads "inf" and "nan"; a value typed by a user must be a finite number.
  auto v = whole<double>(s);
  if (!v || !std::isfinite(*v)) return std::nullopt;
  return v;
}

int64_t parse_int(std::string_view text, std::string_view what, int64_t min, int64_t max) {
  auto v = to_int64(text);
  if (!v && all_digits(text)) out_of_range(text, what, min, max);
  TITAN_CHECK(v.has_value(), what, ": ", shown(text), " is not an integer");
  if (*v < min || *v > max) out_of_range(text, what, min, max);
  return *v;
}

uint64_t parse_uint64(std::string_view text, std::string_view what, uint64_t min, uint64_t max) {
  auto v = to_uint64(text);
  if (!v && all_digits(text) && text[0] != '-') out_of_range(text, what, min, max);
  TITAN_CHECK(v.has_value(), what, ": ", shown(text), " is not a non-negative integer");
  if (*v < min || *v > max) out_of_range(text, what, min, max);
  return *v;
}

double parse_double(std::string_view text, std::string_view what, double min, double max) {
  auto v = to_double(text);
  TITAN_CHECK(v.has_value(), what, ": ", shown(text), " is not a number");
  if (*v < min || *v > max) out_of_range(text, what, min, max);
  return *v;
}

}  // namespace titan
