// Helpers of the parallel-training tests (tensor, expert and pipeline parallelism on threaded
// ranks): the small job every layout trains, running it on N ranks, its loss curve, and the
// comparisons against one process.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/thread_comm.h"
#include "model/hf_checkpoint.h"
#include "train/trainer.h"

namespace titan::test {

// What every layout's job shares (the caller sets the model and the degrees, then validates):
// `steps` steps of global batch 4 at seq 32, lr 3e-3 after 2 warm-up steps, seed 7, checkpoints
// every 4 steps (all kept), a metrics line per step.
inline JobConfig parallel_job(const std::string& dump, int64_t steps) {
  JobConfig c;
  c.job.dump_folder = dump;
  c.optimizer.lr = 3e-3;
  c.lr_scheduler.warmup_steps = 2;
  c.training.global_batch_size = 4;
  c.training.seq_len = 32;
  c.training.steps = steps;
  c.training.seed = 7;
  c.checkpoint.enable = true;
  c.checkpoint.interval = 4;
  c.checkpoint.keep_latest_k = 0;
  c.metrics.log_freq = 1;
  c.metrics.enable_tensorboard = false;
  return c;
}

// The job on `world` threaded ranks (one process's trainer when world is 1).
inline void run_on_ranks(const JobConfig& c, int64_t world) {
  if (world == 1) {
    run_training(c);
    return;
  }
  comm::run_threaded_ranks(int(world), [&](comm::Comm& w) { run_training(c, w); }, 600);
}

// The loss of every step a run logged (its metrics.jsonl).
inline std::vector<double> losses(const std::string& dump) {
  std::vector<double> v;
  std::ifstream f(dump + "/metrics.jsonl");
  std::string line;
  while (std::getline(f, line))
    if (!line.empty()) v.push_back(nlohmann::json::parse(line)["loss"].get<double>());
  return v;
}

// got[i] equals want[i + from] within 1e-5 relative, for every step of got.
inline void expect_same_curve(const std::vector<double>& got, const std::vector<double>& want, const std::string& what,
                              size_t from = 0) {
  ASSERT_EQ(got.size() + from, want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i + from], 1e-5 * std::fabs(want[i + from])) << what << " step " << i + from + 1;
}

// The HF export of a job's first step with the weights as initialised (lr 0), run on `world` ranks.
inline TensorMap export_as_initialised(JobConfig c, int64_t world) {
  c.optimizer.lr = 0;
  c.checkpoint.last_save_in_hf = true;
  run_on_ranks(c, world);
  return load_hf_weights(c.job.dump_folder + "/checkpoint/step-1-hf");
}

// The same names, shapes and bytes.
inline void expect_same_tensors(const TensorMap& want, const TensorMap& got) {
  ASSERT_EQ(want.size(), got.size());
  for (const auto& [name, t] : want) {
    ASSERT_TRUE(got.count(name)) << name;
    ASSERT_EQ(got.at(name).shape(), t.shape()) << name;
    EXPECT_EQ(std::memcmp(got.at(name).raw(), t.raw(), t.nbytes()), 0) << name;
  }
}

}  // namespace titan::test
