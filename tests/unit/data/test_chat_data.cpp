// Chat data for supervised fine-tuning: ids identical to transformers' apply_chat_template (the
// chat goldens), targets exactly the assistant turns, the instruction form, packing whole
// conversations with the documented drop rule, labels and bad input.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "common/test_util.h"
#include "core/error.h"
#include "data/chat_data.h"
#include "data_test_util.h"

using namespace titan;
using namespace titan::data;
using titan::test::error_of;
using json = nlohmann::json;

namespace {

const ChatEncoder& encoder() {
  static const ChatEncoder enc(ChatTemplate::load(std::string(TITAN_SOURCE_DIR) + "/assets/qwen3-tokenizer"),
                               test::qwen_tokenizer());
  return enc;
}

// The text of the tokens with target == want.
std::string text_of(const ChatTokens& c, uint8_t want) {
  std::vector<uint32_t> ids;
  for (size_t i = 0; i < c.ids.size(); ++i)
    if (c.target[i] == want) ids.push_back(c.ids[i]);
  return test::qwen_tokenizer().decode(ids);
}

std::vector<ChatMessage> msgs(std::initializer_list<std::pair<const char*, const char*>> m) {
  std::vector<ChatMessage> out;
  for (auto& [r, c] : m) out.push_back({r, c, std::nullopt});
  return out;
}

}  // namespace

TEST(ChatData, IdsAreTransformersApplyChatTemplateThenTheSeparator) {
  std::ifstream in(test::fixture("chat/qwen3_chat_goldens.json"));
  const json g = json::parse(in);
  int n = 0;
  for (const json& c : g["conversations"]) {
    if (c["add_generation_prompt"].get<bool>() || !c["enable_thinking"].is_null()) continue;
    const std::vector<ChatMessage> m = parse_chat_messages(c["messages"].dump(), "golden");
    bool assistant = false;
    for (const auto& x : m) assistant |= x.role == "assistant";
    if (!assistant) continue;
    SCOPED_TRACE(c["name"].get<std::string>());
    const ChatTokens t = encoder().encode(m, false, "golden");
    std::vector<uint32_t> want = c["ids"].get<std::vector<uint32_t>>();
    want.push_back(test::qwen_tokenizer().eot_id());
    EXPECT_EQ(t.ids, want);
    ++n;
  }
  EXPECT_GE(n, 5);
}

TEST(ChatData, TargetsAreTheAssistantTurnsThroughTheirEndToken) {
  const ChatTokens one = encoder().encode(msgs({{"user", "What is 37 + 58?"}, {"assistant", "95"}}), false, "t");
  EXPECT_EQ(text_of(one, 1), "<think>\n\n</think>\n\n95<|im_end|>");
  EXPECT_EQ(text_of(one, 0), "<|im_start|>user\nWhat is 37 + 58?<|im_end|>\n<|im_start|>assistant\n\n<|endoftext|>");
  // Several turns and a system prompt: each assistant turn, earlier ones without the think block.
  const ChatTokens multi = encoder().encode(
      msgs({{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello."}, {"user", "2+2?"}, {"assistant", "4"}}),
      false, "t");
  EXPECT_EQ(text_of(multi, 1), "Hello.<|im_end|><think>\n\n</think>\n\n4<|im_end|>");
  // train_on_prompt: every token, the separator included.
  const ChatTokens all = encoder().encode(msgs({{"user", "a"}, {"assistant", "b"}}), true, "t");
  EXPECT_EQ(std::count(all.target.begin(), all.target.end(), 1), int64_t(all.ids.size()));
}

TEST(ChatData, InstructionFormIsAUserAndAnAssistantTurn) {
  auto m = chat_messages_from_json(json::parse(R"({"instruction": "Add.", "input": "2 3", "output": "5"})"), "x");
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0].role, "user");
  EXPECT_EQ(m[0].content, "Add.\n\n2 3");
  EXPECT_EQ(m[1].content, "5");
  m = chat_messages_from_json(json::parse(R"({"instruction": "Say hi.", "input": "", "output": "hi"})"), "x");
  EXPECT_EQ(m[0].content, "Say hi.");
  EXPECT_NE(error_of([] { chat_messages_from_json(json::parse(R"({"messages": [{"role": "user", "content": "x"}]})"),
                                                  "f.jsonl:3"); })
                .find("f.jsonl:3: the conversation has no assistant message"),
            std::string::npos);
  EXPECT_NE(error_of([] { chat_messages_from_json(json::parse(R"({"messages": [{"role": "robot", "content": "x"}]})"),
                                                  "f.jsonl:4"); })
                .find("f.jsonl:4: role \"robot\""),
            std::string::npos);
  EXPECT_NE(error_of([] { chat_messages_from_json(json::parse(R"({"text": "x"})"), "f.jsonl:5"); })
                .find("f.jsonl:5: a conversation needs"),
            std::string::npos);
}

TEST(ChatData, PacksWholeConversationsDropsOverlongOnesAndMasksLabels) {
  auto conv = [](uint32_t first, size_t n, size_t targets_from) {
    ChatTokens c;
    for (size_t i = 0; i < n; ++i) {
      c.ids.push_back(first + uint32_t(i));
      c.target.push_back(i >= targets_from ? 1 : 0);
    }
    return c;
  };
  // seq_len 7: rows of 8 tokens. 5 + 3 fill row 0; 4 does not fit after 5 (row 1 padded); 9 dropped.
  const ChatRows r = ChatRows::pack({conv(10, 5, 3), conv(20, 3, 1), conv(30, 4, 2), conv(40, 9, 0), conv(50, 2, 1)},
                                    7, 0);
  EXPECT_EQ(r.rows(), 2u);
  EXPECT_EQ(r.conversations, 4u);
  EXPECT_EQ(r.dropped, 1u);
  EXPECT_EQ(r.pad_tokens, 2u);
  int64_t in[7], lab[7];
  r.fill(0, in, lab);
  EXPECT_EQ(std::vector<int64_t>(in, in + 7), (std::vector<int64_t>{10, 11, 12, 13, 14, 20, 21}));
  EXPECT_EQ(std::vector<int64_t>(lab, lab + 7), (std::vector<int64_t>{-100, -100, 13, 14, -100, 21, 22}));
  r.fill(1, in, lab);
  EXPECT_EQ(std::vector<int64_t>(in, in + 7), (std::vector<int64_t>{30, 31, 32, 33, 50, 51, 0}));
  EXPECT_EQ(std::vector<int64_t>(lab, lab + 7), (std::vector<int64_t>{-100, 32, 33, -100, 51, -100, -100}));
  EXPECT_EQ(r.target_tokens, 7u);
  r.fill(2, in, lab);  // wraps around
  EXPECT_EQ(in[0], 10);
  EXPECT_NE(r.describe().find("1 dropped"), std::string::npos);
  EXPECT_NE(error_of([&] { ChatRows::pack({conv(1, 9, 0)}, 7, 0); }).find("no conversation fits"), std::string::npos);
}

TEST(ChatData, BadLinesNameTheFileAndLine) {
  const std::string f = test::temp_dir("chat_data") + "/bad.jsonl";
  std::ofstream(f) << R"({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]})"
                   << "\n\n{not json\n";
  EXPECT_NE(error_of([&] { ChatRows::load({f}, encoder(), 64, false); }).find(f + ":3: not valid JSON"),
            std::string::npos);
}
