#include "train/train_data.h"

#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "model/positions.h"

namespace titan {

namespace {

constexpr const char* kBadRowHint =
    "fix or remove the row, or set [training] skip_bad_rows = true to skip and count bad rows";

data::DatasetSpec text_spec(const JobConfig& cfg, const std::string& source) {
  data::DatasetSpec spec;
  spec.name_or_path = source;
  spec.skip_bad_lines = cfg.training.skip_bad_rows;
  spec.bad_line_hint = kBadRowHint;
  if (!cfg.training.dataset_column.empty()) spec.text_field = cfg.training.dataset_column;
  return spec;
}

}  // namespace

void add_document_positions(Batch& b, uint32_t separator) {
  b.positions = positions_after_separator(b.inputs, int64_t(separator));
}

DataRows::DataRows(const JobConfig& cfg, const data::Tokenizer& tok, const std::string& files_or_name,
                   int64_t seq_len)
    : seq_len_(seq_len),
      block_causal_(cfg.model.attn_mask_type == AttnMaskType::BlockCausal),
      eot_(tok.eot_id()) {
  if (cfg.training.dataset_format == DatasetFormat::Chat) {
    const std::string dir = cfg.model.hf_assets_path;
    const std::string tdir = !dir.empty() && data::ChatTemplate::available(dir) ? dir : data::Tokenizer::default_dir();
    data::ChatEncoder enc(data::ChatTemplate::load(tdir), tok);
    data::DocOptions opt;
    opt.skip_bad_rows = cfg.training.skip_bad_rows;
    opt.bad_row_hint = kBadRowHint;
    opt.field = cfg.training.dataset_column;
    chat_ = std::make_shared<const data::ChatRows>(data::ChatRows::load(
        data::resolve_dataset_files(files_or_name), enc, seq_len, cfg.training.train_on_prompt, opt));
  } else {
    text_ = data::TokenDataset::load(text_spec(cfg, files_or_name), tok);
  }
}

uint64_t DataRows::size() const {
  if (chat_) return chat_->rows();
  const uint64_t w = uint64_t(seq_len_) + 1;
  return std::max<uint64_t>(1, text_->size() / w);
}

std::string DataRows::describe() const {
  if (chat_) return chat_->describe();
  return std::to_string(text_->size()) + " tokens (" + std::to_string(text_->documents()) + " documents)";
}

Batch DataRows::rows(uint64_t first, int64_t n) const {
  Batch b;
  b.inputs = Tensor::empty({n, seq_len_}, DType::I64);
  b.labels = Tensor::empty({n, seq_len_}, DType::I64);
  int64_t* in = b.inputs.data<int64_t>();
  int64_t* lab = b.labels.data<int64_t>();
  const uint64_t w = uint64_t(seq_len_) + 1;
  std::vector<int64_t> win(w);
  for (int64_t r = 0; r < n; ++r) {
    if (chat_) {
      chat_->fill(first + uint64_t(r), in + r * seq_len_, lab + r * seq_len_);
    } else {
      text_->read((first + uint64_t(r)) * w, w, win.data());
      std::copy(win.begin(), win.end() - 1, in + r * seq_len_);
      std::copy(win.begin() + 1, win.end(), lab + r * seq_len_);
    }
  }
  if (block_causal_) add_document_positions(b, eot_);
  return b;
}

TrainData::TrainData(const JobConfig& cfg, const ModelConfig& model)
    : local_batch_(cfg.training.local_batch_size),
      seq_len_(cfg.training.seq_len),
      block_causal_(cfg.model.attn_mask_type == AttnMaskType::BlockCausal) {
  struct stat st {};
  const std::string assets = cfg.model.hf_assets_path;
  tokenizer_dir_ = !assets.empty() && ::stat((assets + "/tokenizer.json").c_str(), &st) == 0
                       ? assets
                       : data::Tokenizer::default_dir();
  tok_ = std::make_unique<data::Tokenizer>(data::Tokenizer::load(tokenizer_dir_));
  TITAN_CHECK(int64_t(tok_->vocab_size()) <= model.vocab_size, tokenizer_dir_, "/tokenizer.json: tokenizer has ",
              tok_->vocab_size(), " ids but the model's vocab_size is ", model.vocab_size);
  const std::string source = cfg.training.dataset_path.empty() ? cfg.training.dataset : cfg.training.dataset_path;
  if (cfg.training.dataset_format == DatasetFormat::Chat) {
    chat_ = std::make_unique<DataRows>(cfg, *tok_, source, seq_len_);
  } else {
    loader_ = std::make_unique<data::PackedLoader>(data::TokenDataset::load(text_spec(cfg, source), *tok_));
  }
}

// Chat rows are sharded as text windows are (data/packed_loader.h): global micro-batch g is rows
// [g G, (g + 1) G), G = local_batch x world, rank r taking local_batch of them from r x local_batch.
Batch TrainData::next(int64_t rank, int64_t world) {
  if (chat_) {
    Batch b = chat_->rows(chat_position_ + uint64_t(rank * local_batch_), local_batch_);
    chat_position_ += uint64_t(local_batch_ * world);
    b.epoch = chat_position_ / chat_->size();
    return b;
  }
  Batch b = loader_->next_batch(local_batch_, seq_len_, int(rank), int(world));
  if (block_causal_) add_document_positions(b, tok_->eot_id());
  return b;
}

std::string TrainData::state() const {
  if (chat_) return nlohmann::json{{"chat_rows_consumed", chat_position_}, {"chat_rows", chat_->size()}}.dump();
  return loader_->state().to_json();
}

void TrainData::restore(const std::string& s) {
  if (!chat_) return loader_->restore(data::LoaderState::from_json(s, "checkpoint data state"));
  const nlohmann::json j = nlohmann::json::parse(s, nullptr, false);
  TITAN_CHECK(!j.is_discarded() && j.is_object() && j.contains("chat_rows_consumed") && j.contains("chat_rows") &&
                  j["chat_rows_consumed"].is_number_unsigned() && j["chat_rows"].is_number_unsigned(),
              "checkpoint data state: not a chat data position (was the run trained on text data?)");
  TITAN_CHECK(j["chat_rows"].get<uint64_t>() == chat_->size(), "checkpoint data state: saved on chat data of ",
              j["chat_rows"].get<uint64_t>(), " rows, this dataset packs into ", chat_->size(),
              "; resuming would not continue at the next row");
  chat_position_ = j["chat_rows_consumed"].get<uint64_t>();
}

}  // namespace titan
