// Streamed atomic file write (invariant 5 of DESIGN.md): bytes go to a temporary file next to the
// target; commit() fsyncs it, renames it over the target and fsyncs the folder. Destroyed without
// commit() (an error part-way), the temporary file is removed and the target is untouched.
// Unlike write_file_atomic (util/strings.h) it never holds the whole file in memory. Bytes may
// also be placed at explicit offsets (write_at), for formats whose layout is known up front but
// whose parts arrive in another order (a safetensors data section filled in module order).
#pragma once
#include <cstdint>
#include <string>

namespace titan {

class FileWriter {
 public:
  explicit FileWriter(const std::string& path);
  ~FileWriter();
  FileWriter(const FileWriter&) = delete;
  FileWriter& operator=(const FileWriter&) = delete;

  // Appends at the current end of what write() has written.
  void write(const void* data, size_t n);
  // Writes at byte `offset` of the file (pwrite; does not move write()'s position).
  void write_at(uint64_t offset, const void* data, size_t n);
  void commit();
  uint64_t bytes_written() const { return written_; }  // by write() and write_at() together

 private:
  std::string path_, tmp_;
  int fd_ = -1;
  uint64_t written_ = 0;
};

}  // namespace titan
