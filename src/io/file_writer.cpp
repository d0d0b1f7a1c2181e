#include "io/file_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace titan {

FileWriter::FileWriter(const std::string& path) : path_(path) {
  static std::atomic<uint64_t> counter{0};  // distinct temporary names for concurrent writers
  tmp_ = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  TITAN_CHECK(fd_ >= 0, path, ": cannot create ", tmp_, ": ", std::strerror(errno));
}

FileWriter::~FileWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_.c_str());
  }
}

void FileWriter::write(const void* data, size_t n) {
  TITAN_ASSERT(fd_ >= 0, "FileWriter::write after commit");
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd_, p, n);
    if (w < 0 && errno == EINTR) continue;
    TITAN_CHECK(w > 0, path_, ": write failed: ", std::strerror(errno));
    p += w;
    n -= size_t(w);
    written_ += uint64_t(w);
  }
}

void FileWriter::write_at(uint64_t offset, const void* data, size_t n) {
  TITAN_ASSERT(fd_ >= 0, "FileWriter::write_at after commit");
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::pwrite(fd_, p, n, off_t(offset));
    if (w < 0 && errno == EINTR) continue;
    TITAN_CHECK(w > 0, path_, ": write failed: ", std::strerror(errno));
    p += w;
    n -= size_t(w);
    offset += uint64_t(w);
    written_ += uint64_t(w);
  }
}

void FileWriter::commit() {
  TITAN_ASSERT(fd_ >= 0, "FileWriter::commit twice");
  TITAN_CHECK(::fsync(fd_) == 0, path_, ": fsync failed: ", std::strerror(errno));
  int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0 || ::rename(tmp_.c_str(), path_.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp_.c_str());
    fail(path_, ": cannot move the written file into place: ", std::strerror(e));
  }
  std::string dir = path_.find('/') == std::string::npos ? "." : path_.substr(0, path_.rfind('/'));
  if (dir.empty()) dir = "/";
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {  // make the rename durable
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace titan
