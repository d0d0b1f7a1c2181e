// Chat template rendering against transformers' apply_chat_template (fixtures written by
// tools/oracle/chat_template_goldens.py), and the interpreter's refusals.
#include <gtest/gtest.h>

#include <functional>

#include <nlohmann/json.hpp>

#include "common/test_util.h"
#include "core/error.h"
#include "data/chat_template.h"
#include "data/jinja.h"
#include "unit/data/data_test_util.h"
#include "util/strings.h"

using namespace titan;
using namespace titan::data;
using namespace titan::test;
using nlohmann::json;

namespace {

const json& goldens() {
  static const json j = json::parse(read_file(test::fixture("chat/qwen3_chat_goldens.json")));
  return j;
}

jinja::Value to_value(const json& j) {
  using jinja::Value;
  if (j.is_null()) return Value::none();
  if (j.is_boolean()) return Value::boolean(j.get<bool>());
  if (j.is_number_integer()) return Value::integer(j.get<int64_t>());
  if (j.is_number()) return Value::number(j.get<double>());
  if (j.is_string()) return Value::string(j.get<std::string>());
  if (j.is_array()) {
    jinja::List l;
    for (auto& e : j) l.push_back(to_value(e));
    return Value::make_list(std::move(l));
  }
  jinja::Dict d;
  for (auto& [k, v] : j.items()) d.set(k, to_value(v));
  return Value::make_dict(std::move(d));
}

std::string render(const std::string& src, const jinja::Dict& vars = {}) {
  return jinja::Template::parse(src, "test.jinja").render(vars);
}

}  // namespace

TEST(ChatTemplate, Qwen3ConversationsMatchTransformersTextAndIds) {
  const ChatTemplate tmpl = ChatTemplate::load(std::string(TITAN_SOURCE_DIR) + "/assets/qwen3-tokenizer");
  const Tokenizer& tok = test::qwen_tokenizer();
  int n = 0;
  for (const json& c : goldens()["conversations"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    std::vector<ChatMessage> msgs = parse_chat_messages(c["messages"].dump(), "golden");
    ChatOptions opt;
    opt.add_generation_prompt = c["add_generation_prompt"].get<bool>();
    if (!c["enable_thinking"].is_null()) opt.enable_thinking = c["enable_thinking"].get<bool>();
    const std::string text = tmpl.render(msgs, opt);
    EXPECT_EQ(text, c["text"].get<std::string>());
    EXPECT_EQ(tmpl.encode(tok, msgs, opt), c["ids"].get<std::vector<uint32_t>>());
    ++n;
  }
  EXPECT_GE(n, 60);
}

TEST(ChatTemplate, JinjaFeatureTemplatesMatchTransformersEnvironment) {
  jinja::Value vars = to_value(goldens()["vars"]);
  for (const json& t : goldens()["templates"]) {
    SCOPED_TRACE(t["name"].get<std::string>());
    EXPECT_EQ(render(t["template"].get<std::string>(), *vars.dict), t["text"].get<std::string>());
  }
}

TEST(ChatTemplate, UnsupportedConstructsAreErrorsNamingThem) {
  auto parse_error = [](const std::string& src) {
    return error_of([&] { jinja::Template::parse(src, "t.jinja"); });
  };
  EXPECT_NE(parse_error("{% macro m() %}x{% endmacro %}").find("unsupported tag 'macro'"), std::string::npos);
  EXPECT_NE(parse_error("{% include 'x' %}").find("unsupported tag 'include'"), std::string::npos);
  EXPECT_NE(parse_error("{{ x|wordcount }}").find("unsupported filter 'wordcount'"), std::string::npos);
  EXPECT_NE(parse_error("{% if x is sameas y %}{% endif %}").find("unsupported test 'sameas'"), std::string::npos);
  EXPECT_NE(parse_error("a\n{% if x %}").find("t.jinja: chat template line 2: missing {% endif %}"), std::string::npos);
  EXPECT_NE(parse_error("{% endfor %}").find("unexpected '{% endfor %}'"), std::string::npos);
  EXPECT_NE(parse_error("{{ x").find("not closed"), std::string::npos);
  EXPECT_NE(parse_error("{% break %}").find("outside a for loop"), std::string::npos);
  EXPECT_NE(parse_error("{% set x %}a{% endset %}").find("block set"), std::string::npos);

  auto render_error = [](const std::string& src) { return error_of([&] { render(src); }); };
  EXPECT_NE(render_error("{{ 'a'.zfill(3) }}").find("method str.zfill() is not supported"), std::string::npos);
  EXPECT_NE(render_error("{{ raise_exception('bad role') }}").find("raised an exception: bad role"), std::string::npos);
  EXPECT_NE(render_error("{{ strftime_now('%Y') }}").find("strftime_now() is not supported"), std::string::npos);
  EXPECT_NE(render_error("{{ nothing.attr }}").find("'nothing' is undefined"), std::string::npos);
  EXPECT_NE(render_error("{{ [1, 2] }}").find("printing a list is not supported"), std::string::npos);
  EXPECT_NE(render_error("{{ 1 + 'a' }}").find("unsupported operand types for +: int and str"), std::string::npos);
  EXPECT_NE(render_error("{{ 'é'.upper() }}").find("non-ASCII"), std::string::npos);
}

TEST(ChatTemplate, HostileTemplatesGetErrorsNotCrashes) {
  auto error = [](const std::string& src) {
    return error_of([&] { jinja::Template::parse(src, "t.jinja").render({}); });
  };
  EXPECT_NE(error("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}").find("nesting deeper than 200"),
            std::string::npos);
  EXPECT_NE(error("{{ " + std::string(3000, '-') + "1 }}").find("nesting deeper than 200"), std::string::npos);
  std::string nested;
  for (int k = 0; k < 300; ++k) nested += "{% if true %}";
  EXPECT_NE(error(nested).find("nesting deeper than 200"), std::string::npos);
  EXPECT_NE(error("{{ 9223372036854775807 + 1 }}").find("integer overflow in +"), std::string::npos);
  EXPECT_NE(error("{{ 3 ** 100 }}").find("integer overflow in **"), std::string::npos);
  EXPECT_NE(error("{{ (-9223372036854775807 - 1) // -1 }}").find("integer overflow"), std::string::npos);
  EXPECT_NE(error("{{ 'ab' * 100000000 }}").find("repetition too large"), std::string::npos);
  EXPECT_NE(error("{% for i in range(100000000) %}{% endfor %}").find("range() of more than"), std::string::npos);
  EXPECT_EQ(render("{{ (-1) ** 1000000000000 }} {{ 0 ** 5 }} {{ 7 is divisibleby(-1) }}"), "1 0 True");
}

TEST(ChatTemplate, MessagesAreValidated) {
  auto err = [](const std::string& j) { return error_of([&] { parse_chat_messages(j, "m.json"); }); };
  EXPECT_NE(err("{}").find("m.json: messages must be a JSON array"), std::string::npos);
  EXPECT_NE(err(R"([{"role": "user"}])").find("message 0: missing content"), std::string::npos);
  EXPECT_NE(err(R"([{"role": "robot", "content": "x"}])").find("role 'robot'"), std::string::npos);
  EXPECT_NE(err(R"([{"role": "assistant", "content": "", "tool_calls": []}])").find("tool calls are not supported"),
            std::string::npos);
  EXPECT_NE(err(R"([{"role": "user", "content": [{"type": "text"}]}])").find("content must be a string"),
            std::string::npos);
  EXPECT_NE(err("[1").find("not valid JSON"), std::string::npos);
  // Qwen3's template reads messages[0]: an empty conversation is the template's error, as in Jinja.
  const ChatTemplate tmpl = ChatTemplate::load(std::string(TITAN_SOURCE_DIR) + "/assets/qwen3-tokenizer");
  EXPECT_NE(error_of([&] { tmpl.render({}, ChatOptions{}); }).find("is undefined"), std::string::npos);
}

TEST(ChatTemplate, MissingTemplateIsAnErrorNamingTheFile) {
  const std::string e = error_of([] { ChatTemplate::load(test::fixture("tokenizer")); });
  EXPECT_NE(e.find("no chat template"), std::string::npos) << e;
}

// An unparseable tokenizer_config.json is its own error (it read as "has no chat template").
TEST(ChatTemplate, UnparseableTokenizerConfigIsAnErrorNamingTheFile) {
  const std::string dir = temp_dir("bad_tokenizer_config");
  write_file_atomic(dir + "/tokenizer_config.json", "{\"chat_template\": \"{{ x }}\",\n  oops}");
  const std::string e = error_of([&] { ChatTemplate::available(dir); });
  EXPECT_EQ(e.rfind(dir + "/tokenizer_config.json: not valid JSON (parse error at line 2", 0), 0u) << e;
  EXPECT_EQ(e.find("[json.exception"), std::string::npos) << e;
  EXPECT_EQ(error_of([&] { ChatTemplate::load(dir); }), e);
}
