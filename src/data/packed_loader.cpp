#include "data/packed_loader.h"

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace titan::data {

std::string LoaderState::to_json() const {
  nlohmann::json j = {{"position", position}, {"dataset_tokens", dataset_tokens}};
  return j.dump();
}

LoaderState LoaderState::from_json(std::string_view text, const std::string& origin) {
  nlohmann::json j = nlohmann::json::parse(text.begin(), text.end(), nullptr, false);
  TITAN_CHECK(!j.is_discarded() && j.is_object(), origin, ": data loader state is not a JSON object");
  LoaderState s;
  for (const char* k : {"position", "dataset_tokens"})
    TITAN_CHECK(j.contains(k) && j[k].is_number_unsigned(), origin, ": data loader state needs a non-negative \"", k,
                "\"");
  s.position = j["position"].get<uint64_t>();
  s.dataset_tokens = j["dataset_tokens"].get<uint64_t>();
  return s;
}

PackedLoader::PackedLoader(std::shared_ptr<const TokenDataset> data, bool loop, LogFn log)
    : data_(std::move(data)), loop_(loop), log_(std::move(log)) {
  TITAN_CHECK(data_ && data_->size() > 0, "data loader: empty dataset");
}

void PackedLoader::restore(const LoaderState& s) {
  TITAN_CHECK(s.dataset_tokens == data_->size(), "data loader state was saved on a dataset of ", s.dataset_tokens,
              " tokens, but dataset ", data_->name(), " has ", data_->size(), "; resuming would not continue at the next token");
  position_ = s.position;
}

bool PackedLoader::next_batch(int64_t local_batch, int64_t seq_len, int rank, int world, Batch* out) {
  TITAN_CHECK(local_batch > 0 && seq_len > 0, "data loader: batch size and sequence length must be positive");
  TITAN_CHECK(world > 0 && rank >= 0 && rank < world, "data loader: rank ", rank, " outside world of ", world);
  const uint64_t window = uint64_t(seq_len) + 1;
  const uint64_t global = window * uint64_t(local_batch) * uint64_t(world);
  const uint64_t n = data_->size();
  if (!loop_ && position_ + global > n) return false;
  uint64_t begin = position_ + window * uint64_t(local_batch) * uint64_t(rank);
  out->inputs = Tensor::empty({local_batch, seq_len}, DType::I64);
  out->labels = Tensor::empty({local_batch, seq_len}, DType::I64);
  out->epoch = position_ / n;
  int64_t* in = out->inputs.data<int64_t>();
  int64_t* lab = out->labels.data<int64_t>();
  std::vector<int64_t> w(window);
  for (int64_t b = 0; b < local_batch; ++b) {
    data_->read(begin + uint64_t(b) * window, window, w.data());
    std::copy(w.begin(), w.end() - 1, in + b * seq_len);
    std::copy(w.begin() + 1, w.end(), lab + b * seq_len);
  }
  uint64_t before = position_ / n;
  position_ += global;
  uint64_t after = position_ / n;
  if (after != before && rank == 0 && log_) {
    log_("data: dataset " + data_->name() + ": epoch " + std::to_string(after) + " done (" + std::to_string(n) +
         " tokens, " + std::to_string(data_->documents()) + " documents per epoch); starting epoch " +
         std::to_string(after + 1));
  }
  return true;
}

Batch PackedLoader::next_batch(int64_t local_batch, int64_t seq_len, int rank, int world) {
  Batch b;
  TITAN_CHECK(next_batch(local_batch, seq_len, rank, world, &b), "data loader: dataset ", data_->name(),
              " is exhausted (single pass)");
  return b;
}

}  // namespace titan::data
