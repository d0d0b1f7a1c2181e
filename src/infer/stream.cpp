#include "infer/stream.h"

#include "data/tokenizer.h"
#include "data/utf8.h"

namespace titan::infer {

std::string Utf8Stream::push(std::string_view bytes) {
  pending_.append(bytes);
  // Scan for the first point from which the rest could still become one well-formed character:
  // a maximal ill-formed subpart that reaches the end of the buffer is such a prefix.
  size_t i = 0, cut = pending_.size();
  while (i < pending_.size()) {
    size_t bad = 0;
    size_t n = data::utf8_sequence_length(pending_, i, &bad);
    if (n > 0) {
      i += n;
    } else if (i + bad >= pending_.size() && uint8_t(pending_[i]) >= 0xC2 && uint8_t(pending_[i]) <= 0xF4) {
      // A valid lead byte whose sequence is cut by the end of the buffer (an ill-formed byte
      // inside it would have ended the subpart before the end).
      cut = i;
      break;
    } else {
      i += bad;
    }
  }
  std::string out = data::utf8_replace_invalid(std::string_view(pending_).substr(0, cut));
  pending_.erase(0, cut);
  return out;
}

std::string Utf8Stream::flush() {
  std::string out = data::utf8_replace_invalid(pending_);
  pending_.clear();
  return out;
}

std::string TokenStream::push(uint32_t id) {
  if (!tok_.has_id(id)) return utf8_.push("");
  return utf8_.push(tok_.decode_bytes({id}, /*skip_special_tokens=*/true));
}

}  // namespace titan::infer
