// libFuzzer target: arbitrary bytes as a chat template, parsed and rendered with a small
// conversation. A titan::Error (a construct the interpreter refuses, a template error) is an
// accepted outcome; a crash, a hang past libFuzzer's timeout or any other exception is not.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "data/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace titan::data;
  static const std::vector<ChatMessage> msgs = {
      {"system", "sys", std::nullopt},
      {"user", "héllo <think>", std::nullopt},
      {"assistant", "<think>\nr\n</think>\n\nanswer", std::nullopt},
      {"assistant", "a", std::string("reason")},
      {"user", "again", std::nullopt}};
  try {
    ChatTemplate t = ChatTemplate::from_string(std::string(reinterpret_cast<const char*>(data), size), "fuzz",
                                               {{"eos_token", "<|im_end|>"}});
    ChatOptions o;
    o.enable_thinking = size % 2 == 0;
    (void)t.render(msgs, o);
  } catch (const titan::Error&) {
  }
  return 0;
}
