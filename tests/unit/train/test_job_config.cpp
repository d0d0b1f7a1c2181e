#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "unit/train/checkpoint_test_util.h"
#include "train/job_config.h"
#include "train/model_state.h"

using namespace titan;
using titan::test::error_of;

namespace {

std::string write_temp(const std::string& name, const std::string& text) {
  auto p = std::filesystem::temp_directory_path() / ("titan_jc_" + std::to_string(::getpid()) + "_" + name);
  std::ofstream(p) << text;
  return p.string();
}

}  // namespace

TEST(JobConfig, DefaultsAreTorchtitansAndValid) {
  JobConfig c;
  EXPECT_EQ(c.optimizer.name, OptimizerName::AdamW);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 8e-4);
  EXPECT_DOUBLE_EQ(c.optimizer.beta2, 0.95);
  EXPECT_EQ(c.lr_scheduler.warmup_steps, 200);
  EXPECT_FALSE(c.lr_scheduler.decay_ratio.has_value());
  EXPECT_EQ(c.training.seq_len, 2048);
  EXPECT_EQ(c.checkpoint.keep_latest_k, 10);
  EXPECT_EQ(c.metrics.log_freq, 10);
  EXPECT_NO_THROW(c.validate("defaults"));
}

TEST(JobConfig, ParsesEverySectionWithTypes) {
  JobConfig c;
  apply_toml(c, R"(
[job]
dump_folder = "/tmp/x"
[model]
flavor = "0.6B"
n_layers = 2
num_experts = 8
top_k = 2
[optimizer]
lr = 3          # an integer is accepted for a float key
weight_decay = 0.0
[lr_scheduler]
warmup_steps = 7
decay_ratio = 0.25
decay_type = "cosine"
min_lr_factor = 0.1
[training]
local_batch_size = 2
global_batch_size = 8
deterministic = true
mixed_precision_param = "bfloat16"
[checkpoint]
enable = true
initial_load_in_hf = true
initial_load_path = "/w"
[activation_checkpoint]
mode = "full"
[metrics]
peak_tflops = 1.5
[kernels]
replace = ["model.layers.*.mlp=swiglu_fused", "*.self_attn=flash"]
[compute]
threads = 2
)",
             "t.toml");
  EXPECT_EQ(c.job.dump_folder, "/tmp/x");
  EXPECT_EQ(c.model.n_layers, 2);
  EXPECT_EQ(c.model.num_experts, 8);
  EXPECT_EQ(c.model.top_k, 2);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 3.0);
  EXPECT_EQ(c.lr_scheduler.warmup_steps, 7);
  ASSERT_TRUE(c.lr_scheduler.decay_ratio.has_value());
  EXPECT_DOUBLE_EQ(*c.lr_scheduler.decay_ratio, 0.25);
  EXPECT_EQ(c.lr_scheduler.decay_type, DecayType::Cosine);
  EXPECT_TRUE(c.training.deterministic);
  EXPECT_EQ(c.training.mixed_precision_param, DType::BF16);
  EXPECT_EQ(c.activation_checkpoint.mode, ActivationCheckpointMode::Full);
  ASSERT_EQ(c.kernels.replace.size(), 2u);
  EXPECT_EQ(c.kernels.replace[1], "*.self_attn=flash");
  EXPECT_EQ(c.compute.threads, 2);
  EXPECT_EQ(c.grad_accumulation_steps(1), 4);
  EXPECT_EQ(c.checkpoint_folder(), "/tmp/x/checkpoint");
  EXPECT_NO_THROW(c.validate("t.toml"));
}

TEST(JobConfig, UnknownKeysSuggestTheClosest) {
  JobConfig c;
  std::string e = error_of([&] { apply_toml(c, "[training]\nstpes = 3\n", "a.toml"); });
  EXPECT_NE(e.find("a.toml:2"), std::string::npos) << e;
  EXPECT_NE(e.find("unknown key [training] stpes"), std::string::npos) << e;
  EXPECT_NE(e.find("did you mean steps?"), std::string::npos) << e;

  e = error_of([&] { apply_toml(c, "[training]\nwarmup_steps = 3\n", "a.toml"); });
  EXPECT_NE(e.find("did you mean [lr_scheduler] warmup_steps?"), std::string::npos) << e;

  e = error_of([&] { apply_toml(c, "[trainig]\nsteps = 3\n", "a.toml"); });
  EXPECT_NE(e.find("unknown section [trainig]"), std::string::npos) << e;
  EXPECT_NE(e.find("did you mean [training]?"), std::string::npos) << e;

  e = error_of([&] { apply_toml(c, "steps = 3\n", "a.toml"); });
  EXPECT_NE(e.find("did you mean [training] steps?"), std::string::npos) << e;

  e = error_of([&] { apply_override(c, "optimizer.lrr", "1"); });
  EXPECT_NE(e.find("unknown option --optimizer.lrr"), std::string::npos) << e;
  EXPECT_NE(e.find("did you mean --optimizer.lr?"), std::string::npos) << e;
}

TEST(JobConfig, TypeErrorsNameFileKeyAndType) {
  JobConfig c;
  std::string e = error_of([&] { apply_toml(c, "[training]\n\nsteps = \"ten\"\n", "b.toml"); });
  EXPECT_NE(e.find("b.toml:3: [training] steps must be an integer, got string"), std::string::npos) << e;
  e = error_of([&] { apply_toml(c, "[training]\ndeterministic = 1\n", "b.toml"); });
  EXPECT_NE(e.find("deterministic must be a boolean"), std::string::npos) << e;
  e = error_of([&] { apply_toml(c, "[optimizer]\nlr = \"x\"\n", "b.toml"); });
  EXPECT_NE(e.find("lr must be a number, got string"), std::string::npos) << e;
  e = error_of([&] { apply_toml(c, "[kernels]\nreplace = [1]\n", "b.toml"); });
  EXPECT_NE(e.find("replace must be an array of strings"), std::string::npos) << e;
  e = error_of([&] { apply_toml(c, "[training]\nsteps = 3\nsteps = 4\n", "b.toml"); });
  EXPECT_NE(e.find("b.toml:3: TOML syntax error"), std::string::npos) << e;
  e = error_of([&] { apply_toml(c, "[lr_scheduler]\ndecay_type = \"cosin\"\n", "b.toml"); });
  EXPECT_NE(e.find("is not one of: linear, sqrt, cosine (did you mean cosine?)"), std::string::npos) << e;
  e = error_of([&] { apply_override(c, "training.steps", "12x"); });
  EXPECT_NE(e.find("option --training.steps must be an integer, got \"12x\""), std::string::npos) << e;
  e = error_of([&] { apply_override(c, "training.deterministic", "yes"); });
  EXPECT_NE(e.find("must be a boolean"), std::string::npos) << e;
}

TEST(JobConfig, CommandLineOverridesInBothForms) {
  std::string path = write_temp("cl.toml", "[training]\nsteps = 3\nseq_len = 64\n[optimizer]\nlr = 0.5\n");
  JobConfig c = parse_job_command_line({"--training.steps=9", "--config", path, "--optimizer.lr", "1e-3",
                                        "--training.deterministic", "true", "--kernels.replace", "a=b, c=d",
                                        "--lr_scheduler.decay_ratio", "0.5"});
  EXPECT_EQ(c.training.steps, 9);  // overrides apply after the file, wherever they appear
  EXPECT_EQ(c.training.seq_len, 64);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 1e-3);
  EXPECT_TRUE(c.training.deterministic);
  EXPECT_EQ(c.kernels.replace, (std::vector<std::string>{"a=b", "c=d"}));
  EXPECT_DOUBLE_EQ(c.lr_scheduler.decay_ratio.value(), 0.5);
  c = parse_job_command_line({"--job.config_file=" + path, "--lr_scheduler.decay_ratio=none"});
  EXPECT_FALSE(c.lr_scheduler.decay_ratio.has_value());
  EXPECT_EQ(c.training.steps, 3);

  EXPECT_NE(error_of([&] { parse_job_command_line({"train.toml"}); }).find("unexpected argument 'train.toml'"),
            std::string::npos);
  EXPECT_NE(error_of([&] { parse_job_command_line({"--training.steps"}); }).find("needs a value"),
            std::string::npos);
  EXPECT_NE(error_of([&] { parse_job_command_line({"--config", "/nonexistent/x.toml"}); }).find("/nonexistent/x.toml"),
            std::string::npos);
  std::filesystem::remove(path);
}

// [model] flavor resolves per [model] name, as torchtitan keys flavors per model: "4B" is Qwen3-4B
// for qwen3 and Qwen3.5-4B for qwen3_5; the qualified Qwen3.5 names work under either name.
TEST(JobConfig, FlavorResolvesPerModelName) {
  auto model = [](std::vector<std::string> args) { return job_model_config(parse_job_command_line(args)); };
  EXPECT_EQ(model({"--model.flavor", "4B"}).model_type, "qwen3");
  ModelConfig q = model({"--model.name", "qwen3_5", "--model.flavor", "4B"});
  EXPECT_EQ(q.model_type, "qwen3_5");
  EXPECT_EQ(q.flavor, "qwen3_5-4B");
  EXPECT_EQ(model({"--model.name", "qwen3_5", "--model.flavor", "35B-A3B"}).model_type, "qwen3_5_moe");
  EXPECT_EQ(model({"--model.flavor", "qwen3_5-0.8B"}).flavor, "qwen3_5-0.8B");
  EXPECT_EQ(model({"--model.name", "qwen3_5", "--model.flavor", "debug-qwen3_5"}).flavor, "debug-qwen3_5");
  q = model({"--model.name", "qwen3_5", "--model.flavor", "9B", "--model.n_layers", "8"});
  EXPECT_EQ(q.num_hidden_layers, 8);
  EXPECT_EQ(q.layer_mixers.size(), 8u);
  EXPECT_NE(error_of([&] { model({"--model.name", "qwen3_5", "--model.flavor", "30B-A3B"}); })
                .find("[model] name is qwen3_5 but the model (flavor 30B-A3B) is a qwen3_moe"),
            std::string::npos);
}

TEST(JobConfig, ValidationRefusesUnimplementedParallelismAndBadRanges) {
  JobConfig c;
  c.parallelism.data_parallel_shard_degree = 64;  // data parallelism runs over MPI ranks
  EXPECT_NO_THROW(c.validate("r.toml"));
  EXPECT_EQ(c.data_parallel_degree(1), 64);  // the trainer refuses it on a world of 1 rank
  c.parallelism.data_parallel_shard_degree = 0;
  std::string e = error_of([&] { c.validate("r.toml"); });
  EXPECT_NE(e.find("data_parallel_shard_degree"), std::string::npos) << e;
  EXPECT_NE(e.find("must be -1 (all remaining ranks) or >= 1"), std::string::npos) << e;
  c = JobConfig();
  c.parallelism.tensor_parallel_degree = 2;  // built (model/tensor_parallel.h)
  EXPECT_NO_THROW(c.validate("x"));
  c.parallelism.context_parallel_degree = 2;  // built (model/context_parallel.h)
  EXPECT_NO_THROW(c.validate("x"));
  c.parallelism.context_parallel_load_balancer = CpLoadBalancer::None;
  c.training.seq_len = 2049;  // not 2 chunks
  EXPECT_NE(error_of([&] { c.validate("x"); }).find("[training] seq_len = 2049 does not divide into 2 chunks"),
            std::string::npos);
  c = JobConfig();
  c.parallelism.expert_parallel_degree = -1;
  EXPECT_NE(error_of([&] { c.validate("x"); }).find("[parallelism] expert_parallel_degree must be >= 1"),
            std::string::npos);
  c = JobConfig();
  c.training.global_batch_size = 10;
  c.training.local_batch_size = 4;
  EXPECT_NE(error_of([&] { c.validate("x"); }).find("not a multiple of local_batch_size"), std::string::npos);
  c = JobConfig();
  c.lr_scheduler.decay_ratio = 1.5;
  EXPECT_NE(error_of([&] { c.validate("x"); }).find("decay_ratio must be in [0, 1]"), std::string::npos);
  c = JobConfig();
  c.kernels.replace = {"noequals"};
  EXPECT_NE(error_of([&] { c.validate("x"); }).find("pattern=kernel"), std::string::npos);
  c = JobConfig();
  c.checkpoint.initial_load_in_hf = true;
  EXPECT_NE(error_of([&] { c.validate("x"); }).find("initial_load_path is empty"), std::string::npos);
}

TEST(JobConfig, RenderRoundTrips) {
  JobConfig c;
  c.job.description = "quote \" backslash \\ tab\t";
  c.optimizer.lr = 3e-4;
  c.lr_scheduler.decay_ratio = 0.2;
  c.training.max_norm = 1.0;
  c.kernels.replace = {"a=b", "c=d"};
  std::string t = render_toml(c);
  EXPECT_NE(t.find("lr = 0.0003\n"), std::string::npos) << t;
  EXPECT_NE(t.find("max_norm = 1.0\n"), std::string::npos) << t;
  JobConfig d;
  apply_toml(d, t, "rendered");
  EXPECT_EQ(render_toml(d), t);
  EXPECT_EQ(d.job.description, c.job.description);
  EXPECT_EQ(d.kernels.replace, c.kernels.replace);
  // An unset optional is rendered as a comment and reads back unset.
  JobConfig e;
  std::string et = render_toml(e);
  EXPECT_NE(et.find("# decay_ratio unset\n"), std::string::npos);
  EXPECT_EQ(et.find("decay_ratio ="), std::string::npos);
  JobConfig f;
  apply_toml(f, et, "rendered");
  EXPECT_FALSE(f.lr_scheduler.decay_ratio.has_value());
  // 52 + [model] load_balance_coeff + 2 [comm] timeouts + [model] attn_mask_type + [training]
  // dataset_format, train_on_prompt, skip_bad_rows, dataset_column, dataset_mix, dataset_streaming,
  // dataset_threads + 9 [validation] keys + 11 [lora] keys + [parallelism] enable_sequence_parallel
  // + [parallelism] pipeline_parallel_schedule, _microbatch_size, _layers_per_stage, _stages_per_rank
  // + [parallelism] context_parallel_load_balancer + [compute] device
  EXPECT_EQ(job_config_keys().size(), 92u);
}

TEST(JobConfig, HashCoversTheTrajectoryOnly) {
  JobConfig a, b;
  EXPECT_EQ(config_hash(a), config_hash(b));
  EXPECT_EQ(config_hash(a).size(), 16u);
  b.metrics.log_freq = 1;
  b.job.dump_folder = "elsewhere";
  b.checkpoint.interval = 3;
  EXPECT_EQ(config_hash(a), config_hash(b));
  b.optimizer.lr = 1e-3;
  EXPECT_NE(config_hash(a), config_hash(b));
}

TEST(JobConfig, CommTimeoutsParseValidateAndStayOutOfTheHash) {
  JobConfig a;
  EXPECT_EQ(a.comm.init_timeout_seconds, 300);  // torchtitan's defaults
  EXPECT_EQ(a.comm.train_timeout_seconds, 100);
  JobConfig b = a;
  apply_toml(b, "[comm]\ninit_timeout_seconds = 30\n", "t.toml");
  apply_override(b, "comm.train_timeout_seconds", "5");
  EXPECT_EQ(b.comm.init_timeout_seconds, 30);
  EXPECT_EQ(b.comm.train_timeout_seconds, 5);
  EXPECT_NO_THROW(b.validate("t.toml"));
  // A timeout never changes the trajectory: a resume with another timeout must be accepted.
  EXPECT_EQ(config_hash(a), config_hash(b));
  JobConfig back;
  apply_toml(back, render_toml(b), "rendered");
  EXPECT_EQ(back.comm.train_timeout_seconds, 5);
  b.comm.train_timeout_seconds = 0;
  EXPECT_EQ(error_of([&] { b.validate("t.toml"); }), "t.toml: [comm] train_timeout_seconds must be > 0 (seconds)");
  b = a;
  b.comm.init_timeout_seconds = -1;
  EXPECT_EQ(error_of([&] { b.validate("t.toml"); }), "t.toml: [comm] init_timeout_seconds must be > 0 (seconds)");
  EXPECT_NE(error_of([&] { apply_toml(b, "[comm]\ntrain_timeout_seconds = 2.5\n", "t.toml"); })
                .find("[comm] train_timeout_seconds must be an integer"),
            std::string::npos);
  EXPECT_NE(error_of([&] { apply_override(b, "comm.train_timout_seconds", "5"); }).find("did you mean --comm.train_timeout_seconds?"),
            std::string::npos);
}

TEST(JobConfig, RecipesParse) {
  std::string dir = std::string(TITAN_SOURCE_DIR) + "/recipes/";
  JobConfig d = load_job_config_file(dir + "debug.toml");
  EXPECT_NO_THROW(d.validate("debug.toml"));
  EXPECT_EQ(d.model.flavor, "debugmodel");
  EXPECT_EQ(d.training.dataset, "c4_test");
  JobConfig n = load_job_config_file(dir + "qwen3_4b_native.toml");
  EXPECT_NO_THROW(n.validate("qwen3_4b_native.toml"));
  EXPECT_EQ(n.training.global_batch_size, 64);
  EXPECT_EQ(n.grad_accumulation_steps(1), 64);
  JobConfig h = load_job_config_file(dir + "qwen3_4b_hf_finetune.toml");
  EXPECT_TRUE(h.checkpoint.initial_load_in_hf);
  EXPECT_TRUE(h.checkpoint.last_save_in_hf);
  EXPECT_EQ(h.training.steps, 10);
  // Needs 64 MPI ranks (the trainer checks the world size); one process runs it with the degree
  // overridden.
  EXPECT_NO_THROW(h.validate("hf"));
  JobConfig h1 = parse_job_command_line(
      {"--config", dir + "qwen3_4b_hf_finetune.toml", "--parallelism.data_parallel_shard_degree", "1"});
  EXPECT_EQ(h1.parallelism.data_parallel_shard_degree, 1);
  JobConfig m = load_job_config_file(dir + "qwen3_30b_a3b_4layer_moe.toml");
  EXPECT_NO_THROW(m.validate("qwen3_30b_a3b_4layer_moe.toml"));
  EXPECT_EQ(m.model.name, ModelName::Qwen3Moe);
  EXPECT_EQ(m.model.flavor, "30B-A3B");
  EXPECT_EQ(m.model.n_layers, 4);
  EXPECT_EQ(m.model.num_experts, 64);
  EXPECT_EQ(m.model.top_k, 4);
}

// Issue 10: huge sizes and thread counts ended in SIGSEGV (an overflowing token count, an OpenMP
// runtime that cannot start 100000 threads); the config now bounds them with the reason named.
TEST(JobConfig, BoundsSizesAndThreadsAndChecksProductsForOverflow) {
  auto err = [](std::vector<std::string> args) {
    return error_of([&] { parse_job_command_line(args); });
  };
  std::string e = err({"--training.local_batch_size", "4611686018427387904", "--training.seq_len", "4"});
  EXPECT_NE(e.find("command line: [training] local_batch_size must be <= "), std::string::npos) << e;
  e = err({"--training.seq_len", "9223372036854775807"});
  EXPECT_NE(e.find("[training] seq_len must be <= "), std::string::npos) << e;
  // Each within its bound, the product too large: the tokens of one micro-batch.
  e = err({"--training.local_batch_size", "16777216", "--training.seq_len", "16777216"});
  EXPECT_NE(e.find("local_batch_size x seq_len"), std::string::npos) << e;
  e = err({"--training.global_batch_size", "4611686018427387904", "--training.local_batch_size", "1"});
  EXPECT_NE(e.find("[training] global_batch_size must be <= "), std::string::npos) << e;
  e = err({"--training.global_batch_size", "1073741824", "--training.local_batch_size", "1", "--training.seq_len",
           "16777216"});
  EXPECT_NE(e.find("global_batch_size x seq_len"), std::string::npos) << e;
  e = err({"--training.steps", "9223372036854775807"});
  EXPECT_NE(e.find("[training] steps must be <= "), std::string::npos) << e;
  e = err({"--lr_scheduler.warmup_steps", "9223372036854775807"});
  EXPECT_NE(e.find("[lr_scheduler] warmup_steps must be <= "), std::string::npos) << e;
  e = err({"--parallelism.data_parallel_shard_degree", "4611686018427387904"});
  EXPECT_NE(e.find("[parallelism] data_parallel_shard_degree must be "), std::string::npos) << e;
  e = err({"--parallelism.data_parallel_replicate_degree", "4611686018427387904"});
  EXPECT_NE(e.find("[parallelism] data_parallel_replicate_degree must be "), std::string::npos) << e;
  e = err({"--compute.threads", "100000"});
  EXPECT_EQ(e, "command line: [compute] threads must be <= 4096 (0 = leave as is; more threads than the machine "
               "has only slow a run down, and far more crash the OpenMP runtime)");
  EXPECT_EQ(err({"--compute.threads", "4096"}), "");
  // The documented bounds themselves are accepted.
  EXPECT_EQ(err({"--training.local_batch_size", "1", "--training.seq_len", "16777216", "--training.steps",
                 "1099511627776"}),
            "");
  // Every error is one line.
  EXPECT_EQ(e.find('\n'), std::string::npos);
}

// What a resume compares key by key (issue 10: raising [training] steps was refused).
TEST(JobConfig, TrajectoryConfigLeavesOutWhatAResumeMayChange) {
  JobConfig a;
  auto ra = trajectory_config(a, 1);
  EXPECT_EQ(ra.at("optimizer.lr"), "0.0008");
  EXPECT_EQ(ra.at("lr_scheduler.decay_ratio"), "unset");
  EXPECT_EQ(ra.at("training.global_batch_size"), "8");  // effective: 8 x 1 rank x 1
  EXPECT_EQ(trajectory_config(a, 4).at("training.global_batch_size"), "32");
  for (const char* k : {"training.steps", "training.local_batch_size", "training.seed", "training.dataset_path",
                        "model.hf_assets_path", "checkpoint.interval", "checkpoint.keep_latest_k", "metrics.log_freq",
                        "comm.train_timeout_seconds", "compute.threads", "compute.device", "activation_checkpoint.mode",
                        "job.dump_folder", "parallelism.data_parallel_shard_degree"})
    EXPECT_EQ(ra.count(k), 0u) << k;
  JobConfig b = a;
  b.training.steps = 123456;
  b.training.local_batch_size = 2;
  b.training.global_batch_size = 8;  // the same global batch, as 4 micro-batches of 2
  b.checkpoint.keep_latest_k = 1;
  b.comm.init_timeout_seconds = 5;
  EXPECT_EQ(trajectory_config(b, 1), ra);
  b.lr_scheduler.decay_ratio = 0.5;
  b.kernels.replace = {"model.layers.*.self_attn.rope=rope.transposed"};
  auto rb = trajectory_config(b, 1);
  EXPECT_EQ(rb.at("lr_scheduler.decay_ratio"), "0.5");
  EXPECT_EQ(rb.at("kernels.replace"), "[\"model.layers.*.self_attn.rope=rope.transposed\"]");
}

namespace {

TEST(JobConfig, DatasetMixFromTomlAndTheCommandLine) {
  JobConfig c;
  apply_toml(c, "[training]\ndataset_mix = [{path = \"a/*.json.gz\", weight = 3}, {path = \"b\", weight = 0.5}]\n", "m.toml");
  ASSERT_EQ(c.training.dataset_mix.size(), 2u);
  EXPECT_EQ(c.training.dataset_mix[0], (DatasetMixEntry{"a/*.json.gz", 3.0}));
  EXPECT_EQ(c.training.dataset_mix[1], (DatasetMixEntry{"b", 0.5}));
  EXPECT_NO_THROW(c.validate("m.toml"));
  // Rendered as it was written, and read back the same.
  JobConfig d;
  apply_toml(d, render_toml(c), "rendered");
  EXPECT_EQ(d.training.dataset_mix, c.training.dataset_mix);
  JobConfig e;
  apply_override(e, "training.dataset_mix", "a/*.json.gz=3, b=0.5");
  EXPECT_EQ(e.training.dataset_mix, c.training.dataset_mix);
  JobConfig f;
  apply_override(f, "training.dataset_mix", "[{path = \"a/*.json.gz\", weight = 3}, {path = \"b\", weight = 0.5}]");
  EXPECT_EQ(f.training.dataset_mix, c.training.dataset_mix);
  // Bad entries and combinations.
  JobConfig g;
  EXPECT_NE(error_of([&] { apply_toml(g, "[training]\ndataset_mix = [{path = \"a\", wieght = 1}]\n", "g.toml"); })
                .find("an entry's keys are path (a string) and weight (a number), got wieght"),
            std::string::npos);
  EXPECT_NE(error_of([&] { apply_toml(g, "[training]\ndataset_mix = [\"a\"]\n", "g.toml"); })
                .find("must be an array of {path, weight} tables"),
            std::string::npos);
  EXPECT_NE(error_of([&] { apply_override(g, "training.dataset_mix", "a"); }).find("--training.dataset_mix"),
            std::string::npos);
  c.training.dataset_mix[1].weight = 0;
  EXPECT_NE(error_of([&] { c.validate("m.toml"); }).find("entry b: weight 0.0 must be a positive number"),
            std::string::npos);
  c.training.dataset_mix[1].weight = 1;
  c.training.dataset_path = "x.jsonl";
  EXPECT_NE(error_of([&] { c.validate("m.toml"); }).find("are both set"), std::string::npos);
  c.training.dataset_path.clear();
  c.training.dataset_streaming = DatasetStreaming::Off;
  EXPECT_NE(error_of([&] { c.validate("m.toml"); }).find("cannot serve a dataset_mix"), std::string::npos);
}

}  // namespace
