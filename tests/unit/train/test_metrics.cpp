#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/test_util.h"
#include "core/error.h"
#include "model/config.h"
#include "train/crc32c.h"
#include "model/flops.h"
#include "train/metrics.h"
#include "train/tensorboard.h"
#include "util/strings.h"

using namespace titan;
using namespace titan::test;
namespace fs = std::filesystem;

namespace {

std::string only_file_in(const std::string& dir) {
  std::string out;
  for (auto& e : fs::directory_iterator(dir)) {
    EXPECT_TRUE(out.empty()) << "more than one file in " << dir;
    out = e.path().string();
  }
  return out;
}

}  // namespace

TEST(Crc32c, KnownVectorsAndChaining) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);  // the standard check value
  char zeros[32] = {};
  EXPECT_EQ(crc32c(zeros, 32), 0x8A9136AAu);       // RFC 3720 B.4
  unsigned char ones[32];
  std::memset(ones, 0xff, 32);
  EXPECT_EQ(crc32c(ones, 32), 0x62A8AB43u);        // RFC 3720 B.4
  std::string s = "The quick brown fox jumps over the lazy dog, twice over.";
  for (size_t cut = 0; cut <= s.size(); cut += 7)
    EXPECT_EQ(crc32c(s.data() + cut, s.size() - cut, crc32c(s.data(), cut)), crc32c(s.data(), s.size()));
  EXPECT_EQ(crc32c_mask(0), 0xa282ead8u);
  EXPECT_EQ(crc32c_mask(0x00008000u), 0xa282ead9u);  // bit 15 rotates to bit 0
}

TEST(TensorBoard, EventBytesMatchTheProtobufEncoding) {
  std::string dir = temp_dir("tb_bytes");
  {
    TensorBoardWriter w(dir);
    w.add_scalars(5, {{"a", 2.0}}, 1.0);
  }
  auto recs = read_tfrecords(only_file_in(dir));
  ASSERT_EQ(recs.size(), 2u);
  // Event{wall_time: 1.0 (field 1, fixed64), step: 5 (field 2, varint),
  //       summary (field 5) {value (field 1) {tag (1): "a", simple_value (2, fixed32): 2.0f}}}
  const unsigned char want[] = {0x09, 0, 0, 0, 0, 0, 0, 0xF0, 0x3F, 0x10, 0x05, 0x2A, 0x0A, 0x0A, 0x08,
                                0x0A, 0x01, 'a', 0x15, 0, 0, 0, 0x40};
  EXPECT_EQ(recs[1], std::string(reinterpret_cast<const char*>(want), sizeof want));
  EXPECT_NE(recs[0].find("brain.Event:2"), std::string::npos);
  fs::remove_all(dir);
}

TEST(TensorBoard, WritesScalarsThatReadBackAndDetectsCorruption) {
  std::string dir = temp_dir("tb_rw");
  std::string path;
  {
    TensorBoardWriter w(dir);
    path = w.path();
    EXPECT_NE(path.find("events.out.tfevents."), std::string::npos);
    for (int s = 1; s <= 3; ++s) w.add_scalars(s, {{"loss", 10.0 - s}, {"lr", 1e-3 * s}});
    w.add_scalar("big_step", 1.5, int64_t(1) << 40);
  }
  TbEvents ev = read_tb_events(path);
  EXPECT_EQ(ev.file_version, "brain.Event:2");
  ASSERT_EQ(ev.scalars.size(), 7u);
  EXPECT_EQ(ev.scalars[0].tag, "loss");
  EXPECT_EQ(ev.scalars[0].step, 1);
  EXPECT_FLOAT_EQ(ev.scalars[4].value, 7.0f);
  EXPECT_FLOAT_EQ(ev.scalars[5].value, 3e-3f);
  EXPECT_EQ(ev.scalars[6].step, int64_t(1) << 40);
  EXPECT_GT(ev.scalars[0].wall_time, 1.7e9);

  std::string bytes = read_file(path);
  std::string bad = bytes;
  bad[bad.size() - 10] ^= 0x01;  // inside the last record's payload
  write_file_atomic(path, bad);
  try {
    read_tfrecords(path);
    FAIL() << "corruption not detected";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("data CRC mismatch"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos);
  }
  write_file_atomic(path, bytes.substr(0, bytes.size() - 3));
  EXPECT_THROW(read_tfrecords(path), Error);
  bad = bytes;
  bad[0] ^= 0x40;  // the first record's length
  write_file_atomic(path, bad);
  EXPECT_THROW(read_tfrecords(path), Error);
  fs::remove_all(dir);
}

// A step that reports its own model FLOPs (the lm_head on the counted rows only) is rated by them,
// not by tokens x flops_per_token.
TEST(Metrics, StepFlopsOverrideTheConstantPerToken) {
  MetricsOptions o;
  o.log_freq = 1;
  o.perf_warmup_steps = 0;
  o.flops_per_token = 1e9;
  o.peak_flops = 1e12;
  MetricsLogger m(o);
  StepRecord r;
  r.step = 1;
  r.tokens = 100;
  r.step_seconds = 0.1;
  r.flops = 4e10;  // 0.4e9 per token
  auto l = m.record(r);
  ASSERT_TRUE(l.has_value());
  EXPECT_NEAR(l->tps, 1000.0, 1e-6);
  EXPECT_NEAR(l->tflops, 0.4, 1e-9);
  EXPECT_NEAR(l->mfu, 40.0, 1e-6);
  r.step = 2;
  r.flops = 0;  // unknown: the constant
  l = m.record(r);
  ASSERT_TRUE(l.has_value());
  EXPECT_NEAR(l->mfu, 100.0, 1e-6);
  EXPECT_NEAR(m.summary().median_mfu, 70.0, 1e-6);  // the median of 40 and 100
}

TEST(Metrics, LogsJsonlTensorBoardConsoleAndSummary) {
  std::string dir = temp_dir("logger");
  std::FILE* con = std::tmpfile();
  MetricsOptions o;
  o.dump_folder = dir;
  o.log_freq = 3;
  o.total_steps = 7;
  o.perf_warmup_steps = 2;
  o.flops_per_token = 1e9;
  o.peak_flops = 1e12;
  o.tensorboard = true;
  o.tb_folder = dir + "/tb";
  o.console = con;  // not a TTY: plain text
  std::vector<int64_t> logged;
  RunSummary sum;
  {
    MetricsLogger m(o);
    for (int s = 1; s <= 7; ++s) {
      StepRecord r;
      r.step = s;
      r.loss = 10.0 - s;
      r.grad_norm = 0.5;
      r.lr = 1e-3;
      r.tokens = 100;
      r.step_seconds = s <= 2 ? 1.0 : 0.1;  // warm-up steps are slow
      r.data_seconds = s <= 2 ? 0.5 : 0.01;
      auto l = m.record(r);
      if (l) logged.push_back(l->step);
      if (s == 6) {
        ASSERT_TRUE(l.has_value());
        EXPECT_NEAR(l->tps, 1000.0, 1e-6);      // steps 4..6: 300 tokens in 0.3 s
        EXPECT_NEAR(l->tflops, 1.0, 1e-9);      // 1e9 FLOP/token * 1000 tok/s
        EXPECT_NEAR(l->mfu, 100.0, 1e-6);       // against 1 TFLOP/s
        EXPECT_NEAR(l->data_pct, 10.0, 1e-6);
        EXPECT_FALSE(l->warmup);
      }
    }
    sum = m.finish();
  }
  EXPECT_EQ(logged, (std::vector<int64_t>{1, 2, 3, 6, 7}));  // step 1, end of warm-up, every 3rd, last
  EXPECT_EQ(sum.steps, 7);
  EXPECT_EQ(sum.steady_steps, 5);
  EXPECT_NEAR(sum.median_tps, 1000.0, 1e-6);  // the slow warm-up steps are excluded
  EXPECT_NEAR(sum.median_mfu, 100.0, 1e-6);
  EXPECT_DOUBLE_EQ(sum.final_loss, 3.0);

  std::ifstream js(dir + "/metrics.jsonl");
  std::string line;
  std::vector<bool> warm;
  while (std::getline(js, line)) {
    auto j = nlohmann::json::parse(line);
    for (const char* k : {"step", "loss", "grad_norm", "lr", "memory_gib", "memory_peak_gib", "tps", "tflops", "mfu",
                          "warmup", "data_pct", "memory_pct"})
      EXPECT_TRUE(j.contains(k)) << k;
    warm.push_back(j["warmup"].get<bool>());
  }
  EXPECT_EQ(warm, (std::vector<bool>{true, true, false, false, false}));
  auto sj = nlohmann::json::parse(read_file(dir + "/summary.json"));
  EXPECT_NEAR(sj["median_tps"].get<double>(), 1000.0, 1e-6);

  TbEvents ev = read_tb_events(only_file_in(dir + "/tb"));
  int losses = 0;
  for (auto& s : ev.scalars)
    if (s.tag == "loss_metrics/global_avg_loss") {
      EXPECT_FLOAT_EQ(s.value, float(10 - s.step));
      ++losses;
    }
  EXPECT_EQ(losses, 5);

  std::fseek(con, 0, SEEK_SET);
  std::string text(4096, '\0');
  text.resize(std::fread(text.data(), 1, text.size(), con));
  std::fclose(con);
  EXPECT_EQ(text.find('\033'), std::string::npos) << "colors on a non-TTY";
  EXPECT_NE(text.find("step:  6  loss:  4.0000"), std::string::npos) << text;
  EXPECT_NE(text.find("tps: 1,000"), std::string::npos) << text;
  EXPECT_NE(text.find("(warm-up)"), std::string::npos) << text;
  EXPECT_NE(text.find("summary: 7 steps"), std::string::npos) << text;
  fs::remove_all(dir);
}

TEST(Metrics, ColorAndNonFiniteLoss) {
  LogLine l;
  l.step = 12;
  l.loss = 2.5;
  l.tps = 1234567;
  std::string c = MetricsLogger::format_line(l, true);
  EXPECT_NE(c.find("\033[31mstep: 12"), std::string::npos) << c;
  EXPECT_NE(c.find("tps: 1,234,567"), std::string::npos) << c;
  EXPECT_EQ(MetricsLogger::format_line(l, false).find('\033'), std::string::npos);

  std::string dir = temp_dir("nan");
  MetricsOptions o;
  o.dump_folder = dir;
  o.console = nullptr;
  o.log_freq = 1;
  {
    MetricsLogger m(o);
    StepRecord r;
    r.step = 1;
    r.loss = std::nan("");
    m.record(r);
  }
  auto j = nlohmann::json::parse(read_file(dir + "/metrics.jsonl"));
  EXPECT_TRUE(j["loss"].is_null());  // JSON has no NaN
  fs::remove_all(dir);
}

// Every truncation and single-byte corruption of an event file is an Error, never a crash or a
// silently different scalar (both CRCs cover every byte of a record).
TEST(TensorBoard, MutatedEventFilesFailCleanly) {
  std::string dir = temp_dir("tb_mut");
  std::string path;
  {
    TensorBoardWriter w(dir);
    path = w.path();
    w.add_scalars(3, {{"loss", 2.0}, {"lr", 0.5}});
  }
  std::string bytes = read_file(path);
  auto put = [&](const std::string& b) { std::ofstream(path, std::ios::binary | std::ios::trunc) << b; };
  // A cut exactly after the first record leaves a valid one-record file; any other cut is an error.
  uint64_t first_len;
  std::memcpy(&first_len, bytes.data(), 8);
  size_t boundary = 12 + first_len + 4;
  for (size_t n = 1; n < bytes.size(); ++n) {
    put(bytes.substr(0, n));
    if (n == boundary) {
      EXPECT_EQ(read_tfrecords(path).size(), 1u);
      continue;
    }
    EXPECT_THROW(read_tb_events(path), Error) << "truncated to " << n;
  }
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string b = bytes;
    b[i] ^= 0x5a;
    put(b);
    EXPECT_THROW(read_tb_events(path), Error) << "byte " << i;
  }
  fs::remove_all(dir);
}
