// Streaming detokenization: byte-level BPE tokens can end inside a UTF-8 character, so text is
// handed out only once the bytes that form it are complete. Ill-formed bytes become U+FFFD by the
// rule Tokenizer::decode uses (one per maximal ill-formed subpart), so the pieces of a stream,
// concatenated and flushed, equal decode() of all its tokens.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace titan::data {
class Tokenizer;
}

namespace titan::infer {

class Utf8Stream {
 public:
  // Appends bytes and returns the text that is now complete (possibly empty). Holds back only a
  // trailing prefix of a well-formed sequence (at most 3 bytes) that more bytes could complete.
  std::string push(std::string_view bytes);
  // The held-back bytes, repaired (an unfinished character at the end becomes U+FFFD).
  std::string flush();

 private:
  std::string pending_;
};

// Utf8Stream over token ids: special tokens are skipped (as decode(skip_special_tokens=true))
// and ids that name no token (a model vocabulary larger than the tokenizer's) give no text.
class TokenStream {
 public:
  explicit TokenStream(const data::Tokenizer& tok) : tok_(tok) {}
  std::string push(uint32_t id);
  std::string flush() { return utf8_.flush(); }

 private:
  const data::Tokenizer& tok_;
  Utf8Stream utf8_;
};

}  // namespace titan::infer
