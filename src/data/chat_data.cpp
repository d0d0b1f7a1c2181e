#include "util/strings.h"
#include "data/chat_data.h"

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace titan::data {

namespace {

// What add_generation_prompt appends to a conversation: the assistant header.
std::string assistant_header(const ChatTemplate& t) {
  const std::vector<ChatMessage> probe{{"user", "x", std::nullopt}};
  ChatOptions with, without;
  without.add_generation_prompt = false;
  const std::string a = t.render(probe, with), b = t.render(probe, without);
  TITAN_CHECK(a.size() > b.size() && a.compare(0, b.size(), b) == 0, t.origin(),
              ": the chat template's generation prompt is not an appended header; cannot find assistant turns");
  return a.substr(b.size());
}

}  // namespace

ChatEncoder::ChatEncoder(ChatTemplate tmpl, const Tokenizer& tok) : tmpl_(std::move(tmpl)), tok_(tok) {
  header_ = assistant_header(tmpl_);
  end_ = tmpl_.special_token_text("eos_token");
  TITAN_CHECK(!end_.empty(), tmpl_.origin(), ": no eos_token to end assistant turns with");
}

ChatTokens ChatEncoder::encode(const std::vector<ChatMessage>& messages, bool train_on_prompt,
                               const std::string& origin) const {
  ChatOptions opt;
  opt.add_generation_prompt = false;
  const std::string text = tmpl_.render(messages, opt);
  ChatTokens out;
  out.ids = tok_.encode(text);
  // Byte spans of the assistant turns: after the i-th header up to and including the end token.
  std::vector<std::pair<size_t, size_t>> spans;
  size_t at = 0;
  for (const auto& m : messages) {
    if (m.role != "assistant") continue;
    const size_t h = text.find(header_, at);
    TITAN_CHECK(h != std::string::npos, origin, ": assistant turn ", spans.size() + 1,
                " has no assistant header in the rendered conversation");
    const size_t b = h + header_.size(), e = text.find(end_, b);
    TITAN_CHECK(e != std::string::npos, origin, ": assistant turn ", spans.size() + 1, " does not end with ", end_);
    spans.emplace_back(b, e + end_.size());
    at = e + end_.size();
  }
  TITAN_CHECK(text.find(header_, at) == std::string::npos, origin,
              ": the rendered conversation has more assistant headers than assistant messages");
  // A token is a target when its first byte lies in a span.
  out.target.assign(out.ids.size(), train_on_prompt ? 1 : 0);
  size_t byte = 0, s = 0;
  for (size_t i = 0; i < out.ids.size(); ++i) {
    while (s < spans.size() && byte >= spans[s].second) ++s;
    if (s < spans.size() && byte >= spans[s].first) out.target[i] = 1;
    byte += tok_.decode_bytes({out.ids[i]}).size();
  }
  TITAN_CHECK(byte == text.size(), origin, ": token bytes (", byte, ") do not add up to the rendered text (",
              text.size(), ")");
  out.ids.push_back(tok_.eot_id());
  out.target.push_back(train_on_prompt ? 1 : 0);
  return out;
}

std::vector<ChatMessage> chat_messages_from_json(const nlohmann::json& j, const std::string& origin) {
  TITAN_CHECK(j.is_object(), origin, ": a conversation must be a JSON object");
  auto str = [&](const nlohmann::json& v, const char* what) {
    TITAN_CHECK(v.is_string(), origin, ": \"", what, "\" must be a string");
    return v.get<std::string>();
  };
  std::vector<ChatMessage> out;
  if (j.contains("messages")) {
    TITAN_CHECK(j["messages"].is_array() && !j["messages"].empty(), origin, ": \"messages\" must be a non-empty array");
    for (const auto& m : j["messages"]) {
      TITAN_CHECK(m.is_object() && m.contains("role") && m.contains("content"), origin,
                  ": every message needs \"role\" and \"content\"");
      out.push_back(ChatMessage{str(m["role"], "role"), str(m["content"], "content"), std::nullopt});
    }
  } else if (j.contains("instruction")) {
    TITAN_CHECK(j.contains("output"), origin, ": the instruction form needs \"output\"");
    std::string user = str(j["instruction"], "instruction");
    if (j.contains("input") && !j["input"].is_null()) {
      const std::string input = str(j["input"], "input");
      if (!input.empty()) user += "\n\n" + input;
    }
    out.push_back({"user", user, std::nullopt});
    out.push_back({"assistant", str(j["output"], "output"), std::nullopt});
  } else {
    TITAN_CHECK(false, origin, ": a conversation needs \"messages\" or \"instruction\"/\"output\"");
  }
  check_conversation(out, origin);
  return out;
}

void check_conversation(const std::vector<ChatMessage>& messages, const std::string& origin) {
  bool any = false;
  for (const auto& m : messages) {
    TITAN_CHECK(m.role == "system" || m.role == "user" || m.role == "assistant", origin, ": role \"", m.role,
                "\" is not system, user or assistant");
    any |= m.role == "assistant";
  }
  TITAN_CHECK(any, origin, ": the conversation has no assistant message");
}

ChatRows ChatRows::pack(const std::vector<ChatTokens>& conversations, int64_t seq_len, uint32_t separator) {
  TITAN_CHECK(seq_len > 0, "chat data: seq_len must be positive");
  ChatRows r;
  r.width_ = seq_len + 1;
  const size_t w = size_t(r.width_);
  size_t used = 0;  // tokens in the current (last) row
  auto pad_row = [&] {
    if (used == 0) return;
    r.pad_tokens += w - used;
    r.ids_.insert(r.ids_.end(), w - used, separator);
    r.target_.insert(r.target_.end(), w - used, 0);
    used = 0;
  };
  for (const auto& c : conversations) {
    if (c.ids.size() > w) {
      ++r.dropped;
      continue;
    }
    if (used + c.ids.size() > w) pad_row();
    if (used == 0) ++r.rows_;
    r.ids_.insert(r.ids_.end(), c.ids.begin(), c.ids.end());
    r.target_.insert(r.target_.end(), c.target.begin(), c.target.end());
    used += c.ids.size();
    ++r.conversations;
    if (used == w) used = 0;
  }
  pad_row();
  TITAN_CHECK(r.rows_ > 0, "chat data: no conversation fits in seq_len + 1 = ", r.width_, " tokens (", r.dropped,
              " dropped)");
  for (size_t i = 0; i < r.ids_.size(); ++i)
    if (i % w != 0) r.target_tokens += r.target_[i];
  return r;
}

ChatRows ChatRows::load(const std::vector<std::string>& files, const ChatEncoder& enc, int64_t seq_len,
                        bool train_on_prompt, DocOptions opt) {
  opt.chat = true;
  std::vector<ChatTokens> convs;
  uint64_t skipped = 0;
  for (const auto& f : files) {
    auto reader = open_doc_reader(f, opt);
    Document doc;
    while (reader->next(&doc))
      convs.push_back(enc.encode(doc.messages, train_on_prompt, f + ":" + std::to_string(doc.row)));
    skipped += reader->skipped();
  }
  TITAN_CHECK(!convs.empty(), "chat data: no conversations in ", files.empty() ? std::string("(no files)") : files[0],
              skipped ? " (all " + std::to_string(skipped) + " rows were bad and skipped)" : std::string());
  ChatRows r = pack(convs, seq_len, enc.tokenizer().eot_id());
  r.skipped = skipped;
  return r;
}

void ChatRows::fill(uint64_t i, int64_t* inputs, int64_t* labels) const {
  const size_t w = size_t(width_), base = size_t(i % rows_) * w;
  for (size_t s = 0; s + 1 < w; ++s) {
    inputs[s] = ids_[base + s];
    labels[s] = target_[base + s + 1] ? int64_t(ids_[base + s + 1]) : -100;
  }
}

std::string ChatRows::describe() const {
  return std::to_string(conversations) + " conversations in " + std::to_string(rows_) + " rows of " +
         std::to_string(width_) + " tokens (" + std::to_string(target_tokens) + " target tokens, " +
         std::to_string(pad_tokens) + " padding); " + std::to_string(dropped) +
         " dropped (longer than seq_len + 1 tokens)" +
         (skipped ? "; " + std::to_string(skipped) + " bad rows skipped" : std::string());
}

}  // namespace titan::data
