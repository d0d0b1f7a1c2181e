// The run's folders (issue 10): a second run on one dump folder is refused at once naming the
// pid that holds it, a lock file left by a killed run blocks nothing, and an unusable folder is
// named with the reason before any work.
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "common/test_util.h"
#include "core/error.h"
#include "train/run_folder.h"
#include "util/strings.h"

using namespace titan;
using namespace titan::test;
namespace fs = std::filesystem;

namespace {

}  // namespace

TEST(RunFolder, ASecondHolderIsRefusedWithThePidOfTheFirst) {
  std::string dir = temp_dir("lock") + "/run";  // created by the lock
  const std::string me = std::to_string(::getpid());
  {
    RunLock a(dir);
    EXPECT_EQ(trim(read_file(dir + "/titan.lock")), me);
    // flock is per open file: a second open of the same lock, even in this process, is refused.
    std::string e = error_of([&] { RunLock b(dir); });
    EXPECT_EQ(e.rfind(dir + " is in use by pid " + me, 0), 0u) << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
  RunLock c(dir);  // released with its holder
  fs::remove_all(fs::path(dir).parent_path());
}

TEST(RunFolder, ALockFileLeftByAKilledRunBlocksNothing) {
  std::string dir = temp_dir("stale");
  {
    std::ofstream(dir + "/titan.lock") << "999999999\n";  // no process holds it
  }
  RunLock a(dir);
  EXPECT_EQ(trim(read_file(dir + "/titan.lock")), std::to_string(::getpid()));
  fs::remove_all(dir);
}

TEST(RunFolder, UnusableFoldersAreNamedWithTheReason) {
  std::string dir = temp_dir("unusable");
  {
    std::ofstream(dir + "/afile") << "x";
  }
  EXPECT_EQ(error_of([&] { ensure_writable_folder(dir + "/afile/ckpt", "checkpoint folder"); }),
            dir + "/afile/ckpt: cannot create the checkpoint folder: Not a directory");
  EXPECT_EQ(error_of([&] { RunLock l(dir + "/afile/run"); }),
            dir + "/afile/run: cannot create the run folder: Not a directory");
  EXPECT_EQ(error_of([&] { ensure_writable_folder(dir + "/ok/sub", "checkpoint folder"); }), "");
  EXPECT_TRUE(fs::is_directory(dir + "/ok/sub"));
  EXPECT_TRUE(fs::is_empty(dir + "/ok/sub"));  // the probe file is gone
  // A folder that exists but takes no files (root passes permission bits: a read-only mount).
  const std::string ro = dir + "/ro";
  fs::create_directories(ro);
  if (::mount("tmpfs", ro.c_str(), "tmpfs", MS_RDONLY, "size=64k") != 0) {
    const std::string why = std::strerror(errno);
    fs::remove_all(dir);
    GTEST_SKIP() << "cannot mount a read-only tmpfs (" << why << "): needs root";
  }
  std::string e1 = error_of([&] { ensure_writable_folder(ro, "checkpoint folder"); });
  std::string e2 = error_of([&] { RunLock l(ro); });
  ::umount2(ro.c_str(), MNT_DETACH);
  EXPECT_EQ(e1, ro + ": the checkpoint folder is not writable: " + std::strerror(EROFS));
  EXPECT_EQ(e2.rfind(ro + ": ", 0), 0u) << e2;
  EXPECT_NE(e2.find(std::strerror(EROFS)), std::string::npos) << e2;
  fs::remove_all(dir);
}
