#include "data/doc_reader.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "util/strings.h"
#include "data/chat_data.h"
#include "data/jsonl.h"
#include "data/parquet.h"
#include "data/utf8.h"

namespace titan::data {

namespace {

bool type_of(const std::string& path, FileType* t) {
  std::string name = ascii_lower(std::filesystem::path(path).filename().string());
  t->compression = compression_of(name);
  if (t->compression == Compression::Gzip) name.resize(name.size() - 3);
  if (t->compression == Compression::Zstd) name.resize(name.size() - 4);
  const std::string ext = std::filesystem::path(name).extension().string();
  if (ext == ".jsonl" || ext == ".json") {
    t->format = FileFormat::Jsonl;
  } else if (ext == ".txt") {
    t->format = FileFormat::Text;
  } else if (ext == ".bin" && t->compression == Compression::None) {
    t->format = FileFormat::Tokens;
  } else if (ext == ".parquet" && t->compression == Compression::None) {
    t->format = FileFormat::Parquet;
  } else {
    return false;
  }
  return true;
}

// Offset of the first byte of s that starts no well-formed UTF-8 sequence, or npos.
size_t first_bad_utf8(std::string_view s) {
  size_t bad = 0;
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_sequence_length(s, i, &bad);
    if (n == 0) return i;
    i += n;
  }
  return std::string_view::npos;
}

class JsonlReader final : public DocReader {
 public:
  JsonlReader(const std::string& path, const DocOptions& opt, Compression c) : DocReader(path, opt), in_(path, c) {}

  bool next(Document* doc) override {
    while (in_.next(&line_)) {
      ++rows_;
      if (line_.find_first_not_of(" \t\r") == std::string::npos) continue;
      if (parse(doc)) {
        doc->row = rows_;
        return true;
      }
    }
    return false;
  }

  void seek_row(uint64_t row) override {
    while (rows_ < row && in_.next(&line_)) ++rows_;
  }

  uint64_t bytes_read() const override { return in_.bytes(); }

 private:
  std::string where() const { return path_ + ":" + std::to_string(rows_); }

  bool parse(Document* doc) {
    std::string why;
    if (!opt_.chat) {
      if (parse_jsonl_line(line_, opt_.column(), &doc->text, &why)) return true;
      if (const size_t b = first_bad_utf8(line_); b != std::string::npos)
        why = "not valid UTF-8 (byte " + std::to_string(b + 1) + " of the line)";
      bad_row(where(), why);
      return false;
    }
    const nlohmann::json j = nlohmann::json::parse(line_, nullptr, false);
    if (j.is_discarded()) {
      const size_t b = first_bad_utf8(line_);
      bad_row(where(), b != std::string::npos ? "not valid UTF-8 (byte " + std::to_string(b + 1) + " of the line)"
                                              : std::string("not valid JSON"));
      return false;
    }
    try {
      doc->messages = chat_messages_from_json(j, where());
      return true;
    } catch (const Error& e) {
      if (!opt_.skip_bad_rows) throw;
      ++skipped_;
      return false;
    }
  }

  LineReader in_;
  std::string line_;
};

// The whole file, one document.
class TextReader final : public DocReader {
 public:
  TextReader(const std::string& path, const DocOptions& opt) : DocReader(path, opt) {
    TITAN_CHECK(!opt.chat, path, ": a chat dataset needs JSON lines or Parquet, not plain text");
  }

  bool next(Document* doc) override {
    if (rows_ > 0) return false;
    ByteReader in(path_, compression_of(path_));
    doc->text.clear();
    constexpr size_t kChunk = size_t(1) << 20;
    while (true) {
      const size_t old = doc->text.size();
      doc->text.resize(old + kChunk);
      const size_t got = in.read(doc->text.data() + old, kChunk, 0);
      doc->text.resize(old + got);
      if (got == 0) break;
    }
    bytes_ = in.compressed_bytes();
    rows_ = 1;
    doc->row = 1;
    TITAN_CHECK(!doc->text.empty(), path_, ": empty file, no documents");
    const size_t b = first_bad_utf8(doc->text);
    TITAN_CHECK(b == std::string::npos, path_, ": not valid UTF-8 text (byte ", b, "); a .txt file must be UTF-8, and "
                "a dataset file's extension must say its format (", known_dataset_extensions(), ")");
    return true;
  }

  void seek_row(uint64_t row) override {
    if (row > 0) rows_ = 1;
  }
  uint64_t bytes_read() const override { return bytes_; }

 private:
  uint64_t bytes_ = 0;
};

// A Parquet column, a row group at a time. Rows are counted from 0 in errors, as pyarrow and
// pandas index them.
class ParquetReader final : public DocReader {
 public:
  ParquetReader(const std::string& path, const DocOptions& opt)
      : DocReader(path, opt),
        file_(std::make_shared<parquet::File>(parquet::file_source(path))),
        rows_of_(file_, opt.column(), opt.chat) {}

  bool next(Document* doc) override {
    while (true) {
      while (g_ < rows_of_.row_groups() && i_ >= rows_of_.rows_in(g_)) ++g_, i_ = 0, loaded_ = false;
      if (g_ >= rows_of_.row_groups()) return false;
      if (!loaded_) rows_of_.load(g_), loaded_ = true;
      const int64_t i = i_++;
      ++rows_;
      std::string why;
      const bool ok = opt_.chat ? rows_of_.messages(i, &doc->messages, &why) : rows_of_.text(i, &doc->text, &why);
      auto where = [&] {
        return path_ + ": row group " + std::to_string(g_) + ", row " + std::to_string(i) + " (row " +
               std::to_string(rows_ - 1) + " of the file)";
      };
      if (!ok) {
        bad_row(where(), why);
        continue;
      }
      if (opt_.chat) {
        try {
          check_conversation(doc->messages, where());
        } catch (const Error&) {
          if (!opt_.skip_bad_rows) throw;
          ++skipped_;
          continue;
        }
      }
      doc->row = rows_;
      return true;
    }
  }

  void seek_row(uint64_t row) override {
    while (rows_ < row && g_ < rows_of_.row_groups()) {
      const uint64_t step = std::min<uint64_t>(uint64_t(rows_of_.rows_in(g_) - i_), row - rows_);
      i_ += int64_t(step);
      rows_ += step;
      if (i_ >= rows_of_.rows_in(g_)) ++g_, i_ = 0, loaded_ = false;
    }
  }

  uint64_t bytes_read() const override {
    const int64_t total = file_->meta().num_rows;
    return total > 0 ? uint64_t(double(file_size()) * double(rows_) / double(total)) : 0;
  }

 private:
  uint64_t file_size() const {
    std::error_code ec;
    const auto n = std::filesystem::file_size(path_, ec);
    return ec ? 0 : uint64_t(n);
  }
  std::shared_ptr<parquet::File> file_;
  parquet::ColumnRows rows_of_;
  size_t g_ = 0;
  int64_t i_ = 0;
  bool loaded_ = false;
};

}  // namespace

const char* known_dataset_extensions() {
  return ".jsonl, .json, .txt (each also .gz or .zst), .parquet or .bin";
}

FileType file_type(const std::string& path) {
  FileType t;
  TITAN_CHECK(type_of(path, &t), path, ": not a dataset format this build reads (by its extension: ",
              known_dataset_extensions(), ")");
  return t;
}

bool is_dataset_file(const std::string& path) {
  FileType t;
  return type_of(path, &t);
}

const std::string& DocOptions::column() const {
  static const std::string text = "text", messages = "messages";
  return !field.empty() ? field : chat ? messages : text;
}

void DocReader::bad_row(const std::string& where, const std::string& why) {
  TITAN_CHECK(opt_.skip_bad_rows, where, ": ", why, " (", opt_.bad_row_hint.empty() ? kDefaultBadLineHint : opt_.bad_row_hint,
              ")");
  ++skipped_;
}

std::unique_ptr<DocReader> open_doc_reader(const std::string& path, const DocOptions& opt) {
  check_regular_file(path);  // a named pipe would block open() for ever
  const FileType t = file_type(path);
  switch (t.format) {
    case FileFormat::Jsonl: return std::make_unique<JsonlReader>(path, opt, t.compression);
    case FileFormat::Text: return std::make_unique<TextReader>(path, opt);
    case FileFormat::Parquet: return std::make_unique<ParquetReader>(path, opt);
    case FileFormat::Tokens: fail(path, ": a token file, not read as documents");
  }
  fail(path, ": no reader for this format");
}

}  // namespace titan::data
