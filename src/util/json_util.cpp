#include "util/json_util.h"

#include <set>
#include <vector>

#include "core/error.h"

namespace titan {

namespace {

// Escapes control bytes as \xNN (and, for quoting, '"' and '\\' with a backslash); cuts after max_len.
std::string escape(std::string_view s, size_t max_len, bool quoting) {
  static const char hex[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < s.size() && i < max_len; ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (quoting && (c == '"' || c == '\\')) {
      out += '\\';
      out += char(c);
    } else if (c < 0x20 || c == 0x7f) {
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += char(c);  // printable ASCII and UTF-8 bytes kept as they are
    }
  }
  if (s.size() > max_len) out += "...";
  return out;
}

}  // namespace

std::string printable(std::string_view s, size_t max_len) { return escape(s, max_len, false); }

std::string quote(std::string_view s, size_t max_len) { return "\"" + escape(s, max_len, true) + "\""; }

const char* json_kind(const nlohmann::json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null: return "null";
    case nlohmann::json::value_t::object: return "object";
    case nlohmann::json::value_t::array: return "array";
    case nlohmann::json::value_t::string: return "string";
    case nlohmann::json::value_t::boolean: return "boolean";
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned: return "integer";
    case nlohmann::json::value_t::number_float: return "number";
    case nlohmann::json::value_t::binary: return "binary";
    case nlohmann::json::value_t::discarded: return "discarded";
  }
  return "unknown";
}

nlohmann::json parse_json_strict(std::string_view text, const std::string& origin) {
  using Event = nlohmann::json::parse_event_t;
  std::vector<std::set<std::string>> open_objects;  // keys seen so far, one set per open object
  std::string duplicate;
  bool found_duplicate = false;
  nlohmann::json::parser_callback_t cb = [&](int, Event ev, nlohmann::json& parsed) {
    if (ev == Event::object_start) {
      open_objects.emplace_back();
    } else if (ev == Event::object_end) {
      if (!open_objects.empty()) open_objects.pop_back();
    } else if (ev == Event::key && !open_objects.empty() && parsed.is_string()) {
      const auto& k = parsed.get_ref<const std::string&>();
      if (!open_objects.back().insert(k).second && !found_duplicate) {
        found_duplicate = true;
        duplicate = k;
      }
    }
    return true;
  };
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text.begin(), text.end(), cb, /*allow_exceptions=*/true);
  } catch (const nlohmann::json::exception& e) {
    // e.what() may quote raw input bytes; escape them so the message stays one line.
    fail(origin, ": invalid JSON: ", printable(e.what(), 200));
  }
  if (found_duplicate) fail(origin, ": duplicate key ", quote(duplicate), " in JSON");
  return j;
}

}  // namespace titan
