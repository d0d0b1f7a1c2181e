#include "data/jinja_text.h"

#include <charconv>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "data/jinja_value.h"
#include "data/utf8.h"

namespace titan::data::jinja {

bool py_isspace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

void append_code_point(std::string& out, uint32_t cp) { utf8_append(out, cp); }

std::vector<uint32_t> code_points(std::string_view s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    size_t bad = 0;
    size_t n = utf8_sequence_length(s, i, &bad);
    if (n == 0) {
      out.push_back(0xFFFD);
      i += bad;
    } else {
      size_t j = i;
      out.push_back(utf8_next(s, j));
      i += n;
    }
  }
  return out;
}

std::string from_code_points(const uint32_t* cp, size_t n) {
  std::string out;
  for (size_t k = 0; k < n; ++k) utf8_append(out, cp[k]);
  return out;
}

size_t rstrip_len(std::string_view s) {
  std::vector<uint32_t> cps = code_points(s);
  size_t end = cps.size();
  while (end > 0 && py_isspace(cps[end - 1])) --end;
  return from_code_points(cps.data(), end).size();
}

size_t lstrip_len(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    size_t bad = 0, n = utf8_sequence_length(s, i, &bad);
    if (n == 0) break;
    size_t j = i;
    if (!py_isspace(utf8_next(s, j))) break;
    i += n;
  }
  return i;
}

std::string py_strip(std::string_view s, const std::string* chars, bool left, bool right) {
  std::vector<uint32_t> cps = code_points(s), set;
  if (chars) set = code_points(*chars);
  auto strip_me = [&](uint32_t c) {
    if (!chars) return py_isspace(c);
    for (uint32_t x : set)
      if (x == c) return true;
    return false;
  };
  size_t b = 0, e = cps.size();
  if (left)
    while (b < e && strip_me(cps[b])) ++b;
  if (right)
    while (e > b && strip_me(cps[e - 1])) --e;
  return from_code_points(cps.data() + b, e - b);
}

std::vector<std::string> py_split(std::string_view s, const std::string* sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    TITAN_CHECK(!sep->empty(), "chat template: str.split() with an empty separator");
    size_t start = 0;
    for (;;) {
      size_t hit = (maxsplit >= 0 && int64_t(out.size()) >= maxsplit) ? std::string_view::npos : s.find(*sep, start);
      if (hit == std::string_view::npos) {
        out.emplace_back(s.substr(start));
        return out;
      }
      out.emplace_back(s.substr(start, hit - start));
      if (int64_t(out.size()) > kMaxItems) return out;  // the caller refuses more than kMaxItems parts
      start = hit + sep->size();
    }
  }
  std::vector<uint32_t> cps = code_points(s);
  size_t i = 0, n = cps.size();
  for (;;) {
    while (i < n && py_isspace(cps[i])) ++i;
    if (i >= n) return out;
    if (maxsplit >= 0 && int64_t(out.size()) >= maxsplit) {
      size_t e = n;
      while (e > i && py_isspace(cps[e - 1])) --e;
      out.push_back(from_code_points(cps.data() + i, e - i));
      return out;
    }
    size_t j = i;
    while (j < n && !py_isspace(cps[j])) ++j;
    out.push_back(from_code_points(cps.data() + i, j - i));
    if (int64_t(out.size()) > kMaxItems) return out;
    i = j;
  }
}

std::string py_float_repr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  std::string sci(buf, r.ptr);  // [-]d[.ddd]e(+|-)XX, shortest round trip
  std::string sign;
  if (sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  const size_t epos = sci.find('e');
  const int exp = std::stoi(sci.substr(epos + 1));
  std::string digits;
  for (size_t k = 0; k < epos; ++k)
    if (sci[k] != '.') digits += sci[k];
  if (exp < -4 || exp >= 16) return sign + sci;  // Python's repr switches to exponent form here
  std::string out;
  if (exp < 0) {
    out = "0." + std::string(size_t(-exp - 1), '0') + digits;
  } else if (size_t(exp) + 1 >= digits.size()) {
    out = digits + std::string(size_t(exp) + 1 - digits.size(), '0') + ".0";
  } else {
    out = digits.substr(0, size_t(exp) + 1) + "." + digits.substr(size_t(exp) + 1);
  }
  return sign + out;
}

static void json_string(std::string& out, const std::string& s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", c);
          out += b;
        } else {
          out += char(c);
        }
    }
  }
  out += '"';
}

static void json_value(std::string& out, const Value& v, int64_t indent, int depth) {
  auto newline = [&](int d) {
    out += '\n';
    out.append(size_t(indent * d), ' ');
  };
  const char* item_sep = indent >= 0 ? "," : ", ";
  switch (v.kind) {
    case Value::Kind::None: out += "null"; break;
    case Value::Kind::Bool: out += v.b ? "true" : "false"; break;
    case Value::Kind::Int: out += std::to_string(v.i); break;
    case Value::Kind::Float:
      if (std::isnan(v.f)) out += "NaN";
      else if (std::isinf(v.f)) out += v.f > 0 ? "Infinity" : "-Infinity";
      else out += py_float_repr(v.f);
      break;
    case Value::Kind::String: json_string(out, v.s); break;
    case Value::Kind::List: {
      if (v.list->empty()) {
        out += "[]";
        break;
      }
      out += '[';
      for (size_t k = 0; k < v.list->size(); ++k) {
        if (k) out += item_sep;
        if (indent >= 0) newline(depth + 1);
        json_value(out, (*v.list)[k], indent, depth + 1);
      }
      if (indent >= 0) newline(depth);
      out += ']';
      break;
    }
    case Value::Kind::Dict: {
      if (v.dict->items.empty()) {
        out += "{}";
        break;
      }
      out += '{';
      for (size_t k = 0; k < v.dict->items.size(); ++k) {
        if (k) out += item_sep;
        if (indent >= 0) newline(depth + 1);
        json_string(out, v.dict->items[k].first);
        out += ": ";
        json_value(out, v.dict->items[k].second, indent, depth + 1);
      }
      if (indent >= 0) newline(depth);
      out += '}';
      break;
    }
    default: fail("chat template: tojson of ", v.kind == Value::Kind::Undefined ? "an undefined value" : "a namespace",
                  " is not supported");
  }
}

std::string py_json_dumps(const Value& v, int64_t indent) {
  std::string out;
  json_value(out, v, indent, 0);
  return out;
}

}  // namespace titan::data::jinja
