// Sharded parameters as n-d boxes (train/tensor_region.h) written and read back: the runs of a
// box, a dim-1 shard round trip, ranges and boxes of one tensor mixed across files, and a 2x2
// threaded mesh (dp_shard 2 x tp 2) where every rank writes its shard of every parameter — its
// tensor-parallel box by the ParamSpec placement, split again over dp_shard — the tp groups
// all-gather their column shards, and the pieces load back as whole tensors, FSDP ranges and boxes
// of another layout.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "comm/device_mesh.h"
#include "comm/thread_comm.h"
#include "common/test_util.h"
#include "model/config.h"
#include "train/checkpoint_pieces.h"
#include "train/tensor_file.h"
#include "train/tensor_region.h"

using namespace titan;

namespace {

// Element i of tensor `name` (any value that differs per element and per tensor).
float value_of(const std::string& name, int64_t i) { return float(name.size() % 7) * 1000.f + float(i % 4093); }

Tensor full_tensor(const std::string& name, const Shape& s) {
  Tensor t = Tensor::empty(s, DType::F32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = value_of(name, i);
  return t;
}

// The box's elements of the full tensor, row-major.
Tensor box_of(const std::string& name, const Shape& full, const Shape& off, const Shape& box) {
  TensorRegion r;
  r.box_offset = off, r.box_shape = box;
  Tensor t = Tensor::empty(box, DType::F32);
  for (const TensorRun& run : region_runs(r, full))
    for (int64_t k = 0; k < run.len; ++k) t.data<float>()[run.local + k] = value_of(name, run.flat + k);
  return t;
}

void expect_values(const std::string& name, const Tensor& t, const std::vector<TensorRun>& runs) {
  for (const TensorRun& r : runs)
    for (int64_t k = 0; k < r.len; ++k)
      ASSERT_EQ(t.data<float>()[r.local + k], value_of(name, r.flat + k)) << name << " element " << r.flat + k;
}

}  // namespace

TEST(TensorRegion, RunsOfBoxes) {
  TensorRegion r;
  r.box_offset = {1, 2}, r.box_shape = {2, 3};  // rows 1-2, columns 2-4 of [4, 6]
  auto runs = region_runs(r, {4, 6});
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].flat, 8);
  EXPECT_EQ(runs[0].len, 3);
  EXPECT_EQ(runs[1].flat, 14);
  EXPECT_EQ(runs[1].local, 3);
  r.box_offset = {1, 0, 0}, r.box_shape = {2, 3, 5};  // whole trailing dims: one run
  runs = region_runs(r, {4, 3, 5});
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].flat, 15);
  EXPECT_EQ(runs[0].len, 30);
  r.box_offset = {0, 4}, r.box_shape = {1, 3};
  EXPECT_NE(region_outside(r, {4, 6}).find("box [0:1, 4:7] lies outside its full shape [4, 6]"), std::string::npos)
      << region_outside(r, {4, 6});
  EXPECT_EQ(r.str(), "box [0:1, 4:7]");
}

TEST(TensorRegion, Dim1ShardRoundTrip) {
  const std::string dir = test::temp_dir("dim1_shard");
  const Shape full = {6, 8};
  const std::string name = "model.layers.0.self_attn.o_proj.weight";
  // Two ranks of a row-parallel weight: columns [0, 4) and [4, 8), one file each.
  for (int r = 0; r < 2; ++r) {
    TensorPiece p{name, full, 0, box_of(name, full, {0, 4 * r}, {6, 4}), {0, 4 * r}, {6, 4}};
    write_tensor_pieces(dir + "/r" + std::to_string(r) + ".tensors", {p});
  }
  CheckpointPieces cp({dir + "/r0.tensors", dir + "/r1.tensors"}, dir);
  cp.check_names({name});
  // Whole, a 1-D range crossing both files, and a box of another split (rows 2-4, columns 3-6).
  std::vector<TensorPiece> want = {{name, full, 0, Tensor::empty(full, DType::F32)},
                                   {name, full, 5, Tensor::empty({30}, DType::F32)},
                                   {name, full, 0, Tensor::empty({3, 4}, DType::F32), {2, 3}, {3, 4}}};
  cp.fill(want);
  for (const TensorPiece& p : want) expect_values(name, p.data, region_runs(p.region(), full));
  // A missing column block is named.
  EXPECT_ERROR_HAS(CheckpointPieces({dir + "/r0.tensors"}, dir),
                   "tensor 'model.layers.0.self_attn.o_proj.weight' f32[6, 8]: elements [4, 8) are in no file");
  // Overlapping boxes in one file are refused when written.
  TensorPiece a{name, full, 0, box_of(name, full, {0, 0}, {6, 4}), {0, 0}, {6, 4}};
  TensorPiece b{name, full, 0, box_of(name, full, {2, 2}, {2, 4}), {2, 2}, {2, 4}};
  EXPECT_ERROR_HAS(write_tensor_pieces(dir + "/bad.tensors", {a, b}), "pieces of tensor '" + name + "' overlap");
}

TEST(ShardedParams, TwoByTwoThreadedMeshRoundTrip) {
  const ModelConfig c = flavor_config("debug-tiny");
  const std::vector<ParamSpec> specs = model_param_specs(c);
  const std::string dir = test::temp_dir("mesh_2x2_params");
  comm::ParallelDegrees d;
  d.tp = 2;  // dp_shard 2 x tp 2
  comm::run_threaded_ranks(4, [&](comm::Comm& world) {
    comm::DeviceMesh mesh(world, comm::ParallelDims::resolve(d, 4));
    const int64_t tp = mesh.coord(comm::MeshAxis::TP), dp = mesh.coord(comm::MeshAxis::DpShard);
    std::vector<TensorPiece> mine;
    for (const ParamSpec& s : specs) {
      Shape off(s.shape.size(), 0), box = s.shape;
      if (s.placement.tp_dim >= 0) {  // the tensor-parallel box: the spec's dim split by tp
        box = s.local_shape(2);
        off[size_t(s.placement.tp_dim)] = tp * box[size_t(s.placement.tp_dim)];
      } else if (tp != 0) {
        continue;  // replicated over tp: tp rank 0 of each pair writes it
      }
      ASSERT_EQ(box[0] % 2, 0) << s.name;
      box[0] /= 2, off[0] += dp * box[0];  // then FSDP-style along dim 0 over dp_shard
      mine.push_back({s.name, s.shape, 0, box_of(s.name, s.shape, off, box), off, box});
      // The tp group's all-gather of a column shard is the dp rank's rows of the whole tensor.
      if (s.placement.tp_dim == 0 && s.shape.size() == 2) {
        Tensor all = Tensor::empty({2 * box[0] * box[1]}, DType::F32);
        mesh.tp().all_gather(mine.back().data.data<float>(), all.data<float>(), box[0] * box[1]);
        for (int64_t q = 0; q < 2; ++q)
          for (int64_t i = 0; i < box[0] * box[1]; ++i) {
            const int64_t row = q * s.shape[0] / 2 + dp * box[0] + i / box[1];
            ASSERT_EQ(all.data<float>()[q * box[0] * box[1] + i], value_of(s.name, row * s.shape[1] + i % box[1]))
                << s.name;
          }
      }
    }
    write_tensor_pieces(dir + "/model.rank-" + std::to_string(world.rank()) + "-of-4.tensors", mine);
    world.barrier();
  });
  std::vector<std::string> files, names;
  for (int r = 0; r < 4; ++r) files.push_back(dir + "/model.rank-" + std::to_string(r) + "-of-4.tensors");
  CheckpointPieces cp(files, dir + "/model.rank-*-of-4.tensors");
  for (const ParamSpec& s : specs) names.push_back(s.name);
  cp.check_names(names);
  // Loaded by one process (whole), by 3 FSDP ranks (ranges), and by tp 4 along dim 1 (boxes).
  std::vector<TensorPiece> whole, ranges, boxes;
  for (const ParamSpec& s : specs) {
    const int64_t n = shape_numel(s.shape);
    whole.push_back({s.name, s.shape, 0, Tensor::empty(s.shape, DType::F32)});
    for (int64_t r = 0; r < 3; ++r) {
      const int64_t b = r * n / 3, e = (r + 1) * n / 3;
      ranges.push_back({s.name, s.shape, b, Tensor::empty({e - b}, DType::F32)});
    }
    if (s.shape.size() == 2 && s.shape[1] % 4 == 0)
      for (int64_t q = 0; q < 4; ++q) {
        const Shape off = {0, q * s.shape[1] / 4}, box = {s.shape[0], s.shape[1] / 4};
        boxes.push_back({s.name, s.shape, 0, Tensor::empty(box, DType::F32), off, box});
      }
  }
  cp.fill(whole);
  cp.fill(ranges);
  cp.fill(boxes);
  for (auto* set : {&whole, &ranges, &boxes})
    for (const TensorPiece& p : *set) expect_values(p.name, p.data, region_runs(p.region(), p.full_shape));
  EXPECT_GT(boxes.size(), 8u);
  for (const TensorPiece& p : whole)
    EXPECT_EQ(std::memcmp(p.data.raw(), full_tensor(p.name, p.full_shape).raw(), p.data.nbytes()), 0) << p.name;
}
