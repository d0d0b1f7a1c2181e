#include "data/chat_stream.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace titan::data {

// ---- ChatStreamState ----

std::string ChatStreamState::to_json() const {
  return nlohmann::json{{"chat_stream",
                         {{"name", name}, {"epoch", next.epoch}, {"file", next.file}, {"row", next.row}, {"rows", rows}}}}
      .dump();
}

bool ChatStreamState::from_json(std::string_view text, const std::string& origin, ChatStreamState* out) {
  const nlohmann::json j = nlohmann::json::parse(text.begin(), text.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("chat_stream")) return false;
  const nlohmann::json& s = j["chat_stream"];
  auto u64 = [&](const char* k) {
    TITAN_CHECK(s.is_object() && s.contains(k) && s[k].is_number_unsigned(), origin,
                ": chat stream state needs a non-negative \"", k, "\"");
    return s[k].get<uint64_t>();
  };
  ChatStreamState r;
  r.next = {u64("epoch"), u64("file"), u64("row")};
  r.rows = u64("rows");
  TITAN_CHECK(s.contains("name") && s["name"].is_string(), origin, ": chat stream state without a dataset name");
  r.name = s["name"].get<std::string>();
  *out = std::move(r);
  return true;
}

// ---- ChatStream ----

namespace {

DocOptions chat_options(DocOptions o) {
  o.chat = true;
  return o;
}

}  // namespace

ChatStream::ChatStream(std::string name, std::vector<std::string> files, const ChatEncoder& enc, int64_t seq_len,
                       ChatStreamOptions opt, LogFn log)
    : enc_(enc),
      opt_(std::move(opt)),
      log_(std::move(log)),
      docs_(name, std::move(files), chat_options(opt_.doc), log_),
      width_(size_t(std::max<int64_t>(seq_len, 0)) + 1),
      separator_(enc.tokenizer().eot_id()) {
  TITAN_CHECK(seq_len > 0, "chat data: seq_len must be positive");
  TITAN_CHECK(opt_.threads > 0 && opt_.batch_conversations > 0, "chat data stream: threads and batch must be positive");
  base_.name = std::move(name);
}

ChatStream::~ChatStream() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void ChatStream::produce() {
  try {
    const size_t n = opt_.batch_conversations;
    std::vector<Document> docs(n);
    std::vector<std::string> origins(n);
    while (true) {
      {
        std::unique_lock<std::mutex> l(mu_);
        cv_.wait(l, [&] { return stop_ || queued_tokens_ < opt_.queue_tokens; });
        if (stop_) return;
      }
      std::vector<Conv> convs(n);
      for (size_t i = 0; i < n; ++i) {
        docs_.next(&docs[i]);
        convs[i].after = docs_.position();
        convs[i].epoch = convs[i].after.epoch;
        origins[i] = docs_.files()[convs[i].after.file] + ":" + std::to_string(docs[i].row);
      }
      // Encoding is the work (the template and the tokenizer); errors leave the region and are
      // rethrown on this thread, the first in stream order.
      std::vector<std::exception_ptr> errors(n);
#pragma omp parallel for schedule(dynamic, 1) num_threads(opt_.threads)
      for (int64_t i = 0; i < int64_t(n); ++i) {
        try {
          convs[size_t(i)].tokens = enc_.encode(docs[size_t(i)].messages, opt_.train_on_prompt, origins[size_t(i)]);
        } catch (...) {
          errors[size_t(i)] = std::current_exception();
        }
      }
      for (auto& e : errors)
        if (e) std::rethrow_exception(e);
      size_t tokens = 0;
      for (const Conv& c : convs) tokens += c.tokens.ids.size();
      {
        std::lock_guard<std::mutex> l(mu_);
        for (Conv& c : convs) queue_.push_back(std::move(c));
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

const ChatStream::Conv& ChatStream::peek() {
  if (!started_) {
    started_ = true;
    thread_ = std::thread([this] { produce(); });
  }
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait(l, [&] { return !queue_.empty() || error_; });
  if (queue_.empty()) std::rethrow_exception(error_);
  return queue_.front();  // only this thread pops, so the reference stays valid until pop()
}

void ChatStream::pop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    base_.next = queue_.front().after;
    queued_tokens_ -= queue_.front().tokens.ids.size();
    queue_.pop_front();
  }
  cv_.notify_all();
}

void ChatStream::end_epoch_log(uint64_t epoch) {
  TITAN_CHECK(!whole_epoch_ || epoch_rows_ > 0, "chat data: no conversation fits in seq_len + 1 = ", width_,
              " tokens (", epoch_dropped_, " dropped)");
  if (log_)
    log_("chat data: " + base_.name + ": epoch " + std::to_string(epoch + 1) + " done (" +
         (whole_epoch_ ? "" : "since the resume: ") + std::to_string(epoch_convs_) + " conversations in " +
         std::to_string(epoch_rows_) + " rows, " + std::to_string(epoch_dropped_) +
         " dropped as longer than seq_len + 1 tokens); starting epoch " + std::to_string(epoch + 2));
  whole_epoch_ = true;
  epoch_rows_ = epoch_convs_ = epoch_dropped_ = 0;
}

void ChatStream::next_row(int64_t* inputs, int64_t* labels) {
  row_ids_.clear();
  row_target_.clear();
  while (row_ids_.size() < width_) {
    const Conv& c = peek();
    if (!have_epoch_) {
      have_epoch_ = true;
      row_epoch_ = c.epoch;
    }
    if (c.epoch != row_epoch_) {
      if (!row_ids_.empty()) break;  // the epoch's last row ends here, padded
      end_epoch_log(row_epoch_);
      row_epoch_ = c.epoch;
    }
    const size_t len = c.tokens.ids.size();
    if (len > width_) {
      ++epoch_dropped_;
      pop();
      continue;
    }
    if (row_ids_.size() + len > width_) break;  // starts the next row
    row_ids_.insert(row_ids_.end(), c.tokens.ids.begin(), c.tokens.ids.end());
    row_target_.insert(row_target_.end(), c.tokens.target.begin(), c.tokens.target.end());
    ++epoch_convs_;
    pop();
  }
  row_target_.resize(width_, 0);
  row_ids_.resize(width_, separator_);
  ++epoch_rows_;
  ++base_.rows;
  for (size_t s = 0; s + 1 < width_; ++s) {
    inputs[s] = row_ids_[s];
    labels[s] = row_target_[s + 1] ? int64_t(row_ids_[s + 1]) : -100;
  }
}

Batch ChatStream::next_batch(int64_t local_batch, int rank, int world) {
  TITAN_CHECK(local_batch > 0, "chat data stream: batch size must be positive");
  TITAN_CHECK(world > 0 && rank >= 0 && rank < world, "chat data stream: rank ", rank, " outside world of ", world);
  const int64_t seq = int64_t(width_) - 1;
  Batch b;
  b.inputs = Tensor::empty({local_batch, seq}, DType::I64);
  b.labels = Tensor::empty({local_batch, seq}, DType::I64);
  std::vector<int64_t> in(static_cast<size_t>(seq)), lab(static_cast<size_t>(seq));
  const int64_t mine = int64_t(rank) * local_batch;
  for (int64_t r = 0; r < local_batch * world; ++r) {
    next_row(in.data(), lab.data());
    if (r == mine) b.epoch = row_epoch_;
    if (r >= mine && r < mine + local_batch) {
      std::copy(in.begin(), in.end(), b.inputs.data<int64_t>() + (r - mine) * seq);
      std::copy(lab.begin(), lab.end(), b.labels.data<int64_t>() + (r - mine) * seq);
    }
  }
  return b;
}

ChatStreamState ChatStream::state() const { return base_; }

void ChatStream::restore(const ChatStreamState& s) {
  TITAN_CHECK(!started_, "chat data stream: restore after reading");
  TITAN_CHECK(s.name == base_.name, "checkpoint data state: saved on the chat dataset ", s.name,
              ", this run streams ", base_.name, "; resuming would not continue at the next row");
  docs_.seek(s.next);
  base_ = s;
  row_epoch_ = s.next.epoch;
  have_epoch_ = true;
  whole_epoch_ = s.next.file == 0 && s.next.row == 0;
}

std::string ChatStream::describe() const {
  return "streaming chat conversations of " + base_.name + " (" + std::to_string(docs_.files().size()) +
         (docs_.files().size() == 1 ? " file" : " files") + ") into rows of " + std::to_string(width_) +
         " tokens, " + std::to_string(opt_.threads) + " encoding threads";
}

}  // namespace titan::data
