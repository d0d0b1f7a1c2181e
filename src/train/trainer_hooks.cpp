// The trainer's built-in hooks: logging, checkpoints, the Hugging Face export (train/trainer.h).
#include <cstdio>

#include "train/trainer.h"

namespace titan {

namespace {

// Rank 0 logs every step (console, metrics.jsonl, TensorBoard at [metrics] log_freq) and the run
// summary at the end.
class MetricsHook final : public TrainerHook {
 public:
  void on_step_end(Trainer& t, const StepRecord& rec) override {
    if (t.lead()) t.metrics().record(rec);
  }
  void on_train_end(Trainer& t, TrainResult&) override {
    if (t.lead()) t.metrics().finish();
  }
};

// With [checkpoint] enable: a checkpoint every [checkpoint] interval steps, at the last step and
// when the run stops on a signal (collective: every rank writes its part).
class CheckpointHook final : public TrainerHook {
 public:
  void on_step_end(Trainer& t, const StepRecord& rec) override {
    if (!t.checkpoint_manager()) return;
    const int64_t interval = t.cfg().checkpoint.interval;
    if ((interval > 0 && rec.step % interval == 0) || t.stopping() || t.last_step()) t.save_checkpoint(rec.step);
  }
};

// [checkpoint] last_save_in_hf: the Hugging Face export when the run ends, unless a signal
// stopped it (collective).
class HfExportHook final : public TrainerHook {
 public:
  void on_train_end(Trainer& t, TrainResult& result) override {
    if (t.cfg().checkpoint.last_save_in_hf && !result.stopped_by_signal) t.export_hf();
  }
};

}  // namespace

std::unique_ptr<TrainerHook> make_metrics_hook() { return std::make_unique<MetricsHook>(); }
std::unique_ptr<TrainerHook> make_checkpoint_hook() { return std::make_unique<CheckpointHook>(); }
std::unique_ptr<TrainerHook> make_hf_export_hook() { return std::make_unique<HfExportHook>(); }

}  // namespace titan
