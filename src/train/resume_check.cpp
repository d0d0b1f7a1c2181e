#include "train/resume_check.h"

#include <cstdio>
#include <map>
#include <optional>

#include "core/error.h"
#include "model/base_fingerprint.h"
#include "train/lr_schedule.h"

namespace titan {
namespace {

using Record = std::map<std::string, std::string>;

// The recorded trajectory config and training steps, from the record or, for checkpoints written
// before it, from their job config; nullopt when neither is there (or the old text no longer
// parses or fits this world).
std::optional<std::pair<Record, int64_t>> recorded_config(const nlohmann::json& extra, const std::string& origin,
                                                          int64_t world_size) {
  if (extra.contains("trajectory_config") && extra["trajectory_config"].is_object()) {
    Record r;
    for (auto& [k, v] : extra["trajectory_config"].items())
      if (v.is_string()) r[k] = v.get<std::string>();
    const int64_t steps = extra.contains("training_steps") && extra["training_steps"].is_number_integer()
                              ? extra["training_steps"].get<int64_t>()
                              : -1;
    return std::make_pair(r, steps);
  }
  if (!extra.contains("job_config") || !extra["job_config"].is_string()) return std::nullopt;
  try {
    JobConfig old;
    apply_toml(old, extra["job_config"].get<std::string>(), origin);
    return std::make_pair(trajectory_config(old, world_size), old.training.steps);
  } catch (const Error&) {
    return std::nullopt;
  }
}

}  // namespace

void record_resume_config(TrainState& st, const JobConfig& cfg, int64_t world_size) {
  nlohmann::json rec = nlohmann::json::object();
  for (auto& [k, v] : trajectory_config(cfg, world_size)) rec[k] = v;
  st.extra["trajectory_config"] = rec;
  st.extra["training_steps"] = cfg.training.steps;
}

std::vector<std::string> check_resume_config(const TrainState& st, const std::string& step_dir, const JobConfig& cfg,
                                             int64_t world_size, const nlohmann::json& model_config) {
  const nlohmann::json& extra = st.extra;
  auto recorded = recorded_config(extra, step_dir + "/state.json job_config", world_size);
  if (!recorded) {
    TITAN_CHECK(st.config_hash == config_hash(cfg), step_dir,
                ": checkpoint from an older titan records only a config hash, and this job's config (",
                config_hash(cfg), ") differs from it (", st.config_hash,
                ") in some [model] [optimizer] [lr_scheduler] [training] [parallelism] [activation_checkpoint] "
                "[kernels] key, [training] steps included; resume with the config it was written with, or start "
                "over in another [job] dump_folder");
    return {};
  }
  std::string diffs;
  auto differ = [&](const std::string& key, const std::string& was, const std::string& now) {
    if (was == now) return;
    diffs += (diffs.empty() ? "" : ", ") + key + " " + was + " -> " + now;
  };
  // A LoRA run continues only on the base it trained on (model/base_fingerprint.h).
  if (cfg.lora.enable && cfg.checkpoint.initial_load_in_hf && extra.contains("lora") && extra["lora"].is_object() &&
      extra["lora"].contains("base_fingerprint") && extra["lora"]["base_fingerprint"].is_string())
    check_base_fingerprint(step_dir + "/state.json", extra["lora"]["base_fingerprint"].get<std::string>(),
                           cfg.checkpoint.initial_load_path, cfg.lora.allow_other_base, "--lora.allow_other_base true");
  const Record now = trajectory_config(cfg, world_size);
  for (auto& [k, v] : now)
    if (auto it = recorded->first.find(k); it != recorded->first.end()) differ(k, it->second, v);
  if (extra.contains("model_config") && extra["model_config"].is_object() && model_config.is_object())
    for (auto& [k, v] : model_config.items())
      if (extra["model_config"].contains(k)) differ("model_config." + k, extra["model_config"][k].dump(), v.dump());
  TITAN_CHECK(diffs.empty(), step_dir, ": checkpoint was written with a different config (checkpoint -> this job): ",
              diffs, "; resume with the checkpoint's values, or start over in another [job] dump_folder ([training] "
              "steps may change)");

  std::vector<std::string> notes;
  const int64_t old_steps = recorded->second;
  if (old_steps >= 1 && old_steps != cfg.training.steps && st.step < cfg.training.steps) {
    JobConfig old = cfg;
    old.training.steps = old_steps;
    const int64_t next = st.step + 1;
    char buf[512];
    std::snprintf(buf, sizeof buf,
                  "[training] steps %lld -> %lld: the lr schedule is recomputed for %lld steps; step %lld gets lr "
                  "%.4e (%.4e under the %lld-step schedule)",
                  (long long)old_steps, (long long)cfg.training.steps, (long long)cfg.training.steps, (long long)next,
                  make_lr_schedule(cfg).lr_at_step(next), make_lr_schedule(old).lr_at_step(next),
                  (long long)old_steps);
    notes.push_back(buf);
  }
  return notes;
}

}  // namespace titan
