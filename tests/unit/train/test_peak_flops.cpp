// The MFU peak probe (train/peak_flops.h). Timings are only checked for plausibility: the
// machine running the tests may be shared and loaded.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/test_util.h"
#include "train/peak_flops.h"
#include "train/peak_flops_kernels.h"

using namespace titan;
using namespace titan::test;
namespace fs = std::filesystem;

namespace {

constexpr double kBudget = 0.02;  // seconds per measurement: enough for a plausible number

nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  return nlohmann::json::parse(f, nullptr, false);
}

void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

// A stand-in for the probe: counts its calls, returns `gflops` (steady unless told otherwise).
struct FakeProbe {
  int calls = 0;
  double gflops = 123.0;
  bool steady = true;
  PeakMeasurement operator()(bool bf16, int threads, double) {
    ++calls;
    PeakMeasurement m;
    m.gflops = bf16 ? 2 * gflops : gflops;
    m.team = threads;
    m.reps = m.concurrent = 40;
    m.near_best = steady ? 10 : 1;
    m.seconds = 0.1;
    return m;
  }
};

PeakOptions opts(const std::string& dir, FakeProbe* fake = nullptr, bool bf16 = false) {
  PeakOptions o;
  o.cache_dir = dir;
  o.bf16 = bf16;
  o.threads = 2;
  o.budget_s = kBudget;
  if (fake) {
    o.measure = [fake](bool b, int t, double s) { return (*fake)(b, t, s); };
    o.measure_gemm = nullptr;  // the fake's rate alone
  }
  return o;
}

}  // namespace

TEST(PeakFlops, ProbeGivesAPlausiblePositiveRate) {
  for (bool bf16 : {false, true})
    for (int threads : {1, 2}) {
      const double g = measure_peak(bf16, threads, kBudget).gflops;
      EXPECT_TRUE(std::isfinite(g)) << bf16 << " " << threads;
      EXPECT_GT(g, 1.0) << "bf16 " << bf16 << ", " << threads << " threads";   // > 1 GFLOP/s
      EXPECT_LT(g, 1e6) << "bf16 " << bf16 << ", " << threads << " threads";   // < 1 PFLOP/s
    }
}

TEST(PeakFlops, KernelNamesAndCpuIdentity) {
  const std::string f32 = peak_probe_kernel(false), bf16 = peak_probe_kernel(true);
  EXPECT_TRUE(f32 == "avx512 fma" || f32 == "avx2 fma") << f32;
  if (__builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512f"))
    EXPECT_TRUE(bf16 == "avx512_bf16 vdpbf16ps" || bf16 == "amx_bf16 tdpbf16ps") << bf16;
  else
    EXPECT_EQ(bf16, f32);  // bf16 matmuls run at the f32 FMA rate there
  EXPECT_NE(cpu_identity().find("family"), std::string::npos) << cpu_identity();
}

TEST(PeakFlops, Bf16DotRateIsWithinTheKnownRangeOfTheF32Peak) {
  if (peak_probe_kernel(true) != "avx512_bf16 vdpbf16ps") GTEST_SKIP() << "no AVX512_BF16 on this CPU";
  // A vdpbf16ps does twice the flops of an FMA (4 per f32 lane), but CPUs issue it at 1/4 (Intel
  // Sapphire / Emerald Rapids: 0.5x the f32 FLOP rate, measured) to 1x (AMD Zen 4: 2x) the FMA
  // rate, so "bf16 >= f32" does not hold everywhere; the ratio is within [0.5, 2], checked with
  // margins for a loaded machine. Best of a few tries each.
  double f32 = 0, bf16 = 0;
  for (int i = 0; i < 3; ++i) {
    f32 = std::max(f32, measure_peak(false, 1, 0.05).gflops);
    bf16 = std::max(bf16, measure_peak(true, 1, 0.05).gflops);
  }
  EXPECT_GE(bf16, 0.4 * f32) << "bf16 " << bf16 << " GFLOP/s, f32 " << f32 << " GFLOP/s";
  EXPECT_LE(bf16, 2.5 * f32) << "bf16 " << bf16 << " GFLOP/s, f32 " << f32 << " GFLOP/s";
}

TEST(PeakFlops, ProbeNamesTheFormItRan) {
  for (bool bf16 : {false, true}) {
    const PeakMeasurement m = measure_peak(bf16, 1, kBudget);
    const bool tiles = peak_probe_kernel(bf16) == "amx_bf16 tdpbf16ps";
    EXPECT_NE(m.form.find(tiles ? " tiles" : " chains"), std::string::npos) << m.form;
  }
}

TEST(PeakFlops, AmxTileProbeDoesTheProductsItCounts) {
  if (peak_probe_kernel(true) != "amx_bf16 tdpbf16ps") GTEST_SKIP() << "no AMX tiles usable here";
  // Each iteration adds 32 * 1.0 * 2^-24 = 2^-19 to every element of 6 tiles of 16 x 16: the sum
  // is exact while the elements stay below 2^5 (f32 keeps 24 bits), so a kernel that skipped a
  // tile, a row or an iteration gives another number.
  EXPECT_EQ(detail::peak_amx_tiles(), 6);
  for (int64_t iters : {1, 3, 64, 1000}) {
    const float want = float(6 * 256 * iters) * 0x1p-19f;
    EXPECT_EQ(detail::peak_tdpbf16_amx(iters, 0x3f80, 0x3380), want) << iters << " iterations";
  }
  const double g = measure_peak(true, 1, kBudget).gflops;
  EXPECT_GT(g, 1.0);
  EXPECT_LT(g, 1e6);
}

TEST(PeakFlops, GemmCheckGivesAPlausiblePositiveRate) {
  for (bool bf16 : {false, true}) {
    const double g = measure_gemm_peak(bf16, 1, kBudget);
    EXPECT_GT(g, 0.1) << (bf16 ? "bf16" : "f32");
    EXPECT_LT(g, 1e6) << (bf16 ? "bf16" : "f32");
  }
}

// A probe that reads low (too few chains for this core, a slow form) is overruled by the GEMM:
// the peak is the larger of the two, and both are kept in the cache entry and the log line.
TEST(PeakFlops, FasterGemmRaisesThePeak) {
  const std::string dir = temp_dir("gemm"), file = dir + "/peak_flops.json";
  FakeProbe fake;
  for (double gemm : {200.0, 100.0}) {
    PeakOptions o = opts(dir, &fake);
    o.remeasure = true;
    o.measure_gemm = [gemm](bool, int, double) { return gemm; };
    const PeakFlops p = mfu_peak(o);
    EXPECT_DOUBLE_EQ(p.tflops, std::max(gemm, 123.0) * 1e-3);
    EXPECT_DOUBLE_EQ(p.probe_gflops, 123.0);
    EXPECT_DOUBLE_EQ(p.gemm_gflops, gemm);
    EXPECT_EQ(p.describe().find("the probe read low") != std::string::npos, gemm > 123.0) << p.describe();
    const PeakFlops c = mfu_peak(opts(dir, &fake));
    EXPECT_EQ(c.source, PeakFlops::Source::Cached);
    EXPECT_DOUBLE_EQ(c.tflops, p.tflops);
    EXPECT_DOUBLE_EQ(c.gemm_gflops, gemm);
  }
  fs::remove_all(dir);
}

TEST(PeakFlops, RealProbeThroughTheCache) {
  const std::string dir = temp_dir("real"), file = dir + "/peak_flops.json";
  for (bool bf16 : {false, true}) {
    PeakOptions o = opts(dir, nullptr, bf16);
    const PeakFlops a = mfu_peak(o);
    EXPECT_EQ(a.source, PeakFlops::Source::Measured);
    EXPECT_GT(a.tflops, 1e-3);  // > 1 GFLOP/s
    EXPECT_LT(a.tflops, 1e3);
    EXPECT_GT(a.probe_ms, 0);
    EXPECT_NE(a.describe().find(bf16 ? "bf16 measured (" : "f32 measured ("), std::string::npos) << a.describe();
    if (!a.cache_note.empty()) {  // a busy machine: unsteady, not cached
      EXPECT_NE(a.cache_note.find("unsteady"), std::string::npos) << a.cache_note;
      continue;
    }
    EXPECT_EQ(a.cache_path, file);
    const PeakFlops b = mfu_peak(o);
    EXPECT_EQ(b.source, PeakFlops::Source::Cached);
    EXPECT_EQ(b.tflops, a.tflops);
  }
  fs::remove_all(dir);
}

TEST(PeakFlops, MoreThreadsThanCpusMeasureTheCpus) {
  const int cpus = int(std::thread::hardware_concurrency());
  const PeakMeasurement m = measure_peak(false, 2 * cpus, kBudget);
  EXPECT_EQ(m.team, 2 * cpus);
  EXPECT_LE(m.cpus, cpus);
  EXPECT_EQ(m.concurrent, 0);  // the threads cannot all compute at once
  EXPECT_GT(m.gflops, 1.0);
  // Such a run has its own cache entry, named with the CPU count.
  const std::string dir = temp_dir("oversubscribed");
  FakeProbe fake;
  PeakOptions o = opts(dir, &fake);
  o.threads = 2 * cpus;
  const PeakFlops p = mfu_peak(o);
  EXPECT_NE(p.describe().find(std::to_string(2 * cpus) + " threads on "), std::string::npos) << p.describe();
  EXPECT_NE(read_json(dir + "/peak_flops.json")["entries"].begin().key().find(" CPU"), std::string::npos);
  fs::remove_all(dir);
}

TEST(PeakFlops, SecondCallReadsTheCacheWithoutMeasuring) {
  const std::string dir = temp_dir("cache"), file = dir + "/peak_flops.json";
  FakeProbe fake;
  const PeakFlops a = mfu_peak(opts(dir, &fake));
  EXPECT_EQ(fake.calls, 1);
  EXPECT_EQ(a.source, PeakFlops::Source::Measured);
  EXPECT_DOUBLE_EQ(a.tflops, 0.123);
  EXPECT_EQ(a.cache_path, file);
  EXPECT_NE(a.describe().find("measured ("), std::string::npos) << a.describe();
  EXPECT_NE(a.describe().find("now cached in " + file), std::string::npos) << a.describe();

  const PeakFlops b = mfu_peak(opts(dir, &fake));
  EXPECT_EQ(fake.calls, 1);  // not measured again
  EXPECT_EQ(b.source, PeakFlops::Source::Cached);
  EXPECT_EQ(b.tflops, a.tflops);
  EXPECT_EQ(b.probe_ms, 0);
  EXPECT_NE(b.describe().find(", cached in " + file), std::string::npos) << b.describe();

  // The value really comes from the file: change it there and the next call returns it.
  nlohmann::json j = read_json(file);
  ASSERT_TRUE(j.is_object());
  ASSERT_EQ(j["entries"].size(), 1u);
  j["entries"].begin().value()["gflops"] = 12345.0;
  write_text(file, j.dump());
  EXPECT_DOUBLE_EQ(mfu_peak(opts(dir, &fake)).tflops, 12.345);

  // Another thread count or precision is another entry; the first one stays.
  PeakOptions one = opts(dir, &fake);
  one.threads = 1;
  EXPECT_EQ(mfu_peak(one).source, PeakFlops::Source::Measured);
  const PeakFlops bf16 = mfu_peak(opts(dir, &fake, true));
  EXPECT_EQ(bf16.source, PeakFlops::Source::Measured);
  EXPECT_EQ(fake.calls, 3);
  EXPECT_EQ(read_json(file)["entries"].size(), 3u);  // bf16 is its own entry, whichever kernel probes it
  EXPECT_DOUBLE_EQ(mfu_peak(opts(dir, &fake)).tflops, 12.345);

  // remeasure ignores the entry and replaces it.
  PeakOptions again = opts(dir, &fake);
  again.remeasure = true;
  const PeakFlops c = mfu_peak(again);
  EXPECT_EQ(c.source, PeakFlops::Source::Measured);
  EXPECT_DOUBLE_EQ(c.tflops, 0.123);
  EXPECT_DOUBLE_EQ(mfu_peak(opts(dir, &fake)).tflops, 0.123);
  fs::remove_all(dir);
}

TEST(PeakFlops, UnsteadyMeasurementIsUsedButNotCached) {
  const std::string dir = temp_dir("unsteady");
  FakeProbe fake;
  fake.steady = false;
  const PeakFlops a = mfu_peak(opts(dir, &fake));
  EXPECT_EQ(a.source, PeakFlops::Source::Measured);
  EXPECT_DOUBLE_EQ(a.tflops, 0.123);
  EXPECT_TRUE(a.cache_path.empty());
  EXPECT_NE(a.describe().find("not cached: unsteady"), std::string::npos) << a.describe();
  EXPECT_EQ(mfu_peak(opts(dir, &fake)).source, PeakFlops::Source::Measured);
  EXPECT_EQ(fake.calls, 2);
  fake.steady = true;
  mfu_peak(opts(dir, &fake));
  EXPECT_EQ(mfu_peak(opts(dir, &fake)).source, PeakFlops::Source::Cached);
  EXPECT_EQ(fake.calls, 3);
  fs::remove_all(dir);
}

TEST(PeakFlops, CorruptCacheIsIgnoredAndRewritten) {
  const std::string dir = temp_dir("corrupt"), file = dir + "/peak_flops.json";
  FakeProbe fake;
  int calls = 0;
  for (const std::string& bad : {std::string("{not json"), std::string(""), std::string("[1, 2]"),
                                 std::string("{\"version\": 1, \"entries\": 7}"),
                                 std::string("{\"version\": 999, \"entries\": {}}"), std::string("\x00\xff", 2)}) {
    write_text(file, bad);
    const PeakFlops p = mfu_peak(opts(dir, &fake));
    EXPECT_EQ(fake.calls, ++calls) << bad;
    EXPECT_EQ(p.source, PeakFlops::Source::Measured) << bad;
    EXPECT_DOUBLE_EQ(p.tflops, 0.123) << bad;
    if (!bad.empty()) {
      EXPECT_FALSE(p.cache_note.empty()) << bad;
    }
    EXPECT_EQ(p.cache_path, file) << bad;
    EXPECT_EQ(mfu_peak(opts(dir, &fake)).source, PeakFlops::Source::Cached) << bad;  // rewritten, usable
    EXPECT_EQ(fake.calls, calls) << bad;
  }
  // An entry of the right key with an unusable value is measured again.
  for (const char* value : {"-1", "0", "\"fast\"", "null", "1e300"}) {
    nlohmann::json j = read_json(file);
    ASSERT_TRUE(j.is_object()) << value;
    j["entries"].begin().value()["gflops"] = nlohmann::json::parse(value);
    write_text(file, j.dump());
    const PeakFlops p = mfu_peak(opts(dir, &fake));
    EXPECT_EQ(fake.calls, ++calls) << value;
    EXPECT_DOUBLE_EQ(p.tflops, 0.123) << value;
  }
  fs::remove_all(dir);
}

TEST(PeakFlops, UnwritableOrDisabledCacheIsNotAnError) {
  const std::string dir = temp_dir("unwritable");
  write_text(dir + "/file", "x");  // a regular file where the cache folder's parent should be
  FakeProbe fake;
  const PeakFlops p = mfu_peak(opts(dir + "/file/cache", &fake));
  EXPECT_EQ(p.source, PeakFlops::Source::Measured);
  EXPECT_DOUBLE_EQ(p.tflops, 0.123);
  EXPECT_TRUE(p.cache_path.empty());
  EXPECT_NE(p.cache_note.find("not cached"), std::string::npos) << p.cache_note;
  EXPECT_NE(p.describe().find("not cached"), std::string::npos) << p.describe();

  const PeakFlops n = mfu_peak(opts("none", &fake));
  EXPECT_EQ(n.source, PeakFlops::Source::Measured);
  EXPECT_TRUE(n.cache_path.empty());
  EXPECT_FALSE(fs::exists("none"));
  EXPECT_EQ(fake.calls, 2);
  fs::remove_all(dir);
}

TEST(PeakFlops, OverrideWinsAndMeasuresNothing) {
  const std::string dir = temp_dir("override") + "/cache";
  FakeProbe fake;
  PeakOptions o = opts(dir, &fake, /*bf16=*/true);
  o.override_tflops = 1.5;
  const PeakFlops p = mfu_peak(o);
  EXPECT_EQ(p.source, PeakFlops::Source::Override);
  EXPECT_DOUBLE_EQ(p.tflops, 1.5);
  EXPECT_EQ(fake.calls, 0);
  EXPECT_FALSE(fs::exists(dir));  // no cache read or written
  EXPECT_EQ(p.describe(), "[titan] MFU peak: 1.500 TFLOP/s bf16 from [metrics] peak_tflops");
  // It also wins over a cached measurement.
  const std::string cached = temp_dir("override_cached");
  mfu_peak(opts(cached, &fake, true));
  EXPECT_EQ(fake.calls, 1);
  o.cache_dir = cached;
  EXPECT_DOUBLE_EQ(mfu_peak(o).tflops, 1.5);
  EXPECT_EQ(fake.calls, 1);
  fs::remove_all(fs::path(dir).parent_path());
  fs::remove_all(cached);
}
