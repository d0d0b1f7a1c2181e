#include "data/doc_reader.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/chat_data.h"
#include "data/jsonl.h"
#include "data/utf8.h"

namespace titan::data {

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return s;
}

bool type_of(const std::string& path, FileType* t) {
  std::string name = lower(std::filesystem::path(path).filename().string());
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

}  // namespace

const char* known_dataset_extensions() { return ".jsonl, .json, .txt (each also .gz or .zst) or .bin"; }

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
  const FileType t = file_type(path);
  switch (t.format) {
    case FileFormat::Jsonl: return std::make_unique<JsonlReader>(path, opt, t.compression);
    case FileFormat::Text: return std::make_unique<TextReader>(path, opt);
    case FileFormat::Parquet: break;
    case FileFormat::Tokens: fail(path, ": a token file, not read as documents");
  }
  fail(path, ": no reader for this format");
}

}  // namespace titan::data
