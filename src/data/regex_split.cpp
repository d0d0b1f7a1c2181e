#include "data/regex_split.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/error.h"

namespace titan::data {

namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof buf);
  return reinterpret_cast<const char*>(buf);
}

// Per-thread match state: a JIT stack large enough for long whitespace or letter runs (a 1 MB
// line is one match of \s+ or \p{L}+), and one match-data block.
struct ThreadMatchState {
  pcre2_jit_stack* stack = nullptr;
  pcre2_match_context* ctx = nullptr;
  pcre2_match_data* md = nullptr;
  ThreadMatchState() {
    stack = pcre2_jit_stack_create(64 * 1024, 64 * 1024 * 1024, nullptr);
    ctx = pcre2_match_context_create(nullptr);
    md = pcre2_match_data_create(1, nullptr);
    TITAN_CHECK(stack && ctx && md, "out of memory creating PCRE2 match state");
    pcre2_jit_stack_assign(ctx, nullptr, stack);
  }
  ~ThreadMatchState() {
    pcre2_match_data_free(md);
    pcre2_match_context_free(ctx);
    pcre2_jit_stack_free(stack);
  }
};
thread_local ThreadMatchState t_match;

}  // namespace

std::string rewrite_whitespace_classes(const std::string& p) {
  std::string out;
  out.reserve(p.size() + 32);
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == '\\' && i + 1 < p.size()) {
      char c = p[i + 1];
      if (c == 's') {
        out += "\\p{White_Space}";
      } else if (c == 'S') {
        out += "\\P{White_Space}";
      } else {
        out += p[i];
        out += c;
      }
      ++i;
    } else {
      out += p[i];
    }
  }
  return out;
}

RegexSplitter::RegexSplitter(const std::string& pattern, const std::string& origin)
    : pattern_(rewrite_whitespace_classes(pattern)), origin_(origin) {
  int err = 0;
  PCRE2_SIZE off = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern_.data()), pattern_.size(),
                                   PCRE2_UTF | PCRE2_UCP, &err, &off, nullptr);
  TITAN_CHECK(code, origin, ": pre-tokenizer regex does not compile at offset ", off, ": ", pcre2_message(err));
  int jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  if (jit != 0) {
    pcre2_code_free(code);
    fail(origin, ": PCRE2 JIT compilation of the pre-tokenizer regex failed: ", pcre2_message(jit));
  }
  code_ = code;
}

RegexSplitter::~RegexSplitter() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

bool RegexSplitter::next_match(std::string_view text, size_t from, size_t* s, size_t* e) const {
  ThreadMatchState& st = t_match;
  int rc = pcre2_jit_match(static_cast<pcre2_code*>(code_), reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(),
                           from, 0, st.md, st.ctx);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  TITAN_CHECK(rc >= 0, origin_, ": pre-tokenizer regex failed on a text of ", text.size(), " bytes: ", pcre2_message(rc));
  PCRE2_SIZE* ov = pcre2_get_ovector_pointer(st.md);
  *s = ov[0];
  *e = ov[1];
  return true;
}

}  // namespace titan::data
