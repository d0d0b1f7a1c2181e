// titan's decoding loop over the KV-cache source against transformers' greedy generate on a
// tiny model (fixtures from tools/oracle/generate_goldens.py), plus batch and sampling properties.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "data/chat_template.h"
#include "data/tokenizer.h"
#include "infer/generate.h"
#include "infer/generation_config.h"
#include "infer/cached_source.h"
#include "model/hf_model.h"
#include "infer_fixtures.h"
#include "util/strings.h"

using namespace titan;
using namespace titan::infer;
using nlohmann::json;

namespace {

std::string fixture(const std::string& rel) { return test::infer_fixture(rel); }
const json& goldens() { return test::infer_goldens("generate.json"); }

struct Tiny {
  std::unique_ptr<DecoderModel> model = load_hf_model(fixture("tiny_chat"));
  data::Tokenizer tok = data::Tokenizer::load(fixture("tiny_chat"));
};
Tiny& tiny() {
  static Tiny t;
  return t;
}

}  // namespace

TEST(Generate, GreedyIsTokenIdenticalToTransformers) {
  Tiny& t = tiny();
  CachedLogitsSource src(*t.model);
  int n = 0;
  for (const json& c : goldens()["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    GenerateOptions opt;
    opt.stop.max_new_tokens = c["max_new_tokens"].get<int64_t>();
    opt.stop.eos_ids = c["eos_ids"].get<std::vector<uint32_t>>();
    opt.sampling.repetition_penalty = c["repetition_penalty"].get<double>();
    opt.pad_id = t.tok.eot_id();
    std::string streamed;
    const auto prompt = c["prompt_ids"].get<std::vector<uint32_t>>();
    auto res = generate(src, t.tok, {prompt}, opt, [&](size_t row, const std::string& piece) {
      EXPECT_EQ(row, 0u);
      streamed += piece;
    });
    ASSERT_EQ(res.size(), 1u);
    EXPECT_EQ(res[0].prompt_ids, prompt);
    EXPECT_EQ(res[0].ids, c["ids"].get<std::vector<uint32_t>>());
    EXPECT_EQ(res[0].text, c["text"].get<std::string>());
    EXPECT_EQ(finish_reason_name(res[0].finish), c["finish_reason"].get<std::string>());
    EXPECT_EQ(streamed, res[0].text);
    ++n;
  }
  EXPECT_EQ(n, 5);
}

TEST(Generate, LeftPaddedBatchMatchesTransformersBatchedGenerate) {
  Tiny& t = tiny();
  CachedLogitsSource src(*t.model);
  std::vector<std::vector<uint32_t>> prompts;
  for (const json& row : goldens()["batch"]) prompts.push_back(row["prompt_ids"].get<std::vector<uint32_t>>());
  GenerateOptions opt;
  opt.stop.max_new_tokens = goldens()["batch_max_new_tokens"].get<int64_t>();
  opt.stop.eos_ids = read_generation_defaults(fixture("tiny_chat")).eos_ids;
  opt.pad_id = t.tok.eot_id();
  auto res = generate(src, t.tok, prompts, opt);
  ASSERT_EQ(res.size(), prompts.size());
  for (size_t r = 0; r < res.size(); ++r)
    EXPECT_EQ(res[r].ids, goldens()["batch"][r]["ids"].get<std::vector<uint32_t>>()) << "row " << r;
}

TEST(Generate, ChatPromptIdsMatchTransformersTemplateOnTheTinyTokenizer) {
  Tiny& t = tiny();
  const data::ChatTemplate tmpl = data::ChatTemplate::load(fixture("tiny_chat"));
  data::ChatOptions opt;
  opt.enable_thinking = false;
  const auto ids = tmpl.encode(t.tok, {{"user", "Hi there!", std::nullopt}}, opt);
  int found = 0;
  for (const json& c : goldens()["cases"]) {
    if (c["name"] != "chat") continue;
    EXPECT_EQ(ids, c["prompt_ids"].get<std::vector<uint32_t>>());
    ++found;
  }
  EXPECT_EQ(found, 1);
}

TEST(Generate, GenerationConfigGivesEosAndPad) {
  GenerationDefaults g = read_generation_defaults(fixture("tiny_chat"));
  Tiny& t = tiny();
  EXPECT_EQ(g.eos_ids, (std::vector<uint32_t>{uint32_t(t.tok.token_to_id("<|im_end|>")), t.tok.eot_id()}));
  ASSERT_TRUE(g.pad_id.has_value());
  EXPECT_EQ(*g.pad_id, t.tok.eot_id());
  EXPECT_FALSE(g.do_sample.value_or(true));
  GenerationDefaults q = parse_generation_defaults(R"({"eos_token_id": 7, "do_sample": true, "temperature": 0.6,
      "top_k": 20, "top_p": 0.95})", "gc.json");
  EXPECT_EQ(q.eos_ids, std::vector<uint32_t>{7});
  EXPECT_TRUE(*q.do_sample);
  EXPECT_DOUBLE_EQ(*q.temperature, 0.6);
  EXPECT_EQ(*q.top_k, 20);
  try {
    parse_generation_defaults(R"({"eos_token_id": "x"})", "gc.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("gc.json: eos_token_id must be"), std::string::npos);
  }
}

TEST(Generate, SampledRowsDependOnlyOnTheirStreamNotTheBatch) {
  Tiny& t = tiny();
  CachedLogitsSource src(*t.model);
  GenerateOptions opt;
  opt.sampling.temperature = 0.9;
  opt.sampling.top_k = 40;
  opt.sampling.top_p = 0.9;
  opt.sampling.seed = 11;
  opt.stop.max_new_tokens = 12;
  opt.pad_id = t.tok.eot_id();
  const std::vector<uint32_t> a = t.tok.encode("Hello world, this is"), b = t.tok.encode("Short");
  auto both = generate(src, t.tok, {a, b}, opt);
  GenerateOptions second = opt;
  second.first_stream = 1;
  auto alone_a = generate(src, t.tok, {a}, opt);
  auto alone_b = generate(src, t.tok, {b}, second);
  EXPECT_EQ(both[0].ids, alone_a[0].ids);
  EXPECT_EQ(both[1].ids, alone_b[0].ids);
  auto again = generate(src, t.tok, {a, b}, opt);
  EXPECT_EQ(again[0].ids, both[0].ids);
  GenerateOptions reseeded = opt;
  reseeded.sampling.seed = 12;
  EXPECT_NE(generate(src, t.tok, {a}, reseeded)[0].ids, both[0].ids);
}

TEST(Generate, StopStringsAndLengthEndRows) {
  Tiny& t = tiny();
  CachedLogitsSource src(*t.model);
  const json& c = goldens()["cases"][0];  // "text": greedy output known
  const auto prompt = c["prompt_ids"].get<std::vector<uint32_t>>();
  const auto full = c["ids"].get<std::vector<uint32_t>>();
  GenerateOptions opt;
  opt.stop.max_new_tokens = 24;
  // A stop string spanning tokens 3..4 of the known output ends generation right after token 4.
  const std::string bytes34 = t.tok.decode_bytes({full[3], full[4]});
  ASSERT_GE(bytes34.size(), 2u);
  opt.stop.stop_strings = {bytes34.substr(bytes34.size() - 2)};
  auto res = generate(src, t.tok, {prompt}, opt);
  EXPECT_EQ(res[0].finish, FinishReason::Stop);
  ASSERT_LE(res[0].ids.size(), 5u);
  EXPECT_EQ(res[0].ids, std::vector<uint32_t>(full.begin(), full.begin() + long(res[0].ids.size())));
  opt.stop.stop_strings.clear();
  opt.stop.max_new_tokens = 3;
  res = generate(src, t.tok, {prompt}, opt);
  EXPECT_EQ(res[0].finish, FinishReason::Length);
  EXPECT_EQ(res[0].ids, std::vector<uint32_t>(full.begin(), full.begin() + 3));
  opt.stop.max_new_tokens = 0;
  res = generate(src, t.tok, {prompt}, opt);
  EXPECT_TRUE(res[0].ids.empty());
  EXPECT_EQ(res[0].finish, FinishReason::Length);
}

TEST(Generate, BadRequestsAreClearErrors) {
  Tiny& t = tiny();
  CachedLogitsSource src(*t.model);
  GenerateOptions opt;
  auto err = [&](const std::vector<std::vector<uint32_t>>& p, const GenerateOptions& o) {
    try {
      generate(src, t.tok, p, o);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(err({{}}, opt).find("prompt 0 is empty"), std::string::npos);
  EXPECT_NE(err({{5000}}, opt).find("token id 5000 is not below the model's vocab_size 1040"), std::string::npos);
  opt.stop.max_new_tokens = 600;
  EXPECT_NE(err({{1, 2}}, opt).find("exceeds the model's max_position_embeddings 512"), std::string::npos);
}

TEST(Generate, ResultJsonFormat) {
  GenerationResult r;
  r.prompt_ids = {1, 2};
  r.ids = {3};
  r.text = "a\"é\n";
  r.finish = FinishReason::Eos;
  EXPECT_EQ(result_json(r), "{\"prompt_ids\":[1,2],\"ids\":[3],\"text\":\"a\\\"é\\n\",\"finish_reason\":\"eos\"}");
}
