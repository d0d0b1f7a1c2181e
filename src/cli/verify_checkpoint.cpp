// titan verify checkpoint DIR: load (an HF folder or a training checkpoint), export to HF
// safetensors in f32, reload the export through the HF loader, and compare every key, shape and
// value with what was loaded. A tied lm_head is checked too: the export must not carry it and the
// reloaded model must use the embedding for it, as transformers does. --workdir D: a new or empty
// folder for the export (default: a fresh folder under $TMPDIR); what was written there is removed
// at the end unless --keep.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "cli/verify.h"
#include "model/hf_checkpoint.h"
#include "train/checkpoint_model.h"

namespace titan::cli {

namespace fs = std::filesystem;

// The folder the export is written to, and at the end the removal of what this command created
// there, and of nothing else: a folder that did not exist (--workdir NEW, or the default, a fresh
// mkdtemp folder under $TMPDIR) goes as a whole; a given empty folder stays and loses only the
// files written into it. A folder that exists and is not empty is refused: it may be anything,
// the checkpoint being verified included.
class Workdir {
 public:
  explicit Workdir(const Args& args) : keep_(args.has("keep")) {
    if (!args.has("workdir")) {
      std::string tmpl = (fs::temp_directory_path() / "titan-verify-XXXXXX").string();
      TITAN_CHECK(::mkdtemp(tmpl.data()) != nullptr, tmpl, ": cannot create a temporary folder: ", std::strerror(errno));
      path_ = tmpl;
      created_ = true;
      return;
    }
    path_ = args.get("workdir");
    TITAN_CHECK(!path_.empty(), "--workdir: empty path");
    struct stat st {};
    if (::lstat(path_.c_str(), &st) != 0) {
      TITAN_CHECK(errno == ENOENT, "--workdir ", path_, ": ", std::strerror(errno));
      TITAN_CHECK(::mkdir(path_.c_str(), 0755) == 0, "--workdir ", path_, ": cannot create: ", std::strerror(errno));
      created_ = true;
      return;
    }
    TITAN_CHECK(S_ISDIR(st.st_mode), "--workdir ", path_, ": exists and is not a folder");
    std::error_code ec;
    TITAN_CHECK(fs::is_empty(path_, ec) && !ec, "--workdir ", path_,
                ": exists and is not empty; give a new or an empty folder (verify removes what it writes there)");
  }
  ~Workdir() {
    if (keep_) return;
    std::error_code ec;
    if (created_) {
      fs::remove_all(path_, ec);
    } else {  // empty when given: whatever it holds now, the export wrote
      for (const auto& e : fs::directory_iterator(path_, ec)) fs::remove_all(e.path(), ec);
    }
  }
  Workdir(const Workdir&) = delete;
  Workdir& operator=(const Workdir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  bool created_ = false, keep_;
};

static int cmd_verify_checkpoint(const std::vector<std::string>& argv) {
  Args args(argv, {"keep", "quiet"});
  args.check_known({"keep", "quiet", "workdir"});
  TITAN_CHECK(args.positional().size() == 1, "usage: titan verify checkpoint DIR [--workdir D] [--keep] [--quiet]");
  const std::string dir = args.positional()[0];
  const Workdir workdir(args);  // checked before the (long) load; removed on every way out
  const std::string& work = workdir.path();
  const FolderWeights w = load_folder_weights(dir);
  const ModelConfig& mc = w.config;
  const TensorMap& src = w.tensors;
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
  if (args.has("keep")) std::printf("kept the export in %s\n", work.c_str());
  std::printf("verified %lld keys, %lld values: %s\n", (long long)keys, (long long)values,
              bad ? "MISMATCHES FOUND" : "export round trip exact");
  return bad ? 1 : 0;
}

TITAN_VERIFY_COMMAND("checkpoint", "load DIR, export to HF, reload, compare every key, shape and value",
                     cmd_verify_checkpoint);

}  // namespace titan::cli
