// Lines of a file that may be compressed, by its extension: ".gz" is gzip (any number of members,
// as `cat a.gz b.gz` makes), ".zst" is Zstandard (any number of frames), anything else is read as
// it is. The data is decompressed in pieces as the lines are read, never whole.
//
// The lines before damage are handed out; then the error names the file and the last whole line
// read: a corrupt member or frame ("f.jsonl.gz: corrupt gzip data, after line 17 (invalid block
// type)"), a file that ends inside a member or frame ("f.jsonl.gz: truncated: ends inside a gzip
// member, after line 17"), bytes after the last member that start no member, read errors.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

namespace titan::data {

enum class Compression { None, Gzip, Zstd };
// By the last extension (".gz", ".zst", case-insensitive).
Compression compression_of(const std::string& path);
const char* compression_name(Compression c);  // "gzip", "zstd", "none"

// Decompressed bytes of a file, read front to back.
class ByteReader {
 public:
  ByteReader(const std::string& path, Compression c);
  ~ByteReader();
  ByteReader(const ByteReader&) = delete;
  ByteReader& operator=(const ByteReader&) = delete;
  // Up to cap bytes into buf; 0 only at the end. `line` (the last whole line handed out) goes
  // into the error of a damaged file.
  size_t read(char* buf, size_t cap, uint64_t line);
  uint64_t compressed_bytes() const;  // of the file, read so far (progress)
  const std::string& path() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The lines of a file, without their '\n' (a last line without one counts too).
class LineReader {
 public:
  explicit LineReader(const std::string& path);  // compression by compression_of(path)
  LineReader(const std::string& path, Compression c);
  bool next(std::string* line);                   // false at the end
  uint64_t line_no() const { return line_no_; }  // of the last line returned, from 1
  uint64_t bytes() const { return in_.compressed_bytes(); }
  const std::string& path() const { return in_.path(); }

 private:
  ByteReader in_;
  std::string buf_;
  size_t at_ = 0;  // start of the unread part of buf_
  bool eof_ = false;
  uint64_t line_no_ = 0;
};

// The whole decompressed content of a file (plain text documents).
std::string read_decompressed(const std::string& path);

}  // namespace titan::data
