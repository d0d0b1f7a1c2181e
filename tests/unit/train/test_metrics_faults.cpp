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

#include "common/test_util.h"
#include "core/error.h"
#include "train/metrics.h"
#include "train/tensorboard.h"
#include "util/strings.h"

using namespace titan;
using namespace titan::test;
namespace fs = std::filesystem;

namespace {

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

std::vector<int64_t> steps_in(const std::string& path) {
  std::vector<int64_t> v;
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) v.push_back(nlohmann::json::parse(line)["step"].get<int64_t>());
  return v;
}

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

// A run killed after step 6 whose last checkpoint is step 3 resumes at step 4: the lines of steps
// 4..6 it logged before the kill would otherwise appear twice.
TEST(MetricsFaults, AResumedRunDropsTheLinesAfterItsCheckpoint) {
  std::string dir = temp_dir("resume");
  const std::string path = dir + "/metrics.jsonl";
  {
    MetricsLogger m(quiet(dir));
    for (int s = 1; s <= 6; ++s) m.record(step(s));
  }
  {
    std::ofstream(path, std::ios::app) << "{\"step\": 7, \"lo";  // torn by the kill
  }
  MetricsOptions o = quiet(dir);
  o.resume_step = 3;
  o.tensorboard = true;
  o.tb_folder = dir + "/tb";
  {
    MetricsLogger m(o);
    EXPECT_EQ(steps_in(path), (std::vector<int64_t>{1, 2, 3}));
    EXPECT_EQ(m.dropped_jsonl_lines(), 4);
    m.record(step(4));
    m.record(step(5));
  }
  EXPECT_EQ(steps_in(path), (std::vector<int64_t>{1, 2, 3, 4, 5}));
  // TensorBoard: the resumed run's events file opens with SessionLog START at step 4 (after the
  // file_version record), TensorBoard's restart marker.
  std::string events;
  for (auto& e : fs::directory_iterator(dir + "/tb")) events = e.path().string();
  auto recs = read_tfrecords(events);
  ASSERT_GE(recs.size(), 2u);
  const std::string start_tail = {0x10, 0x04, 0x3A, 0x02, 0x08, 0x01};  // step 4; field 7 {status: 1}
  EXPECT_EQ(recs[1].substr(9), start_tail);  // after wall_time (tag + 8 bytes)
  EXPECT_EQ(read_tb_events(events).scalars.size(), 20u);  // 2 steps x 10 scalars, START skipped
  fs::remove_all(dir + "/tb");
  o.tensorboard = false;
  // Nothing to drop: the file is left as it is; no file: one is created.
  {
    MetricsOptions o5 = o;
    o5.resume_step = 5;
    MetricsLogger m(o5);
    EXPECT_EQ(m.dropped_jsonl_lines(), 0);
  }
  EXPECT_EQ(steps_in(path), (std::vector<int64_t>{1, 2, 3, 4, 5}));
  fs::remove(path);
  {
    MetricsLogger m(o);
    m.record(step(4));
  }
  EXPECT_EQ(steps_in(path), (std::vector<int64_t>{4}));
  fs::remove_all(dir);
}

// A rerun of a finished run (nothing to train) wrote summary.json with "final_loss": 0.0.
TEST(MetricsFaults, ARunThatTrainsNothingLeavesSummaryJsonAsItWas) {
  std::string dir = temp_dir("noop");
  {
    MetricsLogger m(quiet(dir));
    m.record(step(1, 5.0));
    m.record(step(2, 4.5));
    m.finish();
  }
  const std::string before = read_file(dir + "/summary.json");
  EXPECT_DOUBLE_EQ(nlohmann::json::parse(before)["final_loss"].get<double>(), 4.5);
  MetricsOptions o = quiet(dir);
  o.resume_step = 2;
  {
    MetricsLogger m(o);
    EXPECT_EQ(m.finish().steps, 0);
  }
  EXPECT_EQ(read_file(dir + "/summary.json"), before);
  fs::remove_all(dir);
}
