#include "train/train_data.h"

#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "core/error.h"

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

// [training] dataset_streaming = "auto" streams datasets above this size on disk.
constexpr uint64_t kStreamAboveBytes = uint64_t(1) << 30;

bool should_stream(const JobConfig& cfg, const std::vector<std::string>& files) {
  if (!cfg.training.dataset_mix.empty()) return true;
  switch (cfg.training.dataset_streaming) {
    case DatasetStreaming::On: return true;
    case DatasetStreaming::Off: return false;
    case DatasetStreaming::Auto: break;
  }
  uint64_t bytes = 0;
  for (const std::string& f : files) {
    if (data::file_type(f).format == data::FileFormat::Tokens) return false;  // mapped, never tokenized
    struct stat st {};
    if (::stat(f.c_str(), &st) == 0) bytes += uint64_t(st.st_size);
  }
  return bytes > kStreamAboveBytes;
}

data::DocOptions chat_doc_options(const JobConfig& cfg) {
  data::DocOptions opt;
  opt.skip_bad_rows = cfg.training.skip_bad_rows;
  opt.bad_row_hint = kBadRowHint;
  opt.field = cfg.training.dataset_column;
  return opt;
}

// The model folder's chat template where it has one, else the bundled Qwen3 tokenizer's.
data::ChatEncoder chat_encoder(const JobConfig& cfg, const data::Tokenizer& tok) {
  const std::string dir = cfg.model.hf_assets_path;
  const std::string tdir = !dir.empty() && data::ChatTemplate::available(dir) ? dir : data::Tokenizer::default_dir();
  return data::ChatEncoder(data::ChatTemplate::load(tdir), tok);
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
    chat_ = std::make_shared<const data::ChatRows>(data::ChatRows::load(data::resolve_dataset_files(files_or_name),
                                                                        chat_encoder(cfg, tok), seq_len,
                                                                        cfg.training.train_on_prompt,
                                                                        chat_doc_options(cfg)));
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
    std::vector<std::string> files = data::resolve_dataset_files(source);
    if (!should_stream(cfg, files)) {
      chat_ = std::make_unique<DataRows>(cfg, *tok_, source, seq_len_);
      return;
    }
    chat_encoder_ = std::make_unique<data::ChatEncoder>(chat_encoder(cfg, *tok_));
    data::ChatStreamOptions so;
    so.doc = chat_doc_options(cfg);
    so.train_on_prompt = cfg.training.train_on_prompt;
    so.threads = int(cfg.training.dataset_threads);
    chat_stream_ = std::make_unique<data::ChatStream>(source, std::move(files), *chat_encoder_, seq_len_, so);
    return;
  }
  std::vector<data::StreamSource> sources;
  if (!cfg.training.dataset_mix.empty()) {
    for (const DatasetMixEntry& m : cfg.training.dataset_mix)
      sources.push_back({m.path, data::resolve_dataset_files(m.path), m.weight});
  } else {
    sources.push_back({source, data::resolve_dataset_files(source), 1.0});
  }
  if (!should_stream(cfg, sources[0].files)) {
    loader_ = std::make_unique<data::PackedLoader>(data::TokenDataset::load(text_spec(cfg, source), *tok_));
    return;
  }
  const data::DatasetSpec spec = text_spec(cfg, source);
  data::StreamOptions so;
  so.doc.field = spec.text_field;
  so.doc.skip_bad_rows = spec.skip_bad_lines;
  so.doc.bad_row_hint = kBadRowHint;
  so.seed = uint64_t(cfg.training.seed);
  so.threads = int(cfg.training.dataset_threads);
  stream_ = std::make_unique<data::TokenStream>(std::move(sources), *tok_, so);
}

std::string TrainData::describe() const {
  if (chat_) return "chat data: " + chat_->describe();
  if (chat_stream_) return "chat data: " + chat_stream_->describe();
  if (stream_) return "data: " + stream_->describe();
  return "";
}

std::vector<std::pair<std::string, uint64_t>> TrainData::dataset_tokens() const {
  std::vector<std::pair<std::string, uint64_t>> out;
  if (!stream_ || stream_->sources() < 2) return out;
  const auto t = stream_->source_tokens();
  for (size_t i = 0; i < t.size(); ++i) out.emplace_back(stream_->source_name(i), t[i]);
  return out;
}

// Chat rows are sharded as text windows are (data/packed_loader.h): global micro-batch g is rows
// [g G, (g + 1) G), G = local_batch x world, rank r taking local_batch of them from r x local_batch.
Batch TrainData::next(int64_t rank, int64_t world) {
  if (chat_stream_) {
    Batch b = chat_stream_->next_batch(local_batch_, int(rank), int(world));
    if (block_causal_) add_document_positions(b, tok_->eot_id());
    return b;
  }
  if (chat_) {
    Batch b = chat_->rows(chat_position_ + uint64_t(rank * local_batch_), local_batch_);
    chat_position_ += uint64_t(local_batch_ * world);
    b.epoch = chat_position_ / chat_->size();
    return b;
  }
  Batch b = stream_ ? stream_->next_batch(local_batch_, seq_len_, int(rank), int(world))
                   : loader_->next_batch(local_batch_, seq_len_, int(rank), int(world));
  if (block_causal_) add_document_positions(b, tok_->eot_id());
  return b;
}

std::string TrainData::state() const {
  if (chat_stream_) return chat_stream_->state().to_json();
  if (chat_) return nlohmann::json{{"chat_rows_consumed", chat_position_}, {"chat_rows", chat_->size()}}.dump();
  if (stream_) return stream_->state().to_json();
  return loader_->state().to_json();
}

void TrainData::restore(const std::string& s) {
  const std::string origin = "checkpoint data state";
  data::ChatStreamState cs;
  const bool is_chat_stream = data::ChatStreamState::from_json(s, origin, &cs);
  if (chat_stream_) {
    TITAN_CHECK(is_chat_stream, origin, ": not a chat stream position (the run encoded its chat data first, or "
                "trained on text; keep [training] dataset_streaming and dataset_format as they were)");
    return chat_stream_->restore(cs);
  }
  TITAN_CHECK(!is_chat_stream, origin, ": a chat stream position, but this run ",
              chat_ ? "encodes its chat data first (set [training] dataset_streaming = \"on\" as the run that saved "
                      "it had)"
                    : "trains on text data (dataset_format = \"chat\" saved it)");
  data::StreamState st;
  const bool is_stream = data::StreamState::from_json(s, origin, &st);
  if (stream_) {
    TITAN_CHECK(is_stream, origin, ": not a stream position (the run tokenized its dataset first; keep [training] "
                "dataset_streaming and dataset_mix as they were)");
    return stream_->restore(st);
  }
  if (!chat_) {
    TITAN_CHECK(!is_stream, origin, ": a stream position, but this run tokenizes its dataset first (set [training] "
                "dataset_streaming = \"on\" as the run that saved it had, or its dataset_mix)");
    return loader_->restore(data::LoaderState::from_json(s, origin));
  }
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
