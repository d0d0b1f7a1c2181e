// Training with tensor parallelism on the mesh (threaded ranks): the loss curve of tp2, tp4,
// tp2 x dp_shard 2, tp2 with HSDP and tp2 without sequence parallelism equals one process's (and
// Qwen3-MoE's and Qwen3.5's at tp2 x dp2);
// checkpoints saved at one mesh resume at another with the same next losses; the HF export of a
// tp run equals one process's. LoRA: adapters split like their projections give one process's
// curve (dropout on), PEFT folder and a checkpoint that resumes on one process.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iterator>

#include "common/test_util.h"
#include "parallel_train.h"
#include "io/safetensors.h"
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

// ctest -L long. Qwen3.5 (debug-qwen3_5: 3 Gated DeltaNet layers, then gated attention): tp2 x dp2 trains one
// process's curve; its step-4 checkpoint (in_proj_qkv and conv1d held as boxes of each of their
// q, k, v parts) resumes on one process with the same next losses; its HF export as initialised is
// one process's bit for bit.
TEST(TensorParallelTrainingLong, Qwen3_5Tp2ByDp2CurveResumeAndExportEqualOneProcess) {
  auto q35 = [](const std::string& dump, int64_t steps, const Mesh& m) {
    JobConfig c = tp_job(dump, steps, m);
    c.model.name = ModelName::Qwen3_5;
    c.model.flavor = "debug-qwen3_5";
    c.model.n_layers = 4;
    c.validate("test");
    return c;
  };
  const Mesh tp2dp2{1, 2, 2, true};
  const std::string one = test::temp_dir("tp_q35_one"), two = test::temp_dir("tp_q35_tp2dp2");
  run(q35(one, 8, {}), {});
  run(q35(two, 8, tp2dp2), tp2dp2);
  const std::vector<double> want = losses(one);
  ASSERT_EQ(want.size(), 8u);
  EXPECT_LT(want.back(), want.front());
  expect_same_curve(losses(two), want, "qwen3_5 tp2 x dp2");
  fs::remove_all(two + "/checkpoint/step-8");
  run(q35(two, 8, {}), {});  // resumes from tp2 x dp2's step 4 on one process
  std::vector<double> got = losses(two);
  ASSERT_EQ(got.size(), 8u);
  got.erase(got.begin(), got.begin() + 4);
  expect_same_curve(got, want, "qwen3_5 tp2 x dp2 -> 1", 4);
  test::expect_same_tensors(test::export_as_initialised(q35(test::temp_dir("tp_q35_export_one"), 1, {}), 1),
                            test::export_as_initialised(q35(test::temp_dir("tp_q35_export_tp2dp2"), 1, tp2dp2), 4));
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

// LoRA under tensor parallelism (model/lora.h): lora_B split by rows on q/k/v and gate/up, lora_A by
// columns on o_proj and down_proj, dropout 0.1 (masks keyed by the whole input's features and the
// sample's row in the global batch), the frozen base sharded over dp.
namespace {

// AdamW's eps is 1e-5 here, not 1e-8: at init the q/k adapters' gradients are ill-conditioned (near-
// uniform attention: d(q) is a difference of near-equal terms), so some of their elements are
// rounding noise, and with eps 1e-8 AdamW turns that noise's sign into a full +-lr step. Any other
// order of the same sums then moves those elements differently (tp2: 0.15 of a lora_A's peak after
// 8 steps, dp2 1e-4), which says nothing about the layout. eps 1e-5 leaves those elements nearly
// still and every other one an Adam step (the curve falls the same), so the trained adapters can be
// compared element by element.
JobConfig lora_tp_job(const std::string& dump, int64_t steps, const Mesh& m, double lr = 1e-2) {
  JobConfig c = tp_job(dump, steps, m);
  c.lora.enable = true;
  c.lora.rank = 8, c.lora.alpha = 16, c.lora.dropout = 0.1;
  c.optimizer.eps = 1e-5;
  c.checkpoint.last_save_in_hf = true;
  c.validate("test");
  c.optimizer.lr = lr;  // (0, which validate refuses: the adapters as initialised)
  return c;
}

// The adapters of a run's PEFT folder at step `step`.
TensorMap peft_tensors(const std::string& dump, int64_t step) {
  const SafetensorsFile f = SafetensorsFile::open(dump + "/checkpoint/step-" + std::to_string(step) +
                                                  "-hf/adapter_model.safetensors");
  TensorMap m;
  for (const auto& e : f.entries()) m[e.name] = f.get(e.name);
  return m;
}

// The gradient norm of every step a run logged.
std::vector<double> grad_norms(const std::string& dump) {
  std::vector<double> v;
  std::ifstream f(dump + "/metrics.jsonl");
  std::string line;
  while (std::getline(f, line))
    if (!line.empty()) v.push_back(nlohmann::json::parse(line)["grad_norm"].get<double>());
  return v;
}

// The one-process LoRA run (8 steps, checkpoints at 4 and 8, the PEFT folder at the end).
const std::string& lora_baseline() {
  static const std::string dump = [] {
    const std::string d = test::temp_dir("tp_lora_one");
    run(lora_tp_job(d, 8, {}), {});
    return d;
  }();
  return dump;
}

}  // namespace

// make test: the adapters as initialised (lr 0), joined from the tp shards of a tp2 x dp2 run: the
// PEFT folder one process writes, byte for byte (adapter_config.json too).
TEST(TensorParallelTraining, LoraPeftFolderAsInitialisedEqualsOneProcess) {
  auto folder = [](const Mesh& m, const std::string& name) {
    const std::string d = test::temp_dir("tp_lora_peft0_" + name);
    run(lora_tp_job(d, 1, m, 0), m);
    return d;
  };
  const std::string one = folder({}, "one"), tp = folder({1, 2, 2, true}, "tp2xdp2");
  const TensorMap a = peft_tensors(one, 1), b = peft_tensors(tp, 1);
  EXPECT_EQ(a.size(), 2u * 2 * 7);  // 2 layers x 7 projections x (A, B)
  test::expect_same_tensors(a, b);
  auto text = [](const std::string& f) {
    std::ifstream in(f);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  EXPECT_EQ(text(one + "/checkpoint/step-1-hf/adapter_config.json"), text(tp + "/checkpoint/step-1-hf/adapter_config.json"));
}

// ctest -L long: tp2, tp2 without sequence parallelism and tp2 x dp2 follow the one-process
// curve within 1e-5 relative with dropout on (and its gradient norms: the split adapters' squares
// summed over tp, the replicated ones' counted once), and their trained PEFT folders hold its
// adapters (each tensor within 1e-3 of its largest element).
TEST(TensorParallelTrainingLong, LoraLossCurvesAndAdaptersEqualOneProcess) {
  const std::string& one = lora_baseline();
  const std::vector<double> want = losses(one), norms = grad_norms(one);
  ASSERT_EQ(want.size(), 8u);
  EXPECT_LT(want.back(), want.front());
  const TensorMap adapters = peft_tensors(one, 8);
  for (const auto& [name, m] : std::vector<std::pair<std::string, Mesh>>{
           {"tp2", {1, 1, 2, true}}, {"tp2_no_sp", {1, 1, 2, false}}, {"tp2xdp2", {1, 2, 2, true}}}) {
    const std::string d = test::temp_dir("tp_lora_" + name);
    run(lora_tp_job(d, 8, m), m);
    expect_same_curve(losses(d), want, "LoRA " + name);
    const std::vector<double> got_norms = grad_norms(d);
    ASSERT_EQ(got_norms.size(), norms.size()) << name;
    double worst_loss = 0, worst_norm = 0, worst = 0;
    for (size_t i = 0; i < norms.size(); ++i) {
      EXPECT_NEAR(got_norms[i], norms[i], 1e-4 * norms[i]) << name << " grad_norm of step " << i + 1;
      worst_norm = std::max(worst_norm, std::fabs(got_norms[i] - norms[i]) / norms[i]);
      worst_loss = std::max(worst_loss, std::fabs(losses(d)[i] - want[i]) / want[i]);
    }
    const TensorMap got = peft_tensors(d, 8);
    ASSERT_EQ(got.size(), adapters.size()) << name;
    std::string worst_name;
    for (const auto& [t, w] : adapters) {
      ASSERT_TRUE(got.count(t)) << name << " " << t;
      ASSERT_EQ(got.at(t).shape(), w.shape()) << name << " " << t;
      const double e = test::rel_err(got.at(t), w);
      EXPECT_LE(e, 1e-3) << name << " " << t << ": the trained adapter differs from one process's";
      if (e > worst) worst = e, worst_name = t;
    }
    std::printf("[ lora tp ] %s: losses within %.3g, grad norms %.3g relative; adapters after 8 steps within %.3g of "
                "their peak (%s)\n",
                name.c_str(), worst_loss, worst_norm, worst, worst_name.c_str());
  }
}

// ctest -L long: LoRA checkpoints (the split adapters and their moments as boxes of the whole
// tensors) resume across meshes: one written at tp2 resumes on one process, and the one-process
// run's resumes at tp2 x dp2 without sequence parallelism; steps 5..8 are the one-process run's and
// so are the adapters at the end (within 1e-3 of each tensor's peak).
TEST(TensorParallelTrainingLong, LoraCheckpointsResumeAcrossMeshes) {
  const std::vector<double> want = losses(lora_baseline());
  ASSERT_EQ(want.size(), 8u);
  const TensorMap adapters = peft_tensors(lora_baseline(), 8);
  auto check = [&](const std::string& d, const std::string& what) {
    const std::vector<double> got = losses(d);
    ASSERT_EQ(got.size(), 8u) << what;
    expect_same_curve(got, want, what);
    const TensorMap b = peft_tensors(d, 8);
    ASSERT_EQ(b.size(), adapters.size()) << what;
    for (const auto& [t, w] : adapters) EXPECT_LE(test::rel_err(b.at(t), w), 1e-3) << what << " " << t;
  };
  const std::string a = test::temp_dir("tp_lora_resume_tp2_to_1");
  run(lora_tp_job(a, 8, {1, 1, 2, true}), {1, 1, 2, true});
  fs::remove_all(a + "/checkpoint/step-8");
  run(lora_tp_job(a, 8, {}), {});
  check(a, "LoRA tp2 -> 1");
  const std::string b = test::temp_dir("tp_lora_resume_1_to_tp2xdp2");
  fs::copy(lora_baseline(), b, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  fs::remove_all(b + "/checkpoint/step-8");
  fs::remove_all(b + "/checkpoint/step-8-hf");
  run(lora_tp_job(b, 8, {1, 2, 2, false}), {1, 2, 2, false});
  check(b, "LoRA 1 -> tp2 x dp2 (no sp)");
}

// ctest -L long: a bf16 base ([lora] base_dtype, its shards and gathers bf16) at tp2 x dp2 trains
// bit for bit like the f32 base with bf16 matmuls at tp2 x dp2 (the same rounded weights), as one
// process and FSDP do: every loss and the trained PEFT folder.
TEST(TensorParallelTrainingLong, LoraBf16BaseAtTp2ByDp2EqualsF32BaseWithBf16Matmuls) {
  const Mesh m{1, 2, 2, true};
  auto go = [&](bool bf16_base) {
    const std::string d = test::temp_dir(bf16_base ? "tp_lora_bf16_base" : "tp_lora_f32_base_bf16_matmuls");
    JobConfig c = lora_tp_job(d, 6, m);
    if (bf16_base) c.lora.base_dtype = DType::BF16;
    else c.training.mixed_precision_param = DType::BF16;
    run(c, m);
    return d;
  };
  const std::string a = go(false), b = go(true);
  const std::vector<double> la = losses(a), lb = losses(b);
  ASSERT_EQ(la.size(), 6u);
  EXPECT_LT(la.back(), la.front());
  for (size_t i = 0; i < la.size(); ++i) EXPECT_EQ(la[i], lb[i]) << "step " << i + 1;
  test::expect_same_tensors(peft_tensors(a, 6), peft_tensors(b, 6));
}
