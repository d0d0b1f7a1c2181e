// Streaming datasets: documents are read and tokenized on a background thread into a bounded
// queue while training runs, instead of tokenizing the whole dataset first; several datasets mix
// by weight.
//
// The stream: document slot k = 0, 1, 2, ... is drawn from source i with probability
// weight_i / sum(weights), by a hash of (seed, k) alone (so the same for any rank count and after
// any resume); each source reads its files in order and starts over at the end (an epoch). A
// document contributes its ids followed by <|endoftext|>. With one source, the stream is exactly
// TokenDataset's (data/dataset.h) token stream for the same files.
//
// Every rank reads the whole stream and takes its slice of each global batch (data/
// packed_loader.h's sharding): the price of resuming at any rank count with the same tokens.
//
// State (StreamState, JSON in checkpoints): the slot of the document being consumed, every
// source's position before it (epoch, file, row), the tokens of it already consumed, the tokens
// consumed in all and per source. restore() continues with exactly the next token.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "data/dataset.h"
#include "data/doc_reader.h"
#include "data/packed_loader.h"
#include "data/tokenizer.h"

namespace titan::data {

struct DocPosition {
  uint64_t epoch = 0, file = 0, row = 0;  // rows of `file` passed
  bool operator==(const DocPosition&) const = default;
};

// The documents of one dataset's files, endlessly, from a position.
class DocStream {
 public:
  DocStream(std::string name, std::vector<std::string> files, DocOptions opt, LogFn log);
  void next(std::string* text);         // the next document's text
  void next(Document* doc);             // the next document (a conversation with DocOptions::chat)
  DocPosition position() const { return pos_; }  // seek(position()) then next() gives the same document
  void seek(const DocPosition& p);
  const std::string& name() const { return name_; }
  const std::vector<std::string>& files() const { return files_; }

 private:
  std::string name_;
  std::vector<std::string> files_;
  DocOptions opt_;
  LogFn log_;
  DocPosition pos_;
  std::unique_ptr<DocReader> reader_;  // of files_[pos_.file], at pos_.row
  uint64_t docs_this_epoch_ = 0;
};

struct StreamSource {
  std::string name;  // in logs and metrics
  std::vector<std::string> files;
  double weight = 1;
};

struct StreamOptions {
  DocOptions doc;
  uint64_t seed = 0;
  int threads = 2;                          // tokenization threads of the background reader
  size_t queue_tokens = size_t(1) << 20;    // bound of the queue, in tokens
  size_t batch_docs = 256;                  // documents tokenized together
};

struct StreamState {
  uint64_t slot = 0;
  std::vector<DocPosition> sources;  // each source's position before document `slot`
  uint64_t offset = 0;               // tokens of document `slot` consumed
  uint64_t consumed = 0;             // tokens consumed, all sources
  std::vector<uint64_t> source_tokens;
  std::vector<std::string> names;    // of the sources, checked on restore
  std::string to_json() const;
  // Errors name `origin`; false when the JSON is not a stream state at all.
  static bool from_json(std::string_view json, const std::string& origin, StreamState* out);
};

class TokenStream {
 public:
  TokenStream(std::vector<StreamSource> sources, const Tokenizer& tok, StreamOptions opt, LogFn log = log_to_stderr);
  ~TokenStream();
  TokenStream(const TokenStream&) = delete;
  TokenStream& operator=(const TokenStream&) = delete;

  // The next n tokens of the stream (waits for the background reader when it is behind).
  void read(size_t n, int64_t* out);
  // This rank's slice of the next global batch (data/packed_loader.h's windows and sharding).
  Batch next_batch(int64_t local_batch, int64_t seq_len, int rank, int world);
  StreamState state() const;
  // Before the first read; errors when the sources differ from the state's.
  void restore(const StreamState& s);
  size_t sources() const { return sources_.size(); }
  const std::string& source_name(size_t i) const { return sources_[i].name(); }
  std::vector<uint64_t> source_tokens() const;  // consumed per source
  std::string describe() const;

 private:
  struct Doc {
    uint32_t source = 0;
    uint64_t epoch = 0;         // of its source
    std::vector<uint32_t> ids;  // with the separator
    StreamState before;         // slot and positions before this document
  };
  uint32_t choose(uint64_t slot) const;
  void produce();   // the background thread
  void start();
  Doc pop();

  const Tokenizer& tok_;
  StreamOptions opt_;
  LogFn log_;
  std::vector<DocStream> sources_;
  std::vector<double> cumulative_;  // weights, normalized, cumulative
  uint64_t next_slot_ = 0;          // producer's

  // Consumer side.
  std::unique_ptr<Doc> cur_;
  uint64_t offset_ = 0, consumed_ = 0;
  std::vector<uint64_t> source_tokens_;
  std::vector<uint64_t> epochs_;  // last epoch logged, per source
  StreamState base_;   // the state before any document is current
  uint64_t skip_first_ = 0;  // restore: tokens of the first document to drop

  std::thread thread_;
  bool started_ = false;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Doc> queue_;
  size_t queued_tokens_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
};

}  // namespace titan::data
