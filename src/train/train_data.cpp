#include "train/train_data.h"

#include <sys/stat.h>

namespace titan {

TrainData::TrainData(const JobConfig& cfg, const ModelConfig& model)
    : local_batch_(cfg.training.local_batch_size), seq_len_(cfg.training.seq_len) {
  struct stat st {};
  const std::string assets = cfg.model.hf_assets_path;
  tokenizer_dir_ = !assets.empty() && ::stat((assets + "/tokenizer.json").c_str(), &st) == 0
                       ? assets
                       : data::Tokenizer::default_dir();
  data::Tokenizer tok = data::Tokenizer::load(tokenizer_dir_);
  TITAN_CHECK(int64_t(tok.vocab_size()) <= model.vocab_size, tokenizer_dir_, "/tokenizer.json: tokenizer has ",
              tok.vocab_size(), " ids but the model's vocab_size is ", model.vocab_size);
  data::DatasetSpec spec;
  spec.name_or_path = cfg.training.dataset_path.empty() ? cfg.training.dataset : cfg.training.dataset_path;
  loader_ = std::make_unique<data::PackedLoader>(data::TokenDataset::load(spec, tok));
}

Batch TrainData::next(int64_t rank, int64_t world) {
  return loader_->next_batch(local_batch_, seq_len_, int(rank), int(world));
}

std::string TrainData::state() const { return loader_->state().to_json(); }

void TrainData::restore(const std::string& s) {
  loader_->restore(data::LoaderState::from_json(s, "checkpoint data state"));
}

}  // namespace titan
