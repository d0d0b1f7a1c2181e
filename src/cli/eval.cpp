// titan eval: loss and perplexity of a model on text, JSON-lines or token (.bin) files, by the
// sliding-window method of transformers' perplexity guide (infer/eval.h).
//
//   titan eval --model DIR|CHECKPOINT_STEP --data FILE... [--seq-len N] [--stride S] [--json]
//              [--tokenizer DIR] [--field text] [--dtype f32|bf16] [--quiet]
//
// The files are read as titan's datasets read them (src/data/dataset.h): every document is
// followed by <|endoftext|>, text is tokenized once and cached; the stream is evaluated once (no
// repetition). --seq-len defaults to min(max_position_embeddings, 2048), --stride to --seq-len
// (no overlap); a smaller stride gives each scored token more context. --json prints
// {"loss": .., "perplexity": .., "tokens": ..} and nothing else on stdout; the progress bar goes to
// stderr.
#include <cstdio>
#include <vector>

#include "cli/infer_common.h"
#include "core/error.h"
#include "data/dataset.h"
#include "data/progress.h"
#include "infer/eval.h"

namespace titan::cli {
namespace {

int cmd_eval(const std::vector<std::string>& argv_in) {
  std::vector<std::string> argv = argv_in;
  const std::vector<std::string> files = take_list(argv, "data");
  Args args(argv, {"json", "quiet", "allow-other-base"});
  args.check_known({"model", "adapter", "tokenizer", "seq-len", "stride", "json", "quiet", "field", "dtype", "kernels",
                    "allow-other-base"});
  TITAN_CHECK(args.positional().empty(), "unexpected argument '", args.positional().empty() ? "" : args.positional()[0], "'");
  TITAN_CHECK(!files.empty(), "missing required option --data FILE...");

  InferenceModel m = load_inference_model(args);
  const int64_t max_pos = m.model->config().max_position_embeddings;
  const int64_t seq_len = args.get_int("seq-len", std::min<int64_t>(max_pos, 2048), 2, max_pos);
  const int64_t stride = args.get_int("stride", seq_len, 1, INT64_MAX);  // <= seq_len: infer::sliding_windows
  const bool quiet = args.has("quiet");

  data::DatasetSpec spec;
  spec.name_or_path.clear();
  for (size_t k = 0; k < files.size(); ++k) {
    TITAN_CHECK(files[k].find(',') == std::string::npos, "--data ", files[k], ": file names with ',' are not supported");
    spec.name_or_path += (k ? "," : "") + files[k];
  }
  spec.text_field = args.get("field", "text");
  spec.progress = !quiet;
  auto ds = data::TokenDataset::load(spec, m.tokenizer, quiet ? data::LogFn([](const std::string&) {}) : data::LogFn(data::log_to_stderr));
  std::vector<int64_t> buf(ds->size());
  ds->read(0, buf.size(), buf.data());
  const int64_t V = m.model->config().vocab_size;
  std::vector<uint32_t> ids(buf.size());
  for (size_t i = 0; i < buf.size(); ++i) {
    TITAN_CHECK(buf[i] < V, spec.name_or_path, ": token id ", buf[i], " at position ", i,
                " is not below the model's vocab_size ", V);
    ids[i] = uint32_t(buf[i]);
  }

  const size_t n_windows = infer::sliding_windows(int64_t(ids.size()), seq_len, stride).size();
  data::Progress bar("eval", n_windows, !quiet, "windows");
  const infer::EvalResult r = infer::evaluate(*m.model, ids, seq_len, stride, [&](int64_t done, int64_t) {
    bar.update(uint64_t(done));
  });
  bar.finish(std::to_string(r.windows) + " windows, " + std::to_string(r.tokens) + " tokens scored");
  if (args.has("json")) {
    std::printf("{\"loss\": %.9g, \"perplexity\": %.9g, \"tokens\": %lld}\n", r.loss(), r.perplexity(),
                static_cast<long long>(r.tokens));
  } else {
    std::printf("loss: %.9g\nperplexity: %.9g\ntokens: %lld (%lld windows of %lld, stride %lld)\n", r.loss(),
                r.perplexity(), static_cast<long long>(r.tokens), static_cast<long long>(r.windows),
                static_cast<long long>(seq_len), static_cast<long long>(stride));
  }
  return 0;
}

}  // namespace

TITAN_COMMAND("eval", "loss and perplexity of a model on data (sliding windows)", cmd_eval);

}  // namespace titan::cli
