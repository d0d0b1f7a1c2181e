// Hugging Face export from and load into a model on cuda:0 (docs/cuda.md "Checkpoints of a GPU
// model"): each parameter goes through one bounded pinned buffer (core/pinned_staging.h),
// converted on the host chunk by chunk, so the exported folder is the CPU model's byte for byte
// and a load gives the CPU model's values bit for bit. Under the emulator device and pinned memory
// are host memory, counted, and Tensor::data<T>() refuses host access to a GPU tensor. The staging
// bound is set small so that the large parameters go through many pieces.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "common/gpu_test_util.h"
#include "common/test_util.h"
#include "core/cuda_emu/runtime.h"
#include "core/pinned_staging.h"
#include "model/decoder.h"
#include "model/hf_model.h"
#include "util/strings.h"

using namespace titan;
using namespace titan::test;
namespace fs = std::filesystem;

namespace {

constexpr uint64_t kBound = 4104;  // 8 * 513 bytes

}  // namespace

TEST(HfOnGpu, ExportIsTheCpuModelsByteForByte) {
  ScopedChunk bound(kBound);
  for (bool tied : {true, false}) {
    ModelConfig c = flavor_config("debug-tiny");
    c.tie_word_embeddings = tied;
    DecoderModel ref(c, "cpu");
    ref.init_weights(InitScheme::Torchtitan, 11);
    DecoderModel gpu = gpu_model(c);
    gpu.init_weights(InitScheme::Torchtitan, 11);
    ASSERT_EQ(gpu.params().all()[0].value.device(), kGpu);
    ASSERT_GT(gpu.params().all()[0].value.nbytes(), 30 * kBound);
    struct Case {
      DType dtype;
      uint64_t shard;
    };
    for (const Case& k : {Case{DType::BF16, 5'000'000'000}, Case{DType::F32, 50'000}, Case{DType::F16, 100'000}}) {
      SCOPED_TRACE(std::string(tied ? "tied, " : "untied, ") + dtype_name(k.dtype));
      const std::string root = temp_dir("hf_gpu_export");
      HfExportOptions opt;
      opt.dtype = k.dtype;
      opt.max_shard_bytes = k.shard;
      export_hf_checkpoint(root + "/cpu", c, model_state(ref), opt);
      const uint64_t pinned0 = cuda_emu::pinned_live_bytes(), live0 = PinnedStaging::stats().live_bytes;
      PinnedStaging::reset_peak();
      export_hf_checkpoint(root + "/gpu", c, model_state(gpu), opt);
      EXPECT_EQ(PinnedStaging::stats().peak_bytes - live0, kBound);  // one bounded buffer at a time
      EXPECT_EQ(PinnedStaging::stats().live_bytes, live0);
      EXPECT_EQ(cuda_emu::pinned_live_bytes(), pinned0);
      expect_same_files(root + "/cpu", root + "/gpu");
      if (k.shard < 1'000'000) {
        EXPECT_TRUE(fs::exists(root + "/gpu/model.safetensors.index.json"));
      }
    }
  }
}

// load_weights into a GPU model: the CPU model's loaded values bit for bit, from bf16 and f16 files
// (converted to f32 on the host, chunk by chunk) and from f32 files (copied), through one pinned
// buffer for the whole model.
TEST(HfOnGpu, LoadWeightsGivesTheCpuModelsValues) {
  ScopedChunk bound(kBound);
  const ModelConfig c = flavor_config("debug-tiny");
  DecoderModel src(c, "cpu");
  src.init_weights(InitScheme::Torchtitan, 5);
  for (DType dt : {DType::BF16, DType::F16, DType::F32}) {
    SCOPED_TRACE(dtype_name(dt));
    const std::string dir = temp_dir("hf_gpu_load");
    HfExportOptions opt;
    opt.dtype = dt;
    opt.replace = true;
    export_hf_checkpoint(dir, c, model_state(src), opt);
    const HfCheckpoint ck = HfCheckpoint::open(dir);
    DecoderModel cpu_model(c, "cpu");
    load_weights(cpu_model, ck);
    DecoderModel gpu = gpu_model(c);
    gpu.init_weights(InitScheme::Torchtitan, 99);  // other values first: the load must replace them
    const uint64_t pinned0 = cuda_emu::pinned_live_bytes(), live0 = PinnedStaging::stats().live_bytes;
    const uint64_t buffers0 = PinnedStaging::stats().buffers;
    PinnedStaging::reset_peak();
    load_weights(gpu, ck);
    EXPECT_EQ(PinnedStaging::stats().peak_bytes - live0, kBound);
    EXPECT_EQ(PinnedStaging::stats().buffers - buffers0, 1u);  // one buffer for every parameter
    EXPECT_EQ(PinnedStaging::stats().live_bytes, live0);
    EXPECT_EQ(cuda_emu::pinned_live_bytes(), pinned0);
    const auto& want = cpu_model.params().all();
    const auto& got = gpu.params().all();
    ASSERT_EQ(got.size(), want.size());
    size_t rounded = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(got[i].value.device(), kGpu);
      EXPECT_TRUE(host_bytes(got[i].value) == host_bytes(want[i].value)) << want[i].name;
      rounded += host_bytes(want[i].value) != host_bytes(src.params().all()[i].value);
    }
    // The 16-bit files really were converted (their values are the rounded ones), the f32 copied.
    if (dt == DType::F32) {
      EXPECT_EQ(rounded, 0u);
    } else {
      EXPECT_GT(rounded, want.size() / 2);
    }
  }
}
