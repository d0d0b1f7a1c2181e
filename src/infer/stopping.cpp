#include "infer/stopping.h"

#include <algorithm>

#include "core/error.h"

namespace titan::infer {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::Eos: return "eos";
    case FinishReason::Stop: return "stop";
    case FinishReason::Length: return "length";
    case FinishReason::Interrupted: return "interrupted";
    default: return "";
  }
}

void validate(const StopParams& p) {
  TITAN_CHECK(p.max_new_tokens >= 0, "--max-new-tokens must be >= 0, got ", p.max_new_tokens);
  for (auto& s : p.stop_strings) TITAN_CHECK(!s.empty(), "--stop needs a non-empty string");
}

StopChecker::StopChecker(const StopParams& p) : p_(p) {
  for (auto& s : p.stop_strings) keep_ = std::max(keep_, s.size() - 1);
}

FinishReason StopChecker::update(uint32_t id, std::string_view token_bytes, int64_t n) {
  if (std::find(p_.eos_ids.begin(), p_.eos_ids.end(), id) != p_.eos_ids.end()) return FinishReason::Eos;
  if (!p_.stop_strings.empty()) {
    // A match ending in the new bytes starts at most keep_ bytes before them; one lying wholly in
    // the older bytes would have stopped an earlier step.
    const size_t old = tail_.size();
    tail_.append(token_bytes);
    for (auto& s : p_.stop_strings) {
      size_t from = old + 1 >= s.size() ? old + 1 - s.size() : 0;
      if (tail_.find(s, from) != std::string::npos) return FinishReason::Stop;
    }
    if (tail_.size() > keep_) tail_.erase(0, tail_.size() - keep_);
  }
  if (n >= p_.max_new_tokens) return FinishReason::Length;
  return FinishReason::None;
}

}  // namespace titan::infer
