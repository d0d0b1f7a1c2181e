// titan cache info|clear [--dir D]: where the cache is (token files, src/data/token_cache.h, and
// the measured MFU peaks, src/train/peak_flops.h), what it holds, and emptying it. Only the
// cache's own files are listed or removed.
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>

#include "cli/command.h"
#include "core/error.h"
#include "data/dataset.h"
#include "data/progress.h"
#include "data/token_cache.h"
#include "train/peak_flops.h"

namespace titan::cli {

namespace {

// Where the folder came from, as data::default_cache_dir() chooses it.
std::string cache_dir_source(const Args& args) {
  if (args.has("dir")) return "--dir";
  for (const char* v : {"TITAN_CACHE_DIR", "XDG_CACHE_HOME"})
    if (const char* e = std::getenv(v); e && *e) return std::string("$") + v + (v[0] == 'X' ? "/titan" : "");
  return std::getenv("HOME") ? "$HOME/.cache/titan" : "no $HOME: the temp folder";
}

std::string date(int64_t ns) {
  const std::time_t t = std::time_t(ns / 1000000000);
  char buf[32];
  std::tm tm {};
  ::localtime_r(&t, &tm);
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M", &tm);
  return buf;
}

std::string bound_text(uint64_t b) {
  if (b == UINT64_MAX) return "none";
  if (b % (uint64_t(1) << 30) == 0) return std::to_string(b >> 30) + " GiB";
  return std::to_string(b) + " bytes";
}

int cmd_cache(const std::vector<std::string>& argv) {
  Args args(argv, {});
  args.check_known({"dir"});
  const auto& pos = args.positional();
  const std::string usage = "usage: titan cache info|clear [--dir D]";
  TITAN_CHECK(pos.size() == 1 && (pos[0] == "info" || pos[0] == "clear"),
              pos.empty() ? "missing action; " + usage : "unknown cache action '" + pos[0] + "'; " + usage);
  const std::string dir = args.get("dir", data::default_cache_dir());
  if (pos[0] == "clear") {
    const data::CacheContents r = data::clear_cache(dir);
    std::error_code ec;
    // Only a peaks file titan wrote: a user's peak_flops.json in the folder stays.
    const bool peaks = is_peak_cache_file(peak_cache_path(dir)) && std::filesystem::remove(peak_cache_path(dir), ec);
    TITAN_CHECK(!ec, peak_cache_path(dir), ": cannot remove: ", ec.message());
    std::printf("removed %zu token files (%s)%s and %zu temporary files from %s\n", r.files.size(),
                data::human_bytes(double(r.bytes)).c_str(), peaks ? ", the measured MFU peaks" : "", r.temps.size(),
                dir.c_str());
    return 0;
  }
  const data::CacheContents c = data::list_cache(dir);
  const uint64_t bound = data::default_cache_max_bytes();
  std::printf("cache    %s (%s)\n", dir.c_str(), cache_dir_source(args).c_str());
  std::printf("files    %zu token files, %s; bound %s ($TITAN_CACHE_MAX_BYTES), least recently used evicted beyond it\n",
              c.files.size(), data::human_bytes(double(c.bytes)).c_str(),
              bound_text(bound).c_str());
  for (auto it = c.files.rbegin(); it != c.files.rend(); ++it)  // most recently used first
    std::printf("         %-60s %10s  used %s\n", std::filesystem::path(it->path).filename().c_str(),
                data::human_bytes(double(it->bytes)).c_str(), date(it->mtime_ns).c_str());
  if (is_peak_cache_file(peak_cache_path(dir)))
    std::printf("peaks    %s: the measured MFU peaks (titan info --peak)\n",
                std::filesystem::path(peak_cache_path(dir)).filename().c_str());
  if (!c.temps.empty())
    std::printf("temps    %zu temporary files of tokenizations at work or killed (those of killed ones go on "
                "the next use of the cache, or with titan cache clear)\n",
                c.temps.size());
  return 0;
}

}  // namespace

TITAN_COMMAND("cache", "the token cache: where it is and what it holds (info), emptying it (clear)", cmd_cache);

}  // namespace titan::cli
