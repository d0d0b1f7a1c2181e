// The token cache: temporary files of killed writers are removed when the cache is next opened (and
// only those), and the cache is listed, bounded and cleared without touching anything it did not
// write.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include <filesystem>
#include <fstream>
#include <functional>

#include "common/test_util.h"
#include "data_test_util.h"
#include "core/error.h"
#include "data/dataset.h"
#include "data/token_cache.h"
#include "data/token_file.h"

namespace titan::test {
namespace {

namespace fs = std::filesystem;

struct Dir {
  fs::path path;
  Dir() {
    static int n = 0;
    path = fs::temp_directory_path() / ("titan_cache_test_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~Dir() { fs::remove_all(path); }
  std::string write(const std::string& name, const std::string& content) const {
    const std::string p = (path / name).string();
    std::ofstream(p, std::ios::binary) << content;
    return p;
  }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

void age(const std::string& path, int hours) {
  fs::last_write_time(path, fs::file_time_type::clock::now() - std::chrono::hours(hours));
}

// A process id that is not running: a child that has exited and been reaped.
pid_t dead_pid() {
  pid_t p = ::fork();
  if (p == 0) ::_exit(0);
  int status = 0;
  ::waitpid(p, &status, 0);
  return p;
}

std::string host() {
  char h[256] = {0};
  ::gethostname(h, sizeof h - 1);
  return h;
}

data::DatasetSpec small_spec(const Dir& d) {
  data::DatasetSpec spec;
  spec.name_or_path = d.write("doc.txt", "Hello world, a small document.\n");
  spec.cache_dir = d / "cache";
  spec.progress = false;
  return spec;
}

const data::LogFn quiet = [](const std::string&) {};

// The first bytes of a token file the cache writes: a header with the cache's tag.
std::string tagged(const std::string& rest = "") {
  std::string h(data::kTokenFileHeaderBytes, '\0');
  const uint32_t u32s[4] = {1, uint32_t(data::kTokenFileHeaderBytes), 10, 0xFFFFFFFFu};
  std::memcpy(&h[0], "TITANTOK", 8);
  std::memcpy(&h[8], u32s, sizeof u32s);
  std::memcpy(&h[48], data::kTokenCacheTag, 8);
  return h + rest;
}

TEST(TokenCache, TempFilesOfDeadWritersAreRemovedWhenTheCacheIsOpened) {
  Dir d;
  fs::create_directories(d / "cache");
  const std::string stem = "x-0123456789abcdef.bin";
  const std::string dead_legacy = d.write("cache/" + stem + ".tmp." + std::to_string(dead_pid()), tagged("partial"));
  const std::string dead_here = d.write("cache/" + stem + ".tmp." + host() + "." + std::to_string(dead_pid()), tagged("partial"));
  const std::string live_here = d.write("cache/" + stem + ".tmp." + host() + "." + std::to_string(::getpid()), tagged("w"));
  const std::string other_fresh = d.write("cache/" + stem + ".tmp.other-host.1", tagged("being written elsewhere"));
  const std::string other_old = d.write("cache/" + stem + ".tmp.other-host.2", tagged("abandoned elsewhere"));
  // Named like a dead writer's temporary but not marked as the cache's inside: a user's file.
  const std::string untagged_dead = d.write("cache/" + stem + ".tmp." + host() + "." + std::to_string(dead_pid()) + "0", "partial");
  age(other_old, 48);
  // A source whose name holds ".bin.tmp." itself: its cache file stays, its dead writer's temp goes.
  const std::string odd = "y.bin.tmp.z-0123456789abcdef.bin";
  const std::string odd_cached = d.write("cache/" + odd, "a finished cache file");
  const std::string odd_dead = d.write("cache/" + odd + ".tmp." + host() + "." + std::to_string(dead_pid()), tagged("partial"));
  const std::string not_ours = d.write("cache/notes.tmp.123", "a user's file");
  const std::string not_ours2 = d.write("cache/keep.bin.tmp.999999999x", "a user's file");

  data::TokenDataset::load(small_spec(d), qwen_tokenizer(), quiet);

  EXPECT_FALSE(fs::exists(dead_legacy));
  EXPECT_FALSE(fs::exists(dead_here));
  EXPECT_FALSE(fs::exists(other_old));
  EXPECT_FALSE(fs::exists(odd_dead));
  EXPECT_TRUE(fs::exists(odd_cached));
  EXPECT_TRUE(fs::exists(live_here));    // a writer that still runs here
  EXPECT_TRUE(fs::exists(other_fresh));  // another machine's writer, recently active
  EXPECT_TRUE(fs::exists(not_ours));
  EXPECT_TRUE(fs::exists(not_ours2));
  EXPECT_TRUE(fs::exists(untagged_dead));
}

TEST(TokenCache, InfoListsOnlyCacheFilesAndClearRemovesOnlyThem) {
  Dir d;
  const data::DatasetSpec spec = small_spec(d);
  data::TokenDataset::load(spec, qwen_tokenizer(), quiet);
  const std::string user_file = d.write("cache/README.txt", "not a cache file");
  const std::string user_bin = d.write("cache/mine.bin", "not a cache file either");
  const std::string live = d.write("cache/a-0123456789abcdef.bin.tmp." + host() + "." + std::to_string(::getpid()), tagged("w"));

  data::CacheContents c = data::list_cache(spec.cache_dir);
  ASSERT_EQ(c.files.size(), 1u);
  EXPECT_EQ(fs::path(c.files[0].path).filename().string().rfind("doc-", 0), 0u);
  EXPECT_EQ(c.files[0].bytes, fs::file_size(c.files[0].path));
  EXPECT_EQ(c.bytes, c.files[0].bytes);
  ASSERT_EQ(c.temps.size(), 1u);

  data::CacheContents removed = data::clear_cache(spec.cache_dir);
  EXPECT_EQ(removed.files.size(), 1u);
  EXPECT_TRUE(removed.temps.empty());  // a live writer's temporary file stays
  EXPECT_TRUE(data::list_cache(spec.cache_dir).files.empty());
  EXPECT_TRUE(fs::exists(user_file));
  EXPECT_TRUE(fs::exists(user_bin));
  EXPECT_TRUE(fs::exists(live));
  // A missing folder is an empty cache, not an error; a file in its place is an error.
  EXPECT_TRUE(data::list_cache(d / "nothing").files.empty());
  EXPECT_NE(error_of([&] { data::list_cache(d.write("plain", "x")); }).find("plain: is not a folder"), std::string::npos);
}

// Judged by name alone, `cache clear --dir D` on an ordinary folder deleted a user's
// weights-0123456789abcdef.bin; only files the cache marked as its own go.
TEST(TokenCache, FilesNamedLikeTheCachesButNotMarkedAreNeverRemoved) {
  Dir d;
  const std::string weights = d.write("weights-0123456789abcdef.bin", std::string(4096, 'w'));
  {  // a `titan tokenize` output named like a cache file: a token file, not the cache's
    data::TokenFileWriter w(d / "mine-0123456789abcdef.bin", 10, 0xFFFFFFFFu, 0);
    w.add_document({1, 2, 3});
    w.close();
  }
  const std::string header_only = d.write("short-0123456789abcdef.bin", "TITANTOK");
  const std::string cached = d.write("doc-0123456789abcdef.bin", tagged());
  data::CacheContents c = data::list_cache(d.path.string());
  ASSERT_EQ(c.files.size(), 1u);
  EXPECT_EQ(c.files[0].path, cached);
  const data::CacheContents removed = data::clear_cache(d.path.string());
  EXPECT_EQ(removed.files.size(), 1u);
  EXPECT_FALSE(fs::exists(cached));
  EXPECT_TRUE(fs::exists(weights));
  EXPECT_TRUE(fs::exists(d / "mine-0123456789abcdef.bin"));
  EXPECT_TRUE(fs::exists(header_only));
  EXPECT_EQ(data::evict_cache(d.path.string(), 0, {}).size(), 0u);
  EXPECT_TRUE(fs::exists(weights));
}

TEST(TokenCache, SizeBoundEvictsTheLeastRecentlyUsedFiles) {
  Dir d;
  data::DatasetSpec spec = small_spec(d);
  const auto& tok = qwen_tokenizer();
  // Three cached documents, used in the order a, b, c; then a again.
  std::vector<std::string> docs;
  for (const char* n : {"a.txt", "b.txt", "c.txt"}) docs.push_back(d.write(n, std::string("Some text for ") + n));
  uint64_t one = 0;
  for (int i = 0; i < 3; ++i) {
    spec.name_or_path = docs[size_t(i)];
    data::TokenDataset::load(spec, tok, quiet);
    for (auto& f : data::list_cache(spec.cache_dir).files) {
      const std::string name = fs::path(f.path).filename().string();
      if (name[0] == "abc"[i]) age(f.path, 10 - i);  // distinct use times without sleeping
      one = std::max<uint64_t>(one, f.bytes);
    }
  }
  spec.name_or_path = docs[0];
  data::TokenDataset::load(spec, tok, quiet);  // a cache hit marks a as just used
  ASSERT_EQ(data::list_cache(spec.cache_dir).files.size(), 3u);

  // A bound of about two files: writing d's cache evicts the least recently used, b and then c.
  spec.max_cache_bytes = 2 * one + one / 2;
  std::vector<std::string> logs;
  spec.name_or_path = d.write("d.txt", "Some text for d.txt");
  data::TokenDataset::load(spec, tok, [&](const std::string& s) { logs.push_back(s); });
  std::vector<std::string> left;
  for (auto& f : data::list_cache(spec.cache_dir).files) left.push_back(fs::path(f.path).filename().string().substr(0, 2));
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"a-", "d-"}));
  bool logged = false;
  for (auto& l : logs) logged |= l.find("evicted") != std::string::npos;
  EXPECT_TRUE(logged);
}

}  // namespace
}  // namespace titan::test
