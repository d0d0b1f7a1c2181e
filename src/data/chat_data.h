// Supervised fine-tuning data: conversations rendered with the model's chat template, the loss
// only on the assistant's tokens, packed whole into rows.
//
// Sources are JSON lines, one conversation a line, in either form:
//   {"messages": [{"role": "system" | "user" | "assistant", "content": "..."}, ...]}
//   {"instruction": "...", "input": "..." (optional), "output": "..."}   (Alpaca's form)
// The instruction form is the conversation [user: instruction, or instruction + "\n\n" + input
// when input is non-empty; assistant: output].
//
// Tokens: the conversation's ids are exactly transformers' apply_chat_template(messages,
// tokenize=True) (data/chat_template.h), followed by the tokenizer's <|endoftext|> as the
// document separator. Targets (the tokens whose prediction is trained): each assistant turn's
// tokens after the template's assistant header (the text add_generation_prompt appends, Qwen's
// "<|im_start|>assistant\n") up to and including the end-of-turn token (the template's
// eos_token, Qwen's "<|im_end|>"); with train_on_prompt every token, the separator included.
// The i-th assistant message is the i-th header of the rendered text; a template whose headers
// cannot be matched to the assistant messages so is refused with an error.
//
// Packing: conversations, in file order, fill rows of seq_len + 1 tokens whole; one that does not
// fit in the rest of the row starts the next row, the rest padded with <|endoftext|> (never a
// target). A conversation longer than seq_len + 1 tokens (with its separator) is dropped and
// counted. Row i gives inputs = row[:-1] and labels = row[1:], -100 where the token is no target.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "data/chat_template.h"
#include "data/dataset.h"
#include "data/doc_reader.h"
#include "data/tokenizer.h"

namespace titan::data {

// A conversation's ids and, per id, whether its prediction is trained.
struct ChatTokens {
  std::vector<uint32_t> ids;
  std::vector<uint8_t> target;
};

class ChatEncoder {
 public:
  // Errors when the template has no assistant header or eos_token to mark turns by.
  ChatEncoder(ChatTemplate tmpl, const Tokenizer& tok);
  // `origin` names the conversation in errors (file:line).
  ChatTokens encode(const std::vector<ChatMessage>& messages, bool train_on_prompt, const std::string& origin) const;
  const Tokenizer& tokenizer() const { return tok_; }
  const ChatTemplate& chat_template() const { return tmpl_; }

 private:
  ChatTemplate tmpl_;
  const Tokenizer& tok_;
  std::string header_, end_;
};

// The messages of one JSON line in either form; errors name `origin` and the reason.
std::vector<ChatMessage> chat_messages_from_json(const nlohmann::json& line, const std::string& origin);
// Errors unless every role is system, user or assistant and one message is the assistant's.
void check_conversation(const std::vector<ChatMessage>& messages, const std::string& origin);

// Conversations packed into rows (see the top).
class ChatRows {
 public:
  static ChatRows pack(const std::vector<ChatTokens>& conversations, int64_t seq_len, uint32_t separator);
  // Every conversation of the files (data/dataset.h's resolve_dataset_files, read by
  // data/doc_reader.h with opt.chat set), encoded and packed.
  static ChatRows load(const std::vector<std::string>& files, const ChatEncoder& enc, int64_t seq_len,
                       bool train_on_prompt, DocOptions opt = {});

  uint64_t rows() const { return rows_; }
  int64_t seq_len() const { return width_ - 1; }
  // inputs and labels [seq_len] of row i mod rows().
  void fill(uint64_t i, int64_t* inputs, int64_t* labels) const;
  uint64_t conversations = 0;  // packed
  uint64_t dropped = 0;        // longer than a row
  uint64_t target_tokens = 0;  // labels counted, over all rows
  uint64_t pad_tokens = 0;
  uint64_t skipped = 0;        // bad rows skipped (skip_bad_rows)
  std::string describe() const;  // one log line

 private:
  int64_t width_ = 0;
  uint64_t rows_ = 0;
  std::vector<uint32_t> ids_;    // [rows, width]
  std::vector<uint8_t> target_;  // [rows, width]
};

}  // namespace titan::data
