#include "train/run_folder.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <thread>

#include "core/error.h"
#include "comm/comm.h"
#include "train/job_config.h"

namespace fs = std::filesystem;

namespace titan {
namespace {

void create_folder(const std::string& folder, const std::string& what) {
  std::error_code ec;
  fs::create_directories(folder, ec);
  TITAN_CHECK(!ec, folder, ": cannot create the ", what, ": ", std::strerror(ec.value()));
  TITAN_CHECK(fs::is_directory(folder, ec), folder, ": the ", what, " is not a folder");
}

// The pid a holder wrote into its lock file; 0 when there is none (yet: the holder writes it
// just after taking the lock, so a few short waits cover that moment).
long holder_pid(const std::string& path) {
  for (int attempt = 0; attempt < 50; ++attempt) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      char buf[32] = {};
      const ssize_t n = ::read(fd, buf, sizeof buf - 1);
      ::close(fd);
      if (n > 0) {
        const long pid = std::strtol(buf, nullptr, 10);
        if (pid > 0) return pid;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return 0;
}

bool inside(const std::string& child, const std::string& parent) {
  std::error_code ec;
  const fs::path c = fs::weakly_canonical(child, ec), p = fs::weakly_canonical(parent, ec);
  auto [pe, ce] = std::mismatch(p.begin(), p.end(), c.begin(), c.end());
  return pe == p.end() || (std::next(pe) == p.end() && pe->empty());  // "a/b/" ends in an empty part
}

}  // namespace

RunLock::RunLock(const std::string& folder) {
  create_folder(folder, "run folder");
  path_ = folder + "/titan.lock";
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  TITAN_CHECK(fd_ >= 0, folder, ": cannot create the lock file titan.lock: ", std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int e = errno;
    ::close(fd_);
    fd_ = -1;
    TITAN_CHECK(e == EWOULDBLOCK, path_, ": cannot lock: ", std::strerror(e));
    const long pid = holder_pid(path_);
    fail(folder, " is in use by ", pid > 0 ? "pid " + std::to_string(pid) : std::string("another process"),
         " (another run holds ", path_, "; wait for it, or use another [job] dump_folder)");
  }
  // Ours now: replace whatever pid a previous (ended or killed) holder left.
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, pid.data(), pid.size(), 0) != ssize_t(pid.size())) {
    const int e = errno;
    ::close(fd_);
    fd_ = -1;
    fail(path_, ": cannot write: ", std::strerror(e));
  }
}

RunLock::~RunLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock; the file stays (removing it would race)
}

void ensure_writable_folder(const std::string& folder, const std::string& what) {
  create_folder(folder, what);
  const std::string probe = folder + "/.titan-probe-" + std::to_string(::getpid());
  int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  TITAN_CHECK(fd >= 0, folder, ": the ", what, " is not writable: ", std::strerror(errno));
  const bool wrote = ::write(fd, "x", 1) == 1;
  const int e = errno;
  ::close(fd);
  ::unlink(probe.c_str());
  TITAN_CHECK(wrote, folder, ": the ", what, " is not writable: ", std::strerror(e));
}

std::vector<std::unique_ptr<RunLock>> prepare_run_folders(const JobConfig& cfg, comm::Comm& comm) {
  std::vector<std::unique_ptr<RunLock>> locks;
  std::string error;
  if (comm.rank() == 0) {
    try {
      if (!cfg.job.dump_folder.empty()) {
        ensure_writable_folder(cfg.job.dump_folder, "run folder ([job] dump_folder)");
        locks.push_back(std::make_unique<RunLock>(cfg.job.dump_folder));
      }
      if (cfg.checkpoint.enable) {
        const std::string ck = cfg.checkpoint_folder();
        ensure_writable_folder(ck, "checkpoint folder");
        // Another run's dump folder may name the same checkpoint folder.
        if (cfg.job.dump_folder.empty() || !inside(ck, cfg.job.dump_folder))
          locks.push_back(std::make_unique<RunLock>(ck));
      }
    } catch (const Error& e) {
      error = e.what();
    }
  }
  // Every rank fails alike, instead of the others waiting in the next collective.
  int64_t n = int64_t(error.size());
  comm.broadcast(&n, sizeof n, 0);
  error.resize(size_t(n));
  if (n > 0) comm.broadcast(error.data(), size_t(n), 0);
  if (n > 0) throw Error(error);
  return locks;
}

}  // namespace titan
