// Checkpoints of tensors on cuda:0 (train/checkpoint.h "Devices"): a GPU tensor is written and read
// through one bounded pinned buffer (core/pinned_staging.h), and the files are those the same
// values on the CPU give, byte for byte, so a checkpoint moves between devices. Under the emulator
// device and pinned memory are host memory, counted (cuda_emu::pinned_live_bytes), and
// Tensor::data<T>() refuses host access to a GPU tensor. The staging bound is set small here so
// that every large tensor goes through many pieces, none a whole multiple of a row.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "checkpoint_test_util.h"
#include "comm/comm.h"
#include "common/gpu_test_util.h"
#include "core/cuda_emu/runtime.h"
#include "core/pinned_staging.h"
#include "model/decoder.h"
#include "model/hf_model.h"
#include "train/checkpoint.h"
#include "train/model_state.h"
#include "util/strings.h"

using namespace titan;
using namespace titan::test;
namespace fs = std::filesystem;

namespace {

constexpr uint64_t kBound = 4104;  // 8 * 513 bytes

std::vector<NamedTensor> values_of(DecoderModel& m) {
  std::vector<NamedTensor> out;
  for (auto& p : m.params().all()) out.push_back({p.name, p.value});
  return out;
}

// AdamW-moment-like state for every parameter (random f32, as FullState names them), plus a bf16,
// an i64 and an empty tensor: on the host, and the same values moved to `d`.
std::vector<NamedTensor> moments(const DecoderModel& m, Device d) {
  std::vector<NamedTensor> out;
  uint64_t s = 100;
  for (auto& p : m.params().all()) {
    out.push_back({p.name + ".exp_avg", random_f32(p.value.shape(), s++)});
    out.push_back({p.name + ".exp_avg_sq", random_f32(p.value.shape(), s++)});
  }
  Tensor ids = Tensor::empty({3, 5}, DType::I64);
  for (int64_t i = 0; i < ids.numel(); ++i) ids.data<int64_t>()[i] = i * 7919 - 40;
  out.push_back({"extra.bf16", random_f32({1027}, s++).to(DType::BF16)});
  out.push_back({"extra.ids", ids});
  out.push_back({"extra.empty", Tensor::zeros({0, 4}, DType::F32)});
  if (d.type == DeviceType::CUDA)
    for (auto& t : out) t.tensor = t.tensor.to(d);
  return out;
}

std::vector<NamedTensor> zeros_on(const std::vector<NamedTensor>& ts, Device d) {
  std::vector<NamedTensor> out;
  for (auto& t : ts) out.push_back({t.name, Tensor::zeros(t.tensor.shape(), t.tensor.dtype(), d)});
  return out;
}

void expect_same_bits(const std::vector<NamedTensor>& got, const std::vector<NamedTensor>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].name, want[i].name);
    EXPECT_EQ(got[i].tensor.dtype(), want[i].tensor.dtype()) << want[i].name;
    EXPECT_TRUE(host_bytes(got[i].tensor) == host_bytes(want[i].tensor)) << want[i].name;
  }
}

// Every file of two folders, by name, byte for byte.
uint64_t largest(const std::vector<NamedTensor>& ts) {
  uint64_t m = 0;
  for (auto& t : ts) m = std::max<uint64_t>(m, t.tensor.nbytes());
  return m;
}

}  // namespace

// The GPU model's checkpoint (values + moments on cuda:0) is the CPU model's byte for byte, and
// loads into the CPU; the CPU's loads into GPU tensors and into the GPU model: the same bits.
TEST(CheckpointOnGpu, SameFilesAsTheCpuAndResumesAcrossDevices) {
  ScopedChunk bound(kBound);
  const ModelConfig c = flavor_config("debug-tiny");
  DecoderModel ref(c, "cpu");
  ref.init_weights(InitScheme::Torchtitan, 11);
  DecoderModel gpu = gpu_model(c);
  gpu.init_weights(InitScheme::Torchtitan, 11);
  const std::vector<NamedTensor> cpu_vals = values_of(ref), gpu_vals = values_of(gpu);
  const std::vector<NamedTensor> cpu_opt = moments(ref, cpu()), gpu_opt = moments(gpu, kGpu);
  for (auto& t : gpu_vals) ASSERT_EQ(t.tensor.device(), kGpu) << t.name;
  for (auto& t : gpu_opt) ASSERT_EQ(t.tensor.device(), kGpu) << t.name;
  ASSERT_GT(largest(gpu_vals), 30 * kBound);  // the embedding goes through 32 pieces

  const std::string root = temp_dir("ckpt_gpu_same");
  CheckpointManager on_cpu(root + "/cpu", 0), on_gpu(root + "/gpu", 0);
  on_cpu.save(state_at(3), cpu_vals, cpu_opt);
  const uint64_t pinned0 = cuda_emu::pinned_live_bytes(), live0 = PinnedStaging::stats().live_bytes;
  const uint64_t buffers0 = PinnedStaging::stats().buffers;
  PinnedStaging::reset_peak();
  on_gpu.save(state_at(3), gpu_vals, gpu_opt);
  const PinnedStaging::Stats s = PinnedStaging::stats();
  EXPECT_EQ(s.peak_bytes - live0, kBound);  // one buffer of the bound, not a tensor's or the model's size
  EXPECT_EQ(s.buffers - buffers0, 2u);      // one per file
  EXPECT_EQ(s.live_bytes, live0);
  EXPECT_EQ(cuda_emu::pinned_live_bytes(), pinned0);
  expect_same_files(on_cpu.step_dir(3), on_gpu.step_dir(3));

  {  // the GPU's checkpoint on the CPU
    std::vector<NamedTensor> v = zeros_on(cpu_vals, cpu()), o = zeros_on(cpu_opt, cpu());
    const TrainState st = on_gpu.load(3, v, o);
    EXPECT_EQ(st.data_state, state_at(3).data_state);
    expect_same_bits(v, cpu_vals);
    expect_same_bits(o, cpu_opt);
  }
  {  // the CPU's checkpoint into GPU tensors
    PinnedStaging::reset_peak();
    std::vector<NamedTensor> v = zeros_on(gpu_vals, kGpu), o = zeros_on(gpu_opt, kGpu);
    on_cpu.load(3, v, o);
    for (auto& t : v) EXPECT_EQ(t.tensor.device(), kGpu);
    expect_same_bits(v, cpu_vals);
    expect_same_bits(o, cpu_opt);
    EXPECT_EQ(PinnedStaging::stats().peak_bytes - live0, kBound);
  }
  {  // and into the GPU model itself, as a resume does
    for (auto& p : gpu.params().all()) p.value.zero_();
    std::vector<NamedTensor> v = values_of(gpu), o = zeros_on(gpu_opt, kGpu);
    on_cpu.load(3, v, o);
    expect_same_bits(values_of(gpu), cpu_vals);
  }
  EXPECT_EQ(PinnedStaging::stats().live_bytes, live0);
  EXPECT_EQ(cuda_emu::pinned_live_bytes(), pinned0);
}

// Pieces on the GPU: a ranged and a box request of stored whole tensors, and a save of a tensor in
// two GPU pieces (one process holding both halves), against the same requests on the CPU.
TEST(CheckpointOnGpu, PiecesAndBoxesOnTheGpu) {
  ScopedChunk bound(48);
  const std::string root = temp_dir("ckpt_gpu_pieces");
  const Tensor w = random_f32({37, 11}, 1), b = random_f32({29}, 2);
  CheckpointManager ckm(root + "/gpu", 0);
  {  // w saved as two GPU pieces, b as one whole GPU tensor
    const Tensor wg = w.to(kGpu);
    std::vector<TensorPiece> model = {{"w", w.shape(), 0, wg.view({wg.numel()}).slice0(0, 150)},
                                      {"w", w.shape(), 150, wg.view({wg.numel()}).slice0(150, wg.numel())},
                                      {"b", b.shape(), 0, b.to(kGpu)}};
    ckm.save_sharded(state_at(1), ShardedSave{}, model, {});
  }
  const std::vector<std::string> names = {"b", "w"};
  for (Device d : {cpu(), kGpu}) {
    SCOPED_TRACE(d.str());
    TensorPiece range{"w", w.shape(), 93, Tensor::zeros({101}, DType::F32, d)};
    TensorPiece box{"w", w.shape(), 0, Tensor::zeros({5 * 4}, DType::F32, d), {30, 6}, {5, 4}};
    TensorPiece whole{"b", b.shape(), 0, Tensor::zeros({29}, DType::F32, d)};
    std::vector<TensorPiece> want = {range, box, whole};
    std::vector<TensorPiece> none;
    ckm.load_pieces(1, names, want, {}, none);
    const Tensor wr = w.view({w.numel()}).slice0(93, 194);
    EXPECT_TRUE(host_bytes(want[0].data) == host_bytes(wr));
    std::string wb;
    for (int64_t r = 30; r < 35; ++r) wb += host_bytes(w.slice0(r, r + 1)).substr(6 * 4, 4 * 4);
    EXPECT_TRUE(host_bytes(want[1].data) == wb);
    EXPECT_TRUE(host_bytes(want[2].data) == host_bytes(b));
  }
  // The file holds exactly the bytes the same two pieces give from the CPU.
  CheckpointManager ref(root + "/cpu", 0);
  std::vector<TensorPiece> model = {{"w", w.shape(), 0, w.view({w.numel()}).slice0(0, 150)},
                                    {"w", w.shape(), 150, w.view({w.numel()}).slice0(150, w.numel())},
                                    {"b", b.shape(), 0, b}};
  ref.save_sharded(state_at(1), ShardedSave{}, model, {});
  expect_same_files(ckm.step_dir(1), ref.step_dir(1));
  // A whole tensor read straight from the file into a GPU tensor.
  const TensorFileReader file(ckm.step_dir(1) + "/model.tensors");
  Tensor bg = Tensor::zeros(b.shape(), DType::F32, kGpu);
  file.read_into("b", bg);
  EXPECT_TRUE(host_bytes(bg) == host_bytes(b));
}

// A damaged file is refused by a GPU load as by a CPU one (the CRC is checked across the pieces),
// and the staging buffer is freed on that path too.
TEST(CheckpointOnGpu, DamagedFileIsRefusedAndNothingLeaks) {
  ScopedChunk bound(64);
  const std::string root = temp_dir("ckpt_gpu_damaged");
  CheckpointManager ckm(root, 0);
  const Tensor w = random_f32({40, 9}, 3);
  ckm.save(state_at(2), {{"w", w.to(kGpu)}}, {});
  const std::string file = ckm.step_dir(2) + "/model.tensors";
  std::string bytes = read_file(file);
  bytes[64 + 200] ^= 0x10;  // inside w's data (the first entry, at byte 64)
  write_file_atomic(file, bytes);
  const uint64_t pinned0 = cuda_emu::pinned_live_bytes();
  for (Device d : {cpu(), kGpu}) {
    std::vector<NamedTensor> v = {{"w", Tensor::zeros(w.shape(), DType::F32, d)}}, o;
    EXPECT_ERROR_HAS(ckm.load(2, v, o), "model.tensors: tensor 'w' checksum mismatch (file corrupt)");
  }
  EXPECT_EQ(cuda_emu::pinned_live_bytes(), pinned0);
}

// The trainer's own entry points ([compute] device = "cuda", FullState: save, load, export_hf) on
// the debug-tiny job: the GPU state's checkpoint and HF export are the CPU state's byte for byte;
// after a GPU step (non-zero moments on the device) its checkpoint resumes on the CPU and back,
// each saving the same files again.
TEST(CheckpointOnGpu, TrainerStatesSaveExportAndResumeAcrossDevices) {
  ScopedChunk bound(kBound);
  JobConfig cfg;
  cfg.model.flavor = "debug-tiny";
  cfg.training.seed = 7;
  JobConfig gcfg = cfg;
  gcfg.compute.device = DeviceType::CUDA;
  comm::LocalComm comm;
  const std::unique_ptr<ModelState> on_cpu = make_full_state(cfg, comm), on_gpu = make_full_state(gcfg, comm);
  ASSERT_EQ(on_gpu->model().params().all()[0].value.device(), kGpu);
  const std::string root = temp_dir("ckpt_gpu_trainer");
  CheckpointManager a(root + "/cpu", 0), b(root + "/gpu", 0);
  on_cpu->save(a, state_at(4));
  on_gpu->save(b, state_at(4));
  expect_same_files(a.step_dir(4), b.step_dir(4));
  on_cpu->export_hf(root + "/cpu-hf", HfExportOptions{});
  on_gpu->export_hf(root + "/gpu-hf", HfExportOptions{});
  expect_same_files(root + "/cpu-hf", root + "/gpu-hf");

  // One step on the GPU: parameters and both moments change there.
  const ModelConfig& mc = on_gpu->model().config();
  Tensor ids = Tensor::empty({2, 16}, DType::I64), labels = Tensor::empty({2, 16}, DType::I64);
  for (int64_t i = 0; i < ids.numel(); ++i) {
    ids.data<int64_t>()[i] = (i * 37 + 11) % mc.vocab_size;
    labels.data<int64_t>()[i] = (i * 53 + 5) % mc.vocab_size;
  }
  on_gpu->zero_grad();
  on_gpu->model().forward_backward(ids, labels, 1.0f / 32);
  on_gpu->step(1, 1.0, AdamWParams{});
  CheckpointManager e(root + "/gpu-step", 0), f(root + "/cpu-resumed", 0), g(root + "/gpu-resumed", 0);
  on_gpu->save(e, state_at(5));
  EXPECT_FALSE(read_file(e.step_dir(5) + "/optimizer.tensors") == read_file(b.step_dir(4) + "/optimizer.tensors"));

  JobConfig other_cpu = cfg, other_gpu = gcfg;
  other_cpu.training.seed = other_gpu.training.seed = 99;
  const std::unique_ptr<ModelState> cpu2 = make_full_state(other_cpu, comm), gpu2 = make_full_state(other_gpu, comm);
  EXPECT_EQ(cpu2->load(e, 5).step, 5);  // the GPU's checkpoint on the CPU
  cpu2->save(f, state_at(5));
  expect_same_files(e.step_dir(5), f.step_dir(5));
  EXPECT_EQ(gpu2->load(f, 5).step, 5);  // and back on the GPU
  gpu2->save(g, state_at(5));
  expect_same_files(e.step_dir(5), g.step_dir(5));
  EXPECT_EQ(PinnedStaging::stats().live_bytes, 0u);
}
