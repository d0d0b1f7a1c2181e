// Output folders are written whole or not at all (util/output_folder.h): a non-empty folder is
// refused unless replaced, a replacement leaves nothing of what the folder held, an abandoned
// write leaves the folder as it was, and only marked temporaries of dead processes are removed.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include "unit/io/io_test_util.h"
#include "util/output_folder.h"
#include "util/strings.h"

using namespace titan;
namespace fs = std::filesystem;

namespace {

std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

pid_t dead_pid() {
  const pid_t p = ::fork();
  if (p == 0) ::_exit(0);
  int st = 0;
  ::waitpid(p, &st, 0);
  return p;
}

std::string host() {
  char h[256] = {0};
  ::gethostname(h, sizeof h - 1);
  return h;
}

TEST(OutputFolder, ANonEmptyFolderIsRefusedUnlessReplaced) {
  iotest::TempDir tmp;
  const std::string m = tmp / "m";
  fs::create_directories(m);
  write_file_atomic(m + "/notes.txt", "mine");
  const std::string e = iotest::error_of([&] { OutputFolder f(m, false, "import"); });
  EXPECT_EQ(e, m + ": is not empty; pass --replace to replace what it holds, or choose another folder");
  EXPECT_EQ(names_in(tmp.path), std::vector<std::string>{"m"});  // no temporary left
  write_file_atomic(tmp / "file", "x");
  EXPECT_NE(iotest::error_of([&] { OutputFolder f(tmp / "file", true, "import"); }).find("is not a folder"), std::string::npos);
}

TEST(OutputFolder, AReplacementLeavesNothingOfTheOldFolder) {
  iotest::TempDir tmp;
  const std::string m = tmp / "m";
  fs::create_directories(m + "/sub");
  for (const char* f : {"model-00001-of-00002.safetensors", "model.safetensors.index.json", "chat_template.jinja",
                        "generation_config.json", "sub/x"})
    write_file_atomic(m + "/" + f, "old");
  {
    OutputFolder f(m, true, "import");
    EXPECT_NE(f.path(), m);
    write_file_atomic(f.path() + "/model.safetensors", "new");
    EXPECT_EQ(read_file(m + "/chat_template.jinja"), "old");  // untouched until commit
    f.commit();
  }
  EXPECT_EQ(names_in(m), std::vector<std::string>{"model.safetensors"});
  EXPECT_EQ(read_file(m + "/model.safetensors"), "new");
  EXPECT_EQ(names_in(tmp.path), std::vector<std::string>{"m"});
  // Into a folder that does not exist yet, and into an empty one.
  for (bool make : {false, true}) {
    const std::string n = tmp / ("n" + std::to_string(make));
    if (make) fs::create_directories(n);
    OutputFolder f(n, false, "export");
    write_file_atomic(f.path() + "/a", "1");
    f.commit();
    EXPECT_EQ(names_in(n), std::vector<std::string>{"a"});
  }
}

TEST(OutputFolder, AnAbandonedWriteLeavesTheFolderAsItWas) {
  iotest::TempDir tmp;
  const std::string m = tmp / "m";
  fs::create_directories(m);
  write_file_atomic(m + "/config.json", "old");
  {
    OutputFolder f(m, true, "export");
    write_file_atomic(f.path() + "/config.json", "new");
  }  // an error before commit()
  EXPECT_EQ(names_in(m), std::vector<std::string>{"config.json"});
  EXPECT_EQ(read_file(m + "/config.json"), "old");
  EXPECT_EQ(names_in(tmp.path), std::vector<std::string>{"m"});
}

TEST(OutputFolder, OnlyMarkedTemporariesOfDeadProcessesAreRemoved) {
  iotest::TempDir tmp;
  const std::string m = tmp / "m";
  auto make = [&](const std::string& name, const std::string& marker) {
    fs::create_directories(tmp / name);
    write_file_atomic(tmp / name + "/shard.safetensors", "big");
    if (!marker.empty()) write_file_atomic(tmp / name + "/" + kOutputFolderMarker, marker);
  };
  const std::string dead = std::to_string(dead_pid());
  const std::string mark = "titan output folder being written\nhost " + host() + "\npid ";
  make(".m.titan-partial-a", mark + dead + "\n");                                 // ours, dead: removed
  make(".m.titan-partial-b", mark + "1\n");                                       // ours, alive: kept
  make(".m.titan-partial-c", "");                                                 // unmarked: kept
  make(".m.titan-partial-d", "titan output folder being written\nhost elsewhere\npid " + dead + "\n");  // other host
  make(".m.titan-partial-e", "something else\nhost " + host() + "\npid " + dead + "\n");              // not our marker
  make(".other.titan-partial-f", mark + dead + "\n");                             // beside another folder
  make("user-folder", mark + dead + "\n");                                        // not a temporary's name
  EXPECT_EQ(remove_stale_output_temporaries(m), 1);
  EXPECT_EQ(names_in(tmp.path), (std::vector<std::string>{".m.titan-partial-b", ".m.titan-partial-c", ".m.titan-partial-d",
                                                          ".m.titan-partial-e", ".other.titan-partial-f", "user-folder"}));
}

}  // namespace
