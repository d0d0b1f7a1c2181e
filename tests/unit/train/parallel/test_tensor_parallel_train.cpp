// Training with tensor parallelism on the mesh (threaded ranks): the loss curve of tp2, tp4,
// tp2 x dp_shard 2, tp2 with HSDP and tp2 without sequence parallelism equals one process's;
// checkpoints saved at one mesh resume at another with the same next losses; the HF export of a
// tp run equals one process's.
#include <gtest/gtest.h>

#include <filesystem>

#include "common/test_util.h"
#include "parallel_train.h"
#include "model/hf_checkpoint.h"
#include "train/tensor_region.h"
#include "train/trainer.h"

using namespace titan;
using test::expect_same_curve;
using test::losses;
namespace fs = std::filesystem;

namespace {

struct Mesh {
  int64_t dp_replicate = 1, dp_shard = 1, tp = 1;
  bool sp = true;
  int64_t world() const { return dp_replicate * dp_shard * tp; }
};

JobConfig tp_job(const std::string& dump, int64_t steps, const Mesh& m) {
  JobConfig c = test::parallel_job(dump, steps);
  c.model.flavor = "debugmodel";  // 8 heads, 4 KV heads, the real vocabulary
  c.model.n_layers = 2;
  c.training.local_batch_size = 4 / (m.dp_replicate * m.dp_shard);
  c.parallelism.data_parallel_replicate_degree = m.dp_replicate;
  c.parallelism.data_parallel_shard_degree = m.dp_shard;
  c.parallelism.tensor_parallel_degree = m.tp;
  c.parallelism.enable_sequence_parallel = m.sp;
  c.validate("test");
  return c;
}

void run(const JobConfig& c, const Mesh& m) { test::run_on_ranks(c, m.world()); }

// The one-process run every layout is compared with (8 steps; checkpoints at 4 and 8, HF export).
const std::vector<double>& baseline(std::string* dump_out = nullptr) {
  static const std::string dump = test::temp_dir("tp_train_baseline");
  static const std::vector<double> curve = [] {
    JobConfig c = tp_job(dump, 8, {});
    c.checkpoint.last_save_in_hf = true;
    run(c, {});
    return losses(dump);
  }();
  if (dump_out) *dump_out = dump;
  return curve;
}

}  // namespace

static void expect_layouts_match(const std::vector<std::pair<const char*, Mesh>>& layouts) {
  const std::vector<double>& want = baseline();
  ASSERT_EQ(want.size(), 8u);
  EXPECT_LT(want.back(), want.front());
  for (const auto& [name, m] : layouts) {
    const std::string dump = test::temp_dir(std::string("tp_train_") + name);
    run(tp_job(dump, 8, m), m);
    expect_same_curve(losses(dump), want, name);
  }
}

// make test: the 2-D mesh (the long entry below runs every layout).
TEST(TensorParallelTraining, LossCurveOfTp2ByDp2EqualsOneProcess) { expect_layouts_match({{"tp2 x dp2", {1, 2, 2, true}}}); }

// ctest -L long (train_tensor_parallel_long): tp2, tp2 without sequence parallelism, tp4, and a
// 3-D mesh (HSDP 2 x 2 x tp2, 8 threads on 2 cores).
TEST(TensorParallelTrainingLong, LossCurvesOfEveryLayoutEqualOneProcess) {
  expect_layouts_match({{"tp2", {1, 1, 2, true}},
                        {"tp2 no sp", {1, 1, 2, false}},
                        {"tp4", {1, 1, 4, true}},
                        {"hsdp 2x2 x tp2", {2, 2, 2, true}}});
}

// Layout `a` trains the 8-step schedule; its step-8 checkpoint is removed, so layout `b` resumes
// from step 4: its steps 5..8 must be the baseline's.
// Qwen3-MoE (debug-moe: 8 experts of 128, top-2, every layer sparse): tp2 x dp2 splits each
// expert like a dense MLP; its curve equals one process's.
TEST(TensorParallelTrainingLong, MoELossCurveOfTp2ByDp2EqualsOneProcess) {
  auto moe_job = [](const std::string& dump, const Mesh& m) {
    JobConfig c = tp_job(dump, 8, m);
    c.model.name = ModelName::Qwen3Moe;
    c.model.flavor = "debug-moe";
    c.checkpoint.enable = false;
    c.validate("test");
    return c;
  };
  const std::string a = test::temp_dir("tp_moe_one"), b = test::temp_dir("tp_moe_tp2dp2");
  run(moe_job(a, {}), {});
  run(moe_job(b, {1, 2, 2, true}), {1, 2, 2, true});
  const std::vector<double> want = losses(a);
  ASSERT_EQ(want.size(), 8u);
  expect_same_curve(losses(b), want, "moe tp2 x dp2");
}

static void resume_case(const Mesh& a, const Mesh& b, const std::string& name) {
  const std::vector<double>& want = baseline();
  const std::string dump = test::temp_dir("tp_resume_" + name);
  run(tp_job(dump, 8, a), a);
  fs::remove_all(dump + "/checkpoint/step-8");
  run(tp_job(dump, 8, b), b);
  std::vector<double> got = losses(dump);  // the resumed run keeps the metrics up to step 4
  ASSERT_EQ(got.size(), 8u) << name;
  expect_same_curve(std::vector<double>(got.begin(), got.begin() + 4), std::vector<double>(want.begin(), want.begin() + 4),
                    name + " (before)");
  got.erase(got.begin(), got.begin() + 4);
  expect_same_curve(got, want, name, 4);
}

TEST(TensorParallelTrainingLong, CheckpointsResumeAcrossMeshes) {
  resume_case({1, 2, 2, true}, {}, "tp2xdp2_to_1");
  resume_case({}, {1, 2, 2, true}, "1_to_tp2xdp2");
  resume_case({1, 1, 2, true}, {1, 1, 4, false}, "tp2_to_tp4");
}

// The export gathers each unit over fsdp and each shard over tp: with the weights as initialised
// (lr 0) it must be bit for bit one process's, whatever the layout.
TEST(TensorParallelTraining, HfExportEqualsOneProcess) {
  auto exported = [](const Mesh& m, const std::string& name) {
    return test::export_as_initialised(tp_job(test::temp_dir("tp_export_" + name), 1, m), m.world());
  };
  test::expect_same_tensors(exported({}, "one"), exported({1, 2, 2, true}, "tp2xdp2"));
}

TEST(TensorParallelTraining, RangeBoxesTileARange) {
  // Every range of a [3, 4, 5] tensor, as boxes, covers exactly its elements in order.
  const Shape s = {3, 4, 5};
  for (int64_t b = 0; b < 60; b += 7)
    for (int64_t e = b + 1; e <= 60; e += 5) {
      std::vector<int64_t> seen;
      for (const TensorRegion& r : range_boxes(s, b, e - b))
        for (const TensorRun& run : region_runs(r, s))
          for (int64_t i = 0; i < run.len; ++i) seen.push_back(run.flat + i);
      ASSERT_EQ(int64_t(seen.size()), e - b) << b << " " << e;
      for (int64_t i = 0; i < e - b; ++i) ASSERT_EQ(seen[size_t(i)], b + i) << b << " " << e;
    }
}
