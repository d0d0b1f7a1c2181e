// Hugging Face tokenizer.json of the byte-level BPE kind (GPT-2, Qwen2, Qwen3), producing the same
// ids as the `tokenizers` library:
//   1. added tokens are cut out of the raw text first (leftmost, then longest match);
//   2. the text between them is normalized (NFC) and pre-tokenized (regex Split, Isolated);
//   3. each piece is encoded by byte-level BPE.
// Input that is not valid UTF-8 is first repaired with U+FFFD per maximal ill-formed subpart, which
// is what Python's bytes.decode("utf-8", "replace") hands to `tokenizers`.
// Decoding concatenates token bytes and repairs invalid UTF-8 the same way (`errors: replace`).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace titan::data {

struct AddedToken {
  std::string content;
  uint32_t id = 0;
  bool special = false;
  bool normalized = false;
};

class Tokenizer {
 public:
  // `path`: a folder holding tokenizer.json, or the file itself. Errors name the file and the
  // reason (unsupported component, bad merge, missing byte token, ...).
  static Tokenizer load(const std::string& path);
  // Parses tokenizer.json bytes; `origin` names them in errors.
  static Tokenizer from_json(std::string_view json_bytes, const std::string& origin);

  // The bundled Qwen3 tokenizer folder: $TITAN_TOKENIZER_DIR if set, else
  // <TITAN_SOURCE_DIR>/assets/qwen3-tokenizer (compiled in), else assets/qwen3-tokenizer next to or
  // one level above the running executable.
  static std::string default_dir();

  std::vector<uint32_t> encode(std::string_view text) const;
  void encode_append(std::string_view text, std::vector<uint32_t>& out) const;  // appends ids
  // Ids of many texts, spread over up to `threads` threads (<= 0: all); same result as a loop.
  std::vector<std::vector<uint32_t>> encode_batch(const std::vector<std::string>& texts, int threads) const;

  // Errors on an id that names no token.
  std::string decode(const std::vector<uint32_t>& ids, bool skip_special_tokens = false) const;
  // The tokens' bytes without the UTF-8 repair (a token can end inside a character): what
  // streaming output needs; decode() is utf8_replace_invalid(decode_bytes()).
  std::string decode_bytes(const std::vector<uint32_t>& ids, bool skip_special_tokens = false) const;
  // True when `id` names a token (BPE vocabulary or added token).
  bool has_id(uint32_t id) const;

  // Max id + 1 over the BPE vocabulary and the added tokens (151669 for Qwen3).
  uint32_t vocab_size() const;
  // Id of a token given as text (added token content, or a byte-level vocabulary string), or -1.
  int64_t token_to_id(std::string_view token) const;
  // The document separator used for packing: the id of "<|endoftext|>"; errors when absent.
  uint32_t eot_id() const;
  const std::vector<AddedToken>& added_tokens() const;
  // 64-bit FNV-1a of the tokenizer.json bytes: tags token files and caches built with it.
  uint64_t fingerprint() const;
  const std::string& origin() const;
  // True when text can be cut after a '\n' that is followed by a printable ASCII character and the
  // parts encoded separately with the same result: every split pattern is the Qwen2/Qwen3 or GPT-2
  // one (no match crosses such a point), NFC cannot compose across it, and no added token holds a
  // '\n'.
  bool splits_after_newline() const;

  struct Impl;

 private:
  std::shared_ptr<const Impl> impl_;
};

}  // namespace titan::data
