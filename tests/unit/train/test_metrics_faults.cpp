// Metrics under faults (issue 10): a write that fails (full disk) stops the run at once with the
// path and the reason; a resumed run drops the lines of the steps after its checkpoint; a run
// that trains nothing leaves summary.json as it was.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "train/metrics.h"
#include "util/strings.h"

using namespace titan;
namespace fs = std::filesystem;

namespace {

std::string temp_dir(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("titan_metrics_faults_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

MetricsOptions quiet(const std::string& dir) {
  MetricsOptions o;
  o.dump_folder = dir;
  o.log_freq = 1;
  o.console = nullptr;
  return o;
}

StepRecord step(int64_t s, double loss = 1.0) {
  StepRecord r;
  r.step = s;
  r.loss = loss;
  r.tokens = 10;
  r.step_seconds = 0.1;
  return r;
}

// A 64 KiB tmpfs mounted over `dir` for the scope (needs root, or CAP_SYS_ADMIN).
struct TinyTmpfs {
  std::string dir, why;
  bool mounted = false;
  explicit TinyTmpfs(std::string d) : dir(std::move(d)) {
    if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=64k") == 0) mounted = true;
    else why = std::strerror(errno);
  }
  ~TinyTmpfs() {
    if (mounted) ::umount2(dir.c_str(), MNT_DETACH);
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  void fill() const {
    int fd = ::open((dir + "/filler").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ASSERT_GE(fd, 0);
    char buf[4096] = {};
    while (::write(fd, buf, sizeof buf) > 0) {
    }
    ::close(fd);
  }
};

}  // namespace

// The disk filled while only metrics.jsonl was written: the run trained on with the metrics lost.
TEST(MetricsFaults, AFailedMetricsWriteStopsAtOnceNamingFileAndReason) {
  std::string dir = temp_dir("devfull");
  fs::create_symlink("/dev/full", dir + "/metrics.jsonl");  // every write: ENOSPC
  MetricsLogger m(quiet(dir));
  EXPECT_EQ(error_of([&] { m.record(step(1)); }),
            dir + "/metrics.jsonl: cannot write metrics: " + std::strerror(ENOSPC));
  fs::remove_all(dir);
}

TEST(MetricsFaults, AFullFileSystemStopsJsonlTensorBoardAndSummaryWrites) {
  std::string dir = temp_dir("tmpfs");
  TinyTmpfs fs64(dir);
  if (!fs64.mounted) GTEST_SKIP() << "cannot mount a tmpfs on " << dir << " (" << fs64.why << "): needs root";
  const std::string nospc = std::strerror(ENOSPC);
  {  // metrics.jsonl
    MetricsLogger m(quiet(dir));
    m.record(step(1));
    fs64.fill();
    int64_t s = 2;  // the file's last page may hold a few more lines
    std::string e = error_of([&] {
      for (; s < 1000; ++s) m.record(step(s));
    });
    EXPECT_EQ(e, dir + "/metrics.jsonl: cannot write metrics: " + nospc);
    EXPECT_LT(s, 100);
    fs::remove(dir + "/filler");
  }
  {  // TensorBoard events
    MetricsOptions o = quiet("");
    o.tensorboard = true;
    o.tb_folder = dir + "/tb";
    MetricsLogger m(o);
    m.record(step(1));
    fs64.fill();
    std::string e = error_of([&] {
      for (int s = 2; s < 1000; ++s) m.record(step(s));  // stdio buffers: fails at the flush
    });
    EXPECT_NE(e.find(dir + "/tb/events.out.tfevents."), std::string::npos) << e;
    EXPECT_NE(e.find(nospc), std::string::npos) << e;
    fs::remove(dir + "/filler");
  }
  {  // summary.json
    MetricsLogger m(quiet(dir));
    m.record(step(1));
    fs64.fill();
    std::string e = error_of([&] { m.finish(); });
    EXPECT_NE(e.find(dir + "/summary.json"), std::string::npos) << e;
    EXPECT_NE(e.find(nospc), std::string::npos) << e;
  }
}
