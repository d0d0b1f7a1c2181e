#include "data/token_cache.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>

#include "core/error.h"
#include "data/token_file.h"
#include "util/numbers.h"

namespace titan::data {

namespace fs = std::filesystem;

namespace {

constexpr int64_t kForeignTempAge = int64_t(24) * 3600 * 1000000000;  // ns: another machine's writer is gone

bool is_hex16(std::string_view s) {
  if (s.size() != 16) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

// <stem>-<16 hex>.bin, as cache_name() in dataset.cpp writes them.
bool is_cache_name(std::string_view n) {
  if (n.size() < 22 || n.substr(n.size() - 4) != ".bin") return false;
  return n[n.size() - 21] == '-' && is_hex16(n.substr(n.size() - 20, 16));
}

struct TempName {
  std::string host;  // "" in the older <name>.tmp.<pid> form, written on this machine
  pid_t pid = 0;
};

// <cache name>.tmp.<host>.<pid> (TokenFileWriter), or <cache name>.tmp.<pid> (older versions).
std::optional<TempName> temp_name(std::string_view n) {
  const size_t t = n.rfind(".bin.tmp.");  // the last: a source stem may hold the same text
  if (t == std::string_view::npos || !is_cache_name(n.substr(0, t + 4))) return std::nullopt;
  std::string_view rest = n.substr(t + 9);
  TempName r;
  const size_t dot = rest.rfind('.');
  if (dot != std::string_view::npos) {
    r.host = std::string(rest.substr(0, dot));
    rest = rest.substr(dot + 1);
    if (r.host.empty()) return std::nullopt;
  }
  auto pid = to_int64(rest);
  if (!pid || *pid <= 0 || *pid > INT32_MAX) return std::nullopt;
  r.pid = pid_t(*pid);
  return r;
}

bool pid_alive(pid_t p) { return ::kill(p, 0) == 0 || errno == EPERM; }

int64_t now_ns() {
  struct timespec ts {};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// A temporary file whose writer is gone: on this machine its process has ended; from another
// machine (a cache folder shared over the network) it has not been written to for a day.
bool temp_is_stale(const CacheFile& f) {
  auto t = temp_name(fs::path(f.path).filename().string());
  if (!t) return false;
  if (t->host.empty() || t->host == host_name()) return !pid_alive(t->pid);
  return now_ns() - f.mtime_ns > kForeignTempAge;
}

// The file starts with a token file header carrying the cache's tag (a writer writes the header
// first, so its temporary carries it too). Opened without blocking: never a FIFO's open().
bool cache_tagged(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return false;
  unsigned char h[kTokenFileHeaderBytes];
  const ssize_t n = ::pread(fd, h, sizeof h, 0);
  ::close(fd);
  return n == ssize_t(sizeof h) && has_token_cache_header(h, sizeof h);
}

bool remove_file(const std::string& path) { return ::unlink(path.c_str()) == 0 || errno == ENOENT; }

}  // namespace

std::string host_name() {
  char h[256] = {0};
  if (::gethostname(h, sizeof h - 1) != 0 || !h[0]) return "localhost";
  return h;
}

CacheContents list_cache(const std::string& dir) {
  CacheContents c;
  struct stat ds {};
  if (::stat(dir.c_str(), &ds) != 0) return c;
  TITAN_CHECK(S_ISDIR(ds.st_mode), dir, ": is not a folder (the token cache folder)");
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    const bool cached = is_cache_name(name);
    if (!cached && !temp_name(name)) continue;
    struct stat st {};
    if (::lstat(e.path().c_str(), &st) != 0 || !S_ISREG(st.st_mode) || !cache_tagged(e.path().string())) continue;
    CacheFile f{e.path().string(), uint64_t(st.st_size), int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
    if (cached) {
      c.bytes += f.bytes;
      c.files.push_back(std::move(f));
    } else {
      c.temps.push_back(std::move(f));
    }
  }
  TITAN_CHECK(!ec, dir, ": cannot list: ", ec.message());
  auto older = [](const CacheFile& a, const CacheFile& b) { return a.mtime_ns != b.mtime_ns ? a.mtime_ns < b.mtime_ns : a.path < b.path; };
  std::sort(c.files.begin(), c.files.end(), older);
  std::sort(c.temps.begin(), c.temps.end(), older);
  return c;
}

std::vector<CacheFile> remove_stale_temps(const std::string& dir) {
  std::vector<CacheFile> removed;
  for (const CacheFile& t : list_cache(dir).temps)
    if (temp_is_stale(t) && remove_file(t.path)) removed.push_back(t);
  return removed;
}

CacheContents clear_cache(const std::string& dir) {
  CacheContents removed;
  const CacheContents c = list_cache(dir);
  for (const CacheFile& f : c.files) {
    TITAN_CHECK(remove_file(f.path), f.path, ": cannot remove: ", std::strerror(errno));
    removed.bytes += f.bytes;
    removed.files.push_back(f);
  }
  for (const CacheFile& t : c.temps)
    if (temp_is_stale(t) && remove_file(t.path)) removed.temps.push_back(t);
  return removed;
}

void mark_cache_use(const std::string& path) { ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0); }

std::vector<CacheFile> evict_cache(const std::string& dir, uint64_t max_bytes, const std::vector<std::string>& keep) {
  std::vector<CacheFile> evicted;
  CacheContents c = list_cache(dir);
  for (const CacheFile& f : c.files) {  // least recently used first
    if (c.bytes <= max_bytes) break;
    const fs::path name = fs::path(f.path).filename();
    if (std::any_of(keep.begin(), keep.end(), [&](const std::string& k) { return fs::path(k).filename() == name; }) ||
        !remove_file(f.path))
      continue;
    c.bytes -= f.bytes;
    evicted.push_back(f);
  }
  return evicted;
}

uint64_t default_cache_max_bytes() {
  const char* env = std::getenv("TITAN_CACHE_MAX_BYTES");
  if (!env || !*env) return kDefaultCacheMaxBytes;
  const uint64_t v = parse_uint64(env, "TITAN_CACHE_MAX_BYTES", 0, UINT64_MAX);
  return v == 0 ? UINT64_MAX : v;
}

}  // namespace titan::data
