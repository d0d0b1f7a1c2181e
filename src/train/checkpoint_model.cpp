#include "train/checkpoint_model.h"

#include <sys/stat.h>

#include "model/base_fingerprint.h"
#include "model/hf_model.h"
#include "train/checkpoint.h"
#include "util/numbers.h"

namespace titan {

static bool exists(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0;
}

bool is_hf_folder(const std::string& dir) { return exists(dir + "/config.json"); }

FolderWeights load_folder_weights(const std::string& dir) {
  FolderWeights w;
  if (is_hf_folder(dir)) {
    HfCheckpoint ck = HfCheckpoint::open(dir);
    w.config = ck.config();
    w.tensors = ck.load_all(DType::F32);
  } else {
    w.model = load_checkpoint_model(dir);
    TITAN_CHECK(!w.model->lora_enabled(), dir, ": a LoRA checkpoint (adapters on a frozen base): export it with "
                "--adapter (a PEFT folder) or --merge-lora (a full folder with the adapters merged)");
    w.config = w.model->config();
    w.tensors = model_state(*w.model);
  }
  return w;
}

std::unique_ptr<DecoderModel> load_checkpoint_model(const std::string& dir_in, int64_t* step_out, std::string* lora_base,
                                                  bool allow_other_base, std::string* lora_fingerprint) {
  std::string dir = dir_in;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  std::string folder, base = dir.substr(dir.rfind('/') == std::string::npos ? 0 : dir.rfind('/') + 1);
  int64_t step = -1;
  if (exists(dir + "/state.json") && base.rfind("step-", 0) == 0) {
    folder = dir.find('/') == std::string::npos ? "." : dir.substr(0, dir.rfind('/'));
    const auto n = to_int64(base.substr(5));  // the name as CheckpointManager writes it: step-N
    TITAN_CHECK(n && *n >= 0 && base == "step-" + std::to_string(*n), dir,
                ": not a step folder name (step-N, N a step number without leading zeros)");
    step = *n;
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
  std::unique_ptr<DecoderModel> model;
  ParamStore* stored = nullptr;  // what the model files hold
  if (st.extra.contains("lora")) {
    // A LoRA run's checkpoint holds the adapters; the frozen base is the HF folder it names.
    const std::string where = ckm.step_dir(step) + "/state.json lora";
    LoraConfig lc;
    std::string base, fingerprint;
    try {
      const auto& r = st.extra["lora"];
      base = r.at("base").get<std::string>();
      if (r.contains("base_fingerprint")) fingerprint = r.at("base_fingerprint").get<std::string>();
      lc.rank = r.at("rank").get<int64_t>(), lc.alpha = r.at("alpha").get<double>();
      lc.use_rslora = r.at("use_rslora").get<bool>();
      lc.target_modules = r.at("target_modules").get<std::vector<std::string>>();
      if (r.contains("target_parameters"))
        lc.target_parameters = r.at("target_parameters").get<std::vector<std::string>>();
    } catch (const nlohmann::json::exception& e) {
      fail(where, ": ", e.what());
    }
    TITAN_CHECK(!base.empty(), where, ": the run's base was not loaded from a Hugging Face folder, so the checkpoint "
                "names no base to put its adapters on");
    // Adapters only on the base they were trained on (same shapes are not enough).
    check_base_fingerprint(where, fingerprint, base, allow_other_base, "--allow-other-base");
    if (lora_fingerprint) *lora_fingerprint = fingerprint;
    // The run's model config (its [model] n_layers may keep fewer layers than the base has).
    model = std::make_unique<DecoderModel>(mc, default_variant(), false, /*frozen=*/true);
    load_weights(*model, HfCheckpoint::open(base));
    model->enable_lora(lc, 0);
    stored = &model->lora_params();
    if (lora_base) *lora_base = base;
  } else {
    model = std::make_unique<DecoderModel>(mc);
    stored = &model->params();
  }
  // Whole parameters as pieces: from one model.tensors or assembled from every rank's pieces.
  // Optimizer state is not needed: only the model files are opened.
  std::vector<std::string> names;
  std::vector<TensorPiece> pieces;
  for (auto& p : stored->all()) {
    names.push_back(p.name);
    pieces.push_back({p.name, p.value.shape(), 0, p.value});
  }
  ckm.load_model_pieces(step, names, pieces);
  if (step_out) *step_out = step;
  return model;
}

}  // namespace titan
