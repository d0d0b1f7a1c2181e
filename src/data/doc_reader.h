// Documents of one dataset file, whatever its format, read front to back with a resumable row
// position. The format is the file's extension, and an extension that names no format is an
// error (a compressed or binary file is never read as text):
//   .jsonl .json (+ .gz, .zst)   JSON lines, one document per line (data/jsonl.h's field rules)
//   .txt (+ .gz, .zst)           UTF-8 text, the whole file one document
//   .parquet                     a column of a Parquet file (data/parquet.h), one document a row
//   .bin                         token ids (titan tokenize), not read through a DocReader
// A document is a text, or with `chat` a conversation: a JSON line's "messages" (or Alpaca
// instruction/output) form (data/chat_data.h), a Parquet list<struct<role, content>> column.
//
// Bad rows (malformed JSON, a missing or wrong-typed field, text that is not valid UTF-8) are an
// error naming the file and the row ("f.jsonl.gz:17: ...", "f.parquet: row group 2, row 5 (row
// 1029 of the file): ..."), or with skip_bad_rows skipped and counted. Damaged files (a corrupt
// gzip member, a truncated Parquet footer) are always an error.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/chat_template.h"
#include "data/compressed.h"

namespace titan::data {

enum class FileFormat { Jsonl, Text, Tokens, Parquet };
struct FileType {
  FileFormat format = FileFormat::Text;
  Compression compression = Compression::None;
};
// The type of a dataset file by its name; errors name the file and the extensions known.
FileType file_type(const std::string& path);
// Whether a name has one of those extensions (listing folders).
bool is_dataset_file(const std::string& path);
const char* known_dataset_extensions();  // for messages

struct DocOptions {
  std::string field;  // JSON field or Parquet column; "": "text", or "messages" with chat
  bool chat = false;
  bool skip_bad_rows = false;
  std::string bad_row_hint;  // what an error on a bad row suggests ("": data/jsonl.h's default)
  const std::string& column() const;
};

struct Document {
  std::string text;                    // text documents
  std::vector<ChatMessage> messages;   // chat documents
  uint64_t row = 0;                    // its row in the file, from 1 (JSON lines: its line)
};

class DocReader {
 public:
  virtual ~DocReader() = default;
  // The next document; false at the end of the file.
  virtual bool next(Document* doc) = 0;
  // Passes forward over rows without returning them until rows() == row or the file ends (the
  // resume of a stream: seek_row(doc.row - 1) makes next() return doc again).
  virtual void seek_row(uint64_t row) = 0;
  // Rows passed so far (documents, skipped and blank rows).
  uint64_t rows() const { return rows_; }
  uint64_t skipped() const { return skipped_; }
  virtual uint64_t bytes_read() const = 0;  // of the file on disk, for progress
  const std::string& path() const { return path_; }

 protected:
  DocReader(std::string path, DocOptions opt) : path_(std::move(path)), opt_(std::move(opt)) {}
  // A bad row: fails with `where` + ": " + why + the hint, or counts it as skipped.
  void bad_row(const std::string& where, const std::string& why);
  std::string path_;
  DocOptions opt_;
  uint64_t rows_ = 0, skipped_ = 0;
};

// A reader of `path` (not a token file); errors name the file.
std::unique_ptr<DocReader> open_doc_reader(const std::string& path, const DocOptions& opt);

}  // namespace titan::data
