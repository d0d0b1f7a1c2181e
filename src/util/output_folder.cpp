#include "util/output_folder.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "util/strings.h"

namespace fs = std::filesystem;

namespace titan {
namespace {

constexpr const char* kMarkerFirstLine = "titan output folder being written";

std::string this_host() {
  char h[256] = {0};
  if (::gethostname(h, sizeof h - 1) != 0) return "unknown";
  return h;
}

std::string strip_slashes(std::string d) {
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  return d;
}

// <parent>/.<name>.titan-partial-
std::string temp_prefix(const fs::path& dir) {
  return (dir.parent_path() / ("." + dir.filename().string() + ".titan-partial-")).string();
}

void write_marker(const std::string& folder) {
  const std::string text = std::string(kMarkerFirstLine) + "\nhost " + this_host() + "\npid " + std::to_string(::getpid()) + "\n";
  write_file_atomic(folder + "/" + kOutputFolderMarker, text);
}

// True when `folder` holds our marker naming this host and a process that no longer runs.
bool is_stale_temporary(const fs::path& folder) {
  std::error_code ec;
  const fs::path m = folder / kOutputFolderMarker;
  if (!fs::is_regular_file(fs::symlink_status(m, ec)) || fs::file_size(m, ec) > 4096) return false;
  std::string text;
  try {
    text = read_file(m.string());
  } catch (const Error&) {
    return false;
  }
  const std::vector<std::string> lines = split(text, '\n');
  if (lines.size() < 3 || lines[0] != kMarkerFirstLine || lines[1] != "host " + this_host() || lines[2].rfind("pid ", 0) != 0)
    return false;
  char* end = nullptr;
  const long pid = std::strtol(lines[2].c_str() + 4, &end, 10);
  if (pid <= 0 || *end != '\0') return false;
  return ::kill(pid_t(pid), 0) != 0 && errno == ESRCH;
}

void fsync_path(const std::string& p) {
  const int fd = ::open(p.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

}  // namespace

int remove_stale_output_temporaries(const std::string& dir_in) {
  const fs::path dir = fs::absolute(strip_slashes(dir_in));
  const std::string prefix = temp_prefix(dir);
  const std::string name_prefix = fs::path(prefix).filename().string();
  std::error_code ec;
  int removed = 0;
  for (const auto& e : fs::directory_iterator(dir.parent_path(), ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(name_prefix, 0) != 0 || !e.is_directory(ec) || e.is_symlink(ec)) continue;
    if (!is_stale_temporary(e.path())) continue;
    fs::remove_all(e.path(), ec);
    if (!ec) ++removed;
  }
  return removed;
}

OutputFolder::OutputFolder(const std::string& dir, bool replace, const std::string& what, const std::string& flag)
    : dir_(strip_slashes(dir)), what_(what) {
  TITAN_CHECK(!dir_.empty(), what_, ": the output folder is empty");
  std::error_code ec;
  const fs::file_status st = fs::symlink_status(dir_, ec);
  if (fs::exists(st)) {
    TITAN_CHECK(fs::is_directory(st), dir_, ": is not a folder (", what_, " writes a folder)");
    const bool empty = fs::is_empty(dir_, ec);
    TITAN_CHECK(!ec, dir_, ": cannot read the folder: ", ec.message());
    TITAN_CHECK(empty || replace, dir_, ": is not empty", flag.empty() ? std::string() : "; pass " + flag + " to replace what it holds",
                ", or choose another folder");
  }
  const fs::path abs = fs::absolute(dir_);
  fs::create_directories(abs.parent_path(), ec);
  TITAN_CHECK(!ec, abs.parent_path().string(), ": cannot create the folder: ", ec.message());
  remove_stale_output_temporaries(dir_);
  tmp_ = temp_prefix(abs) + this_host() + "-" + std::to_string(::getpid());
  fs::remove_all(tmp_, ec);  // our own pid's leftover (an earlier writer of this process)
  TITAN_CHECK(::mkdir(tmp_.c_str(), 0755) == 0, tmp_, ": cannot create the temporary folder: ", std::strerror(errno));
  write_marker(tmp_);
}

OutputFolder::~OutputFolder() {
  if (committed_ || tmp_.empty()) return;
  std::error_code ec;
  fs::remove_all(tmp_, ec);
}

void OutputFolder::commit() {
  TITAN_CHECK(!committed_, what_, " to ", dir_, ": committed twice");
  fsync_path(tmp_);
  std::error_code ec;
  const bool exists = fs::exists(fs::symlink_status(dir_, ec));
  bool swapped = false;
  if (exists && !fs::is_empty(dir_, ec)) {
    // The old folder will sit at tmp_ after the swap: mark it first, so that a kill before its
    // removal leaves a temporary a later run removes (the mark left in the new folder is removed
    // right after the swap).
    write_marker(dir_);
    if (::renameat2(AT_FDCWD, tmp_.c_str(), AT_FDCWD, dir_.c_str(), RENAME_EXCHANGE) != 0) {
      // A file system without the exchange: the old folder aside (marked), the new one in place.
      TITAN_CHECK(errno == EINVAL || errno == ENOSYS, dir_, ": cannot swap the new folder into place: ", std::strerror(errno));
      const std::string aside = tmp_ + "-old";
      TITAN_CHECK(::rename(dir_.c_str(), aside.c_str()) == 0, dir_, ": cannot move the old folder aside: ", std::strerror(errno));
      TITAN_CHECK(::rename(tmp_.c_str(), dir_.c_str()) == 0, dir_, ": cannot move the new folder into place: ",
                  std::strerror(errno));
      tmp_ = aside;
    }
    swapped = true;
  } else {
    if (exists) ::rmdir(dir_.c_str());  // an empty folder: replaced by the rename
    TITAN_CHECK(::rename(tmp_.c_str(), dir_.c_str()) == 0, dir_, ": cannot move the new folder into place: ",
                std::strerror(errno));
  }
  committed_ = true;
  ::unlink((dir_ + "/" + kOutputFolderMarker).c_str());
  fsync_path(fs::absolute(dir_).parent_path().string());
  if (swapped) fs::remove_all(tmp_, ec);
}

}  // namespace titan
