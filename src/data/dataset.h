// Datasets for training: a registry name or files, tokenized into one token stream in which every
// document is followed by <|endoftext|>. Sources by extension (data/doc_reader.h; any other
// extension is an error):
//   .jsonl / .json (+ .gz / .zst)  JSON lines with a text field (the c4 format), one document per line
//   .txt (+ .gz / .zst)            plain UTF-8 text, the whole file one document
//   .bin                           token files written by `titan tokenize` (memory-mapped, no tokenization)
// Text sources are tokenized once and cached as a token file keyed by the files' path, size and
// mtime, the tokenizer and the options, so later runs only map the cache (data/token_cache.h: the
// cache's bound, and the removal of what killed tokenizations left).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "data/doc_reader.h"
#include "data/jsonl.h"
#include "data/token_file.h"
#include "data/tokenizer.h"

namespace titan::data {

using LogFn = std::function<void(const std::string&)>;
void log_to_stderr(const std::string& line);

struct DatasetSpec {
  // A registry name ("c4_test", "c4_demo"), or paths: files, folders and globs separated by
  // commas. A Hugging Face dataset folder (data/hf_folder.h) contributes its train split's shards
  // in shard order (F/<split>: that split), another folder its dataset files (data/doc_reader.h's
  // extensions) in name order, a glob its matches in name order.
  std::string name_or_path = "c4_test";
  std::string text_field = "text";
  bool skip_bad_lines = false;  // skip and count bad rows (malformed JSON, invalid UTF-8...) instead of failing
  std::string bad_line_hint;    // the remedy a bad-row error suggests ("": JsonlOptions' default)
  std::string cache_dir;        // "": default_cache_dir(); "none": tokenize in memory every time
  int threads = 0;              // tokenization threads, 0: all
  bool progress = true;         // progress bar for long tokenization jobs
  uint64_t max_cache_bytes = 0;  // bound of the cache folder; 0: default_cache_max_bytes() (token_cache.h)
};

struct DatasetInfo {
  std::string name;
  std::vector<std::string> files;  // relative to data_root()
  std::string description;
};
// Built-in names: c4_test (1000 C4 train documents, the default training set) and c4_demo (300
// other C4 documents, for evaluation).
const std::vector<DatasetInfo>& dataset_registry();

// Folder of the bundled datasets: $TITAN_DATA_DIR if set, else <TITAN_SOURCE_DIR>/data, else data/
// next to or one level above the executable.
std::string data_root();
// $TITAN_CACHE_DIR, else $XDG_CACHE_HOME/titan, else $HOME/.cache/titan.
std::string default_cache_dir();
// The files a name or path list stands for; errors on an unknown name or a missing path.
std::vector<std::string> resolve_dataset_files(const std::string& name_or_path);

struct TokenizeStats {
  uint64_t documents = 0, tokens = 0, bytes = 0, skipped = 0;
};
// Tokenizes text sources (any format but token files) into `out`, one document at a time, batches
// spread over spec.threads threads, with a progress bar labelled `label`; out() receives each
// document's ids in order. Errors on a file with no documents.
using DocumentSink = std::function<void(const std::vector<uint32_t>& ids)>;
TokenizeStats tokenize_files(const std::vector<std::string>& files, const Tokenizer& tok, const DatasetSpec& spec,
                             const DocumentSink& out, const std::string& label);

// Ids of one long text, cut into pieces that encode independently (after a '\n' followed by a
// printable ASCII character, where no pre-token, NFC composition or added token can span the cut),
// encoded on up to `threads` threads. Equals tok.encode(text).
std::vector<uint32_t> encode_long_text(const Tokenizer& tok, std::string_view text, int threads);

// The token stream of a dataset, read as an endless repetition of itself.
class TokenDataset {
 public:
  static std::shared_ptr<const TokenDataset> load(const DatasetSpec& spec, const Tokenizer& tok,
                                                  const LogFn& log = log_to_stderr);
  // Tokens held directly (tests, small in-memory data).
  static std::shared_ptr<const TokenDataset> from_tokens(std::string name, std::vector<uint32_t> tokens,
                                                         uint64_t documents = 1);

  const std::string& name() const { return name_; }
  uint64_t size() const { return total_; }  // tokens in one epoch
  uint64_t documents() const { return documents_; }
  // out[i] = token (pos + i) mod size(), for i < n.
  void read(uint64_t pos, size_t n, int64_t* out) const;

 private:
  struct Segment {
    const uint32_t* data;
    uint64_t size;
    uint64_t start;  // offset of the segment in the stream
  };
  void add_segment(const uint32_t* data, uint64_t size);
  std::string name_;
  uint64_t total_ = 0, documents_ = 0;
  std::vector<Segment> segments_;
  std::vector<std::shared_ptr<const TokenFile>> files_;  // keep the maps alive
  std::vector<std::vector<uint32_t>> owned_;
};

}  // namespace titan::data
