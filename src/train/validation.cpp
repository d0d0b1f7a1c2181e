#include "train/validation.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/clock.h"
#include "comm/comm.h"
#include "infer/generate.h"
#include "infer/cached_source.h"
#include "ops/cross_entropy/cross_entropy.h"

namespace titan {

namespace {

std::string validation_source(const JobConfig& cfg) {
  if (!cfg.validation.dataset_path.empty()) return cfg.validation.dataset_path;
  if (!cfg.validation.dataset.empty()) return cfg.validation.dataset;
  return "c4_demo";
}

}  // namespace

Validator::Validator(const JobConfig& cfg, const data::Tokenizer& tok, const std::string& tokenizer_dir)
    : cfg_(cfg), tok_(tok), tokenizer_dir_(tokenizer_dir) {
  rows_ = std::make_unique<DataRows>(cfg, tok, validation_source(cfg), cfg.validation.seq_len);
}

ValidationResult Validator::run(DecoderModel& model, comm::Comm& comm, comm::Comm* loss_comm) const {
  const double t0 = now_seconds();
  const int64_t W = comm.size(), r = comm.rank(), lb = cfg_.validation.local_batch_size;
  comm::Comm& sum_comm = loss_comm ? *loss_comm : comm;
  const ContextParallel& cp = model.context_parallel();
  const int64_t N = cfg_.validation.steps * lb, per = (N + W - 1) / W, calls = (per + lb - 1) / lb;
  const int64_t first = std::min(N, r * per), last = std::min(N, (r + 1) * per);
  double loss_sum = 0;
  int64_t count = 0;
  for (int64_t c = 0; c < calls; ++c) {
    const int64_t a = first + c * lb, n = std::max<int64_t>(0, std::min(lb, last - a));
    Batch b = rows_->rows(uint64_t(n > 0 ? a : 0), std::max<int64_t>(n, 1));
    if (n == 0)  // this rank is out of rows: a forward that counts nothing
      std::fill_n(b.labels.data<int64_t>(), b.labels.numel(), int64_t(-100));
    if (cp.on()) {  // this rank's chunks of each row, as in training
      b.inputs = cp_take_sequence(b.inputs, cp);
      b.labels = cp_take_sequence(b.labels, cp);
      if (b.positions.defined()) b.positions = cp_take_sequence(b.positions, cp);
    }
    count += count_labels(b.labels);
    loss_sum += model.forward(b.inputs, b.labels, nullptr, b.positions.defined() ? &b.positions : nullptr);
  }
  ValidationResult res;
  const bool sum = sum_comm.size() > 1;
  res.tokens = sum ? sum_comm.all_reduce_sum(count) : count;
  const double total = sum ? sum_comm.all_reduce_sum(loss_sum) : loss_sum;
  res.loss = res.tokens > 0 ? total / double(res.tokens) : NAN;
  res.seconds = now_seconds() - t0;
  return res;
}

std::vector<std::string> Validator::samples(DecoderModel& model) const {
  std::vector<std::vector<uint32_t>> prompts;
  const bool chat = cfg_.training.dataset_format == DatasetFormat::Chat;
  const data::ChatTemplate* tmpl = nullptr;
  std::unique_ptr<data::ChatTemplate> owned;
  if (chat) {
    owned = std::make_unique<data::ChatTemplate>(data::ChatTemplate::load(
        data::ChatTemplate::available(tokenizer_dir_) ? tokenizer_dir_ : data::Tokenizer::default_dir()));
    tmpl = owned.get();
  }
  for (const auto& p : cfg_.validation.sample_prompts)
    prompts.push_back(tmpl ? tmpl->encode(tok_, {{"user", p, std::nullopt}}, data::ChatOptions{}) : tok_.encode(p));
  if (prompts.empty()) return {};
  infer::GenerateOptions opt;
  opt.stop.max_new_tokens = cfg_.validation.sample_max_tokens;
  opt.stop.eos_ids.push_back(tok_.eot_id());
  if (const int64_t im_end = tok_.token_to_id("<|im_end|>"); im_end >= 0) opt.stop.eos_ids.push_back(uint32_t(im_end));
  opt.pad_id = tok_.eot_id();
  // The weights do not change while sampling: their compute copies are made once for all the steps.
  model.hold_compute_weights(true);
  infer::CachedLogitsSource src(model);
  std::vector<std::string> out;
  for (const auto& r : infer::generate(src, tok_, prompts, opt)) out.push_back(r.text);
  model.hold_compute_weights(false);
  return out;
}

namespace {

// Validates every freq steps and at the last step; samples where generation is available.
class ValidationHook final : public TrainerHook {
 public:
  explicit ValidationHook(Trainer& t) : v_(t.cfg(), t.data().tokenizer(), t.data().tokenizer_dir()) {
    if (t.lead())
      std::fprintf(stderr, "[titan] validation: every %lld steps, %lld rows of %lld tokens from %s\n",
                   (long long)t.cfg().validation.freq,
                   (long long)(t.cfg().validation.steps * t.cfg().validation.local_batch_size),
                   (long long)t.cfg().validation.seq_len, v_.rows().describe().c_str());
  }
  void on_step_end(Trainer& t, const StepRecord& rec) override {
    if (rec.step % t.cfg().validation.freq != 0 && !t.last_step()) return;
    const ValidationResult r = v_.run(t.model(), t.mesh().batch(), &t.mesh().loss());
    if (t.lead()) t.metrics().record_validation(rec.step, r.loss, r.tokens, r.seconds);
    if (t.cfg().validation.sample_prompts.empty()) return;
    if (t.comm().size() > 1 || t.model_state().sharded()) {
      if (t.lead() && !warned_)
        std::fprintf(stderr, "[titan] validation: sample_prompts need one process with whole weights; skipped\n");
      warned_ = true;
      return;
    }
    const std::vector<std::string> texts = v_.samples(t.model());
    for (size_t i = 0; i < texts.size(); ++i)
      std::fprintf(stderr, "[titan] sample %zu: %s -> %s\n", i, t.cfg().validation.sample_prompts[i].c_str(),
                   texts[i].c_str());
  }

 private:
  Validator v_;
  bool warned_ = false;
};

}  // namespace

std::unique_ptr<TrainerHook> make_validation_hook(Trainer& trainer) { return std::make_unique<ValidationHook>(trainer); }

}  // namespace titan
