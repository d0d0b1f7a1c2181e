#include "train/checkpoint_model.h"

#include <sys/stat.h>

#include "train/checkpoint.h"

namespace titan {

static bool exists(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0;
}

bool is_hf_folder(const std::string& dir) { return exists(dir + "/config.json"); }

std::unique_ptr<Qwen3Model> load_checkpoint_model(const std::string& dir_in, int64_t* step_out) {
  std::string dir = dir_in;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  std::string folder, base = dir.substr(dir.rfind('/') == std::string::npos ? 0 : dir.rfind('/') + 1);
  int64_t step = -1;
  if (exists(dir + "/state.json") && base.rfind("step-", 0) == 0) {
    folder = dir.find('/') == std::string::npos ? "." : dir.substr(0, dir.rfind('/'));
    step = std::stoll(base.substr(5));
  } else {
    folder = dir;
    auto latest = CheckpointManager(folder, 0).latest_step();
    TITAN_CHECK(latest.has_value(), dir, ": not a training checkpoint (no step-N/state.json) nor an HF folder (no config.json)");
    step = *latest;
  }
  CheckpointManager ckm(folder, 0);
  TrainState st = ckm.read_state(step);
  TITAN_CHECK(st.extra.contains("model_config"), ckm.step_dir(step),
              "/state.json: no model_config recorded (written by an older titan?)");
  ModelConfig mc = parse_hf_config(st.extra["model_config"].dump(), ckm.step_dir(step) + "/state.json model_config");
  auto model = std::make_unique<Qwen3Model>(mc, "cpu");
  std::vector<NamedTensor> tensors, none;
  for (auto& p : model->params().all()) tensors.push_back({p.name, p.value});
  // Optimizer state is not needed: load the model file alone.
  TensorFileReader reader(ckm.step_dir(step) + "/model.tensors");
  TITAN_CHECK(reader.entries().size() == tensors.size(), ckm.step_dir(step), "/model.tensors: holds ",
              reader.entries().size(), " tensors, the model has ", tensors.size());
  for (auto& t : tensors) reader.read_into(t.name, t.tensor);
  if (step_out) *step_out = step;
  return model;
}

}  // namespace titan
