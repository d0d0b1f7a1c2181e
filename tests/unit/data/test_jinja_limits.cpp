// A hostile chat template (from a model folder downloaded from anywhere) must end in a one-line
// error naming its file, never a crash, a hang or gigabytes of memory: left-deep chains past the
// nesting limit, loop bombs past the step budget, values that double past the size limit.
#include <gtest/gtest.h>

#include <chrono>

#include "common/test_util.h"
#include "core/error.h"
#include "data/chat_template.h"
#include "data/jinja.h"

using namespace titan;
using namespace titan::data;
using namespace titan::test;

namespace {

const std::string kOrigin = "/models/evil/tokenizer_config.json";

std::string render_error(const std::string& src) {
  return error_of([&] { jinja::Template::parse(src, kOrigin).render({}); });
}

// `{{ x OP x OP ... }}` with n terms.
std::string chain(const std::string& first, const std::string& link, int n) {
  std::string s = "{% set x = 'a' %}{{ " + first;
  for (int k = 1; k < n; ++k) s += link;
  return s + " }}";
}

double seconds_of(const std::function<void()>& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

TEST(JinjaLimits, LeftDeepChainsAreNestingErrorsNamingTheFile) {
  // 20,000 terms: the evaluator recursed once per term (SIGSEGV) though the parser never nested.
  for (const auto& [first, link] : std::vector<std::pair<std::string, std::string>>{
           {"1", " + 1"}, {"x", " ~ x"}, {"x", " and x"}, {"x", " or x"}, {"x", "|string"}, {"[x]", "[0]"},
           {"x", ".a"}, {"1", " * 1"}, {"x", "()"}, {"x", "[1:]"}}) {
    const std::string e = render_error(chain(first, link, 20000));
    EXPECT_NE(e.find(kOrigin + ": chat template line 1: nesting deeper than 200 levels"), std::string::npos)
        << link << ": " << e;
  }
  // Chains inside parentheses inside chains: the depth of the whole tree counts.
  std::string mixed = "{{ (((1", eighty;
  for (int j = 0; j < 80; ++j) eighty += " + 1";
  mixed += eighty + ")" + eighty + ")" + eighty + ")" + eighty + " }}";
  EXPECT_NE(render_error(mixed).find("nesting deeper than 200"), std::string::npos) << render_error(mixed);
  // Below the limit, a long chain still renders.
  EXPECT_EQ(jinja::Template::parse(chain("1", " + 1", 150), kOrigin).render({}), "150");
}

TEST(JinjaLimits, LoopBombsEndInAnErrorWithinSeconds) {
  std::string e;
  const double s = seconds_of([&] {
    e = render_error("{% for i in range(1048576) %}{% for j in range(1048576) %}{% endfor %}{% endfor %}");
  });
  EXPECT_NE(e.find(kOrigin + ": chat template line 1: rendering takes more than"), std::string::npos) << e;
  EXPECT_LT(s, 20.0);
  // A loop over a big list inside a loop: the list's copies are work too.
  e = render_error("{% set l = range(1000000)|list %}{% for i in range(1000000) %}{% if 5 in l %}{% endif %}{% endfor %}");
  EXPECT_NE(e.find("rendering takes more than"), std::string::npos) << e;
}

TEST(JinjaLimits, ValuesThatDoubleAreSizeErrorsNotBadAlloc) {
  std::string doubling = "{% set ns = namespace(s='ab') %}";
  for (int k = 0; k < 40; ++k) doubling += "{% set ns.s = ns.s ~ ns.s %}";
  // Whichever bound it meets first: the size of one value, or the work of making them all.
  std::string e = render_error(doubling + "{{ ns.s|length }}");
  EXPECT_TRUE(e.find(kOrigin + ": chat template line 1: a string longer than 64 MiB") != std::string::npos ||
              e.find(kOrigin + ": chat template line 1: rendering takes more than") != std::string::npos)
      << e;
  e = render_error("{% set s = 'x' * 60000000 %}{{ (s ~ s)|length }}");
  EXPECT_NE(e.find(kOrigin + ": chat template line 1: a string longer than 64 MiB"), std::string::npos) << e;

  std::string lists = "{% set ns = namespace(l=[1]) %}";
  for (int k = 0; k < 40; ++k) lists += "{% set ns.l = ns.l + ns.l %}";
  e = render_error(lists);
  EXPECT_NE(e.find("a list of more than"), std::string::npos) << e;

  // Repetition and literals of a big string: measured by bytes, not items.
  const std::string big = "{% set s = 'x' * 60000000 %}";
  EXPECT_NE(render_error(big + "{% set l = [s] * 1000 %}").find("repetition too large"), std::string::npos);
  EXPECT_NE(render_error(big + "{% set l = [s, s, s, s, s, s] %}").find("a value larger than 64 MiB"), std::string::npos);
  EXPECT_NE(render_error(big + "{{ dict(a=s, b=s, c=s) }}").find("a value larger than 64 MiB"), std::string::npos);
  EXPECT_NE(render_error(big + "{% for k in range(100) %}{% set t = s ~ '' %}{% endfor %}").find("rendering takes more than"),
            std::string::npos);
  // Indexing a big string does not make a value per character.
  EXPECT_EQ(jinja::Template::parse(big + "{{ s[0] }}{{ s[-1] }}{{ s[1:3] }}", kOrigin).render({}), "xxxx");
  EXPECT_NE(render_error(big + "{% for c in s %}{% endfor %}").find("iterating over a string of more than"),
            std::string::npos);
  EXPECT_NE(render_error("{{ ('a ' * 30000000).split()|length }}").find("into more than"), std::string::npos);
}

TEST(JinjaLimits, NestedAndSelfContainingValuesAreRefused) {
  std::string e = render_error(
      "{% set ns = namespace(l=[]) %}{% for i in range(1000) %}{% set ns.l = [ns.l] %}{% endfor %}{{ ns.l|tojson }}");
  EXPECT_NE(e.find("a value nested deeper than 100 levels"), std::string::npos) << e;
  e = render_error("{% set ns = namespace(a=1) %}{% set ns.me = [ns] %}{{ [ns]|tojson }}");
  EXPECT_NE(e.find("cannot contain itself"), std::string::npos) << e;
}

TEST(JinjaLimits, ChatTemplateErrorsNameTheFile) {
  std::string e = error_of([] {
    ChatTemplate::from_string(chain("1", " + 1", 20000), kOrigin, {}).render({{"user", "hi", std::nullopt}}, ChatOptions{});
  });
  EXPECT_NE(e.find(kOrigin), std::string::npos) << e;
  EXPECT_NE(e.find("nesting deeper than 200"), std::string::npos) << e;
}

TEST(JinjaLimits, RealTemplatesStayFarBelowTheBudgets) {
  // Qwen3's template over 4,000 turns of 2 KB each renders (about 8 MB of text).
  const ChatTemplate tmpl = ChatTemplate::load(std::string(TITAN_SOURCE_DIR) + "/assets/qwen3-tokenizer");
  std::vector<ChatMessage> msgs;
  for (int k = 0; k < 4000; ++k)
    msgs.push_back({k % 2 ? "assistant" : "user", std::string(2048, 'a' + char(k % 26)), std::nullopt});
  const std::string out = tmpl.render(msgs, ChatOptions{});
  EXPECT_GT(out.size(), size_t(4000 * 2048));
}
