// Chat prompts from a tokenizer folder's chat template, as transformers'
// tokenizer.apply_chat_template(messages, add_generation_prompt=..., enable_thinking=...) renders
// them: the template is chat_template.jinja in the folder if present, else tokenizer_config.json's
// "chat_template"; it is run by the strict Jinja interpreter of data/jinja.h with the variables
// messages, add_generation_prompt, tools (none), documents (none), enable_thinking (only when
// given) and the special tokens of tokenizer_config.json (bos_token, eos_token, pad_token,
// unk_token). Token ids are the tokenizer's encoding of the rendered text, special tokens such
// as <|im_start|> matched as added tokens (apply_chat_template(tokenize=True) adds nothing else).
//
// Messages carry a role (system, user, assistant or tool), string content and, for assistant
// turns, an optional reasoning_content (the thinking given apart from the content; without it,
// Qwen3's template takes a <think>...</think> block out of the content itself). Tool definitions,
// tool calls and non-string content are refused with an error.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "data/jinja.h"

namespace titan::data {

class Tokenizer;

struct ChatMessage {
  std::string role;
  std::string content;
  std::optional<std::string> reasoning_content;
};

struct ChatOptions {
  bool add_generation_prompt = true;
  // nullopt: the variable is not passed (Qwen3's template then leaves thinking on).
  std::optional<bool> enable_thinking;
};

class ChatTemplate {
 public:
  // `dir`: a tokenizer or model folder. Errors name the file when there is no template, or it
  // uses a construct the interpreter does not support.
  static ChatTemplate load(const std::string& dir);
  // A template given as text; special tokens by name ("eos_token" -> "<|im_end|>").
  static ChatTemplate from_string(const std::string& source, const std::string& origin,
                                  const std::vector<std::pair<std::string, std::string>>& special_tokens = {});
  static bool available(const std::string& dir);  // a template file or entry exists

  std::string render(const std::vector<ChatMessage>& messages, const ChatOptions& opt) const;
  std::vector<uint32_t> encode(const Tokenizer& tok, const std::vector<ChatMessage>& messages,
                               const ChatOptions& opt) const;
  const std::string& origin() const { return origin_; }
  // A special token's text by name ("eos_token"), "" when the template has none.
  std::string special_token_text(const std::string& name) const {
    for (const auto& [k, v] : special_)
      if (k == name) return v;
    return "";
  }

 private:
  jinja::Template tmpl_;
  std::string origin_;
  std::vector<std::pair<std::string, std::string>> special_;
};

// Messages from a JSON array text ([{"role": "user", "content": "..."}, ...]); errors name
// `origin`, the message index and the reason.
std::vector<ChatMessage> parse_chat_messages(const std::string& json_text, const std::string& origin);

}  // namespace titan::data
