// titan generate: text continuation or chat replies from a model, with transformers' sampling
// semantics (infer/sampling.h), stop rules (infer/stopping.h) and streamed output.
//
//   titan generate --model DIR|CHECKPOINT_STEP (--prompt TEXT | --prompt-ids "ID ID ..." |
//                  --prompts FILE.jsonl) [--chat [--system TEXT] [--thinking on|off]]
//                  [--max-new-tokens N] [--temperature T] [--top-k K] [--top-p P] [--min-p P]
//                  [--repetition-penalty R] [--seed S] [--stop STRING]... [--dtype f32|bf16]
//                  [--tokenizer DIR] [--batch-size N] [--json]
//
// One prompt: the text streams to stdout as it is generated (a summary line goes to stderr);
// with --json, one line {"prompt_ids", "ids" (generated only), "text", "finish_reason"} instead.
// --prompts: one JSON line per prompt, in order; each input line is {"prompt": TEXT},
// {"prompt_ids": [...]} or {"messages": [...]} (a chat, always through the template); with
// --chat a "prompt" is one user turn. Prompts run --batch-size at a time (default 8).
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/infer_common.h"
#include "core/error.h"
#include "infer/cached_source.h"
#include "util/strings.h"

namespace titan::cli {
namespace {

std::vector<uint32_t> chat_prompt(const InferenceModel& m, const data::ChatTemplate& t, const Args& args,
                                  const std::string& user) {
  std::vector<data::ChatMessage> msgs;
  if (args.has("system")) msgs.push_back({"system", args.get("system"), std::nullopt});
  msgs.push_back({"user", user, std::nullopt});
  return t.encode(m.tokenizer, msgs, chat_options(args));
}

std::vector<std::vector<uint32_t>> read_prompts(const std::string& path, const InferenceModel& m,
                                                const std::optional<data::ChatTemplate>& tmpl, const Args& args) {
  std::vector<std::vector<uint32_t>> out;
  const std::vector<std::string> lines = split(read_file(path), '\n');
  for (size_t k = 0; k < lines.size(); ++k) {
    const std::string where = path + ":" + std::to_string(k + 1);
    if (trim(lines[k]).empty()) continue;
    nlohmann::json j = nlohmann::json::parse(lines[k], nullptr, /*allow_exceptions=*/false);
    TITAN_CHECK(!j.is_discarded() && j.is_object(), where, ": not a JSON object");
    const int kinds = int(j.contains("prompt")) + int(j.contains("prompt_ids")) + int(j.contains("messages"));
    TITAN_CHECK(kinds == 1, where, ": needs exactly one of \"prompt\", \"prompt_ids\", \"messages\"");
    if (j.contains("prompt_ids")) {
      TITAN_CHECK(j["prompt_ids"].is_array(), where, ": prompt_ids must be a list of token ids");
      std::vector<uint32_t> ids;
      for (auto& v : j["prompt_ids"]) {
        TITAN_CHECK(v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() <= int64_t(UINT32_MAX), where,
                    ": prompt_ids must be non-negative integers");
        ids.push_back(uint32_t(v.get<int64_t>()));
      }
      out.push_back(std::move(ids));
    } else if (j.contains("messages")) {
      TITAN_CHECK(tmpl.has_value(), where, ": \"messages\" need a chat template (", m.tokenizer_dir, " has none)");
      auto msgs = data::parse_chat_messages(j["messages"].dump(), where);
      out.push_back(tmpl->encode(m.tokenizer, msgs, chat_options(args)));
    } else {
      TITAN_CHECK(j["prompt"].is_string(), where, ": prompt must be a string");
      const std::string p = j["prompt"].get<std::string>();
      out.push_back(args.has("chat") ? chat_prompt(m, *tmpl, args, p) : m.tokenizer.encode(p));
    }
  }
  TITAN_CHECK(!out.empty(), path, ": no prompts");
  return out;
}

int cmd_generate(const std::vector<std::string>& argv_in) {
  std::vector<std::string> argv = argv_in;
  const std::vector<std::string> stops = take_repeated(argv, "stop");
  Args args(argv, {"json", "chat"});
  args.check_known({"model", "adapter", "tokenizer", "prompt", "prompt-ids", "prompts", "chat", "system", "thinking",
                    "max-new-tokens", "temperature", "top-k", "top-p", "min-p", "repetition-penalty", "seed", "dtype",
                    "kernels", "batch-size", "json"});
  TITAN_CHECK(args.positional().empty(), "unexpected argument '", args.positional().empty() ? "" : args.positional()[0], "'");
  const int sources = int(args.has("prompt")) + int(args.has("prompt-ids")) + int(args.has("prompts"));
  TITAN_CHECK(sources == 1, "give exactly one of --prompt TEXT, --prompt-ids \"ID ...\", --prompts FILE.jsonl");
  TITAN_CHECK(!(args.has("chat") && args.has("prompt-ids")), "--chat takes text prompts, not --prompt-ids");
  TITAN_CHECK(args.has("chat") || (!args.has("system") && !args.has("thinking")), "--system and --thinking need --chat");
  const int64_t batch_size = args.get_int("batch-size", 8, 1, 1 << 20);

  InferenceModel m = load_inference_model(args);
  std::optional<data::ChatTemplate> tmpl;
  if (args.has("chat") || args.has("prompts")) {
    if (data::ChatTemplate::available(m.tokenizer_dir)) tmpl = data::ChatTemplate::load(m.tokenizer_dir);
    TITAN_CHECK(!args.has("chat") || tmpl, "--chat: ", m.tokenizer_dir, " has no chat template");
  }
  const infer::GenerateOptions opt = generation_options(args, m, stops, args.has("chat"));
  infer::CachedLogitsSource src(*m.model);

  if (args.has("prompts")) {
    const auto prompts = read_prompts(args.get("prompts"), m, tmpl, args);
    for (size_t first = 0; first < prompts.size(); first += size_t(batch_size)) {
      const size_t n = std::min(prompts.size() - first, size_t(batch_size));
      std::vector<std::vector<uint32_t>> chunk(prompts.begin() + long(first), prompts.begin() + long(first + n));
      infer::GenerateOptions o = opt;
      o.first_stream = first;
      for (const auto& r : infer::generate(src, m.tokenizer, chunk, o)) std::printf("%s\n", infer::result_json(r).c_str());
      std::fflush(stdout);
    }
    const auto& tm = src.timing();
    std::fprintf(stderr, "[%zu prompts; prefill %.1f tokens/s, decode %.2f tokens/s]\n", prompts.size(),
                 tm.prefill_s > 0 ? double(tm.prefill_tokens) / tm.prefill_s : 0.0,
                 tm.decode_s > 0 ? double(tm.decode_tokens) / tm.decode_s : 0.0);
    return 0;
  }

  std::vector<uint32_t> prompt;
  if (args.has("prompt-ids")) prompt = parse_id_list(args.get("prompt-ids"), "--prompt-ids");
  else if (args.has("chat")) prompt = chat_prompt(m, *tmpl, args, args.get("prompt"));
  else prompt = m.tokenizer.encode(args.get("prompt"));

  const bool json = args.has("json");
  const auto t0 = std::chrono::steady_clock::now();
  infer::TextFn stream;
  if (!json)
    stream = [](size_t, const std::string& piece) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    };
  const auto res = infer::generate(src, m.tokenizer, {prompt}, opt, stream);
  if (json) std::printf("%s\n", infer::result_json(res[0]).c_str());
  else std::printf("\n");
  std::fflush(stdout);
  {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const auto& tm = src.timing();
    std::fprintf(stderr, "[%s: %zu prompt + %zu generated tokens, %.2f s; prefill %.1f tokens/s, decode %.2f tokens/s]\n",
                 infer::finish_reason_name(res[0].finish), prompt.size(), res[0].ids.size(), s,
                 tm.prefill_s > 0 ? double(tm.prefill_tokens) / tm.prefill_s : 0.0,
                 tm.decode_s > 0 ? double(tm.decode_tokens) / tm.decode_s : 0.0);
  }
  return 0;
}

}  // namespace

TITAN_COMMAND("generate", "generate text from a model (sampling as transformers' generate)", cmd_generate);

}  // namespace titan::cli
