#include "data/chat_template.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/tokenizer.h"
#include "util/strings.h"

namespace titan::data {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// The file's JSON object; a syntax error names the file and where (without the library's tag).
json read_json(const std::string& path) {
  std::string text = read_regular_file(path);
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    std::string why = e.what();
    if (const size_t tag = why.find("] "); why.rfind("[json.exception", 0) == 0 && tag != std::string::npos)
      why = why.substr(tag + 2);
    fail(path, ": not valid JSON (", why, ")");
  }
  TITAN_CHECK(j.is_object(), path, ": expected a JSON object");
  return j;
}

// A special token entry of tokenizer_config.json: a string or {"content": "..."}; null when unset.
std::optional<std::string> special_token(const json& cfg, const char* key, const std::string& path) {
  if (!cfg.contains(key) || cfg[key].is_null()) return std::nullopt;
  const json& v = cfg[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  fail(path, ": ", key, " must be a string or an object with a string \"content\"");
}

std::string config_template(const json& cfg, const std::string& path) {
  const json& t = cfg["chat_template"];
  if (t.is_string()) return t.get<std::string>();
  if (t.is_array()) {  // [{"name": "default", "template": "..."}, {"name": "tool_use", ...}]
    for (const json& e : t)
      if (e.is_object() && e.value("name", "") == "default" && e.contains("template") && e["template"].is_string())
        return e["template"].get<std::string>();
    fail(path, ": chat_template lists named templates but none is called \"default\"");
  }
  fail(path, ": chat_template must be a string or a list of named templates");
}

}  // namespace

bool ChatTemplate::available(const std::string& dir) {
  if (fs::exists(fs::path(dir) / "chat_template.jinja")) return true;
  fs::path cfg = fs::path(dir) / "tokenizer_config.json";
  if (!fs::exists(cfg)) return false;
  // An unreadable file is its error, not "no chat template".
  const json j = read_json(cfg.string());
  return j.contains("chat_template") && !j["chat_template"].is_null();
}

ChatTemplate ChatTemplate::load(const std::string& dir) {
  const std::string cfg_path = (fs::path(dir) / "tokenizer_config.json").string();
  const std::string jinja_path = (fs::path(dir) / "chat_template.jinja").string();
  json cfg = fs::exists(cfg_path) ? read_json(cfg_path) : json::object();
  std::vector<std::pair<std::string, std::string>> special;
  for (const char* key : {"bos_token", "eos_token", "pad_token", "unk_token"})
    if (auto v = special_token(cfg, key, cfg_path)) special.emplace_back(key, *v);
  if (fs::exists(jinja_path)) return from_string(read_regular_file(jinja_path), jinja_path, special);
  TITAN_CHECK(fs::exists(cfg_path), dir, ": no chat template (neither chat_template.jinja nor tokenizer_config.json)");
  TITAN_CHECK(cfg.contains("chat_template") && !cfg["chat_template"].is_null(), cfg_path,
              ": no chat_template (the tokenizer has no chat format)");
  return from_string(config_template(cfg, cfg_path), cfg_path, special);
}

ChatTemplate ChatTemplate::from_string(const std::string& source, const std::string& origin,
                                       const std::vector<std::pair<std::string, std::string>>& special_tokens) {
  ChatTemplate t;
  t.tmpl_ = jinja::Template::parse(source, origin);
  t.origin_ = origin;
  t.special_ = special_tokens;
  return t;
}

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages, const ChatOptions& opt) const {
  using jinja::Value;
  jinja::List msgs;
  for (const ChatMessage& m : messages) {
    jinja::Dict d;
    // transformers copies reasoning_content to "thinking" (read by other templates) before the
    // message's own keys.
    if (m.reasoning_content) d.set("thinking", Value::string(*m.reasoning_content));
    d.set("role", Value::string(m.role));
    d.set("content", Value::string(m.content));
    if (m.reasoning_content) d.set("reasoning_content", Value::string(*m.reasoning_content));
    msgs.push_back(Value::make_dict(std::move(d)));
  }
  jinja::Dict vars;
  for (auto& [k, v] : special_) vars.set(k, Value::string(v));
  vars.set("messages", Value::make_list(std::move(msgs)));
  vars.set("tools", Value::none());
  vars.set("documents", Value::none());
  vars.set("add_generation_prompt", Value::boolean(opt.add_generation_prompt));
  if (opt.enable_thinking) vars.set("enable_thinking", Value::boolean(*opt.enable_thinking));
  return tmpl_.render(vars);
}

std::vector<uint32_t> ChatTemplate::encode(const Tokenizer& tok, const std::vector<ChatMessage>& messages,
                                           const ChatOptions& opt) const {
  return tok.encode(render(messages, opt));
}

std::vector<ChatMessage> parse_chat_messages(const std::string& json_text, const std::string& origin) {
  json j = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  TITAN_CHECK(!j.is_discarded(), origin, ": messages are not valid JSON");
  TITAN_CHECK(j.is_array(), origin, ": messages must be a JSON array of {\"role\", \"content\"} objects");
  std::vector<ChatMessage> out;
  for (size_t k = 0; k < j.size(); ++k) {
    const json& m = j[k];
    const std::string where = origin + ": message " + std::to_string(k);
    TITAN_CHECK(m.is_object(), where, ": must be an object");
    ChatMessage msg;
    for (auto& [key, v] : m.items()) {
      if (key == "role") {
        TITAN_CHECK(v.is_string(), where, ": role must be a string");
        msg.role = v.get<std::string>();
      } else if (key == "content") {
        TITAN_CHECK(v.is_string(), where, ": content must be a string (content parts are not supported)");
        msg.content = v.get<std::string>();
      } else if (key == "reasoning_content") {
        if (!v.is_null()) {
          TITAN_CHECK(v.is_string(), where, ": reasoning_content must be a string");
          msg.reasoning_content = v.get<std::string>();
        }
      } else if (key == "tool_calls" || key == "tools") {
        fail(where, ": tool calls are not supported");
      } else {
        fail(where, ": unknown key '", key, "' (expected role, content, reasoning_content)");
      }
    }
    TITAN_CHECK(!msg.role.empty(), where, ": missing role");
    TITAN_CHECK(m.contains("content"), where, ": missing content");
    TITAN_CHECK(msg.role == "system" || msg.role == "user" || msg.role == "assistant" || msg.role == "tool", where,
                ": role '", msg.role, "' is not one of system, user, assistant, tool");
    TITAN_CHECK(!msg.reasoning_content || msg.role == "assistant", where, ": only assistant messages have reasoning_content");
    out.push_back(std::move(msg));
  }
  return out;
}

}  // namespace titan::data
