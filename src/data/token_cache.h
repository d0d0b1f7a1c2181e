// The token cache: a folder of token files (<source stem>-<16 hex digits>.bin) that
// TokenDataset::load writes for text sources, and the temporary files of writers at work
// (<that name>.tmp.<host>.<pid>). Only files named so and marked as the cache's inside (their
// token file header carries the cache's tag, data/token_file.h) are ever listed or removed, so a
// cache folder shared with other files (TITAN_CACHE_DIR=~/data) loses nothing else: not a user's
// weights-0123456789abcdef.bin, not a `titan tokenize` output named like a cache file. (Files of
// versions before the tag are left alone too.)
//
// Least recently used files are evicted when a new one takes the cache above its bound
// ($TITAN_CACHE_MAX_BYTES, default 20 GiB, 0 for none); a cache hit counts as a use (the file's
// mtime is set to now). Temporary files whose writer is gone — its process has ended on this
// machine, or, from another machine sharing the folder, it has not written for a day — are
// removed whenever the cache is opened.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace titan::data {

struct CacheFile {
  std::string path;
  uint64_t bytes = 0;
  int64_t mtime_ns = 0;  // last use
};

struct CacheContents {
  std::vector<CacheFile> files;  // finished token files, least recently used first
  std::vector<CacheFile> temps;  // temporary files of writers
  uint64_t bytes = 0;            // of `files`
};

constexpr uint64_t kDefaultCacheMaxBytes = uint64_t(20) << 30;

// What the cache folder holds; a missing folder is an empty cache.
CacheContents list_cache(const std::string& dir);
// Removes every cache file, and the temporary files of writers that are gone; returns those.
CacheContents clear_cache(const std::string& dir);
// Removes the temporary files of writers that are gone; returns them.
std::vector<CacheFile> remove_stale_temps(const std::string& dir);
// Evicts least recently used files, never one named in `keep`, until the cache holds at most
// max_bytes; returns the evicted files.
std::vector<CacheFile> evict_cache(const std::string& dir, uint64_t max_bytes, const std::vector<std::string>& keep);
// Marks a cache file as just used (its mtime := now; silently nothing on a read-only cache).
void mark_cache_use(const std::string& path);
// $TITAN_CACHE_MAX_BYTES (0: unbounded, returned as UINT64_MAX), else kDefaultCacheMaxBytes.
uint64_t default_cache_max_bytes();
// This machine's name, as temporary token files carry it.
std::string host_name();

}  // namespace titan::data
