#include "infer/generate.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/tokenizer.h"
#include "infer/batch.h"
#include "infer/stream.h"

namespace titan::infer {

std::vector<GenerationResult> generate(LogitsSource& src, const data::Tokenizer& tok,
                                       const std::vector<std::vector<uint32_t>>& prompts, const GenerateOptions& opt,
                                       const TextFn& on_text) {
  validate(opt.sampling);
  validate(opt.stop);
  const size_t rows = prompts.size();
  std::vector<GenerationResult> out(rows);
  if (rows == 0) return out;
  const int64_t V = src.vocab_size();
  const int64_t max_pos = src.max_positions();
  for (size_t r = 0; r < rows; ++r) {
    TITAN_CHECK(!prompts[r].empty(), "prompt ", opt.first_stream + r, " is empty: generation needs at least one token");
    for (uint32_t id : prompts[r])
      TITAN_CHECK(int64_t(id) < V, "prompt ", opt.first_stream + r, ": token id ", id, " is not below the model's vocab_size ", V,
                  " (is the tokenizer the model's?)");
    const int64_t need = int64_t(prompts[r].size()) + opt.stop.max_new_tokens;
    TITAN_CHECK(max_pos <= 0 || need <= max_pos, "prompt ", opt.first_stream + r, " (", prompts[r].size(),
                " tokens) + --max-new-tokens ", opt.stop.max_new_tokens, " exceeds the model's max_position_embeddings ",
                max_pos);
    out[r].prompt_ids = prompts[r];
  }

  std::vector<bool> active(rows, true);
  std::vector<std::vector<uint32_t>> context(prompts);  // what the repetition penalty sees
  std::vector<StopChecker> stops;
  std::vector<TokenStream> streams;
  for (size_t r = 0; r < rows; ++r) {
    stops.emplace_back(opt.stop);
    streams.emplace_back(tok);
  }
  size_t live = rows;
  auto finish = [&](size_t r, FinishReason why) {
    out[r].finish = why;
    active[r] = false;
    --live;
    std::string rest = streams[r].flush();
    if (on_text && !rest.empty()) on_text(r, rest);
  };
  if (opt.stop.max_new_tokens == 0)
    for (size_t r = 0; r < rows; ++r) finish(r, FinishReason::Length);

  LeftPaddedBatch batch = LeftPaddedBatch::make(prompts, opt.pad_id);
  std::vector<float> logits(rows * size_t(V));
  if (live > 0) src.prefill(batch, logits.data());
  std::vector<uint32_t> next(rows, opt.pad_id);
  for (uint64_t step = 0; live > 0; ++step) {
    for (size_t r = 0; r < rows; ++r) {
      if (!active[r]) continue;
      const int64_t id = choose_next(logits.data() + r * size_t(V), V, context[r], opt.sampling, opt.first_stream + r, step);
      next[r] = uint32_t(id);
      out[r].ids.push_back(next[r]);
      context[r].push_back(next[r]);
      std::string piece = streams[r].push(next[r]);
      if (on_text && !piece.empty()) on_text(r, piece);
      const std::string bytes = tok.has_id(next[r]) ? tok.decode_bytes({next[r]}) : std::string();
      FinishReason why = stops[r].update(next[r], bytes, int64_t(out[r].ids.size()));
      if (why != FinishReason::None) finish(r, why);
    }
    if (live > 0 && opt.interrupt && opt.interrupt->load())
      for (size_t r = 0; r < rows; ++r)
        if (active[r]) finish(r, FinishReason::Interrupted);
    if (live == 0) break;
    batch.append(next, active);
    src.decode_step(batch, active, logits.data());
  }

  for (auto& res : out) {
    std::vector<uint32_t> known;
    for (uint32_t id : res.ids)
      if (tok.has_id(id)) known.push_back(id);
    res.text = tok.decode(known, /*skip_special_tokens=*/true);
  }
  return out;
}

std::string result_json(const GenerationResult& r) {
  nlohmann::ordered_json j;
  j["prompt_ids"] = r.prompt_ids;
  j["ids"] = r.ids;
  j["text"] = r.text;
  j["finish_reason"] = finish_reason_name(r.finish);
  return j.dump(-1, ' ', /*ensure_ascii=*/false, nlohmann::json::error_handler_t::replace);
}

}  // namespace titan::infer
