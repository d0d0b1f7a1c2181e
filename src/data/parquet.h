// A strict reader of the Parquet subset that text and chat datasets use (Apache Arrow's C++
// reader is not in the registries reachable here, so this one is written for exactly this
// subset): one string column (BYTE_ARRAY) or a chat column list<struct<role: string, content:
// string>> (the 3-level LIST layout pyarrow writes, or the legacy 2-level one), in PLAIN or
// dictionary (PLAIN_DICTIONARY / RLE_DICTIONARY) encoding, with RLE / bit-packed hybrid levels,
// data pages v1 and v2, UNCOMPRESSED, SNAPPY, GZIP or ZSTD pages, any number of row groups.
// Anything else (another encoding or codec, a column stored in another file) is an error that
// says so. Every offset, length, count and level is checked against the bytes and schema it
// refers to; a damaged file is a titan::Error naming the file (and row group), never a crash.
//
// Only the chosen column's chunks are read, one row group at a time (pread), so a file of any
// size streams in row-group steps.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/chat_template.h"
#include "data/parquet_meta.h"

namespace titan::data::parquet {

// Random-access bytes of a Parquet file.
class Source {
 public:
  virtual ~Source() = default;
  virtual uint64_t size() const = 0;
  virtual std::string read(uint64_t offset, size_t n) const = 0;  // errors past the end
  const std::string& name() const { return name_; }

 protected:
  explicit Source(std::string name) : name_(std::move(name)) {}
  std::string name_;
};
std::unique_ptr<Source> file_source(const std::string& path);
std::unique_ptr<Source> memory_source(std::string bytes, std::string name);
// The most value bytes one column chunk may decode to (default 2 GiB; the fuzz target lowers it).
void set_max_chunk_bytes(uint64_t n);

// One leaf column's schema facts.
struct Leaf {
  size_t index = 0;  // column chunk index in each row group
  std::vector<std::string> path;
  int32_t type = -1;
  int max_def = 0, max_rep = 0;
  int def_at_repeated = 0;  // definition level of the repeated ancestor (chat leaves)
};

// A leaf column's data in one row group: levels per entry (empty when the max level is 0) and
// the non-null values, concatenated.
struct LeafData {
  std::vector<uint8_t> def, rep;
  std::string bytes;
  std::vector<uint64_t> offsets = {0};  // value i is bytes[offsets[i], offsets[i + 1])
  size_t entries = 0;
  size_t values() const { return offsets.size() - 1; }
};

class File {
 public:
  explicit File(std::unique_ptr<Source> src);  // reads and checks the footer
  const FileMetaData& meta() const { return meta_; }
  const std::string& name() const { return src_->name(); }
  // The leaf columns, in column-chunk order.
  const std::vector<Leaf>& leaves() const { return leaves_; }
  // The names of the top-level fields, for messages.
  std::string top_level_names() const;
  // Decodes leaf `leaf` of row group g.
  LeafData read_leaf(size_t g, const Leaf& leaf) const;

 private:
  std::unique_ptr<Source> src_;
  FileMetaData meta_;
  std::vector<Leaf> leaves_;
};

// The documents of one column, a row group at a time.
class ColumnRows {
 public:
  // chat: the column is a list of {role, content} structs; else a string column. Errors name the
  // file and the column (missing, or of another type).
  ColumnRows(std::shared_ptr<const File> file, const std::string& column, bool chat);
  size_t row_groups() const { return file_->meta().row_groups.size(); }
  int64_t rows_in(size_t g) const { return file_->meta().row_groups[g].num_rows; }
  void load(size_t g);  // decodes row group g's column chunk(s)
  // Row i of the loaded row group. False with *why for a bad row (a null, text that is not valid
  // UTF-8, a message without role or content).
  bool text(int64_t i, std::string* out, std::string* why) const;
  bool messages(int64_t i, std::vector<ChatMessage>* out, std::string* why) const;

 private:
  std::shared_ptr<const File> file_;
  bool chat_;
  std::vector<Leaf> leaves_;  // text: 1; chat: role, content
  std::vector<LeafData> data_;
  // Per row of the loaded group: text, its value index or -1 for a null; chat, its first entry.
  std::vector<int64_t> row_value_, row_entry_;
  // chat: per entry, the value index of role and content (-1: null).
  std::vector<int64_t> role_value_, content_value_;
};

}  // namespace titan::data::parquet
