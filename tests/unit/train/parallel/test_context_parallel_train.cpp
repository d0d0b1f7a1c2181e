// Training with context parallelism on the mesh (threaded ranks): cp2, dp_shard 2 x cp 2, cp x tp and
// cp x tp x HSDP on eight threads train and validate like one process (loss curve and held-out loss
// within 1e-5), every mesh of 2 and 4 ranks trains like it, checkpoints move between cp and other meshes, the HF export is one process's;
// the job refuses what cp does not run, in one line naming the keys.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "common/test_util.h"
#include "parallel_train.h"
#include "train/trainer.h"

using namespace titan;
using test::expect_same_curve;
namespace fs = std::filesystem;

namespace {

struct Mesh {
  int64_t dp_replicate = 1, dp_shard = 1, cp = 1, tp = 1;
  bool head_tail = true;
  int64_t world() const { return dp_replicate * dp_shard * cp * tp; }
};

JobConfig cp_job(const std::string& dump, int64_t steps, const Mesh& m) {
  JobConfig c = test::parallel_job(dump, steps);
  c.model.flavor = "debugmodel";
  c.model.n_layers = 2;
  c.training.local_batch_size = 4 / (m.dp_replicate * m.dp_shard);
  c.parallelism.data_parallel_replicate_degree = m.dp_replicate;
  c.parallelism.data_parallel_shard_degree = m.dp_shard;
  c.parallelism.context_parallel_degree = m.cp;
  c.parallelism.context_parallel_load_balancer = m.head_tail ? CpLoadBalancer::HeadTail : CpLoadBalancer::None;
  c.parallelism.tensor_parallel_degree = m.tp;
  // Held-out loss every 4 steps on 4 rows of 32 tokens of the bundled validation text.
  c.validation.enable = true;
  c.validation.freq = 4;
  c.validation.steps = 2;
  c.validation.local_batch_size = 2;
  c.validation.seq_len = 32;
  c.validate("test");
  return c;
}

// The training losses and the validation losses of a run's metrics.jsonl.
struct Curves {
  std::vector<double> train, validation;
};
Curves curves(const std::string& dump) {
  Curves r;
  std::ifstream f(dump + "/metrics.jsonl");
  std::string line;
  while (std::getline(f, line)) {
    if (line.empty()) continue;
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j.contains("validation_loss")) r.validation.push_back(j["validation_loss"].get<double>());
    else if (j.contains("loss")) r.train.push_back(j["loss"].get<double>());
  }
  return r;
}

const Curves& baseline() {
  static const Curves c = [] {
    const std::string dump = test::temp_dir("cp_train_baseline");
    test::run_on_ranks(cp_job(dump, 8, {}), 1);
    return curves(dump);
  }();
  return c;
}

void expect_layout_matches(const char* name, const Mesh& m) {
  const Curves& want = baseline();
  ASSERT_EQ(want.train.size(), 8u);
  ASSERT_EQ(want.validation.size(), 2u);
  const std::string dump = test::temp_dir(std::string("cp_train_") + name);
  test::run_on_ranks(cp_job(dump, 8, m), m.world());
  const Curves got = curves(dump);
  expect_same_curve(got.train, want.train, name);
  expect_same_curve(got.validation, want.validation, std::string(name) + " validation");
}

}  // namespace

// make test: cp2 (FSDP over its 2 ranks).
TEST(ContextParallelTraining, Cp2TrainsAndValidatesLikeOneProcess) { expect_layout_matches("cp2", {1, 1, 2, 1}); }

// ctest -L long: 2-D meshes (FSDP over dp_shard x cp; plain chunks with tp), and a 3-D mesh on eight
// threads (HSDP 2 x cp2 x tp2).
TEST(ContextParallelTrainingLong, TwoAndThreeDimensionalMeshes) {
  expect_layout_matches("dp2 x cp2", {1, 2, 2, 1});
  expect_layout_matches("cp2 x tp2 none", {1, 1, 2, 2, false});
  expect_layout_matches("hsdp2 x cp2 x tp2", {2, 1, 2, 2, true});
}

// Layout a trains 8 steps; its step-8 checkpoint is removed so layout b resumes from step 4.
TEST(ContextParallelTrainingLong, CheckpointsResumeAcrossMeshes) {
  for (auto [a, b, name] : {std::tuple{Mesh{1, 1, 2, 1}, Mesh{1, 1, 1, 2}, "cp2_to_tp2"},
                            std::tuple{Mesh{}, Mesh{1, 1, 2, 2}, "1_to_cp2xtp2"}}) {
    const std::string dump = test::temp_dir(std::string("cp_resume_") + name);
    test::run_on_ranks(cp_job(dump, 8, a), a.world());
    fs::remove_all(dump + "/checkpoint/step-8");
    test::run_on_ranks(cp_job(dump, 8, b), b.world());
    std::vector<double> got = curves(dump).train;  // the resumed run keeps the metrics up to step 4
    ASSERT_EQ(got.size(), 8u) << name;
    got.erase(got.begin(), got.begin() + 4);
    expect_same_curve(got, baseline().train, name, 4);
  }
}

// Every mesh of dp_shard, dp_replicate, tp and cp with 2 or 4 ranks trains 3 steps like one process,
// dense and MoE, under each activation checkpointing mode in turn (by the layout's index), with
// gradient accumulation wherever the batch degree leaves local batches of one row.
TEST(ContextParallelTrainingLong, EveryMeshOfTwoAndFourRanks) {
  const std::vector<Mesh> meshes = {{1, 2, 1, 1}, {2, 1, 1, 1}, {1, 1, 2, 1}, {1, 1, 1, 2},  // product 2
                                    {1, 4, 1, 1}, {4, 1, 1, 1}, {1, 1, 4, 1}, {1, 1, 1, 4}, {2, 2, 1, 1},
                                    {1, 2, 2, 1}, {1, 2, 1, 2}, {2, 1, 2, 1}, {2, 1, 1, 2}, {1, 1, 2, 2}};
  const ActivationCheckpointMode modes[] = {ActivationCheckpointMode::None, ActivationCheckpointMode::Selective,
                                            ActivationCheckpointMode::Full};
  for (bool moe : {false, true}) {
    auto job = [&](const std::string& dump, const Mesh& m, size_t i) {
      JobConfig c = cp_job(dump, 3, m);
      c.validation.enable = false;
      c.checkpoint.enable = false;
      c.activation_checkpoint.mode = modes[i % 3];
      // Batch degree 4: local batch 1 and 4 / 4 = 1 micro-batch; degree 2: two rows, or one row
      // accumulated twice on odd layouts.
      const int64_t dp = m.dp_replicate * m.dp_shard;
      c.training.local_batch_size = (dp == 2 && i % 2 == 1) ? 1 : 4 / dp;
      if (moe) {
        c.model.name = ModelName::Qwen3Moe;
        c.model.flavor = "debug-moe";
      }
      c.validate("test");
      return c;
    };
    std::vector<double> want[3];
    for (size_t mode = 0; mode < 3; ++mode) {
      const std::string d = test::temp_dir(std::string("cp_every_one_") + (moe ? "moe" : "dense") + std::to_string(mode));
      test::run_on_ranks(job(d, {}, mode), 1);
      want[mode] = curves(d).train;
    }
    for (size_t i = 0; i < meshes.size(); ++i) {
      const Mesh& m = meshes[i];
      if (moe && m.world() == 4 && i % 2 == 0) continue;  // MoE: every 2-rank mesh and half the 4-rank ones
      const std::string name = std::string(moe ? "moe" : "dense") + " rep" + std::to_string(m.dp_replicate) + " shard" +
                               std::to_string(m.dp_shard) + " cp" + std::to_string(m.cp) + " tp" + std::to_string(m.tp);
      const std::string d = test::temp_dir("cp_every_" + std::to_string(i) + (moe ? "m" : "d"));
      test::run_on_ranks(job(d, m, i), m.world());
      expect_same_curve(curves(d).train, want[i % 3], name);
    }
  }
}

// The export gathers each unit over dp_shard x cp: with the weights as initialised (lr 0) it is
// bit for bit one process's.
TEST(ContextParallelTrainingLong, HfExportEqualsOneProcess) {
  auto exported = [](const Mesh& m, const std::string& name) {
    JobConfig c = cp_job(test::temp_dir("cp_export_" + name), 1, m);
    c.validation.enable = false;
    return test::export_as_initialised(c, m.world());
  };
  test::expect_same_tensors(exported({}, "one"), exported({1, 1, 2, 1}, "cp2"));
}

TEST(ContextParallelTraining, JobRefusesWhatItDoesNotRun) {
  JobConfig c = test::parallel_job(test::temp_dir("cp_refusals"), 1);
  c.model.flavor = "debugmodel";
  c.training.local_batch_size = 4;
  c.parallelism.context_parallel_degree = 2;
  c.training.seq_len = 30;  // 4 head-tail chunks
  EXPECT_ERROR_HAS(c.validate("job.toml"), "[training] seq_len = 30 does not divide into 4 chunks");
  c.training.seq_len = 32;
  c.lora.enable = true;
  EXPECT_ERROR_HAS(c.validate("job.toml"), "LoRA does not run context-parallel in this build");
  c.lora.enable = false;
  c.parallelism.pipeline_parallel_degree = 2;
  EXPECT_ERROR_HAS(c.validate("job.toml"), "pipeline stages do not run context-parallel in this build");
}
