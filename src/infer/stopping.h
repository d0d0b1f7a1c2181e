// When a generated sequence ends, checked after each new token in this order:
//   eos     the token is one of the EOS ids (it is kept in the output ids, as generate keeps it);
//   stop    a stop string now occurs in the generated text and ends inside the new token's bytes
//           (transformers' StopStringCriteria: stop as soon as a token completes one, whatever
//           overhangs); matched on the raw bytes of the generated tokens, special tokens'
//           text included, the prompt excluded; the completing token is kept;
//   length  max_new_tokens tokens have been generated.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace titan::infer {

// Interrupted: the caller's interrupt flag (GenerateOptions::interrupt) was raised.
enum class FinishReason { None, Eos, Stop, Length, Interrupted };
const char* finish_reason_name(FinishReason r);  // "eos", "stop", "length", "interrupted" ("" for None)

struct StopParams {
  std::vector<uint32_t> eos_ids;
  std::vector<std::string> stop_strings;
  int64_t max_new_tokens = 256;
};

// Errors on an empty stop string or max_new_tokens < 0 (naming the option).
void validate(const StopParams& p);

class StopChecker {
 public:
  explicit StopChecker(const StopParams& p);
  // After the n-th generated token `id` (n counts from 1), whose bytes are `token_bytes`.
  FinishReason update(uint32_t id, std::string_view token_bytes, int64_t n);

 private:
  const StopParams& p_;
  size_t keep_ = 0;   // bytes of history a match can start in: longest stop string - 1
  std::string tail_;  // the last keep_ bytes of the generated text
};

}  // namespace titan::infer
