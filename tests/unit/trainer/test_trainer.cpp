// End-to-end training runs on the debug model (one layer, short sequences): a resumed run equals
// an uninterrupted one, and the HF path (export, reload, fine-tune) starts from the trained loss.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include <nlohmann/json.hpp>

#include "common/test_util.h"
#include "comm/comm.h"
#include "train/checkpoint.h"
#include "train/lr_schedule.h"
#include "train/run_folder.h"
#include "train/tensor_file.h"
#include "train/trainer.h"
#include "util/strings.h"

using namespace titan;
using namespace titan::test;
namespace fs = std::filesystem;

namespace {

JobConfig small_job(const std::string& dump, int64_t steps) {
  JobConfig c;
  c.job.dump_folder = dump;
  c.model.flavor = "debugmodel";
  c.model.n_layers = 1;
  c.optimizer.lr = 3e-3;
  c.lr_scheduler.warmup_steps = 2;
  c.training.local_batch_size = 2;
  c.training.seq_len = 32;
  c.training.steps = steps;
  c.training.seed = 7;
  c.checkpoint.enable = true;
  c.checkpoint.interval = 3;
  c.checkpoint.keep_latest_k = 0;
  c.metrics.log_freq = 1;
  c.metrics.enable_tensorboard = false;
  c.validate("test");
  return c;
}

std::vector<double> losses(const std::string& dump) {
  std::vector<double> v;
  std::ifstream f(dump + "/metrics.jsonl");
  std::string line;
  while (std::getline(f, line))
    if (!line.empty()) v.push_back(nlohmann::json::parse(line)["loss"].get<double>());
  return v;
}

}  // namespace

TEST(Trainer, ResumedRunEqualsUninterruptedRun) {
  std::string a = temp_dir("a"), b = temp_dir("b");
  JobConfig ca = small_job(a, 6), cb = small_job(b, 6);
  TrainResult ra = run_training(ca);
  EXPECT_EQ(ra.last_step, 6);
  run_training(cb);
  // Interrupt b after step 6 but before its step-6 checkpoint: drop that checkpoint, then resume
  // from step 3. The metrics of steps 4..6 logged before the "kill" are dropped (not duplicated).
  fs::remove_all(b + "/checkpoint/step-6");
  TrainResult rb = run_training(cb);
  EXPECT_EQ(rb.last_step, 6);
  auto la = losses(a), lb = losses(b);
  ASSERT_EQ(la.size(), 6u);
  ASSERT_EQ(lb.size(), 6u);
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(la[i], lb[i]) << "step " << i + 1;
  EXPECT_LT(la.back(), la.front());
  // A rerun at the final step trains nothing and leaves the run's summary as it was.
  const std::string summary = read_file(b + "/summary.json");
  EXPECT_EQ(run_training(cb).last_step, 6);
  EXPECT_EQ(read_file(b + "/summary.json"), summary);
  EXPECT_EQ(losses(b).size(), 6u);
  // Final weights and optimizer states bit for bit.
  for (const char* file : {"model.tensors", "optimizer.tensors"}) {
    TensorFileReader fa(a + "/checkpoint/step-6/" + file), fb(b + "/checkpoint/step-6/" + file);
    ASSERT_EQ(fa.entries().size(), fb.entries().size());
    for (auto& e : fa.entries()) {
      Tensor x = fa.read(e.name), y = fb.read(e.name);
      ASSERT_EQ(x.nbytes(), y.nbytes());
      EXPECT_EQ(0, std::memcmp(x.raw(), y.raw(), x.nbytes())) << file << ": " << e.name;
    }
  }
  fs::remove_all(a);
  fs::remove_all(b);
}

TEST(Trainer, HfExportReloadsAndStartsFarBelowRandom) {
  // Train briefly, export to HF, fine-tune from the export: its first loss must be far below a
  // randomly initialized model's first loss on the same data (the guide's published-weights check).
  std::string a = temp_dir("pre"), c = temp_dir("ft");
  JobConfig pre = small_job(a, 30);
  pre.checkpoint.interval = 1000;
  pre.checkpoint.last_save_in_hf = true;
  pre.checkpoint.export_dtype = DType::F32;
  TrainResult r = run_training(pre);
  ASSERT_FALSE(r.hf_export.empty());
  ASSERT_TRUE(fs::exists(r.hf_export + "/model.safetensors"));
  ASSERT_TRUE(fs::exists(r.hf_export + "/tokenizer.json"));
  const double random_first = losses(a).front();

  JobConfig ft = small_job(c, 1);
  ft.checkpoint.enable = false;
  ft.checkpoint.initial_load_path = r.hf_export;
  ft.checkpoint.initial_load_in_hf = true;
  ft.model.n_layers = -1;  // the folder's own config (1 layer)
  ft.optimizer.lr = 1e-6;
  run_training(ft);
  const double loaded_first = losses(c).front();
  EXPECT_LT(loaded_first, random_first - 2.0) << "random " << random_first << " loaded " << loaded_first;
  fs::remove_all(a);
  fs::remove_all(c);
}

TEST(Trainer, RejectsMismatchedResume) {
  std::string a = temp_dir("mismatch");
  JobConfig ca = small_job(a, 3);
  run_training(ca);
  JobConfig cb = small_job(a, 6);
  cb.optimizer.lr = 1e-4;  // a different trajectory: resuming from a's checkpoint is refused
  try {
    run_training(cb);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("different"), std::string::npos) << e.what();
  }
  fs::remove_all(a);
}

namespace {

// Checkpoints of the debug model are ~0.5 GB: tmpfs when there is one (fsync on a busy disk costs
// more than the training steps).
std::string fast_temp_dir(const std::string& name) {
  std::error_code ec;
  fs::path base = fs::is_directory("/dev/shm", ec) ? fs::path("/dev/shm") : fs::temp_directory_path();
  fs::path p = base / ("titan-trainer-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

std::string error_of_run(const JobConfig& c) {
  try {
    run_training(c);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::vector<nlohmann::json> metric_lines(const std::string& dump) {
  std::vector<nlohmann::json> v;
  std::ifstream f(dump + "/metrics.jsonl");
  std::string line;
  while (std::getline(f, line))
    if (!line.empty()) v.push_back(nlohmann::json::parse(line));
  return v;
}

// Rewrite a checkpoint's state.json after an edit, with its checksum recomputed.
void edit_state(const std::string& step_dir, const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json j = nlohmann::json::parse(read_file(step_dir + "/state.json"));
  edit(j);
  j["state_crc32c"] = state_json_checksum(j);
  write_file_atomic(step_dir + "/state.json", j.dump(2));
}

}  // namespace

// Issue 10: raising --training.steps on resume was refused as "a different config" although the
// end-of-run message advises exactly that. A resume compares the trajectory keys one by one.
TEST(Trainer, RaisingStepsExtendsARunAndOtherChangesAreNamedKeyByKey) {
  std::string d = fast_temp_dir("extend");
  JobConfig c3 = small_job(d, 3);
  c3.checkpoint.keep_latest_k = 1;
  run_training(c3);

  // Changed trajectory keys: every one named with its old and new value, nothing trained.
  JobConfig bad = c3;
  bad.training.steps = 6;
  bad.optimizer.lr = 1e-4;
  bad.training.seq_len = 64;
  bad.lr_scheduler.decay_type = DecayType::Cosine;
  bad.metrics.log_freq = 5;  // not a trajectory key: not named
  std::string e = error_of_run(bad);
  EXPECT_NE(e.find(d + "/checkpoint/step-3: "), std::string::npos) << e;
  EXPECT_NE(e.find("optimizer.lr 0.003 -> 0.0001"), std::string::npos) << e;
  EXPECT_NE(e.find("training.seq_len 32 -> 64"), std::string::npos) << e;
  EXPECT_NE(e.find("lr_scheduler.decay_type \"linear\" -> \"cosine\""), std::string::npos) << e;
  EXPECT_EQ(e.find("log_freq"), std::string::npos) << e;
  EXPECT_EQ(e.find("training.steps"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  EXPECT_EQ(metric_lines(d).size(), 3u);

  // More steps, and keys that do not change the trajectory: the run continues to step 6 with
  // the lr schedule recomputed for 6 steps.
  JobConfig c6 = c3;
  c6.training.steps = 6;
  c6.metrics.log_freq = 2;
  c6.checkpoint.interval = 100;
  c6.checkpoint.keep_latest_k = 2;
  c6.comm.train_timeout_seconds = 7;
  c6.comm.init_timeout_seconds = 9;
  c6.activation_checkpoint.mode = ActivationCheckpointMode::Selective;  // identical gradients, less memory
  c6.compute.threads = 1;
  c6.training.local_batch_size = 1;  // the same global batch of 2 as 2 micro-batches of 1
  c6.training.global_batch_size = 2;
  TrainResult r = run_training(c6);
  EXPECT_EQ(r.last_step, 6);
  auto lines = metric_lines(d);
  ASSERT_GE(lines.size(), 4u);
  EXPECT_EQ(lines[3]["step"], 4);
  EXPECT_FLOAT_EQ(float(lines[3]["lr"].get<double>()), float(make_lr_schedule(c6).lr_at_step(4)));
  fs::remove_all(d);
}

// A checkpoint written before per-key records holds only config_hash (and the effective config as
// TOML): it resumes when the trajectory keys of that config match, else the keys are named.
TEST(Trainer, OldCheckpointsWithOnlyAConfigHashResumeOrSayWhy) {
  std::string d = fast_temp_dir("legacy");
  JobConfig c3 = small_job(d, 3);
  run_training(c3);
  const std::string sd = d + "/checkpoint/step-3";
  edit_state(sd, [](nlohmann::json& j) {
    j["extra"].erase("trajectory_config");
    j["extra"].erase("training_steps");
  });
  JobConfig lower = c3;  // passes the check; nothing to train (the checkpoint is at step 3)
  lower.training.steps = 2;
  EXPECT_EQ(error_of_run(lower), "");
  JobConfig lr = c3;
  lr.optimizer.lr = 1e-4;
  std::string e = error_of_run(lr);
  EXPECT_NE(e.find("optimizer.lr 0.003 -> 0.0001"), std::string::npos) << e;
  // Without the recorded config, only the hash is left to compare.
  edit_state(sd, [](nlohmann::json& j) { j["extra"].erase("job_config"); });
  EXPECT_EQ(error_of_run(c3), "");  // the same config: the same hash
  e = error_of_run(lower);
  EXPECT_NE(e.find(sd + ": "), std::string::npos) << e;
  EXPECT_NE(e.find("records only a config hash"), std::string::npos) << e;
  fs::remove_all(d);
}

// Issue 10: an unusable checkpoint folder was found at the first save, 50 steps in.
TEST(Trainer, AnUnusableCheckpointFolderFailsBeforeStepOne) {
  std::string d = temp_dir("badckpt");
  {
    std::ofstream(d + "/afile") << "x";
  }
  JobConfig c = small_job(d + "/run", 3);
  c.checkpoint.folder = d + "/afile/ckpt";
  EXPECT_EQ(error_of_run(c), d + "/afile/ckpt: cannot create the checkpoint folder: Not a directory");
  EXPECT_FALSE(fs::exists(d + "/run/metrics.jsonl"));
  fs::remove_all(d);
}

// Issue 10: two runs on one dump folder tore each other's metrics.jsonl lines.
TEST(Trainer, ASecondRunOnTheSameDumpFolderIsRefusedAtOnce) {
  std::string d = temp_dir("busy");
  RunLock held(d);  // another run (flock is per open file: this process counts as another)
  std::string e = error_of_run(small_job(d, 3));
  EXPECT_EQ(e.rfind(d + " is in use by pid " + std::to_string(::getpid()), 0), 0u) << e;
  EXPECT_FALSE(fs::exists(d + "/metrics.jsonl"));
  fs::remove_all(d);
}

// A feature joins the loop as a TrainerHook: it sees every step in order, after the built-in hooks
// (the step's metrics line and checkpoint are written), and the end of the run.
TEST(Trainer, AnAddedHookSeesEveryStepAfterTheBuiltInOnes) {
  std::string d = fast_temp_dir("hooks");
  JobConfig c = small_job(d, 4);  // checkpoints at steps 3 and 4
  struct Recorder : TrainerHook {
    std::string dump;
    std::vector<std::string> events;
    void on_train_begin(Trainer& t) override { events.push_back("begin at " + std::to_string(t.step())); }
    void on_step_end(Trainer& t, const StepRecord& r) override {
      std::string e = "step " + std::to_string(r.step);
      if (t.last_step()) e += " last";
      if (fs::exists(dump + "/checkpoint/step-" + std::to_string(r.step))) e += " checkpointed";
      if (metric_lines(dump).size() == size_t(r.step)) e += " logged";
      events.push_back(e);
    }
    void on_train_end(Trainer& t, TrainResult& res) override {
      events.push_back("end at " + std::to_string(res.last_step) + " " + fs::path(res.last_checkpoint).filename().string());
    }
  };
  comm::LocalComm local;
  Trainer trainer(c, local);
  auto hook = std::make_unique<Recorder>();
  hook->dump = d;
  Recorder* rec = hook.get();
  trainer.add_hook(std::move(hook));
  const TrainResult r = trainer.train();
  EXPECT_EQ(rec->events, (std::vector<std::string>{"begin at 0", "step 1 logged", "step 2 logged",
                                                   "step 3 checkpointed logged", "step 4 last checkpointed logged",
                                                   "end at 4 step-4"}));
  EXPECT_EQ(r.last_step, 4);
  fs::remove_all(d);
}
