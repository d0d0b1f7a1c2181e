// UTF-8 helpers for the tokenizer: validation with the replacement rule shared by Python's
// bytes.decode("utf-8", "replace") and Rust's String::from_utf8_lossy (one U+FFFD per maximal
// subpart of an ill-formed sequence, Unicode 15 section 3.9), and NFC through utf8proc.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace titan::data {

// Length of the well-formed UTF-8 sequence starting at s[i], or 0 when s[i] starts an ill-formed
// one; in that case *bad_len receives the length of its maximal subpart (>= 1).
size_t utf8_sequence_length(std::string_view s, size_t i, size_t* bad_len);

bool is_valid_utf8(std::string_view s);

// s with each maximal ill-formed subpart replaced by U+FFFD (EF BF BD).
std::string utf8_replace_invalid(std::string_view s);

// Canonical composition (NFC) of valid UTF-8. Text whose code points are all below U+0300 is
// returned unchanged without calling utf8proc: no such code point decomposes, reorders or is the
// second member of a canonical composition.
std::string nfc(std::string_view valid_utf8);

// Decodes one code point of valid UTF-8 at s[i], advancing i.
uint32_t utf8_next(std::string_view s, size_t& i);
void utf8_append(std::string& out, uint32_t cp);

}  // namespace titan::data
