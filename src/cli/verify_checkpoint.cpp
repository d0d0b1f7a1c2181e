// titan verify checkpoint DIR: load (an HF folder or a training checkpoint), export to HF
// safetensors in f32, reload the export through the HF loader, and compare every key, shape and
// value with what was loaded. A tied lm_head is checked too: the export must not carry it and the
// reloaded model must use the embedding for it, as transformers does.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "cli/verify.h"
#include "io/hf_checkpoint.h"
#include "train/checkpoint_model.h"

namespace titan::cli {

static int cmd_verify_checkpoint(const std::vector<std::string>& argv) {
  Args args(argv, {"keep", "quiet"});
  args.check_known({"keep", "quiet", "workdir"});
  TITAN_CHECK(args.positional().size() == 1, "usage: titan verify checkpoint DIR [--workdir D] [--keep] [--quiet]");
  const std::string dir = args.positional()[0];
  const FolderWeights w = load_folder_weights(dir);
  const ModelConfig& mc = w.config;
  const TensorMap& src = w.tensors;
  namespace fs = std::filesystem;
  std::string work = args.get("workdir", (fs::temp_directory_path() / ("titan-verify-" + std::to_string(::getpid()))).string());
  HfExportOptions eo;
  eo.dtype = DType::F32;
  export_hf_checkpoint(work, mc, src, eo);
  HfCheckpoint back = HfCheckpoint::open(work);
  int64_t keys = 0, values = 0, bad = 0;
  const bool quiet = args.has("quiet");
  for (const auto& spec : model_param_specs(mc)) {
    Tensor a = src.at(spec.name), b = back.get(spec.name, DType::F32);
    double max_diff = 0;
    bool shape_ok = a.shape() == b.shape();
    if (shape_ok)
      for (int64_t i = 0; i < a.numel(); ++i) {
        float x = a.data<float>()[i], y = b.data<float>()[i];
        if (!(x == y || (std::isnan(x) && std::isnan(y)))) max_diff = std::max(max_diff, double(std::fabs(x - y)));
      }
    bool ok = shape_ok && max_diff == 0;
    ++keys;
    values += a.numel();
    bad += !ok;
    if (!quiet || !ok)
      std::printf("%-60s %-18s %s%s\n", spec.name.c_str(), shape_str(a.shape()).c_str(), ok ? "ok" : "MISMATCH",
                  shape_ok ? "" : (" (export shape " + shape_str(b.shape()) + ")").c_str());
  }
  if (mc.tie_word_embeddings) {
    // Tied: one copy on disk (HF's layout), and lm_head resolves to the embedding on reload.
    auto f = SafetensorsFile::open(work + "/model.safetensors");
    bool has_lm = false;
    for (auto& e : f.entries()) has_lm |= e.name == "lm_head.weight";
    bool ok = !has_lm;
    bad += !ok;
    std::printf("%-60s %-18s %s\n", "lm_head.weight (tied to model.embed_tokens.weight)", "-",
                ok ? "ok (written once, as HF does)" : "MISMATCH (written twice)");
  }
  if (!args.has("keep")) fs::remove_all(work);
  std::printf("verified %lld keys, %lld values: %s\n", (long long)keys, (long long)values,
              bad ? "MISMATCHES FOUND" : "export round trip exact");
  return bad ? 1 : 0;
}

TITAN_VERIFY_COMMAND("checkpoint", "load DIR, export to HF, reload, compare every key, shape and value",
                     cmd_verify_checkpoint);

}  // namespace titan::cli
