#include "data/token_stream.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace titan::data {

// ---- DocStream ----

DocStream::DocStream(std::string name, std::vector<std::string> files, DocOptions opt, LogFn log)
    : name_(std::move(name)), files_(std::move(files)), opt_(std::move(opt)), log_(std::move(log)) {
  TITAN_CHECK(!files_.empty(), "dataset ", name_, ": no files");
  for (const std::string& f : files_) {
    const FileType t = file_type(f);
    TITAN_CHECK(t.format != FileFormat::Tokens, f, ": a token file cannot be streamed; use it without [training] "
                "dataset_mix / streaming, or stream the text it was tokenized from");
  }
}

void DocStream::seek(const DocPosition& p) {
  TITAN_CHECK(p.file < files_.size(), "dataset ", name_, ": a stream position in file ", p.file, " of ",
              files_.size(), " (were the dataset's files changed?)");
  pos_ = p;
  reader_ = open_doc_reader(files_[p.file], opt_);
  reader_->seek_row(p.row);
  TITAN_CHECK(reader_->rows() == p.row, files_[p.file], ": the stream position is row ", p.row, " but the file has ",
              reader_->rows(), " (was it changed since the checkpoint?)");
  docs_this_epoch_ = 1;  // resumed mid-epoch: documents were seen
}

void DocStream::next(std::string* text) {
  Document d;
  next(&d);
  *text = std::move(d.text);
}

void DocStream::next(Document* d) {
  for (int empty_files = 0;;) {
    if (!reader_) {
      reader_ = open_doc_reader(files_[pos_.file], opt_);
    }
    if (reader_->next(d)) {
      pos_.row = reader_->rows();
      ++docs_this_epoch_;
      return;
    }
    if (reader_->skipped() && log_)
      log_("data: " + files_[pos_.file] + ": skipped " + std::to_string(reader_->skipped()) + " bad rows");
    reader_.reset();
    pos_.row = 0;
    if (++pos_.file == files_.size()) {
      TITAN_CHECK(docs_this_epoch_ > 0, "dataset ", name_, ": no documents in its files");
      pos_.file = 0;
      ++pos_.epoch;
      docs_this_epoch_ = 0;
    }
    if (++empty_files > int(files_.size()) * 2 + 2) fail("dataset ", name_, ": no documents in its files");
  }
}

// ---- StreamState ----

std::string StreamState::to_json() const {
  nlohmann::json src = nlohmann::json::array();
  for (size_t i = 0; i < sources.size(); ++i)
    src.push_back({{"name", i < names.size() ? names[i] : ""},
                   {"epoch", sources[i].epoch},
                   {"file", sources[i].file},
                   {"row", sources[i].row},
                   {"tokens", i < source_tokens.size() ? source_tokens[i] : 0}});
  return nlohmann::json{{"stream", {{"slot", slot}, {"offset", offset}, {"consumed", consumed}, {"sources", src}}}}.dump();
}

bool StreamState::from_json(std::string_view text, const std::string& origin, StreamState* out) {
  const nlohmann::json j = nlohmann::json::parse(text.begin(), text.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("stream")) return false;
  const nlohmann::json& s = j["stream"];
  auto u64 = [&](const nlohmann::json& o, const char* k) {
    TITAN_CHECK(o.is_object() && o.contains(k) && o[k].is_number_unsigned(), origin,
                ": stream state needs a non-negative \"", k, "\"");
    return o[k].get<uint64_t>();
  };
  StreamState r;
  r.slot = u64(s, "slot");
  r.offset = u64(s, "offset");
  r.consumed = u64(s, "consumed");
  TITAN_CHECK(s.contains("sources") && s["sources"].is_array() && !s["sources"].empty(), origin,
              ": stream state needs its \"sources\"");
  for (const auto& e : s["sources"]) {
    r.sources.push_back({u64(e, "epoch"), u64(e, "file"), u64(e, "row")});
    r.source_tokens.push_back(u64(e, "tokens"));
    TITAN_CHECK(e.contains("name") && e["name"].is_string(), origin, ": stream state source without a name");
    r.names.push_back(e["name"].get<std::string>());
  }
  *out = std::move(r);
  return true;
}

// ---- TokenStream ----

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

TokenStream::TokenStream(std::vector<StreamSource> sources, const Tokenizer& tok, StreamOptions opt, LogFn log)
    : tok_(tok), opt_(std::move(opt)), log_(std::move(log)) {
  TITAN_CHECK(!sources.empty(), "data stream: no datasets");
  double total = 0;
  for (const StreamSource& s : sources) {
    TITAN_CHECK(s.weight > 0 && std::isfinite(s.weight), "dataset ", s.name, ": weight ", s.weight,
                " must be a positive number");
    total += s.weight;
  }
  double c = 0;
  for (StreamSource& s : sources) {
    c += s.weight / total;
    cumulative_.push_back(c);
    sources_.emplace_back(s.name, std::move(s.files), opt_.doc, log_);
  }
  cumulative_.back() = 1.0;
  source_tokens_.assign(sources_.size(), 0);
  epochs_.assign(sources_.size(), 0);
  base_.sources.assign(sources_.size(), DocPosition{});
  base_.source_tokens.assign(sources_.size(), 0);
  for (auto& s : sources_) base_.names.push_back(s.name());
}

TokenStream::~TokenStream() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

uint32_t TokenStream::choose(uint64_t slot) const {
  if (sources_.size() == 1) return 0;
  const double u = double(splitmix64(splitmix64(opt_.seed) ^ slot) >> 11) * 0x1.0p-53;
  const size_t i = size_t(std::upper_bound(cumulative_.begin(), cumulative_.end(), u) - cumulative_.begin());
  return uint32_t(std::min(i, cumulative_.size() - 1));
}

void TokenStream::start() {
  if (started_) return;
  started_ = true;
  thread_ = std::thread([this] { produce(); });
}

void TokenStream::produce() {
  try {
    const uint32_t eot = tok_.eot_id();
    std::vector<std::string> texts;
    std::vector<Doc> docs;
    while (true) {
      {
        std::unique_lock<std::mutex> l(mu_);
        cv_.wait(l, [&] { return stop_ || queued_tokens_ < opt_.queue_tokens; });
        if (stop_) return;
      }
      texts.clear();
      docs.clear();
      for (size_t b = 0; b < opt_.batch_docs; ++b) {
        Doc d;
        d.before.slot = next_slot_;
        for (const DocStream& s : sources_) d.before.sources.push_back(s.position());
        d.source = choose(next_slot_++);
        texts.emplace_back();
        sources_[d.source].next(&texts.back());
        d.epoch = sources_[d.source].position().epoch;
        docs.push_back(std::move(d));
      }
      auto ids = tok_.encode_batch(texts, opt_.threads);
      size_t tokens = 0;
      for (size_t i = 0; i < docs.size(); ++i) {
        docs[i].ids = std::move(ids[i]);
        docs[i].ids.push_back(eot);
        tokens += docs[i].ids.size();
      }
      {
        std::lock_guard<std::mutex> l(mu_);
        for (Doc& d : docs) queue_.push_back(std::move(d));
        queued_tokens_ += tokens;
      }
      cv_.notify_all();
    }
  } catch (...) {
    {
      std::lock_guard<std::mutex> l(mu_);
      error_ = std::current_exception();
    }
    cv_.notify_all();
  }
}

TokenStream::Doc TokenStream::pop() {
  start();
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait(l, [&] { return !queue_.empty() || error_; });
  if (queue_.empty()) std::rethrow_exception(error_);
  Doc d = std::move(queue_.front());
  queue_.pop_front();
  queued_tokens_ -= d.ids.size();
  l.unlock();
  cv_.notify_all();
  return d;
}

void TokenStream::read(size_t n, int64_t* out) {
  while (n) {
    if (!cur_ || offset_ == cur_->ids.size()) {
      cur_ = std::make_unique<Doc>(pop());
      offset_ = std::min<uint64_t>(skip_first_, cur_->ids.size());
      skip_first_ = 0;
      // Epochs are logged as training reaches them, not as the reader runs ahead.
      uint64_t& seen = epochs_[cur_->source];
      if (cur_->epoch > seen) {
        seen = cur_->epoch;
        if (log_) log_("data: dataset " + sources_[cur_->source].name() + ": epoch " + std::to_string(seen) +
                       " done; starting epoch " + std::to_string(seen + 1));
      }
    }
    const size_t take = std::min<size_t>(n, cur_->ids.size() - offset_);
    for (size_t i = 0; i < take; ++i) out[i] = int64_t(cur_->ids[offset_ + i]);
    offset_ += take;
    consumed_ += take;
    source_tokens_[cur_->source] += take;
    out += take;
    n -= take;
  }
}

Batch TokenStream::next_batch(int64_t local_batch, int64_t seq_len, int rank, int world) {
  TITAN_CHECK(local_batch > 0 && seq_len > 0, "data stream: batch size and sequence length must be positive");
  TITAN_CHECK(world > 0 && rank >= 0 && rank < world, "data stream: rank ", rank, " outside world of ", world);
  const size_t window = size_t(seq_len) + 1;
  const size_t per_rank = window * size_t(local_batch);
  std::vector<int64_t> all(per_rank * size_t(world));
  read(all.size(), all.data());
  Batch b;
  b.inputs = Tensor::empty({local_batch, seq_len}, DType::I64);
  b.labels = Tensor::empty({local_batch, seq_len}, DType::I64);
  int64_t* in = b.inputs.data<int64_t>();
  int64_t* lab = b.labels.data<int64_t>();
  const int64_t* mine = all.data() + per_rank * size_t(rank);
  for (int64_t r = 0; r < local_batch; ++r) {
    const int64_t* w = mine + size_t(r) * window;
    std::copy(w, w + seq_len, in + r * seq_len);
    std::copy(w + 1, w + seq_len + 1, lab + r * seq_len);
  }
  b.epoch = cur_ ? cur_->epoch : 0;
  return b;
}

StreamState TokenStream::state() const {
  StreamState s = cur_ ? cur_->before : base_;
  s.offset = cur_ ? offset_ : base_.offset;
  s.consumed = consumed_;
  s.source_tokens = source_tokens_;
  s.names.clear();
  for (auto& src : sources_) s.names.push_back(src.name());
  return s;
}

void TokenStream::restore(const StreamState& s) {
  TITAN_CHECK(!started_, "data stream: restore after reading");
  TITAN_CHECK(s.sources.size() == sources_.size() && s.names == base_.names, "checkpoint data state: saved on "
              "the datasets [", [&] {
                std::string n;
                for (auto& x : s.names) n += (n.empty() ? "" : ", ") + x;
                return n;
              }(), "], this run streams [", [&] {
                std::string n;
                for (auto& x : base_.names) n += (n.empty() ? "" : ", ") + x;
                return n;
              }(), "]; resuming would not continue at the next token");
  for (size_t i = 0; i < sources_.size(); ++i) sources_[i].seek(s.sources[i]);
  next_slot_ = s.slot;
  base_ = s;
  consumed_ = s.consumed;
  source_tokens_ = s.source_tokens;
  skip_first_ = s.offset;
  for (size_t i = 0; i < sources_.size(); ++i) epochs_[i] = s.sources[i].epoch;
}

std::vector<uint64_t> TokenStream::source_tokens() const { return source_tokens_; }

std::string TokenStream::describe() const {
  std::string s = "streaming " + std::to_string(sources_.size()) + (sources_.size() == 1 ? " dataset" : " datasets");
  for (size_t i = 0; i < sources_.size(); ++i) {
    const double w = cumulative_[i] - (i ? cumulative_[i - 1] : 0.0);
    s += (i ? ", " : ": ") + sources_[i].name() + " (" + std::to_string(sources_[i].files().size()) + " files" +
         (sources_.size() > 1 ? ", weight " + std::to_string(w).substr(0, 5) : std::string()) + ")";
  }
  return s;
}

}  // namespace titan::data
