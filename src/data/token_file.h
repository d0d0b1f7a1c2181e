// Pre-tokenized token files (.bin), written by `titan tokenize` and by the dataset cache, read by
// memory mapping. Layout, little-endian:
//   offset 0  char[8]  magic "TITANTOK"
//          8  u32      version (1)
//         12  u32      header bytes (64)
//         16  u32      vocab size: every id is below it
//         20  u32      document separator id (<|endoftext|>), or 0xFFFFFFFF when none
//         24  u64      token count
//         32  u64      document count
//         40  u64      tokenizer fingerprint (FNV-1a-64 of tokenizer.json), 0 when unknown
//         48  char[8]  "titancch" in files the token cache wrote (data/token_cache.h: only those
//                      are ever removed by it), else zero
//         56  u8[8]    zero
//         64  u32[token count] ids; each document is followed by the separator id.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "util/temp_files.h"

namespace titan::data {

struct TokenFileHeader {
  uint32_t vocab_size = 0;
  uint32_t eot_id = 0xFFFFFFFFu;
  uint64_t token_count = 0;
  uint64_t document_count = 0;
  uint64_t tokenizer_fingerprint = 0;
  bool cache_file = false;  // written by the token cache (the tag at offset 48)
};

constexpr char kTokenCacheTag[8] = {'t', 'i', 't', 'a', 'n', 'c', 'c', 'h'};
// Whether the first bytes of a file are a token file header carrying the cache's tag.
bool has_token_cache_header(const unsigned char* p, size_t n);

constexpr size_t kTokenFileHeaderBytes = 64;

// Streams ids to `path` through a temporary file in the same folder; close() fills in the header,
// fsyncs and renames it into place, so a reader never sees a partial file. Destroying an unclosed
// writer removes the temporary file, and so does SIGINT or SIGTERM ending the process (see
// util/temp_files.h); a writer killed otherwise leaves it for the token cache to remove.
class TokenFileWriter {
 public:
  // cache_file: tag the file as the token cache's (its header, from the first bytes written).
  TokenFileWriter(const std::string& path, uint32_t vocab_size, uint32_t eot_id, uint64_t tokenizer_fingerprint,
                  bool cache_file = false);
  ~TokenFileWriter();
  TokenFileWriter(const TokenFileWriter&) = delete;
  TokenFileWriter& operator=(const TokenFileWriter&) = delete;

  // Appends one document's ids followed by the separator (when eot_id is set). Ids must be below
  // the vocab size.
  void add_document(const std::vector<uint32_t>& ids);
  void close();
  uint64_t token_count() const { return header_.token_count; }
  uint64_t document_count() const { return header_.document_count; }

 private:
  void write_bytes(const void* p, size_t n);
  std::string path_, tmp_;  // tmp_: <path>.tmp.<host>.<pid>, so that a cache can tell whose it is
  TempFileGuard tmp_guard_;  // removes tmp_ if SIGINT/SIGTERM ends the process meanwhile
  int fd_ = -1;
  TokenFileHeader header_;
  std::vector<uint32_t> buf_;
};

// A validated, memory-mapped token file. open() checks magic, version, header size, that the file
// length matches the token count (a truncated file is an error) and that every id is below the
// vocab size; each error names the file and the reason.
class TokenFile {
 public:
  static std::shared_ptr<const TokenFile> open(const std::string& path);
  ~TokenFile();
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  const TokenFileHeader& header() const { return header_; }
  const uint32_t* tokens() const { return tokens_; }
  uint64_t size() const { return header_.token_count; }
  const std::string& path() const { return path_; }

 private:
  TokenFile() = default;
  std::string path_;
  TokenFileHeader header_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  const uint32_t* tokens_ = nullptr;
};

}  // namespace titan::data
