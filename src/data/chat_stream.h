// Chat data streamed: conversations read and encoded (chat template + tokenizer, data/chat_data.h)
// on a background thread into a bounded queue while training runs, instead of encoding the whole
// dataset before step 1, and packed into rows exactly as ChatRows packs a whole dataset:
//
//   one epoch's conversations, in file order, fill rows of seq_len + 1 tokens whole; one that does
//   not fit in the rest of a row starts the next row, the rest padded with <|endoftext|> (never a
//   target); one longer than a row is dropped and counted; the epoch's last row is padded and the
//   next epoch starts a new row.
//
// So the rows are ChatRows' rows in order, epoch after epoch: a streamed run trains on the same
// rows as one that encoded its data first (tests/unit/data/test_chat_stream.cpp checks this).
//
// Every rank reads the whole stream and takes its slice of each global micro-batch (rows
// [g G, (g + 1) G), G = local_batch x world, rank r from r x local_batch), as text streams do.
//
// State (ChatStreamState, JSON in checkpoints): the stream position after the last conversation
// of the rows consumed (every row starts at a conversation), and the rows consumed. Restored at any
// rank count, the next row is the one the uninterrupted run would have packed next.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "data/chat_data.h"
#include "data/packed_loader.h"
#include "data/token_stream.h"

namespace titan::data {

struct ChatStreamState {
  DocPosition next;   // seek here, then the next conversation starts the next row
  uint64_t rows = 0;  // rows consumed
  std::string name;   // of the dataset, checked on restore
  std::string to_json() const;
  // Errors name `origin`; false when the JSON is not a chat stream state at all.
  static bool from_json(std::string_view json, const std::string& origin, ChatStreamState* out);
};

struct ChatStreamOptions {
  DocOptions doc;                  // chat is set by the stream
  bool train_on_prompt = false;
  int threads = 2;                 // encoding threads of the background reader
  size_t queue_tokens = size_t(1) << 20;  // bound of the queue, in tokens
  size_t batch_conversations = 64;        // conversations encoded together
};

class ChatStream {
 public:
  // `enc` must outlive the stream. Errors when seq_len is not positive.
  ChatStream(std::string name, std::vector<std::string> files, const ChatEncoder& enc, int64_t seq_len,
             ChatStreamOptions opt, LogFn log = log_to_stderr);
  ~ChatStream();
  ChatStream(const ChatStream&) = delete;
  ChatStream& operator=(const ChatStream&) = delete;

  // The next row: inputs and labels [seq_len] (labels -100 where the token is no target).
  void next_row(int64_t* inputs, int64_t* labels);
  // This rank's rows of the next global micro-batch.
  Batch next_batch(int64_t local_batch, int rank, int world);
  ChatStreamState state() const;
  // Before the first read; errors when the dataset differs from the state's.
  void restore(const ChatStreamState& s);
  uint64_t epoch() const { return row_epoch_; }
  std::string describe() const;

 private:
  struct Conv {
    ChatTokens tokens;
    uint64_t epoch = 0;  // of the dataset
    DocPosition after;   // the stream's position after this conversation
  };
  void produce();  // the background thread
  const Conv& peek();
  void pop();
  void end_epoch_log(uint64_t epoch);

  const ChatEncoder& enc_;
  ChatStreamOptions opt_;
  LogFn log_;
  DocStream docs_;
  size_t width_;
  uint32_t separator_;

  // Consumer side.
  ChatStreamState base_;        // position after the last conversation consumed
  uint64_t row_epoch_ = 0;      // epoch of the last row
  bool have_epoch_ = false;     // a conversation was seen (row_epoch_ is set)
  bool whole_epoch_ = true;     // the current epoch was read from its start (not resumed mid-way)
  uint64_t epoch_rows_ = 0, epoch_convs_ = 0, epoch_dropped_ = 0;  // this epoch's, for the log
  std::vector<uint32_t> row_ids_;
  std::vector<uint8_t> row_target_;

  std::thread thread_;
  bool started_ = false;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Conv> queue_;
  size_t queued_tokens_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
};

}  // namespace titan::data
